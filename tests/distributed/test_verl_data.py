"""verl data layout and config mapping, checked without verl; the real ``DataProto`` where verl is installed."""

from __future__ import annotations

import pytest
import torch

from agentr1_core.config import load_config
from agentr1_core.verl.data import (
    DUAL_CLIP_OFF,
    default_attn_implementation,
    merge_into_verl_config,
    step_rows_to_verl,
    to_dataproto,
    verl_config,
)
from agentr1_core.mdp import Step, Trajectory
from agentr1_core.trainers.batching import build_step_batch, critic_view, trajectories_to_rows

PAD = 2


def _rollout():
    a = Trajectory(steps=[Step([5, 6, 7], [8, 9], [-0.5, -0.25], reward=0.0),
                          Step([5, 6, 7, 8, 9, 10], [11], [-1.0], reward=1.0, done=True)], uid="g0/0", group_id="g0")
    b = Trajectory(steps=[Step([5], [12, 13, 14], [-0.1, -0.2, -0.3], reward=0.0, truncated=True)], uid="g0/1",
                   group_id="g0")
    return trajectories_to_rows([a, b])


def test_layout_left_pads_prompts_right_pads_responses_and_keeps_ids():
    steps = _rollout()
    batch = build_step_batch(steps.rows)
    adv = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0], [4.0, 5.0, 6.0]])
    out = step_rows_to_verl(steps.rows, adv, torch.tensor([0.5, 1.0, 0.0]), PAD, steps.group_keys, steps.traj_uids,
                            meta={"temperature": 1.0})
    b = out["batch"]
    assert b["prompts"].tolist() == [[PAD, PAD, PAD, 5, 6, 7], [5, 6, 7, 8, 9, 10], [PAD] * 5 + [5]]
    assert b["responses"].tolist() == [[8, 9, PAD], [11, PAD, PAD], [12, 13, 14]]
    assert torch.equal(b["input_ids"], torch.cat([b["prompts"], b["responses"]], dim=1))
    assert b["attention_mask"][0].tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 0]
    assert b["position_ids"][0].tolist() == [0, 0, 0, 0, 1, 2, 3, 4, 4]
    assert b["position_ids"][2].tolist() == [0, 0, 0, 0, 0, 0, 1, 2, 3]
    assert b["response_mask"].tolist() == [[1, 1, 0], [1, 0, 0], [1, 1, 1]]
    assert b["old_log_probs"][0].tolist() == [-0.5, -0.25, 0.0] and b["old_log_probs"][2].tolist() == pytest.approx(
        [-0.1, -0.2, -0.3])
    assert b["advantages"].tolist() == [[1.0, 2.0, 0.0], [3.0, 0.0, 0.0], [4.0, 5.0, 6.0]]
    assert b["returns"].tolist() == [[0.5, 0.5, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    assert b["token_level_rewards"].tolist() == [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    assert all(v.shape[0] == 3 for v in b.values())
    nt = out["non_tensor_batch"]
    assert list(nt["uid"]) == ["g0", "g0", "g0"]
    assert list(nt["traj_uid"]) == ["g0/0", "g0/0", "g0/1"]
    assert list(nt["step_index"]) == [0, 1, 0]
    assert out["meta_info"]["global_token_num"] == [5, 7, 4] and out["meta_info"]["temperature"] == 1.0
    assert batch.action_mask.tolist() == b["response_mask"].float().tolist()  # same token alignment as local


def test_the_critics_layout_puts_the_prefix_before_the_prompt_and_keeps_the_response_columns():
    """``critic.prefix`` on verl: the critic's rows are the actor's with the prefix ids before each prompt. Prompts
    stay left-padded, so the last prompt column (where verl's critic reads the value before the first action token)
    still holds each row's last prompt token and every response column is the actor's; a zero-length prefix gives
    the actor's layout exactly."""
    steps = _rollout()
    zeros = torch.zeros(3, 3)
    actor = step_rows_to_verl(steps.rows, zeros, None, PAD)["batch"]
    for row in steps.rows:
        row.critic_prefix_ids = []
    empty = step_rows_to_verl([critic_view(r) for r in steps.rows], zeros, None, PAD)["batch"]
    assert all(torch.equal(empty[k], actor[k]) for k in actor)
    for row in steps.rows:
        row.critic_prefix_ids = [901, 902]
    critic = step_rows_to_verl([critic_view(r) for r in steps.rows], zeros, None, PAD)["batch"]
    assert critic["prompts"].tolist() == [[PAD, PAD, PAD, 901, 902, 5, 6, 7], [901, 902, 5, 6, 7, 8, 9, 10],
                                          [PAD] * 5 + [901, 902, 5]]
    for k in ("responses", "response_mask"):
        assert torch.equal(critic[k], actor[k]), k
    assert critic["prompts"][:, -1].tolist() == actor["prompts"][:, -1].tolist()
    # positions count the prefix: the first response token of row 0 sits at position 2 + 3
    assert critic["position_ids"][0, 8].item() == 5 and actor["position_ids"][0, 6].item() == 3
    assert [r.prompt_ids for r in steps.rows] == [[5, 6, 7], [5, 6, 7, 8, 9, 10], [5]]  # the actor's rows untouched


def test_layout_rejects_advantages_that_do_not_cover_the_responses():
    steps = _rollout()
    with pytest.raises(ValueError, match="advantages shape"):
        step_rows_to_verl(steps.rows, torch.zeros(3, 2), None, PAD)


def _algorithm(name, **params):
    from agentr1_core.plugins import get_registry

    return get_registry().build("algorithm", name, params, where="algorithm")


def test_config_mapping_follows_the_run_config():
    cfg = load_config("default", ["trainer.lr=3e-6", "trainer.micro_batch_size=4", "rollout.batch_size=8",
                                  "rollout.n=4", "trainer.mini_batches=2", "model.lora.enabled=true"])
    algo = _algorithm("ppo", clip_ratio=0.2, clip_ratio_high=0.28, kl_coef=0.01, kl_estimator="k3",
                      loss_agg="seq-mean-token-sum")
    out = verl_config(cfg, algo, n_gpus=2, model_path="/models/x", attn_implementation="sdpa")
    actor = out["actor_rollout_ref"]["actor"]
    assert actor["optim"]["lr"] == 3e-6 and actor["ppo_micro_batch_size_per_gpu"] == 4
    assert actor["ppo_mini_batch_size"] == 16 and actor["clip_ratio_high"] == 0.28 and actor["clip_ratio_low"] == 0.2
    assert actor["use_kl_loss"] and actor["kl_loss_type"] == "low_var_kl" and actor["kl_loss_coef"] == 0.01
    assert actor["loss_agg_mode"] == "seq-mean-token-sum" and actor["policy_loss"]["loss_mode"] == "vanilla"
    assert out["actor_rollout_ref"]["model"]["lora_rank"] == cfg.model.lora.r
    assert out["actor_rollout_ref"]["model"]["path"] == "/models/x"
    assert out["actor_rollout_ref"]["rollout"]["response_length"] == cfg.rollout.max_new_tokens
    assert out["critic"]["optim"]["lr"] == cfg.trainer.critic_lr and out["trainer"]["n_gpus_per_node"] == 2
    assert out["critic"]["cliprange_value"] == 0.5 and out["critic"]["model"]["path"] == "/models/x"


def test_a_token_budget_becomes_verls_dynamic_micro_batches():
    algo = _algorithm("ppo")
    plain = verl_config(load_config("default", []), algo, attn_implementation="sdpa")
    assert plain["actor_rollout_ref"]["actor"]["use_dynamic_bsz"] is False
    assert plain["critic"]["use_dynamic_bsz"] is False
    cfg = load_config("default", ["trainer.micro_batch_tokens=4096"])
    out = verl_config(cfg, algo, attn_implementation="sdpa")
    arr = out["actor_rollout_ref"]
    assert arr["actor"]["use_dynamic_bsz"] and arr["actor"]["ppo_max_token_len_per_gpu"] == 4096
    for part in (arr["rollout"], arr["ref"]):
        assert part["log_prob_use_dynamic_bsz"] and part["log_prob_max_token_len_per_gpu"] == 4096
    assert out["critic"]["use_dynamic_bsz"] and out["critic"]["ppo_max_token_len_per_gpu"] == 4096
    assert out["critic"]["forward_max_token_len_per_gpu"] == 4096
    # verl refuses a cap below its longest sequence: the cap is raised to prompt + response
    small = verl_config(load_config("default", ["trainer.micro_batch_tokens=100"]), algo, attn_implementation="sdpa")
    longest = int(cfg.rollout.max_prompt_tokens) + int(cfg.rollout.max_new_tokens)
    assert small["actor_rollout_ref"]["actor"]["ppo_max_token_len_per_gpu"] == longest


def test_the_critics_token_budget_has_room_for_the_critic_prefix():
    """The critic's rows carry ``critic.prefix``'s tokens before the prompt: its cap grows by ``max_tokens``, the
    actor's does not."""
    overrides = ["trainer.micro_batch_tokens=4096", "critic.prefix.template='Answer: {ground_truth}'",
                 "critic.prefix.max_tokens=64"]
    out = verl_config(load_config("default", overrides), _algorithm("steppo"), attn_implementation="sdpa")
    assert out["actor_rollout_ref"]["actor"]["ppo_max_token_len_per_gpu"] == 4096
    assert out["critic"]["ppo_max_token_len_per_gpu"] == out["critic"]["forward_max_token_len_per_gpu"] == 4096 + 64


@pytest.mark.parametrize("name,agg,mode,c", [
    ("drgrpo", "seq-mean-token-sum", "vanilla", 3.0),   # the algorithm's own default, not token-mean
    ("reinforce", "token-mean", "gpg", 3.0),            # -A log pi, not PPO clip
    ("steppo", "seq-mean-token-mean", "gspo", 3.0),
    ("grpo", "token-mean", "vanilla", 3.0),
])
def test_config_mapping_uses_the_algorithms_resolved_defaults(name, agg, mode, c):
    actor = verl_config(load_config("default"), _algorithm(name), attn_implementation="sdpa")[
        "actor_rollout_ref"]["actor"]
    assert actor["loss_agg_mode"] == agg and actor["policy_loss"]["loss_mode"] == mode
    assert actor["clip_ratio_c"] == c


def test_config_mapping_switches_the_dual_clip_off_for_none():
    actor = verl_config(load_config("default"), _algorithm("grpo", clip_ratio_c=None), attn_implementation="sdpa")[
        "actor_rollout_ref"]["actor"]
    assert actor["clip_ratio_c"] == DUAL_CLIP_OFF  # not 3.0


def test_config_mapping_steppo_clip_ratios_come_from_its_defaults():
    actor = verl_config(load_config("default"), _algorithm("steppo"), attn_implementation="sdpa")[
        "actor_rollout_ref"]["actor"]
    assert actor["clip_ratio_low"] == pytest.approx(3e-4) and actor["clip_ratio_high"] == pytest.approx(4e-4)


def test_kl_loss_only_with_a_kl_coefficient():
    cfg = load_config("default")
    assert not verl_config(cfg, _algorithm("grpo"), attn_implementation="sdpa")[
        "actor_rollout_ref"]["actor"]["use_kl_loss"]
    assert verl_config(cfg, _algorithm("grpo", kl_coef=0.1), attn_implementation="sdpa")[
        "actor_rollout_ref"]["actor"]["use_kl_loss"]


def test_attention_defaults_to_sdpa_without_flash_attn(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "flash_attn" else real(n, *a))
    assert default_attn_implementation() == "sdpa"
    out = verl_config(load_config("default"), _algorithm("ppo"))
    assert out["actor_rollout_ref"]["model"]["override_config"]["attn_implementation"] == "sdpa"
    assert out["critic"]["model"]["override_config"]["attn_implementation"] == "sdpa"
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object() if n == "flash_attn" else real(n, *a))
    assert default_attn_implementation() == "flash_attention_2"


def test_cpu_device_selects_fsdp2_without_compile():
    out = verl_config(load_config("default"), _algorithm("grpo"), device="cpu", attn_implementation="sdpa")
    actor = out["actor_rollout_ref"]["actor"]
    assert actor["strategy"] == "fsdp2" and actor["fsdp_config"]["strategy"] == "fsdp2"
    assert actor["fsdp_config"]["use_torch_compile"] is False and out["trainer"]["device"] == "cpu"


def test_config_mapping_merges_verl_overrides_last():
    cfg = load_config("default", ["trainer.params.verl.actor_rollout_ref.actor.ppo_epochs=3"])
    assert verl_config(cfg, _algorithm("grpo"))["actor_rollout_ref"]["actor"]["ppo_epochs"] == 3


def test_overrides_can_add_keys_verl_yaml_lacks():
    """verl's composed config is in struct mode; the merge must still accept new keys (e.g. override_config)."""
    from omegaconf import OmegaConf

    full = OmegaConf.create({"actor_rollout_ref": {"model": {"path": "x", "override_config": {}}}})
    OmegaConf.set_struct(full, True)
    with pytest.raises(Exception, match="not in struct"):
        OmegaConf.merge(full, {"actor_rollout_ref": {"model": {"override_config": {"attn_implementation": "sdpa"}}}})
    merged = merge_into_verl_config(full, {"actor_rollout_ref": {"model": {"override_config": {
        "attn_implementation": "sdpa"}, "brand_new": 1}}})
    assert merged.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert merged.actor_rollout_ref.model.brand_new == 1 and merged.actor_rollout_ref.model.path == "x"


def test_verl_extra_installs_what_the_engine_workers_import():
    """``import verl.workers.engine_workers`` needs fastapi and uvicorn (verl's own verl-core extra)."""
    import tomllib
    from pathlib import Path

    extra = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["verl"]
    names = {e.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip() for e in extra}
    assert {"verl", "ray", "fastapi", "uvicorn"} <= names


def test_verl_trainer_accepts_critic_algorithms_and_refuses_unknown_stages():
    from agentr1_core.config import ConfigError
    from agentr1_core.verl.trainer import VerlTrainer
    from agentr1_core.plugins import get_registry

    for name in ("steppo", "ppo", "gigpo"):
        VerlTrainer(load_config("default", ["trainer.name=verl", f"algorithm.name={name}"]), get_registry())
    with pytest.raises(ConfigError, match="unknown stage 'warmup'"):
        VerlTrainer(load_config("default", ["trainer.name=verl", "stages=[warmup,rl]"]), get_registry())


def test_real_dataproto_holds_the_layout():
    pytest.importorskip("verl", reason="needs verl (extra agentr1-core[verl]; verl 0.9 pins transformers<5.11)")
    steps = _rollout()
    proto = to_dataproto(step_rows_to_verl(steps.rows, torch.zeros(3, 3), None, PAD, steps.group_keys))
    assert len(proto) == 3 and proto.batch["input_ids"].shape == (3, 9)
    assert list(proto.non_tensor_batch["uid"]) == ["g0", "g0", "g0"]


def test_transformers_engine_uses_the_cache_keyword_of_the_installed_transformers():
    """transformers renamed ``past_key_values`` to ``cache``; verl's environment (5.9) has the old name."""
    from agentr1_core.rollout.transformers_engine import cache_keyword

    class New(torch.nn.Module):
        def forward(self, input_ids=None, cache=None, use_cache=None):
            return input_ids

    class Old(torch.nn.Module):
        def forward(self, input_ids=None, past_key_values=None, use_cache=None):
            return input_ids

    assert cache_keyword(New()) == "cache" and cache_keyword(Old()) == "past_key_values"


def test_engines_sleep_and_wake_around_the_update_when_the_pool_offers_it():
    """Colocated engines (vLLM with sleep mode) free their memory during the update; others are left alone."""
    from agentr1_core.verl.trainer import VerlTrainer
    from agentr1_core.plugins import get_registry

    trainer = VerlTrainer(load_config("default", ["trainer.name=verl"]), get_registry())
    calls = []

    class SleepyPool:
        def sleep(self):
            calls.append("sleep")

        def wake_up(self):
            calls.append("wake_up")

    backend = trainer.backend
    backend.pool = SleepyPool()
    assert backend._engines("sleep") >= 0 and backend._engines("wake_up") >= 0
    assert calls == ["sleep", "wake_up"]
    backend.pool = object()  # a pool without sleep mode
    assert backend._engines("sleep") == 0.0
