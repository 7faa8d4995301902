"""EM / F1 with the HotpotQA normalisation, answer extraction, the qa_em / qa_f1 rewards on trajectories, and what the
env and rewards declare they read from a row."""

from __future__ import annotations

import pytest

from agentr1_core.mdp import Step, Trajectory
from agentr1_tools_search.answers import best_score, exact_match, extract_answer, f1_score, normalize_answer
from agentr1_tools_search.rewards import QAF1, QAExactMatch


@pytest.mark.parametrize("raw, norm", [
    ("The Beatles", "beatles"),
    ("  An   apple, a day!  ", "apple day"),
    ("Theatre", "theatre"),  # 'the' only as a whole word
    ("U.S.A.", "usa"),  # punctuation deleted, not replaced by a space
    ("rock-and-roll", "rockandroll"),
    ("A", ""),
])
def test_normalize_answer(raw, norm):
    assert normalize_answer(raw) == norm


def test_exact_match_ignores_case_articles_and_punctuation():
    assert exact_match("the Eiffel tower.", "Eiffel Tower") == 1.0
    assert exact_match("Eiffel", "Eiffel Tower") == 0.0


def test_f1_partial_overlap_by_hand():
    # pred tokens: [barack, obama, jr]; gold: [barack, obama] -> P = 2/3, R = 1, F1 = 0.8
    assert f1_score("Barack Obama Jr.", "Barack Obama") == pytest.approx(0.8)
    assert f1_score("obama obama", "barack obama") == pytest.approx(0.5)  # multiset overlap is 1
    assert f1_score("Paris", "London") == 0.0


@pytest.mark.parametrize("pred, gold, score", [
    ("yes", "no", 0.0), ("no", "yes", 0.0), ("yes", "Yes.", 1.0),
    ("yes it is", "yes", 0.0),  # gold is yes/no and pred differs
    ("no answer", "noanswer", 0.0), ("noanswer", "the noanswer", 1.0),
])
def test_f1_yes_no_noanswer_rule(pred, gold, score):
    assert f1_score(pred, gold) == pytest.approx(score)


def test_max_over_aliases():
    golds = ["G. Stanley Hall", "Stanley Hall"]
    assert best_score("Stanley Hall", golds, exact_match) == 1.0
    assert best_score("Hall", golds, f1_score) == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert best_score("anything", [], exact_match) == 0.0
    assert best_score("Paris", "paris", exact_match) == 1.0  # a single string gold


def test_extract_answer_takes_the_last_tag():
    assert extract_answer("think <answer>a</answer> more <ANSWER> b \n</answer>") == "b"
    assert extract_answer("no tag here") is None
    assert extract_answer("<answer>unterminated") is None


def _traj(text: str, termination: str = "done") -> Trajectory:
    return Trajectory(steps=[Step([1], [2], [0.0], action_text="<tool_call>{}</tool_call>"),
                             Step([1], [2], [0.0], action_text=text, done=True)], termination=termination)


ROW = {"reward_model": {"ground_truth": ["G. Stanley Hall", "Stanley Hall"]}}


def test_qa_em_reward_uses_last_step_answer_and_aliases():
    assert QAExactMatch()(_traj("<answer>stanley hall</answer>"), ROW) == 1.0
    assert QAExactMatch()(_traj("<answer>Carl Rogers</answer>"), ROW) == 0.0
    assert QAExactMatch()(_traj("Stanley Hall"), ROW) == 0.0  # no tag, no score
    assert QAExactMatch()(_traj("<answer>Stanley Hall</answer>", "truncated"), ROW) == 0.0


def test_format_reward_only_for_a_well_formed_wrong_answer():
    reward = QAExactMatch(format_reward=0.1)
    assert reward(_traj("<answer>Carl Rogers</answer>"), ROW) == pytest.approx(0.1)
    assert reward(_traj("Carl Rogers"), ROW) == 0.0
    assert reward(_traj("<answer>Stanley Hall</answer>"), ROW) == 1.0
    with pytest.raises(ValueError):
        QAExactMatch(format_reward=1.5)


def test_qa_f1_reward():
    assert QAF1()(_traj("<answer>Hall</answer>"), ROW) == pytest.approx(2 / 3)


@pytest.mark.parametrize("reward", [QAExactMatch(), QAF1(format_reward=0.1)])
def test_both_rewards_record_em_and_f1_for_validation(reward):
    partial, unanswered = _traj("<answer>Hall</answer>"), _traj("Hall")
    reward(partial, ROW)
    reward(unanswered, ROW)
    assert partial.metrics["em"] == 0.0 and partial.metrics["f1"] == pytest.approx(2 / 3)
    assert unanswered.metrics["em"] == 0.0 and unanswered.metrics["f1"] == 0.0
    exact = _traj("<answer>G. Stanley Hall</answer>")
    reward(exact, ROW)
    assert exact.metrics["em"] == 1.0 and exact.metrics["f1"] == 1.0


@pytest.mark.parametrize("reward", [QAExactMatch(), QAF1(format_reward=0.1)])
def test_both_rewards_refuse_a_row_without_gold_answers(reward):
    assert reward(_traj("<answer>Hall</answer>"), {"answers": ["Hall"]}) == 1.0  # the plain-format key counts
    with pytest.raises(ValueError, match="no reward_model.ground_truth"):
        reward(_traj("<answer>None</answer>"), {"prompt": "Who?", "reward_model": {"style": "rule"}})


def test_the_recipe_rows_carry_what_the_env_and_reward_declare():
    from agentr1_core.config import load_config
    from agentr1_core.errors import ConfigError
    from agentr1_core.plugins import get_registry
    from agentr1_core.preflight import check_rows, load_rows

    cfg, registry = load_config("hotpotqa-cpu"), get_registry()
    rows = load_rows(cfg, registry, "data.train")
    check_rows(cfg, registry, {"data.train": rows})
    no_gold = {**rows[1], "reward_model": {"style": "rule"}}
    typo = {"env_kwargs": {"max_passage": 3}}
    with pytest.raises(ConfigError) as raised:
        check_rows(cfg, registry, {"data.train": [rows[0], no_gold, typo]})
    valid = ", ".join(sorted(registry.get("env", "search_qa").parameters()))
    assert str(raised.value).splitlines() == [
        "data.train row 2: missing reward_model.ground_truth, which dataset 'hotpotqa' reads "
        "(2 of 3 rows of data.train)",
        "data.train row 2: missing reward_model.ground_truth (or answer, answers), which reward 'qa_em' reads "
        "(2 of 3 rows of data.train)",
        "data.train row 3: missing prompt, which dataset 'hotpotqa' reads (1 of 3 rows of data.train)",
        "data.train row 3: missing extra_info.question (or prompt), which env 'search_qa' reads (1 of 3 rows of "
        "data.train)",
        f"data.train row 3: env_kwargs.max_passage is not a parameter of env 'search_qa' (did you mean "
        f"'max_passages'?); valid: {valid} (1 of 3 rows of data.train)",
    ]
