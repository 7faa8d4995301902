"""verl data layout and config mapping, checked without verl; the real ``DataProto`` where verl is installed."""

from __future__ import annotations

import pytest
import torch

from agentr1_core.config import load_config
from agentr1_core.distributed.verl_data import step_rows_to_verl, to_dataproto, verl_config
from agentr1_core.mdp import Step, Trajectory
from agentr1_core.trainers.batching import build_step_batch, trajectories_to_rows

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


def test_layout_rejects_advantages_that_do_not_cover_the_responses():
    steps = _rollout()
    with pytest.raises(ValueError, match="advantages shape"):
        step_rows_to_verl(steps.rows, torch.zeros(3, 2), None, PAD)


def test_config_mapping_follows_the_run_config():
    cfg = load_config("default", ["trainer.lr=3e-6", "trainer.micro_batch_size=4", "rollout.batch_size=8",
                                  "rollout.n=4", "trainer.mini_batches=2", "model.lora.enabled=true"])
    out = verl_config(cfg, {"clip_ratio": 0.2, "clip_ratio_high": 0.28, "kl_coef": 0.01, "kl_estimator": "k3",
                            "loss_agg": "seq-mean-token-sum"}, needs_critic=True, n_gpus=2)
    actor = out["actor_rollout_ref"]["actor"]
    assert actor["optim"]["lr"] == 3e-6 and actor["ppo_micro_batch_size_per_gpu"] == 4
    assert actor["ppo_mini_batch_size"] == 16 and actor["clip_ratio_high"] == 0.28 and actor["clip_ratio_low"] == 0.2
    assert actor["use_kl_loss"] and actor["kl_loss_type"] == "low_var_kl" and actor["kl_loss_coef"] == 0.01
    assert actor["loss_agg_mode"] == "seq-mean-token-sum" and actor["policy_loss"]["loss_mode"] == "vanilla"
    assert out["actor_rollout_ref"]["model"]["lora_rank"] == cfg.model.lora.r
    assert out["actor_rollout_ref"]["rollout"]["response_length"] == cfg.rollout.max_new_tokens
    assert out["critic"]["optim"]["lr"] == cfg.trainer.critic_lr and out["trainer"]["n_gpus_per_node"] == 2


def test_config_mapping_refuses_a_loss_verl_does_not_have():
    with pytest.raises(ValueError, match="loss_type 'reinforce' has no verl equivalent"):
        verl_config(load_config("default"), {"loss_type": "reinforce"}, needs_critic=False)


def test_config_mapping_merges_verl_overrides_last():
    cfg = load_config("default", ["trainer.params.verl.actor_rollout_ref.actor.ppo_epochs=3"])
    assert verl_config(cfg, {}, False)["actor_rollout_ref"]["actor"]["ppo_epochs"] == 3


def test_real_dataproto_holds_the_layout():
    pytest.importorskip("verl", reason="needs verl (extra agentr1-core[verl]; verl 0.9 pins transformers<5.11)")
    steps = _rollout()
    proto = to_dataproto(step_rows_to_verl(steps.rows, torch.zeros(3, 3), None, PAD, steps.group_keys))
    assert len(proto) == 3 and proto.batch["input_ids"].shape == (3, 9)
    assert list(proto.non_tensor_batch["uid"]) == ["g0", "g0", "g0"]
