"""A warm start that did not take is said out loud: after SFT, no held-out success with the demonstrations' NLL at
or above 0.5 nats per token prints what to try, naming the config keys and the run's values."""

from __future__ import annotations

import math
import textwrap

import pytest

from agentr1_core.cli import main
from agentr1_core.config import load_config
from agentr1_core.lifecycle.warm_start import TOOK_NLL, advice


@pytest.fixture(scope="module")
def default_cfg():
    return load_config("default", [])  # sft.rows 32, sft.epochs 1, sft.lr 1e-4


def test_no_success_and_a_high_nll_names_what_to_try(default_cfg):
    line = advice({"sft_nll": 2.304}, {"success_rate": 0.0, "cases": 48}, default_cfg, train_rows=100)
    assert line == ("[sft] the warm start did not take: no held-out task solved after SFT (0 of 48) and the "
                    "demonstrations' NLL is still 2.30 nats per token (one that took is below 0.5). Try more "
                    "demonstrations (sft.rows: 32, of 100 rows in data.train), more passes over them (sft.epochs: 1) "
                    "or a higher learning rate (sft.lr: 0.0001).")
    every_row = advice({"sft_nll": 2.304}, {"success_rate": 0.0, "cases": 48}, default_cfg, train_rows=20)
    assert "(all 20 rows of data.train are used: add rows, then raise sft.rows)" in every_row


def test_a_warm_start_that_took_or_cannot_be_judged_says_nothing(default_cfg):
    val0 = {"success_rate": 0.0, "cases": 48}
    assert TOOK_NLL == 0.5
    assert advice({"sft_nll": 0.5}, val0, default_cfg, 100) is not None  # at the threshold: not learnt
    assert advice({"sft_nll": 0.49}, val0, default_cfg, 100) is None  # learnt, yet no success: another problem
    assert advice({"sft_nll": 3.0}, {"success_rate": 1 / 48, "cases": 48}, default_cfg, 100) is None  # one solved
    assert advice({"sft_nll": math.nan}, val0, default_cfg, 100) is None
    assert advice({}, val0, default_cfg, 100) is None  # a backend that reports no NLL
    assert advice(None, val0, default_cfg, 100) is None and advice({"sft_nll": 3.0}, None, default_cfg, 100) is None


def test_a_run_whose_warm_start_did_not_take_says_so_and_goes_on(tmp_path, tiny_model_dir, capsys):
    """The tiny random model learns nothing from 4 demonstrations: it solves no held-out task after SFT and its
    NLL stays near log(vocabulary); the run prints the advice and ends normally."""
    config = tmp_path / "run.yaml"
    config.write_text(textwrap.dedent(f"""\
        base: tiny
        stages: [sft]
        model: {{path: "{tiny_model_dir}"}}
        engine: {{name: transformers, max_batch_size: 2}}
        rollout: {{max_new_tokens: 8}}
        validation: {{before: false, max_rows: 2}}
        sft: {{rows: 4, lr: 1.0e-6}}
        trainer: {{checkpoint_every: -1, min_free_gb: 0.01}}
        """))
    assert main(["run", str(config), f"run_dir={tmp_path / 'run'}"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("[sft] the warm start did not take")]
    assert len(lines) == 1 and "(0 of 2)" in lines[0]
    assert "sft.rows: 4, of 16 rows in data.train" in lines[0] and "sft.lr: 1e-06" in lines[0]
    assert "[done]" in out.split(lines[0])[1]  # said, then the run went on to its end
