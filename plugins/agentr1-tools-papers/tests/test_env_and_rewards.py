"""The ``paper_search`` env (pool numbering, year cut-off, selection, context modes, errors, the scripted expert)
and the ``paper_recall`` reward with its episode metrics, on the small corpus with real tools; what the env, the
rewards and the dataset declare they read from a row."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentr1_core.mdp import Action, Step, Trajectory

from agentr1_tools_papers.env import PaperSearchEnv, key_words
from agentr1_tools_papers.rewards import PaperRecall, episode_metrics, selection_scores


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def make_env(small_corpus, **kwargs) -> PaperSearchEnv:
    tools = [{"name": "paper_search", "corpus": str(small_corpus), "top_k": 2},
             {"name": "paper_expand", "corpus": str(small_corpus), "top_k": 5}]
    return PaperSearchEnv(tools=tools, **kwargs)


ROW = {"data_source": "t", "prompt": "q",
       "reward_model": {"ground_truth": ["p5", "p7"]},
       "extra_info": {"query": "Which papers study policy optimization for language models?", "date": "2025-01",
                      "gold_papers": [{"id": "p5", "title": "Proximal policy optimization for reinforcement "
                                                         "learning"},
                                      {"id": "p7", "title": "Group relative policy optimization for "
                                                         "mathematical reasoning"}]}}


def act(env, text):
    return asyncio.run(env.step(Action(text=text, token_ids=[], logprobs=[])))


def test_found_papers_join_a_numbered_pool_and_the_answer_selects_by_number_or_id(small_corpus):
    env = make_env(small_corpus)
    obs = asyncio.run(env.reset(ROW))
    assert "Query: Which papers study policy optimization" in obs.messages[-1]["content"]
    first = act(env, call("paper_search", query="policy optimization"))
    assert [p["id"] for p in first.info["new_papers"]] == list(env.pool) and first.info["searches"] == 1
    shown = first.observation.messages[-1]["content"]
    assert "[1] " in shown and "[2] " in shown and 'searched "policy optimization"' in shown
    second = act(env, call("paper_search", query="human feedback instructions"))
    assert all(p["id"] not in list(env.pool)[:2] for p in second.info["new_papers"])  # only new papers count
    ids = list(env.pool)
    done = act(env, f"<answer>2, {ids[0]}, 99, 2</answer>")
    assert done.done and done.info["selected"] == [ids[1], ids[0]] and done.info["unknown_selections"] == 1


def test_expand_takes_a_pool_number_and_an_unknown_id_is_an_observation(small_corpus):
    env = make_env(small_corpus)
    asyncio.run(env.reset(ROW))
    act(env, call("paper_search", query="group relative policy optimization"))
    number = list(env.pool).index("p7") + 1
    res = act(env, call("paper_expand", paper=str(number), direction="references"))
    assert [p["id"] for p in res.info["new_papers"]] == [p for p in ["p5", "p6"] if p not in list(env.pool)[:2]]
    assert res.info["expansions"] == 1 and f"expanded [{number}] references" in res.observation.messages[-1]["content"]
    unknown = act(env, call("paper_expand", paper="2999.12345"))
    assert unknown.info["new_papers"] == [] and "No paper with id" in unknown.observation.messages[-1]["content"]


def test_the_year_cut_off_comes_from_the_row_date(small_corpus):
    env = make_env(small_corpus)
    asyncio.run(env.reset({**ROW, "extra_info": {**ROW["extra_info"], "date": "2019-05"}}))
    res = act(env, call("paper_search", query="group relative policy optimization reasoning"))
    assert all(p["year"] <= 2019 for p in res.info["new_papers"]) and "p7" not in env.pool
    off = make_env(small_corpus, year_cutoff=False)
    asyncio.run(off.reset({**ROW, "extra_info": {**ROW["extra_info"], "date": "2019-05"}}))
    assert "p7" in [p["id"] for p in act(off, call("paper_search", query="group relative policy")).info["new_papers"]]


def test_no_action_and_bad_calls_are_errors_the_agent_sees_and_the_turn_limit_truncates(small_corpus):
    env = make_env(small_corpus, max_turns=2)
    assert "2 turns left." in asyncio.run(env.reset(ROW)).messages[-1]["content"]
    res = act(env, "I think about it.")
    assert res.info["tool_errors"] == {"no_action": 1} and not res.truncated
    shown = res.observation.messages[-1]["content"]
    assert "Last turn: Error: call paper_search" in shown and "This is your last turn: finish with <answer>" in shown
    res = act(env, call("paper_search"))  # missing query
    assert res.truncated and sum(res.info["tool_errors"].values()) == 1


@pytest.mark.parametrize("context", ["summary", "window", "append"])
def test_context_modes(small_corpus, context):
    env = make_env(small_corpus, context=context, window=1)
    asyncio.run(env.reset(ROW))
    act(env, call("paper_search", query="residual learning"))
    obs = act(env, call("paper_search", query="dense passage retrieval")).observation
    text = "\n".join(m["content"] for m in obs.messages)
    if context == "summary":
        assert len(obs.messages) == 2 and "Papers found so far (4)" in text and "residual learning" in text
    else:
        assert ("residual learning" in text) == (context == "append") and "dense passage retrieval" in text


def test_the_scripted_expert_searches_key_words_then_missing_gold_titles_then_selects_the_gold(small_corpus):
    env = make_env(small_corpus, max_turns=4)
    asyncio.run(env.reset(ROW))
    steps = []
    while (text := env.expert_action()) is not None:
        steps.append(text)
        if act(env, text).done:
            break
    assert json.loads(steps[0].split("<tool_call>")[1].split("</tool_call>")[0])["arguments"] == {
        "query": key_words(ROW["extra_info"]["query"], env.expert_words)}
    assert steps[-1].startswith("<answer>")
    selected, _ = env.selection(steps[-1][len("<answer>"):-len("</answer>")])
    assert set(selected) == {"p5", "p7"}


def test_a_row_demonstration_replaces_the_scripted_expert(small_corpus):
    env = make_env(small_corpus)
    row = {**ROW, "expert_actions": ["<answer>1</answer>"]}
    env.load_expert(row)
    asyncio.run(env.reset(row))
    assert env.expert_action() == "<answer>1</answer>" and env.expert_action() is None


def test_key_words_drop_question_boilerplate():
    assert key_words("Can you tell me some papers about hybrid architectures in reconstruction-based "
                     "techniques?") == "hybrid architectures reconstruction-based techniques"


def _traj(found_per_step: list[list[str]], selected: list[str] | None) -> Trajectory:
    traj = Trajectory()
    for ids in found_per_step:
        traj.steps.append(Step([1], [2], [0.0], info={"new_papers": [{"id": i, "title": i} for i in ids],
                                                        "searches": 1}))
    if selected is not None:
        traj.steps.append(Step([1], [2], [0.0], done=True, info={"selected": selected}))
        traj.termination = "done"
    else:
        traj.termination = "max_turns"
    return traj


def test_selection_scores():
    assert selection_scores(["a", "b"], ["a", "c", "d"]) == pytest.approx(
        {"recall": 1 / 3, "precision": 0.5, "f1": 0.4})
    assert selection_scores([], ["a"]) == {"recall": 0.0, "precision": 0.0, "f1": 0.0}


def test_paper_recall_pays_found_gold_per_step_and_the_selection_at_the_end():
    row = {"reward_model": {"ground_truth": ["a", "b", "c", "d"]}}
    traj = _traj([["a", "x"], ["b", "c", "y"]], ["a", "x"])
    reward = PaperRecall(find_weight=0.5, select_weight=2.0, select_metric="f1")(traj, row)
    assert reward == pytest.approx(2.0 * selection_scores(["a", "x"], ["a", "b", "c", "d"])["f1"])
    assert [s.reward for s in traj.steps] == pytest.approx([0.5 * 1 / 4, 0.5 * 2 / 4, 0.0])
    assert traj.metrics["crawl_recall"] == pytest.approx(3 / 4) and traj.metrics["precision"] == 0.5
    assert traj.metrics["searches"] == 2 and traj.metrics["selected"] == 2
    unfinished = _traj([["a"]], None)
    assert PaperRecall(select_metric="recall")(unfinished, row) == 0.0
    assert unfinished.metrics["crawl_recall"] == 0.25 and unfinished.metrics["f1"] == 0.0


def test_paper_recall_parameters_are_checked():
    with pytest.raises(ValueError, match="select_metric"):
        PaperRecall(select_metric="accuracy")
    with pytest.raises(ValueError, match=">= 0"):
        PaperRecall(find_weight=-1)


def test_episode_metrics_count_expansions():
    traj = _traj([["a"]], ["a"])
    traj.steps[0].info["expansions"] = 2
    assert episode_metrics(traj, {"reward_model": {"ground_truth": ["a"]}})["expansions"] == 2


@pytest.mark.slow
def test_the_experts_calls_fit_the_cpu_recipes_token_budget():
    """Every expert action on the shipped training queries fits ``rollout.max_new_tokens`` of papersearch-cpu, so
    the warm start never teaches a call the policy cannot finish (measured with the real tokenizer)."""
    from agentr1_core.config import load_config
    from agentr1_core.models import load_model_and_tokenizer

    from agentr1_tools_papers.data import load_scholar_queries

    cfg = load_config("papersearch-cpu")
    _, tokenizer = load_model_and_tokenizer(cfg.model.path)
    longest = 0
    for row in load_scholar_queries(split="train")[: int(cfg.sft.rows)]:
        env = PaperSearchEnv(tools=[dict(t) for t in cfg.env.tools], max_turns=int(cfg.env.max_turns))
        env.load_expert(row)
        asyncio.run(env.reset(row))
        while (text := env.expert_action()) is not None:
            longest = max(longest, len(tokenizer(text)["input_ids"]))
            result = act(env, text)
            if result.done or result.truncated:
                break
    assert 0 < longest <= int(cfg.rollout.max_new_tokens)


def test_paper_recall_refuses_a_row_without_gold_papers():
    traj = _traj([["a"]], ["a"])
    assert PaperRecall()(traj, {"reward_model": {"ground_truth": "a"}}) == 1.0  # one id is a list of one
    with pytest.raises(ValueError, match="no reward_model.ground_truth"):
        PaperRecall()(_traj([["a"]], ["a"]), {"prompt": "q", "extra_info": {"query": "q"}})


def test_the_recipe_rows_carry_what_the_env_and_rewards_declare():
    from agentr1_core.config import load_config
    from agentr1_core.errors import ConfigError
    from agentr1_core.plugins import get_registry
    from agentr1_core.preflight import check_rows, load_rows

    registry = get_registry()
    for name in ("papersearch-cpu", "papersearch"):
        cfg = load_config(name)
        rows = {key: load_rows(cfg, registry, key) for key in ("data.train", "data.val")}
        check_rows(cfg, registry, rows)
    cfg = load_config("papersearch-cpu", ["reward.name=paper_selector"])
    no_query = {**ROW, "extra_info": {"date": "2025-01"}}
    with pytest.raises(ConfigError) as raised:
        check_rows(cfg, registry, {"data.val": [ROW, no_query]})
    assert str(raised.value).splitlines() == [
        "data.val row 2: missing extra_info.query, which dataset 'scholar_queries' and reward 'paper_selector' read "
        "(1 of 2 rows of data.val)"]
