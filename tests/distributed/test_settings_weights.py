"""Cluster settings validation, the GPU memory plan, episode sharding, and the weight snapshot that travels to rollout
workers."""

from __future__ import annotations

import pytest
import torch

from agentr1_core.config import ConfigError
from agentr1_core.distributed.pool import split_even
from agentr1_core.distributed.settings import (COLOCATED_ENGINE_FRACTION, ClusterSettings, memory_plan,
                                               plan_engine_config)
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


def test_no_gpu_plan_keeps_two_cpu_workers_and_touches_no_engine_setting():
    plan = memory_plan(0, "ray")
    settings = ClusterSettings.from_params({}).resolved(plan)
    assert (settings.rollout_workers, settings.worker_gpus, settings.trainer_gpus) == (2, 0.0, 0.0)
    config = {"engine": {"name": "vllm"}}
    assert plan_engine_config(config, plan) == config


@pytest.mark.parametrize("trainer", ["ray", "verl"])
def test_one_gpu_plan_runs_one_colocated_engine_that_leaves_room_for_the_trainer(trainer):
    plan = memory_plan(1, trainer)
    settings = ClusterSettings.from_params({}).resolved(plan)
    assert plan.placement == "colocated" and settings.rollout_workers == 1 and plan.sleep_mode
    engine = plan_engine_config({"engine": {"name": "vllm"}}, plan)["engine"]
    assert engine == {"name": "vllm", "gpu_memory_utilization": COLOCATED_ENGINE_FRACTION, "enable_sleep_mode": True}
    # what the engines hold on GPU 0 plus the trainer's share fits in one GPU
    assert settings.rollout_workers * engine["gpu_memory_utilization"] <= 0.5
    if trainer == "ray":  # Ray fractions put both on GPU 0 and add up to one GPU
        assert settings.worker_gpus + settings.trainer_gpus == pytest.approx(1.0)
        assert plan.worker_env(0) == {}
    else:  # verl's pool reserves the whole GPU; the engine uses it without a Ray reservation, pinned to GPU 0
        assert settings.worker_gpus == 0.0 and settings.trainer_gpus == 1.0
        assert plan.worker_env(0)["CUDA_VISIBLE_DEVICES"] == "0"


@pytest.mark.parametrize("gpus, trainer, engines, trainer_gpus", [
    (2, "ray", 1, 1.0), (8, "ray", 7, 1.0), (2, "verl", 1, 1.0), (8, "verl", 4, 4.0)])
def test_several_gpus_give_engines_gpus_of_their_own(gpus, trainer, engines, trainer_gpus):
    plan = memory_plan(gpus, trainer)
    settings = ClusterSettings.from_params({}).resolved(plan)
    assert plan.placement == "separate" and not plan.sleep_mode
    assert (settings.rollout_workers, settings.worker_gpus, settings.trainer_gpus) == (engines, 1.0, trainer_gpus)
    assert settings.rollout_workers * settings.worker_gpus + settings.trainer_gpus == gpus
    assert plan.engine_defaults()["gpu_memory_utilization"] > COLOCATED_ENGINE_FRACTION


def test_colocated_on_several_gpus_pins_one_engine_per_gpu_for_verl():
    plan = memory_plan(4, "verl", "colocated")
    assert plan.rollout_workers == 4 and plan.trainer_gpus == 4.0 and plan.sleep_mode
    assert [plan.worker_env(i)["CUDA_VISIBLE_DEVICES"] for i in range(4)] == ["0", "1", "2", "3"]


def test_explicit_settings_win_over_the_plan():
    plan = memory_plan(1, "ray")
    settings = ClusterSettings.from_params({"rollout_workers": 3, "worker_gpus": 0.2}).resolved(plan)
    assert (settings.rollout_workers, settings.worker_gpus, settings.trainer_gpus) == (3, 0.2, plan.trainer_gpus)
    config = {"engine": {"name": "vllm", "gpu_memory_utilization": 0.25, "enable_sleep_mode": False}}
    assert plan_engine_config(config, plan) == config
    assert plan_engine_config({"engine": {"name": "transformers"}}, plan) == {"engine": {"name": "transformers"}}


def test_bad_placement_is_a_config_error():
    with pytest.raises(ConfigError, match="trainer.params.placement: must be one of auto, colocated, separate"):
        ClusterSettings.from_params({"placement": "spread"})
    with pytest.raises(ConfigError, match="'separate' needs at least 2 GPUs"):
        memory_plan(1, "ray", "separate")


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
