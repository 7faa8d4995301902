"""Step rows: exact ids carried from trajectories, prompt tokens masked out, per-step alignment, and the padded
forward that reads response log-probs, entropy and critic values (checked against a plain per-row forward)."""

from __future__ import annotations

import math

import pytest
import torch

from agentr1_core.mdp import Step, Trajectory
from agentr1_core.trainers.batching import build_step_batch, collate, micro_batches, trajectories_to_rows
from agentr1_core.trainers.forward import response_forward


def _traj(uid, group, steps, done_last=True):
    traj = Trajectory(uid=uid, group_id=group)
    for i, (p, r) in enumerate(steps):
        last = i == len(steps) - 1
        traj.steps.append(Step(prompt_ids=p, response_ids=r, response_logprobs=[-0.1 * (k + 1) for k in range(len(r))],
                               reward=1.0 if last else 0.25, done=last and done_last, anchor=f"s{i}"))
    return traj


def test_rows_carry_exact_ids_and_align_steps():
    a = _traj("g0/0", "g0", [([5, 6, 7], [8, 9]), ([5, 6, 7, 8, 9, 10], [11, 12, 13])])
    b = _traj("g0/1", "g0", [([5, 6, 7], [14])], done_last=False)
    c = _traj("g1/0", "g1", [([20, 21], [22, 23, 24, 25])])
    out = trajectories_to_rows([a, b, c])
    rows = out.rows
    assert [(r.traj, r.group, r.step_index) for r in rows] == [(0, 0, 0), (0, 0, 1), (1, 0, 0), (2, 1, 0)]
    assert rows[1].prompt_ids == [5, 6, 7, 8, 9, 10] and rows[1].response_ids == [11, 12, 13]
    assert rows[1].old_logprobs == pytest.approx([-0.1, -0.2, -0.3])
    assert out.group_keys == ["g0", "g1"] and out.traj_uids == ["g0/0", "g0/1", "g1/0"]
    # an episode that ended neither done nor truncated is cut (truncated) at its last step
    assert rows[2].truncated and not rows[2].done
    assert rows[1].done and not rows[1].truncated and not rows[0].done

    batch = build_step_batch(rows)
    assert batch.action_mask.shape == (4, 4)
    assert batch.action_mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]]
    assert batch.old_logprobs[1, :3].tolist() == pytest.approx([-0.1, -0.2, -0.3])
    assert batch.old_logprobs[1, 3] == 0
    assert batch.traj_ids.tolist() == [0, 0, 1, 2] and batch.group_ids.tolist() == [0, 0, 0, 1]
    assert batch.step_index.tolist() == [0, 1, 0, 0]
    assert batch.rewards.tolist() == [0.25, 1.0, 1.0, 1.0]
    assert batch.dones.tolist() == [False, True, False, True]
    assert batch.truncated.tolist() == [False, False, True, False]
    assert batch.anchors == ["s0", "s1", "s0", "s0"]


def test_nonfinite_engine_logprobs_are_kept_and_counted():
    traj = _traj("u", "g", [([1, 2], [3, 4])])
    traj.steps[0].response_logprobs = [float("nan"), -0.5]
    out = trajectories_to_rows([traj, Trajectory(uid="empty", group_id="g")])
    assert out.nonfinite_logprob_steps == 1 and out.empty_trajectories == 1
    batch = build_step_batch(out.rows)
    assert math.isnan(batch.old_logprobs[0, 0].item()) and batch.old_logprobs[0, 1].item() == -0.5


def test_a_step_both_done_and_truncated_is_terminal_and_gets_no_bootstrap():
    from agentr1_core.algorithms.gae import step_gae

    traj = _traj("u", "g", [([1], [2]), ([3], [4])])
    traj.steps[-1].truncated = True  # the env ended the episode at its step cap on the winning move
    rows = trajectories_to_rows([traj]).rows
    assert [(r.done, r.truncated) for r in rows] == [(False, False), (True, False)]
    batch = build_step_batch(rows)
    batch.values = torch.tensor([0.0, 0.0])
    batch.extras["bootstrap_values"] = torch.tensor([0.0, 100.0])  # must not be read after a terminal step
    out = step_gae(batch, gamma=1.0, lam=1.0)
    assert out.returns.tolist() == pytest.approx([1.25, 1.0])


def test_mismatched_logprobs_are_an_error():
    traj = _traj("u", "g", [([1], [2, 3])])
    traj.steps[0].response_logprobs = [-1.0]
    with pytest.raises(ValueError, match="2 response ids but 1 log-probs"):
        trajectories_to_rows([traj])


