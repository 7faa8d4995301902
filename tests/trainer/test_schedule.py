"""The learning-rate schedule around an SFT stage: the warm start runs at ``sft.lr``, and RL's first optimizer step
then uses the first warm-up factor of ``trainer.lr`` (not the full rate), as a run without SFT does."""

from __future__ import annotations

import pytest

from agentr1_core.cli import main
from agentr1_core.lifecycle.metrics import read_metrics


@pytest.mark.slow
@pytest.mark.parametrize("stages", ["[sft,rl]", "[rl]"])
def test_warmup_starts_at_its_first_factor_with_or_without_sft(tmp_path, tiny_model_dir, stages):
    run_dir = tmp_path / "run"
    assert main(["run", "tiny", f"run_dir={run_dir}", f"model.path={tiny_model_dir}", f"stages={stages}",
                 "trainer.warmup_steps=10", "trainer.lr=1e-3", "trainer.total_steps=2", "validation.before=false",
                 "validation.max_rows=1", "trainer.checkpoint_every=-1"]) == 0
    iterations = [r for r in read_metrics(run_dir) if "event" not in r]
    assert [r["optimizer_steps"] for r in iterations] == [1, 1]
    assert [r["lr"] for r in iterations] == [pytest.approx(1e-4), pytest.approx(2e-4)]
