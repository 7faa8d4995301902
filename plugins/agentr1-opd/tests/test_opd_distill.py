"""End to end on the ``opd`` config: a 6-block student cut from SmolLM2-135M-Instruct, distilled from the full
model on the calculator task by the local trainer, gets clearly closer to the teacher on held-out prompts (exact
per-token reverse KL on its own fresh episodes); and a student with another tokenizer stops the run at startup."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentr1_core.config import load_config
from agentr1_core.plugins import configure_registry
from agentr1_core.trainers.local import LocalTrainer
from agentr1_opd.evaluate import held_out_distance
from agentr1_opd.student import make_student
from agentr1_opd.teacher import TokenizerMismatchError

pytestmark = pytest.mark.slow
CONFIG = "opd"  # the named config this distribution ships
HELD_OUT = 8


@pytest.fixture(scope="module")
def student(tmp_path_factory) -> Path:
    return make_student(tmp_path_factory.mktemp("student") / "opd-student", num_layers=6)


def trainer_for(model_path: Path, run_dir: Path, *overrides: str) -> LocalTrainer:
    cfg = load_config(CONFIG, [f"run_dir={run_dir}", f"model.path={model_path}", *overrides])
    return LocalTrainer(cfg, configure_registry(cfg.plugins.allow, cfg.plugins.block))


def test_distillation_brings_the_student_closer_to_the_teacher_on_held_out_prompts(student, tmp_path):
    trainer = trainer_for(student, tmp_path / "run")
    trainer.setup()
    try:
        algorithm, rows = trainer.algorithm, trainer.val_rows[:HELD_OUT]
        assert len(rows) == HELD_OUT
        before = held_out_distance(trainer, algorithm, rows, label="before")
        history = [trainer.train_iteration() for _ in range(int(trainer.cfg.trainer.total_steps))]
        after = held_out_distance(trainer, algorithm, rows, label="after")
    finally:
        trainer.close()
        trainer.algorithm.close()
    print(f"held-out reverse KL per token {before['kl_token']:.3f} -> {after['kl_token']:.3f}, agreement "
          f"{before['agreement']:.3f} -> {after['agreement']:.3f} ({before['tokens']:.0f}/{after['tokens']:.0f} "
          f"tokens)")
    assert all(m["opd/scored_steps"] == m["train_steps"] for m in history)
    assert all(m["weight_change"] > 0 for m in history)
    # measured (seed 0, 8 held-out prompts, 6 iterations of 4 prompts x 2 samples): 3.90 -> 1.06 nats per token,
    # argmax agreement 0.25 -> 0.90 (a variant run of the same recipe: 3.90 -> 1.31, 0.25 -> 0.86)
    assert before["kl_token"] > 2.0
    assert after["kl_token"] < 0.6 * before["kl_token"]
    assert after["agreement"] > before["agreement"] + 0.25


def test_a_student_with_another_tokenizer_fails_at_startup_naming_both_models(student, tmp_path):
    import shutil

    from transformers import AutoTokenizer

    other = tmp_path / "other-student"
    shutil.copytree(student, other)
    tok = AutoTokenizer.from_pretrained(other)
    tok.add_special_tokens({"additional_special_tokens": ["<|student_only|>"]})
    tok.save_pretrained(other)
    trainer = trainer_for(other, tmp_path / "run")
    try:
        with pytest.raises(TokenizerMismatchError) as err:
            trainer.setup()
    finally:
        trainer.close()
    assert str(other) in str(err.value) and "smollm2-135m-instruct" in str(err.value)
    assert "<|student_only|>" in str(err.value)
