"""The trainer's side of the run lifecycle: preflight of the run directory (exit code 2 from the CLI, before any
model loads), the thread count given back on close, a LoRA run whose final checkpoint exports to a plain Hugging Face folder, and ``agentr1-core eval`` on
that checkpoint with per-source metrics in JSON."""

from __future__ import annotations

import json

import pytest
import torch

from agentr1_core.cli import main
from agentr1_core.lifecycle.checkpoint import latest_checkpoint, load_state
from agentr1_core.lifecycle.export import export_model


def test_unwritable_run_dir_fails_before_training(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    assert main(["run", "tiny", f"run_dir={blocker}/run", "model.path=/nonexistent/model"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("agentr1-core: error: run directory") and "is not writable" in lines[0]
    assert lines[1:] == ["agentr1-core: error: config error at model.path: model folder /nonexistent/model does not "
                         "exist"]  # reported with it, before anything loads


def test_full_disk_fails_before_training(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["run", "tiny", f"run_dir={run_dir}", "trainer.min_free_gb=1.0e9",
                 "model.path=/nonexistent/model"]) == 2
    err = capsys.readouterr().err.strip()
    assert "GiB free; checkpoints need at least" in err and "trainer.min_free_gb" in err
    assert not (run_dir / "metrics.jsonl").exists()


def test_trainer_gives_the_thread_count_back_on_close(tiny_run_config):
    """``trainer.threads`` sets torch's process-wide thread count for the run only: a notebook or test process
    keeps its own count after the trainer closes."""
    from agentr1_core.config import load_config
    from agentr1_core.plugins import configure_registry
    from agentr1_core.trainers.local import LocalTrainer

    before = torch.get_num_threads()
    wanted = 1 if before != 1 else 2
    cfg = load_config(str(tiny_run_config()), [f"trainer.threads={wanted}"])
    trainer = LocalTrainer(cfg, configure_registry())
    try:
        trainer.setup()
        assert torch.get_num_threads() == wanted
    finally:
        trainer.close()
    assert torch.get_num_threads() == before


@pytest.mark.slow
def test_lora_run_checkpoint_export_and_eval(tmp_path, tiny_run_config, tiny_model_dir, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = tiny_run_config("""\
        stages: [rl]
        model:
          lora: {enabled: true, r: 4, alpha: 8, target_modules: [q_proj, v_proj]}
        trainer: {total_steps: 2, checkpoint_every: 0}
        """)
    run_dir = tmp_path / "run"
    assert main(["run", str(config), f"run_dir={run_dir}"]) == 0
    ckpt = latest_checkpoint(run_dir)
    assert ckpt.name == "step_000002" and (ckpt / "model" / "adapter_config.json").is_file()
    for label in ("before_rl", "after_rl"):  # what the agent did in each validation, next to the numbers
        episodes = [json.loads(line) for line in (run_dir / "episodes" / f"{label}.jsonl").read_text().splitlines()]
        assert len(episodes) == 2 and all("?" in e["task"] for e in episodes)  # the arithmetic question
        assert all(e["steps"] and {"action", "feedback"} <= set(e["steps"][0]) and e["reward"] in (0.0, 1.0)
                   for e in episodes)
    state = load_state(ckpt)
    assert state["model_path"] == tiny_model_dir and state["loop"]["iteration"] == 2 and "model" not in state
    assert {"optimizer", "scheduler", "rng", "loop", "metrics_offset"} <= set(state)
    assert {"data", "history", "python_rng"} <= set(state["loop"])

    # resuming restores the adapter exactly (and nothing else changes the weights before the first update)
    from safetensors.torch import load_file

    from agentr1_core.config import load_config
    from agentr1_core.plugins import configure_registry
    from agentr1_core.trainers.local import LocalTrainer

    cfg = load_config(str(config), [f"run_dir={run_dir}", "trainer.resume=auto"])
    trainer = LocalTrainer(cfg, configure_registry())
    try:
        trainer.setup()
        assert trainer.iteration == 2 and trainer.resumed_from == ckpt
        saved = load_file(str(ckpt / "model" / "adapter_model.safetensors"))
        params = {n.replace(".default", ""): p for n, p in trainer.backend.policy.model.named_parameters() if "lora_" in n}
        assert saved.keys() == params.keys()
        assert all(torch.equal(saved[k], params[k].detach()) for k in saved)
        assert any(float(v.abs().sum()) > 0 for k, v in saved.items() if "lora_B" in k)  # trained, not the init
    finally:
        trainer.close()

    out = export_model(run_dir, tmp_path / "export")
    merged = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(out)
    ids = tok("What is 2+3?", return_tensors="pt").input_ids
    with torch.no_grad():
        assert not torch.allclose(merged(ids).logits, base(ids).logits, atol=1e-6)  # the trained adapter is in
        assert merged.generate(ids, max_new_tokens=4, do_sample=False).shape[1] == ids.shape[1] + 4

    report_path = tmp_path / "eval.json"
    assert main(["eval", str(config), f"run_dir={run_dir}", "--checkpoint", "latest", "--out",
                 str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["checkpoint"] == str(ckpt) and report["iteration"] == 2
    assert report["cases"] == 2 and set(report["by_source"]) == {"arithmetic_expression", "arithmetic_word"}
    for source in report["by_source"].values():
        assert {"reward_mean", "success_rate", "cases", "num_steps"} <= set(source)
    assert "[eval] success" in capsys.readouterr().out
    episodes = [json.loads(e) for e in (tmp_path / "eval.episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == report["cases"]
    assert sum(e["reward"] for e in episodes) / len(episodes) == pytest.approx(report["reward_mean"])
    assert main(["eval", str(config), f"run_dir={tmp_path / 'empty'}", "--checkpoint", "latest"]) == 2
