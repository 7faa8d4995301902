"""The RL update on CUDA (skipped without a GPU): the fused AdamW the trainer picks there gives the per-tensor
AdamW's update, the gradient does not depend on the micro-batch size, and a bf16 copy of the policy (what a bf16
engine samples with) gives log-probs far outside GSPO's clip range, which is why old log-probs are recomputed for
such engines. Self-contained (a random tiny Llama, no tokenizer), so it runs where only torch and transformers are."""

from __future__ import annotations

import copy

import pytest
import torch

from agentr1_core.algorithms.components import ALGORITHM_CLASSES
from agentr1_core.mdp import Step, Trajectory
from agentr1_core.trainers.batching import build_step_batch, collate, trajectories_to_rows
from agentr1_core.trainers.forward import response_forward
from agentr1_core.trainers.optimizer_steps import make_optimizer
from agentr1_core.trainers.update import Policy, UpdateSettings, policy_update

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def cuda_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=2048, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, pad_token_id=0,
                      tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).to("cuda").eval()


def _rows(model):
    gen = torch.Generator().manual_seed(1)
    trajs = []
    for i, (p, r) in enumerate(((5, 2), (9, 2), (4, 20), (7, 20))):
        prompt = torch.randint(10, 2000, (p,), generator=gen).tolist()
        resp = torch.randint(10, 2000, (r,), generator=gen).tolist()
        trajs.append(Trajectory(steps=[Step(prompt, resp, [0.0] * r, reward=float(i % 2), done=True)],
                                uid=f"t{i}", group_id="g"))
    rows = trajectories_to_rows(trajs).rows
    batch = build_step_batch(rows)
    with torch.no_grad():
        lp = response_forward(model, collate(rows, 0).to("cuda"), batch.action_mask.shape[1]).logprobs.cpu()
    batch.old_logprobs = (lp + 0.05 * torch.randn(lp.shape, generator=gen)) * batch.action_mask
    return rows, batch


def _update(model, rows, batch, micro, opt_kind, epochs=1, max_grad_norm=0.0):
    m = copy.deepcopy(model).train()
    params = list(m.parameters())
    if opt_kind == "sgd":
        opt = torch.optim.SGD(params, lr=1.0)
    elif opt_kind == "trainer":
        opt = make_optimizer([{"params": params, "lr": 1e-3}], lr=1e-3, device="cuda")
    else:
        opt = torch.optim.AdamW(params, lr=1e-3, foreach=False)
    algo = ALGORITHM_CLASSES["grpo"]()
    adv = algo.compute_advantages(batch)
    before = torch.cat([p.detach().flatten() for p in params])
    metrics = policy_update(Policy(model=m, pad_id=0, device="cuda", params=params), algo, opt, rows,
                            copy.deepcopy(batch), adv.advantages, adv.returns,
                            UpdateSettings(micro_batch_size=micro, update_epochs=epochs, max_grad_norm=max_grad_norm,
                                           progress=False))
    return torch.cat([p.detach().flatten() for p in params]) - before, metrics, opt


def test_cuda_gradient_does_not_depend_on_micro_batch_size(cuda_model):
    rows, batch = _rows(cuda_model)
    full, _, _ = _update(cuda_model, rows, batch, 4, "sgd")
    for micro in (1, 2, 3):
        delta, _, _ = _update(cuda_model, rows, batch, micro, "sgd")
        assert float((delta - full).norm()) <= 1e-5 * float(full.norm()), micro


def test_cuda_fused_adamw_matches_the_per_tensor_update(cuda_model):
    rows, batch = _rows(cuda_model)
    fast, fast_m, opt = _update(cuda_model, rows, batch, 2, "trainer", epochs=2, max_grad_norm=0.05)
    assert opt.defaults["fused"] is True
    slow, slow_m, _ = _update(cuda_model, rows, batch, 2, "per-tensor", epochs=2, max_grad_norm=0.05)
    assert fast_m["optimizer_steps"] == slow_m["optimizer_steps"] == 2
    assert float((fast - slow).norm()) <= 1e-3 * float(slow.norm())
    assert fast_m["weight_change"] == pytest.approx(float(fast.norm()), rel=1e-4)


def test_cuda_bf16_engine_logprobs_differ_by_more_than_the_gspo_clip(cuda_model):
    rows, batch = _rows(cuda_model)
    inputs = collate(rows, 0).to("cuda")
    width = batch.action_mask.shape[1]
    with torch.no_grad():
        fp32 = response_forward(cuda_model, inputs, width).logprobs
        bf16 = response_forward(copy.deepcopy(cuda_model).to(torch.bfloat16), inputs, width).logprobs.float()
    mask = batch.action_mask.to("cuda") > 0
    gap = (fp32 - bf16)[mask].abs()
    print(f"bf16 vs fp32 log-prob gap: mean {float(gap.mean()):.2e}, max {float(gap.max()):.2e}")
    assert float(gap.max()) > 3e-4  # the engine's log-probs cannot stand in for the trainer's