def test_collate_left_pads_so_responses_end_in_the_last_columns():
    rows = trajectories_to_rows([_traj("a", "g", [([1, 2, 3], [4, 5])]), _traj("b", "g", [([6], [7])])]).rows
    inputs = collate(rows, pad_id=0)
    assert inputs.input_ids.tolist() == [[1, 2, 3, 4, 5], [0, 0, 0, 6, 7]]
    assert inputs.attention_mask.tolist() == [[1, 1, 1, 1, 1], [0, 0, 0, 1, 1]]
    assert inputs.position_ids.tolist() == [[0, 1, 2, 3, 4], [0, 0, 0, 0, 1]]
    assert inputs.response_lens.tolist() == [2, 1] and inputs.keep == 3
    chunks = micro_batches([0, 1], rows, 1)
    assert chunks == [[1], [0]]  # shortest first


def _reference_logprobs(model, prompt, response, temperature):
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float() / temperature
    logp = torch.log_softmax(logits, -1)
    return [logp[len(prompt) - 1 + j, tok].item() for j, tok in enumerate(response)], logp


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_response_forward_matches_a_plain_forward_per_row(tiny_model, smol_tokenizer, temperature):
    tok = smol_tokenizer
    texts = [("What is 2 + 2?", "<answer>4</answer>"), ("Hi", "Hello there, how are you today?"),
             ("A much longer prompt with several more words in it.", "ok")]
    steps = []
    for p, r in texts:
        prompt = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True)
        prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
        resp = tok.encode(r, add_special_tokens=False) + [tok.eos_token_id]
        steps.append(Step(prompt_ids=prompt, response_ids=resp, response_logprobs=[0.0] * len(resp)))
    trajs = [Trajectory(steps=[s], uid=str(i), group_id="g") for i, s in enumerate(steps)]
    rows = trajectories_to_rows(trajs).rows
    batch = build_step_batch(rows)
    width = batch.action_mask.shape[1]
    head = torch.nn.Linear(tiny_model.config.hidden_size, 1)
    with torch.no_grad():
        out = response_forward(tiny_model, collate(rows, tok.pad_token_id), width, temperature, with_entropy=True,
                               value_head=head)
    assert out.logprobs.shape == (3, width)
    for i, s in enumerate(steps):
        ref, logp = _reference_logprobs(tiny_model, s.prompt_ids, s.response_ids, temperature)
        n = len(s.response_ids)
        assert out.logprobs[i, :n].tolist() == pytest.approx(ref, abs=1e-4)
        assert torch.all(out.logprobs[i, n:] == 0) and torch.all(out.entropy[i, n:] == 0)
        ent = -(logp.exp() * logp).sum(-1)
        assert out.entropy[i, :n].tolist() == pytest.approx(ent[len(s.prompt_ids) - 1:-1].tolist(), abs=1e-3)
        # the value is read at the last prompt token: the state before the action
        with torch.no_grad():
            hidden = tiny_model(input_ids=torch.tensor([s.prompt_ids]), output_hidden_states=True).hidden_states[-1]
            assert out.values[i].item() == pytest.approx(head(hidden[0, -1]).item(), abs=1e-4)


def test_prompt_tokens_get_no_gradient_through_the_loss(tiny_model, smol_tokenizer):
    """The loss reads response positions only: the gradient w.r.t. the final hidden states (the head's input) is
    exactly zero at prompt positions and at the last position, and non-zero at the two positions that predict the
    response tokens; the head itself is only ever given those two positions."""
    rows = trajectories_to_rows([_traj("a", "g", [([10, 11, 12, 13], [14, 15])])]).rows
    inputs = collate(rows, smol_tokenizer.pad_token_id)
    captured = {}
    head_rows = []

    def keep_hidden(_m, args):
        if "hidden" not in captured:  # the model's own call: [B, keep, H] (later calls are the chunks)
            args[0].retain_grad()
            captured["hidden"] = args[0]
        else:
            head_rows.append(args[0].shape[0])

    head = tiny_model.get_output_embeddings()
    handle = head.register_forward_pre_hook(keep_hidden)
    try:
        inputs.keep = inputs.input_ids.shape[1]  # keep every position, to look at the prompt positions too
        out = response_forward(tiny_model, inputs, 2)
        (-out.logprobs.sum()).backward()
    finally:
        handle.remove()
        tiny_model.zero_grad(set_to_none=True)
    grad = captured["hidden"].grad[0]  # [6, H]: the six tokens 10..15
    touched = (grad.abs().sum(-1) > 0).tolist()
    assert touched == [False, False, False, True, True, False]  # 13 predicts 14, 14 predicts 15
    assert head_rows == [2, 2]  # the forward chunk and its recomputation in the backward pass
