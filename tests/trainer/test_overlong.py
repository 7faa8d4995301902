"""Episodes cut by a limit (``rollout.overlong``): DAPO's length penalty by hand at its edges and against verl's own
DAPO reward manager, which episodes count as cut, where the penalty lands (every estimator's returns), masked rows
(all-zero action mask, verl's response mask, inert for the trainer), a real update on the tiny model where a masked
episode gives no gradient but still counts in its group's baseline, and real ``tiny`` runs with each mode."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from agentr1_core.algorithms.base import inert_rows_of
from agentr1_core.algorithms.components import ALGORITHM_CLASSES
from agentr1_core.cli import main
from agentr1_core.mdp import Step, Trajectory
from agentr1_core.rollout.driver import GREEDY_INFO_KEY
from agentr1_core.trainers.batching import build_step_batch, trajectories_to_rows
from agentr1_core.trainers.console import console_notes
from agentr1_core.trainers.overlong import (
    LOSS_MASK_INFO_KEY, OverlongRule, is_overlong, length_penalty,
)
from agentr1_core.verl.data import loss_tokens, step_rows_to_verl


def _episode(uid: str, lengths: list[int], reward: float, termination: str = "done",
             finish: str = "stop", group: str = "g") -> Trajectory:
    """An episode of one step per reply length; the last step carries the reward (as ``flows.finish`` puts it)."""
    steps = [Step(prompt_ids=[1, 2, 3 + i], response_ids=[10 + k for k in range(n)],
                  response_logprobs=[-0.5] * n, info={"finish_reason": finish}) for i, n in enumerate(lengths)]
    steps[-1].reward = reward
    steps[-1].done = termination == "done"
    return Trajectory(steps=steps, uid=uid, group_id=group, termination=termination, final_reward=reward)


# -- the penalty's numbers --------------------------------------------------------------------------------------------
def test_length_penalty_by_hand_at_its_edges():
    # B = 16, N = 4, factor 1.5: free up to 12 tokens, then 1.5 / 4 = 0.375 per token, -1.5 from 16 on
    assert length_penalty(0, 16, 4, 1.5) == 0.0
    assert length_penalty(12, 16, 4, 1.5) == 0.0  # L = B - N
    assert length_penalty(13, 16, 4, 1.5) == pytest.approx(-0.375)  # L = B - N + 1
    assert length_penalty(14, 16, 4, 1.5) == pytest.approx(-0.75)
    assert length_penalty(16, 16, 4, 1.5) == pytest.approx(-1.5)  # L = B
    assert length_penalty(17, 16, 4, 1.5) == pytest.approx(-1.5)  # beyond: no more than the factor
    assert length_penalty(40, 16, 4, 1.5) == pytest.approx(-1.5)
    assert length_penalty(16, 16, 16, 1.0) == pytest.approx(-1.0)  # a buffer as long as the budget
    assert length_penalty(1, 16, 16, 1.0) == pytest.approx(-1 / 16)
    with pytest.raises(ValueError, match="buffer"):
        length_penalty(5, 16, 0, 1.0)


@pytest.mark.parametrize("budget,buffer_tokens,factor", [(16, 4, 1.0), (16, 16, 0.5), (9, 3, 2.0)])
def test_penalty_matches_verls_dapo_reward_manager(budget, buffer_tokens, factor):
    """verl's ``DAPORewardManager`` with its overlong buffer: the reward it puts on a response's last token is the
    score plus our ``length_penalty``, for every length from 1 to the budget (verl pads responses to the budget, so
    no response is longer)."""
    pytest.importorskip("verl")
    import numpy as np
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.workers.reward_manager.dapo import DAPORewardManager

    from agentr1_core.models import load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m-instruct")
    lengths = list(range(1, budget + 1))
    s, p = len(lengths), 3
    responses = torch.full((s, budget), int(tokenizer.pad_token_id or 0), dtype=torch.long)
    attention = torch.zeros(s, p + budget, dtype=torch.long)
    attention[:, :p] = 1
    for i, n in enumerate(lengths):
        responses[i, :n] = torch.arange(100, 100 + n)
        attention[i, p:p + n] = 1
    data = DataProto.from_dict(
        tensors={"prompts": torch.full((s, p), 200, dtype=torch.long), "responses": responses,
                 "attention_mask": attention},
        non_tensors={"reward_model": np.array([{"ground_truth": "x"}] * s, dtype=object),
                     "data_source": np.array(["t"] * s, dtype=object)})
    buffer_cfg = OmegaConf.create({"enable": True, "len": buffer_tokens, "penalty_factor": factor, "log": False})
    manager = DAPORewardManager(tokenizer, num_examine=0, compute_score=lambda **kw: 0.25, max_resp_len=budget,
                                overlong_buffer_cfg=buffer_cfg)
    theirs = manager(data)
    for i, n in enumerate(lengths):
        ours = 0.25 + length_penalty(n, budget, buffer_tokens, factor)
        assert float(theirs[i, n - 1]) == pytest.approx(ours, abs=1e-6), n


# -- which episodes count as cut --------------------------------------------------------------------------------------
def test_an_episode_is_overlong_when_a_reply_or_a_limit_cut_it():
    assert not is_overlong(_episode("a", [3, 4], 1.0))
    assert is_overlong(_episode("b", [3], 0.0, termination="max_turns"))
    assert is_overlong(_episode("c", [3], 0.0, termination="truncated"))
    assert is_overlong(_episode("d", [3], 0.0, termination="context_limit"))
    for ending in ("env_error", "engine_error"):  # failures, not limits
        assert not is_overlong(_episode("e", [3], 0.0, termination=ending))
    cut_early = _episode("f", [8, 2], 1.0)  # the first reply hit the budget, the episode still ended done
    cut_early.steps[0].info["finish_reason"] = "length"
    assert is_overlong(cut_early)


# -- penalty: where it lands ------------------------------------------------------------------------------------------
def _group_with_long_replies() -> list[Trajectory]:
    """One group, B = 8, N = 4: replies of 4 (free), 6 (-0.5), 8 (-1, cut) tokens; a two-step episode whose
    longest reply (7: -0.75) is its first; and a greedy baseline episode at the budget."""
    cut = _episode("g/2", [8], 0.0, termination="max_turns", finish="length")
    greedy = _episode("g/greedy", [8], 1.0, finish="length")
    greedy.info[GREEDY_INFO_KEY] = True
    return [_episode("g/0", [4], 1.0), _episode("g/1", [6], 1.0), cut, _episode("g/3", [7, 2], 0.0), greedy]


def test_the_penalty_lowers_the_reward_every_estimator_reads_and_keeps_the_raw_one():
    trajs = _group_with_long_replies()
    metrics = OverlongRule("penalty", budget=8, buffer_tokens=4, penalty_factor=1.0).apply(trajs)
    penalties = [0.0, -0.5, -1.0, -0.75, -1.0]
    raw = [1.0, 1.0, 0.0, 0.0, 1.0]
    assert [t.final_reward for t in trajs] == pytest.approx([r + p for r, p in zip(raw, penalties)])
    assert [t.info["raw_reward"] for t in trajs] == raw
    assert [t.steps[-1].reward for t in trajs] == pytest.approx([r + p for r, p in zip(raw, penalties)])
    assert trajs[3].steps[0].reward == 0.0  # on the last step, whichever step was long
    # the greedy baseline is penalised like the samples, but only these are counted
    assert metrics == {"overlong/episodes": 1.0, "overlong/penalty_mean": pytest.approx(-2.25 / 4)}
    again = OverlongRule("penalty", budget=8, buffer_tokens=4, penalty_factor=1.0).apply(trajs)
    assert [t.final_reward for t in trajs] == pytest.approx([r + p for r, p in zip(raw, penalties)])  # not twice
    assert again["overlong/penalty_mean"] == metrics["overlong/penalty_mean"]

    steps = trajectories_to_rows(trajs)
    batch = build_step_batch(steps.rows)
    sampled = torch.tensor([r + p for r, p in zip(raw, penalties)][:4], dtype=torch.float64)
    first = torch.tensor([0, 1, 2, 3])  # the first row of each sampled episode
    for name, params in (("grpo", {}), ("reinforce", {}), ("steppo", {"whiten_advantages": False})):
        b = copy.deepcopy(batch)
        b.values = torch.zeros(b.num_steps)
        out = ALGORITHM_CLASSES[name](**params).compute_advantages(b)
        assert out.returns[first].double() == pytest.approx(sampled, abs=1e-6), name  # G_0: the penalised return
    adv = ALGORITHM_CLASSES["grpo"]().compute_advantages(batch).advantages[first, 0].double()
    expected = (sampled - sampled.mean()) / (sampled.std() + 1e-6)
    assert adv == pytest.approx(expected, abs=1e-5)
    remax = ALGORITHM_CLASSES["remax"]()
    b = copy.deepcopy(batch)
    assert remax.prepare_batch(b, steps.rows, trajs)["remax/greedy_return_mean"] == pytest.approx(0.0)


def test_mode_none_changes_nothing():
    trajs = _group_with_long_replies()
    before = copy.deepcopy(trajs)
    assert OverlongRule("none", budget=8).apply(trajs) == {}
    assert trajs == before


# -- mask: rows without loss --------------------------------------------------------------------------------------
def test_masked_episodes_give_rows_without_action_tokens_on_both_layouts():
    trajs = _group_with_long_replies()
    metrics = OverlongRule("mask", budget=8).apply(trajs)
    assert metrics == {"overlong/episodes": 1.0, "overlong/masked_steps": 1.0}
    assert [bool(t.info.get(LOSS_MASK_INFO_KEY)) for t in trajs] == [False, False, True, False, False]
    assert [t.final_reward for t in trajs] == [1.0, 1.0, 0.0, 0.0, 1.0]  # rewards untouched
    steps = trajectories_to_rows(trajs)
    assert [r.loss_masked for r in steps.rows] == [False, False, True, False, False]
    batch = build_step_batch(steps.rows)
    assert batch.action_mask.sum(-1).tolist() == [4, 6, 0, 7, 2]
    assert batch.rewards.tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]  # the masked episode's reward is still there
    # verl's layout: the masked row is attended to but out of the loss (response_mask) and its token count
    keep = loss_tokens(batch.action_mask, batch.old_logprobs)
    verl = step_rows_to_verl(steps.rows, torch.zeros(5, 8), None, 0, steps.group_keys, steps.traj_uids,
                             loss_mask=keep)["batch"]
    assert verl["response_mask"].sum(-1).tolist() == [4, 6, 0, 7, 2]
    assert verl["attention_mask"][2].sum() == 3 + 8
    # inert for the trainer whatever the algorithm says: with an entropy bonus GRPO calls no row inert by itself
    algo = ALGORITHM_CLASSES["grpo"](entropy_coef=0.01)
    adv = algo.compute_advantages(batch)
    assert algo.inert_rows(batch, adv.advantages) is None
    assert inert_rows_of(algo, batch, adv.advantages, adv.returns, False).tolist() == [False, False, True, False,
                                                                                       False]
    steppo = ALGORITHM_CLASSES["steppo"](entropy_coef=0.01)
    b = copy.deepcopy(batch)
    b.values = torch.tensor([0.5, 0.5, 0.5, 0.5, 0.5])
    adv = steppo.compute_advantages(b)
    assert inert_rows_of(steppo, b, adv.advantages, adv.returns, True).tolist() == [False, False, True, False, False]


def test_the_console_says_what_was_done_only_when_something_was():
    assert not any("[overlong]" in n for n in console_notes({"overlong/episodes": 0, "overlong/masked_steps": 0}))
    assert not any("[overlong]" in n for n in console_notes({"overlong/episodes": 0.0,
                                                              "overlong/penalty_mean": 0.0}))
    notes = console_notes({"episodes": 4, "overlong/episodes": 1.0, "overlong/masked_steps": 2.0})
    assert "[overlong] 1 of 4 episodes cut by a limit; 2 steps kept out of the loss" in notes
    notes = console_notes({"episodes": 4, "overlong/episodes": 0.0, "overlong/penalty_mean": -0.125})
    assert "[overlong] 0 of 4 episodes cut by a limit; mean length penalty -0.125" in notes
    notes = console_notes({"update_skipped": 1, "train_steps": 3, "overlong/episodes": 3.0,
                           "overlong/masked_steps": 3.0, "episodes": 3})
    assert any("kept out of the loss, rollout.overlong.mode mask" in n for n in notes if n.startswith("[update]"))


# -- a real update on the tiny model ------------------------------------------------------------------------------
def _trainer(tmp_path, model_dir, name):
    from agentr1_core.config import load_config
    from agentr1_core.plugins import configure_registry
    from agentr1_core.trainers.local import LocalTrainer

    cfg = load_config("tiny", [f"model.path={model_dir}", f"run_dir={tmp_path / name}", "stages=[rl]",
                               "rollout.max_new_tokens=8", "rollout.max_turns=1", "rollout.overlong.mode=mask",
                               "trainer.min_free_gb=0.01", "trainer.checkpoint_every=-1", "trainer.lr=1e-2"])
    trainer = LocalTrainer(cfg, configure_registry())
    trainer.setup()
    trainer.backend.start_rl(after_sft=False)
    return trainer


def _update(trainer, trajs):
    steps = trajectories_to_rows(trajs)
    metrics = trainer.backend.rl_update(steps, trajs, 1)
    weights = torch.cat([p.detach().flatten() for p in trainer.backend.policy.model.parameters() if p.requires_grad])
    return weights, metrics


@pytest.mark.slow
def test_a_masked_episode_gives_no_gradient_but_counts_in_its_groups_baseline(tmp_path, tiny_model_dir):
    """One group of four real episodes of the tiny model, rewards 0, 1, 0, 1, the first kept out of the loss
    (``mask``). Its tokens do not matter to the update (other tokens of the same length: the same weights); its
    reward does (another reward moves the group's mean: other weights). The entropy bonus of the ``tiny`` config
    would run every row; the masked one is skipped all the same."""
    base = _trainer(tmp_path, tiny_model_dir, "a")
    trajs, _ = base.rollout(base.train_rows[:1], 4, base.sampling)
    assert len(trajs) == 4 and len({t.group_id for t in trajs}) == 1
    for traj, reward in zip(trajs, (0.0, 1.0, 0.0, 1.0)):
        traj.final_reward = reward
        traj.steps[-1].reward = reward
    start = torch.cat([p.detach().flatten() for p in base.backend.policy.model.parameters() if p.requires_grad])
    assert OverlongRule("mask", budget=8).apply(trajs[:1])["overlong/masked_steps"] == len(trajs[0].steps)
    other_tokens, other_reward = copy.deepcopy(trajs), copy.deepcopy(trajs)
    for step in other_tokens[0].steps:
        step.response_ids = [(t + 7) % 1000 + 5 for t in step.response_ids]
    other_reward[0].final_reward = other_reward[0].steps[-1].reward = 1.0

    weights, metrics = _update(base, trajs)
    changed = float((weights - start).norm())
    assert changed > 0 and metrics["update_skipped"] == 0
    assert metrics["update_inert_rows"] == len(trajs[0].steps)  # the masked rows, not run
    assert metrics["adv/num_groups"] == 1.0
    same, _ = _update(_trainer(tmp_path, tiny_model_dir, "b"), other_tokens)
    assert float((same - weights).norm()) <= 1e-6 * changed
    moved, _ = _update(_trainer(tmp_path, tiny_model_dir, "c"), other_reward)
    assert float((moved - weights).norm()) > 1e-2 * changed


# -- real runs on the tiny config -----------------------------------------------------------------------------------
def _run(tmp_path, model_dir, *overrides):
    run_dir = tmp_path / "run"
    assert main(["run", "tiny", f"run_dir={run_dir}", f"model.path={model_dir}", "stages=[rl]",
                 "rollout.max_new_tokens=8", "validation.before=false", "validation.max_rows=1",
                 "trainer.checkpoint_every=-1", "trainer.min_free_gb=0.01", *overrides]) == 0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    iters = [r for r in records if "iteration" in r and r.get("event") is None]
    assert len(iters) == 1
    return iters[0]


@pytest.mark.slow
def test_a_tiny_run_with_every_reply_cut_masks_every_step_and_skips_the_update(tmp_path, tiny_model_dir, capsys):
    """A random tiny model never ends a reply within 8 tokens: every episode is cut, every step is out of the loss,
    and the update is skipped (not NaN) although the entropy bonus would give a gradient."""
    it = _run(tmp_path, tiny_model_dir, "rollout.overlong.mode=mask")
    assert it["episodes"] == 4 and it["overlong/episodes"] == 4
    assert it["overlong/masked_steps"] == it["train_steps"] >= 4
    assert it["update_skipped"] == 1 and it["optimizer_steps"] == 0 and it["loss"] == 0.0
    assert it["update_inert_rows"] == it["train_steps"]
    assert it["reward_mean"] == 0.0 and "overlong/penalty_mean" not in it
    out = capsys.readouterr().out
    assert f"[overlong] 4 of 4 episodes cut by a limit; {it['train_steps']} steps kept out of the loss" in out
    assert "kept out of the loss, rollout.overlong.mode mask" in out


@pytest.mark.slow
def test_a_tiny_run_with_every_reply_cut_trains_on_the_penalised_reward(tmp_path, tiny_model_dir, capsys):
    """Every reply runs to the budget of 8 tokens, past the buffer's 4: each episode loses the whole factor, 0.5.
    The run's reward metrics are the raw ones; the advantage estimator's returns are the penalised ones."""
    it = _run(tmp_path, tiny_model_dir, "rollout.overlong.mode=penalty", "rollout.overlong.buffer_tokens=4",
              "rollout.overlong.penalty_factor=0.5")
    assert it["episodes"] == 4 and it["overlong/episodes"] == 4
    assert it["overlong/penalty_mean"] == pytest.approx(-0.5)
    assert it["reward_mean"] == 0.0 and it["return_mean"] == 0.0 and it["success_rate"] == 0.0
    assert it["adv/return_mean"] == pytest.approx(-0.5)  # every step's return-to-go: the penalty at the end
    assert it["update_skipped"] == 0 and it["optimizer_steps"] == 1 and it["loss"] == it["loss"]
    assert "overlong/masked_steps" not in it
    assert "[overlong] 4 of 4 episodes cut by a limit; mean length penalty -0.500" in capsys.readouterr().out
