"""Cluster settings validation, episode sharding, and the weight snapshot that travels to rollout workers."""

from __future__ import annotations

import pytest
import torch

from agentr1_core.config import ConfigError
from agentr1_core.distributed.pool import split_even
from agentr1_core.distributed.settings import ClusterSettings
from agentr1_core.distributed.weights import engine_state, to_torch_state


def test_cluster_settings_reject_unknown_keys_with_a_suggestion():
    with pytest.raises(ConfigError, match=r"trainer.params.rollout_worker: .*did you mean 'rollout_workers'"):
        ClusterSettings.from_params({"rollout_worker": 2})


@pytest.mark.parametrize("params, message", [
    ({"rollout_workers": 0}, "rollout_workers: must be >= 1"),
    ({"on_worker_failure": "ignore"}, "on_worker_failure: must be 'rerun' or 'drop'"),
])
def test_cluster_settings_reject_bad_values(params, message):
    with pytest.raises(ConfigError, match=message):
        ClusterSettings.from_params(params)


def test_split_even_keeps_order_and_balances():
    items = list(range(11))
    chunks = split_even(items, 3)
    assert [len(c) for c in chunks] == [4, 4, 3]
    assert sum(chunks, []) == items
    assert split_even([1, 2], 5) == [[1], [2]]


def test_engine_state_holds_only_trainable_parameters(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    for p in model.parameters():
        p.requires_grad_(False)
    top = model.model.layers[-1]
    for p in top.parameters():
        p.requires_grad_(True)
    state = engine_state(model)
    assert state and all(name.startswith("model.layers.1.") for name in state)
    assert set(state) == {f"model.layers.1.{n}" for n, _ in top.named_parameters()}
    # the snapshot is a copy: later updates do not leak into an already published state
    name = next(iter(state))
    before = state[name].copy()
    with torch.no_grad():
        dict(model.named_parameters())[name].add_(1.0)
    assert (state[name] == before).all()


def test_lora_state_is_the_merged_weight_of_a_plain_model(tiny_model_dir):
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    lora = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():  # make the adapters non-trivial (B starts at zero)
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    state = engine_state(lora, lora.get_base_model())
    assert set(state) == {f"model.layers.{i}.self_attn.{m}.weight" for i in range(2) for m in ("q_proj", "v_proj")}
    merged = lora.merge_and_unload()
    plain = dict(merged.named_parameters())
    for name, value in to_torch_state(state).items():
        torch.testing.assert_close(value, plain[name].detach(), rtol=1e-5, atol=1e-6)
