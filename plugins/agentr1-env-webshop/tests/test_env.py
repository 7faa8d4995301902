"""The shop env: pages and actions, pagination, options, sub-pages, malformed actions, the step cap, anchors, the
dataset loader, and the core's env conformance check."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentr1_core.mdp import Action
from agentr1_env_webshop.data import load_goals
from agentr1_env_webshop.pages import parse_action

DATA = Path(__file__).parent / "data"
SYNTHETIC = str(DATA / 'goals_synthetic_slice.json')
HUMAN = str(DATA / 'goals_human_slice.json')


def act(env, text):
    return asyncio.run(env.step(Action(text, [], [])))


def start(env, goal):
    return asyncio.run(env.reset({"goal": goal}))


def content(obs):
    return obs.messages[-1]["content"]


def test_parse_action():
    assert parse_action("I will search[red shoes] now") == ("search", "red shoes")
    assert parse_action("CLICK[ Next > ]") == ("click", "Next >")
    assert parse_action("buy it") is None and parse_action("click[unclosed") is None


def test_search_pagination_item_options_and_buy(make_env, synthetic_goals):
    env = make_env(per_page=3)
    goal = next(g for g in synthetic_goals if len(g["goal_options"]) >= 2)
    obs = start(env, goal)
    assert goal["instruction_text"] in content(obs) and "search[<your query>]" in content(obs)
    assert obs.anchor == "search"
    r = act(env, "search[gift]")
    assert r.info["valid_action"] and env.shop.page == "results" and len(env.shop.results) > 3
    assert "click[next >]" in content(r.observation) and "click[< prev]" not in content(r.observation)
    assert "Page 1 (Total results:" in content(r.observation)
    first_page = env.shop.page_results()
    act(env, "click[next >]")
    assert env.shop.page_num == 2 and env.shop.page_results() != first_page
    assert r.observation.anchor != env.observation().anchor
    act(env, "click[< prev]")
    assert env.shop.page_results() == first_page
    act(env, "click[back to search]")
    assert env.shop.page == "search"
    act(env, f"search[{env.catalog.products[goal['asin']]['Title']}]")
    r = act(env, f"click[{goal['asin'].lower()}]")
    assert env.shop.page == "item" and r.observation.anchor.startswith("item|" + goal["asin"])
    for kind, value in goal["goal_options"].items():
        r = act(env, f"click[{value}]")
        assert r.info["valid_action"] and env.shop.options[kind] == value
    assert f"{value} (selected)" in content(r.observation)
    for sub in ("description", "features", "reviews"):
        act(env, f"click[{sub}]")
        assert env.shop.page == "sub"
        act(env, "click[< prev]")
        assert env.shop.page == "item"
    r = act(env, "click[buy now]")
    assert r.done and r.observation is None and r.reward == 1.0 and r.info["success"]
    assert r.info["reward_breakdown"]["option_matches"] == len(goal["goal_options"])


def test_malformed_and_unavailable_actions_keep_the_episode(make_env, synthetic_goals):
    env = make_env()
    start(env, synthetic_goals[0])
    for bad in ("", "I think I should buy something", "click[buy now]", "search[]", "click[nonexistent]"):
        r = act(env, bad)
        assert not r.done and not r.truncated and r.reward == 0.0 and not r.info["valid_action"]
        assert r.feedback.startswith("Invalid action") and "Invalid action" in content(r.observation)
        assert env.shop.page == "search"
    act(env, "search[shampoo]")
    r = act(env, "search[again]")  # no search bar on the results page
    assert not r.info["valid_action"] and env.shop.page == "results"
    assert "(invalid)" in content(r.observation)


def test_step_cap_truncates_without_reward(make_env, synthetic_goals):
    env = make_env(max_steps=3)
    start(env, synthetic_goals[0])
    results = [act(env, "click[nothing]") for _ in range(3)]
    assert [r.truncated for r in results] == [False, False, True]
    assert results[-1].reward == 0.0 and results[-1].info["success"] is False


def test_context_stays_flat(make_env, synthetic_goals):
    env = make_env(history=2)
    start(env, synthetic_goals[0])
    sizes = []
    for i in range(8):
        act(env, "search[soap]")
        r = act(env, "click[back to search]")
        sizes.append(len(content(r.observation)))
    assert max(sizes) - min(sizes) < 40  # the last two actions, not the whole history
    assert content(r.observation).count("search[soap]") == 1


def test_expert_reaches_every_target(make_env, synthetic_goals, human_goals):
    env = make_env()
    for goal in synthetic_goals[:24] + human_goals:
        start(env, goal)
        for _ in range(env.max_steps):
            r = act(env, env.expert_action())
            if r.done:
                break
        assert r.done and r.info["bought"] == goal["asin"]
        if isinstance(goal["goal_options"], dict):
            assert r.reward == 1.0


def test_dataset_splits_follow_index_ranges():
    rows = load_goals(SYNTHETIC)
    assert len(rows) == 26 and rows[0]["prompt"] == rows[0]["goal"]["instruction_text"]
    assert sorted(r["goal_index"] for r in rows) == list(range(26))
    assert [r["goal_index"] for r in rows] == [r["goal_index"] for r in load_goals(SYNTHETIC)]  # seeded
    test = load_goals(SYNTHETIC, split="test", start=0, end=10)
    train = load_goals(SYNTHETIC, split="train", start=10)
    assert {r["goal_index"] for r in test}.isdisjoint({r["goal_index"] for r in train})
    assert len(test) + len(train) == 26
    assert load_goals(SYNTHETIC, split="val") == []  # 500..1500 is past the end of a 26-goal file
    assert len(load_goals(f"{SYNTHETIC},{HUMAN}", limit=7)) == 7
    with pytest.raises(ValueError, match="split"):
        load_goals(SYNTHETIC, split="dev")
    with pytest.raises(ValueError, match="goals=PATH"):
        load_goals("")


def test_env_config_errors(make_env):
    from agentr1_env_webshop.env import WebShopEnv

    with pytest.raises(ValueError, match="products=PATH"):
        WebShopEnv()
    with pytest.raises(ValueError, match="noun_tagger"):
        make_env(noun_tagger="nltk")
    env = make_env()
    with pytest.raises(ValueError, match="goal"):
        asyncio.run(env.reset({"prompt": "x"}))


def test_core_env_conformance(make_env, synthetic_goals):
    check_env = pytest.importorskip("agentr1_core.testing.conformance").check_env
    check_env(make_env(max_steps=5), {"goal": synthetic_goals[0]})
