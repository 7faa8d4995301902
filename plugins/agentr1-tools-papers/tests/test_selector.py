"""The ``paper_selector`` reward. Fast tests: parameter checks, nothing loaded at construction, the selection F1
part, and a clear error for an unknown judge engine. Slow tests (the real SmolLM2 judge through the
``transformers`` engine): scores equal P(yes) from a direct forward, step rewards follow top-k / threshold /
action cost, the reward works when called from inside a running event loop, and an engine failure is a
``JudgeError`` that leaves the episode untouched."""

from __future__ import annotations

import asyncio
import math

import pytest

from agentr1_core.mdp import Step, Trajectory
from agentr1_tools_papers.selector import JudgeError, PaperSelector, judge_messages

QUERY = "attention mechanisms for neural machine translation"
PAPERS = [
    {"id": "a1", "title": "Neural machine translation by jointly learning to align and translate", "year": 2015,
     "abstract": "A soft attention over encoder states lets the decoder align source and target words."},
    {"id": "a2", "title": "Deep residual learning for image recognition", "year": 2016,
     "abstract": "Identity shortcut connections let very deep convolutional networks train."},
    {"id": "a3", "title": "Effective approaches to attention-based neural machine translation", "year": 2015,
     "abstract": "Global and local attention for translation with recurrent encoder-decoders."},
    {"id": "a4", "title": "Proximal policy optimization algorithms", "year": 2017,
     "abstract": "A clipped surrogate objective keeps policy updates close to the sampling policy."},
    {"id": "a5", "title": "Attention is all you need", "year": 2017,
     "abstract": "The Transformer: an encoder-decoder built only from self-attention, strong in translation."},
    {"id": "a6", "title": "A recipe book of Tuscan soups", "year": None, "abstract": ""},
    {"id": "a7", "title": "Convolutional sequence to sequence learning", "year": 2017,
     "abstract": "Gated convolutions and multi-step attention for machine translation."},
]
ROW = {"extra_info": {"query": QUERY}, "reward_model": {"ground_truth": ["a1", "a3", "a5"]}}


def episode(new_papers: list[list[dict]], selected: list[str] | None = None, env_reward: float = 0.0,
            termination: str = "done") -> Trajectory:
    steps = []
    for papers in new_papers:
        info = {"new_papers": papers} if papers else {}
        steps.append(Step(prompt_ids=[1, 2], response_ids=[3], response_logprobs=[-0.5], reward=env_reward,
                          info=info))
    if selected is not None:
        steps[-1].info["selected"] = selected
        steps[-1].done = True
    return Trajectory(steps=steps, termination=termination)


@pytest.fixture(scope="module")
def selector():
    sel = PaperSelector(judge_device="cpu", top_k=2)
    yield sel
    sel.close()


# -- fast -------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("params", [
    {"top_k": 0}, {"top_k": 1.5}, {"threshold": 1.5}, {"threshold": -0.1}, {"action_cost": -1.0},
    {"selection_weight": float("nan")}, {"max_abstract_chars": -1}, {"judge_dtype": "int8"}, {"judge": ""},
    {"judge_engine": ""}, {"judge_engine_params": [1]}, {"cache_size": True},
])
def test_bad_params_raise_one_line_value_errors(params):
    with pytest.raises(ValueError, match=r"^paper_selector: ") as info:
        PaperSelector(**params)
    assert "\n" not in str(info.value)


def test_construction_loads_nothing():
    sel = PaperSelector(judge="no-such-org/no-such-model", judge_engine="no_such_engine")
    assert sel._engine is None and sel.model is None and sel.tokenizer is None and sel._thread is None


def test_selection_weight_adds_weighted_f1_and_an_unfinished_episode_gets_none():
    sel = PaperSelector(judge="no-such-org/no-such-model", selection_weight=0.5, action_cost=0.1)
    done = episode([[], []], selected=["a1", "a3", "zz"], env_reward=1.0)
    assert sel(done, ROW) == pytest.approx(0.5 * 2 / 3)  # precision 2/3, recall 2/3
    assert [s.reward for s in done.steps] == pytest.approx([0.9, 0.9])
    assert done.metrics["f1"] == pytest.approx(2 / 3) and done.metrics["recall"] == pytest.approx(2 / 3)
    assert done.metrics["selector_score_mean"] == 0.0 and done.metrics["selector_found"] == 0.0
    assert sel(episode([[]], termination="max_turns"), ROW) == 0.0  # never finished
    assert sel(episode([[]]), ROW) == 0.0  # finished without selecting
    assert sel(episode([[]], selected=[]), ROW) == 0.0
    assert PaperSelector()(episode([[]], selected=["a1"]), ROW) == 0.0  # weight 0
    assert sel._engine is None and sel.model is None  # no new papers: the judge is never needed


