"""Fixtures for the lifecycle tests: a small calculator run config on the tiny model (tests/conftest.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest


@pytest.fixture
def tiny_run_config(tmp_path, tiny_model_dir):
    """``make(extra_yaml="") -> Path``: a small calculator run on the tiny model (SFT warm start, then 4 GRPO
    iterations with a checkpoint every 2), written to ``tmp_path``."""

    def make(extra: str = "") -> Path:
        return _write_config(tmp_path / "tiny_run.yaml", tiny_model_dir, extra)

    return make


def _write_config(path: Path, model_dir: str, extra: str = "") -> Path:
    path.write_text(textwrap.dedent(f"""\
        base: default
        seed: 5
        model: {{path: "{model_dir}"}}
        engine: {{name: transformers, max_batch_size: 1}}
        data:
          train: {{name: arithmetic, split: train, train_size: 16, val_size: 4, seed: 0}}
          val: {{name: arithmetic, split: val, train_size: 16, val_size: 4, seed: 0}}
        rollout: {{batch_size: 2, n: 2, temperature: 1.0, max_new_tokens: 24, max_turns: 2}}
        validation: {{every: 2, max_rows: 2}}
        sft: {{rows: 4, epochs: 1, batch_size: 4}}
        algorithm: {{name: grpo, entropy_coef: 0.01}}
        trainer:
          total_steps: 4
          checkpoint_every: 2
          threads: 1
          lr: 1.0e-3
          micro_batch_size: 4
          mini_batches: 2
          update_epochs: 2
          train_layers: 0
          min_free_gb: 0.01
        """))
    if extra:  # merged over the base settings
        from omegaconf import OmegaConf

        merged = OmegaConf.merge(OmegaConf.load(path), OmegaConf.create(textwrap.dedent(extra)))
        path.write_text(OmegaConf.to_yaml(merged))
    return path
