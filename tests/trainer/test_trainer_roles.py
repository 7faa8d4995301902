"""The local trainer's reference and critic on the tiny model through the real calculator task: the KL reference
is the policy after SFT (when RL starts), also with LoRA and across a resume; a separate critic model trains beside
the policy; every iteration logs the engine-vs-trainer log-prob gap."""

from __future__ import annotations

import textwrap

import pytest
import torch

from agentr1_core.config import load_config
from agentr1_core.plugins import configure_registry
from agentr1_core.trainers.local import LocalTrainer


def _config(tmp_path, model_dir: str, extra: str = ""):
    path = tmp_path / "run.yaml"
    path.write_text(textwrap.dedent(f"""\
        base: default
        seed: 1
        run_dir: "{tmp_path / 'run'}"
        stages: [sft, rl]
        model: {{path: "{model_dir}"}}
        engine: {{name: transformers, max_batch_size: 4}}
        data:
          train: {{name: arithmetic, split: train, train_size: 8, val_size: 2, seed: 0}}
          val: {{name: arithmetic, split: val, train_size: 8, val_size: 2, seed: 0}}
        rollout: {{batch_size: 2, n: 2, temperature: 1.0, max_new_tokens: 8, max_turns: 2}}
        validation: {{every: 0, max_rows: 1}}
        sft: {{rows: 4, epochs: 1, batch_size: 4, lr: 1.0e-2}}
        algorithm: {{name: grpo, kl_coef: 0.1}}
        trainer: {{total_steps: 1, threads: 1, lr: 1.0e-3, micro_batch_size: 2, train_layers: 0, min_free_gb: 0.01,
                   checkpoint_every: -1}}
        """))
    overrides = [line for line in textwrap.dedent(extra).splitlines() if line.strip()]
    return load_config(str(path), overrides)


def _trainable(trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.backend.policy.model.named_parameters() if p.requires_grad}


@pytest.mark.slow
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_kl_reference_is_the_policy_when_rl_starts(tmp_path, tiny_model_dir, lora):
    extra = "model.lora.enabled=true\nmodel.lora.r=4\nmodel.lora.alpha=8" if lora else ""
    cfg = _config(tmp_path, tiny_model_dir, extra)
    trainer = LocalTrainer(cfg, configure_registry())
    try:
        trainer.setup()
        before = _trainable(trainer)
        trainer.run_sft()
        after = _trainable(trainer)
        assert any(not torch.equal(before[n], after[n]) for n in before)  # SFT moved the weights
        trainer.backend.start_rl(after_sft=True)
        ref = dict(trainer.backend.policy.ref_model.named_parameters())
        assert all(torch.equal(ref[n].detach(), after[n]) for n in after)
        assert not any(p.requires_grad for p in ref.values())
        metrics = trainer.train_iteration()
        # one optimizer step per rollout: the update's forward runs at the reference's weights, so KL is 0
        assert metrics["kl"] == pytest.approx(0.0, abs=1e-6)
        assert "logprob_gap_mean" in metrics and metrics["logprob_gap_max"] < 1e-3  # shared fp32 module
        assert trainer.backend.recompute_old is False
        state = trainer.backend.state_dict()
    finally:
        trainer.close()
    assert set(state["reference"]) == set(after) and all(torch.equal(state["reference"][n], after[n]) for n in after)
    if lora:
        return
    # a resumed run keeps the reference, not a copy of the weights it resumes with (here: moved by 0.01)
    state["model"] = {n: v + 0.01 for n, v in state["model"].items()}
    resumed = LocalTrainer(cfg, configure_registry())
    try:
        resumed.setup()
        resumed.backend.load_state_dict(state)
        ref = dict(resumed.backend.policy.ref_model.named_parameters())
        assert all(torch.equal(ref[n].detach(), after[n]) for n in after)
        assert any(not torch.equal(p.detach(), after[n]) for n, p in resumed.backend.policy.model.named_parameters())
    finally:
        resumed.close()


def test_ref_model_names_another_model(tmp_path, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    cfg = _config(tmp_path, tiny_model_dir, f"trainer.ref_model={tiny_model_dir}\nstages=[rl]")
    trainer = LocalTrainer(cfg, configure_registry())
    try:
        trainer.setup()
        with torch.no_grad():
            for p in trainer.backend.policy.model.parameters():
                p.add_(0.01)
        trainer.backend.start_rl(after_sft=False)  # keeps the named model
        disk = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
        ref = trainer.backend.policy.ref_model.state_dict()
        assert all(torch.equal(ref[k], disk[k]) for k in disk)
    finally:
        trainer.close()


def test_separate_critic_trains_beside_the_policy(tmp_path, tiny_model_dir):
    cfg = _config(tmp_path, tiny_model_dir, f"algorithm.name=steppo\nalgorithm.kl_coef=0.0\nstages=[rl]\n"
                                            f"critic.model={tiny_model_dir}\ncritic.lr=1.0e-3")
    trainer = LocalTrainer(cfg, configure_registry())
    try:
        trainer.setup()
        critic = trainer.backend.policy.critic
        assert critic is not None and trainer.backend.policy.value_head is None
        assert not {id(p) for p in critic.params} & {id(p) for p in trainer.backend.policy.params}
        with torch.no_grad():
            critic.head.bias.fill_(0.5)  # the random tiny policy earns 0 reward: give the critic an error to fix
        before = [p.detach().clone() for p in critic.params]
        metrics = trainer.train_iteration()
        assert metrics["critic_grad_norm"] > 0 and "vf_loss" in metrics and "bootstrapped_steps" in metrics
        assert any(not torch.equal(b, p.detach()) for b, p in zip(before, critic.params))
        assert trainer.backend.state_dict()["critic"]["head"]["weight"].shape == (1, critic.head.in_features)
    finally:
        trainer.close()


def test_bad_recompute_mode_is_a_one_line_error(tmp_path, tiny_model_dir, capsys):
    from agentr1_core.cli import main

    _config(tmp_path, tiny_model_dir)
    assert main(["run", str(tmp_path / "run.yaml"), "trainer.recompute_old_logprobs=maybe"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "recompute_old_logprobs must be one of auto, true, false" in err