def test_judge_messages_hold_query_paper_and_question():
    paper = {"id": "x", "title": "A  title", "year": 2020, "abstract": "word " * 200}
    system, user = judge_messages(QUERY, paper, max_abstract_chars=40)
    assert system["role"] == "system" and user["role"] == "user"
    text = user["content"]
    assert text.startswith(f"Query: {QUERY}\nPaper: A title (2020). word")
    assert text.endswith("...\nIs this paper relevant to the query? Answer Yes or No.")
    assert len(text) < len(QUERY) + 40 + 150
    assert "Paper: No year." in judge_messages(QUERY, {"title": "No year", "abstract": ""})[1]["content"]


def test_unknown_judge_engine_is_a_clear_error_on_first_use():
    sel = PaperSelector(judge_engine="no_such_engine")
    traj = episode([[PAPERS[0]]])
    with pytest.raises(JudgeError, match=r"judge engine: unknown engine 'no_such_engine'.*valid: .*transformers"):
        sel(traj, ROW)
    assert sel.model is None and traj.steps[0].reward == 0.0 and not traj.metrics


# -- slow: the real judge ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_scores_equal_p_yes_from_a_direct_forward(selector):
    import torch

    papers = PAPERS[:4]
    scores = selector.score_papers(QUERY, papers)
    tok, model = selector.tokenizer, selector.model
    yes, no = (tok.encode(a, add_special_tokens=False) for a in ("Yes", "No"))
    for paper, score in zip(papers, scores):
        prompt = selector.prompt_ids(QUERY, paper)
        text = tok.decode(prompt)
        assert QUERY in text and paper["title"] in text and "Answer Yes or No." in text
        lps = []
        for cont in (yes, no):
            with torch.no_grad():
                logits = model(torch.tensor([prompt + cont])).logits[0].float()
            logp = torch.log_softmax(logits, dim=-1)
            lps.append(sum(float(logp[len(prompt) - 1 + j, t]) for j, t in enumerate(cont)))
        direct = math.exp(lps[0]) / (math.exp(lps[0]) + math.exp(lps[1]))
        assert score == pytest.approx(direct, abs=1e-4)
    assert all(0.0 < s < 1.0 for s in scores) and len(set(scores)) == len(scores)
    assert selector.score_papers(QUERY, papers[1:2]) == scores[1:2]  # cached


@pytest.mark.slow
def test_step_rewards_are_top_k_after_threshold_minus_action_cost(selector):
    groups = [PAPERS[0:3], [], PAPERS[3:5]]
    scores = selector.score_papers(QUERY, [p for g in groups for p in g])
    threshold = sorted(scores)[len(scores) // 2]  # the median: some scores fall below it
    sel = PaperSelector(judge_device="cpu", top_k=2, threshold=threshold, action_cost=0.05, selection_weight=1.0)
    sel._cache.update(selector._cache)  # the same judge's scores: nothing to load
    traj = episode(groups, selected=["a1", "a2"], env_reward=0.25)
    final = sel(traj, ROW)
    assert sel._engine is None
    expected, start = [], 0
    for g in groups:
        kept = sorted((s if s >= threshold else 0.0 for s in scores[start:start + len(g)]), reverse=True)
        expected.append(0.25 + sum(kept[:2]) - 0.05)
        start += len(g)
    assert [s.reward for s in traj.steps] == pytest.approx(expected, abs=1e-12)
    assert final == pytest.approx(0.4)  # precision 1/2, recall 1/3
    assert traj.metrics["selector_score_mean"] == pytest.approx(sum(scores) / len(scores))
    assert traj.metrics["selector_found"] == sum(s >= threshold for s in scores)

    plain = episode(groups)
    assert selector(plain, ROW) == 0.0
    top = sorted(scores[:3], reverse=True)[:2]
    assert plain.steps[0].reward == pytest.approx(sum(top)) and plain.steps[1].reward == 0.0
    assert plain.metrics["selector_found"] == sum(s >= 0.5 for s in scores)


@pytest.mark.slow
def test_reward_called_synchronously_inside_a_running_event_loop(selector):
    fresh = [PAPERS[5], PAPERS[6]]  # not cached yet: the judge runs

    async def rollout() -> list[Trajectory]:
        trajs = [episode([fresh[:1], fresh[1:]]), episode([fresh])]
        for traj in trajs:
            selector(traj, ROW)
            await asyncio.sleep(0)
        return trajs

    first, second = asyncio.run(rollout())
    a, b = selector.score_papers(QUERY, fresh)
    assert [s.reward for s in first.steps] == pytest.approx([a, b])
    assert second.steps[0].reward == pytest.approx(a + b)


@pytest.mark.slow
def test_an_engine_failure_is_a_judge_error_and_changes_nothing(selector):
    sel = PaperSelector(judge_device="cpu", judge_engine_params={"max_context": 16})
    sel.model, sel.tokenizer = selector.model, selector.tokenizer  # share the loaded weights
    traj = episode([[PAPERS[0]]], selected=["a1"])
    try:
        with pytest.raises(JudgeError, match=r"failed to score 1 papers: ValueError: .*max_context 16"):
            sel(traj, ROW)
    finally:
        sel.close()
    assert traj.steps[0].reward == 0.0 and not traj.metrics
