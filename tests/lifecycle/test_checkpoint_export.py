"""Atomic checkpoints, run-dir preflight, metrics sinks, plots, and export to a plain Hugging Face folder."""

from __future__ import annotations

import json

import pytest
import torch

from agentr1_core.lifecycle import checkpoint as ck
from agentr1_core.lifecycle.export import export_model
from agentr1_core.lifecycle.metrics import MetricsLogger, read_metrics, truncate_metrics
from agentr1_core.trainers.console import console_line
from agentr1_core.lifecycle.plot import plot_run


@pytest.fixture(scope="module")
def tiny_model(smol_tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(smol_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      bos_token_id=smol_tokenizer.bos_token_id, eos_token_id=smol_tokenizer.eos_token_id)
    return LlamaForCausalLM(cfg).eval()


def test_checkpoints_are_atomic_and_pruned(tmp_path, tiny_model, smol_tokenizer):
    for step in (1, 2, 3):
        ck.save_checkpoint(tmp_path, step, {"iteration": step, "rng": torch.get_rng_state()}, tiny_model,
                           smol_tokenizer, keep=2)
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["step_000002", "step_000003"]
    # a writer killed before the rename leaves a hidden temp folder; one killed before the marker, no marker
    (ck.checkpoint_root(tmp_path) / ".tmp-step_000004-x").mkdir()
    half = ck.checkpoint_root(tmp_path) / "step_000005"
    half.mkdir()
    (half / ck.STATE_FILE).write_bytes(b"partial")
    assert ck.latest_checkpoint(tmp_path).name == "step_000003"
    assert ck.load_state(ck.latest_checkpoint(tmp_path))["iteration"] == 3


def test_run_dir_preflight(tmp_path):
    assert ck.check_run_dir(tmp_path / "ok", min_free_bytes=1) == tmp_path / "ok"
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(ck.RunDirError, match="is not writable"):
        ck.check_run_dir(blocker / "run")
    with pytest.raises(ck.RunDirError, match="GiB free; checkpoints need at least"):
        ck.check_run_dir(tmp_path / "ok", min_free_bytes=10**18)


def test_metrics_logger_plot_console_and_truncation(tmp_path):
    logger = MetricsLogger(tmp_path)
    logger.write({"event": "validation", "label": "before_rl", "iteration": 0, "success_rate": 0.25,
                  "by_source": {"a": {"success_rate": 0.5}}})
    offsets = []
    for i in range(1, 4):
        logger.write({"iteration": i, "reward_mean": 0.1 * i, "success_rate": 0.5, "loss": 1.0 - i, "note": "x",
                      "bad": float("nan"), "tool_errors": {"timeout": i}, "rollout_tok_s": 10.0 * i})
        offsets.append(logger.offset())
    logger.close()
    records = read_metrics(tmp_path)
    assert [r.get("iteration") for r in records] == [0, 1, 2, 3]
    assert records[2]["reward_mean"] == pytest.approx(0.2) and records[2]["bad"] is None
    with (tmp_path / "metrics.jsonl").open("a") as fh:
        fh.write('{"iteration": 4, "torn')  # a run killed mid-line
    assert len(read_metrics(tmp_path)) == 4
    assert truncate_metrics(tmp_path, offsets[0]) == 2  # two whole records after iteration 1 (+ the torn line)
    assert [r.get("iteration") for r in read_metrics(tmp_path)] == [0, 1]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"reward_mean", "tool_errors/timeout", "val/success_rate", "val/by_source/a/success_rate"} <= tags
    assert [e.step for e in acc.Scalars("reward_mean")] == [1, 2, 3]

    png = plot_run(tmp_path)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    line = console_line({"iteration": 7, "reward_mean": 0.25, "loss": 0.5, "kl": float("nan"),
                         "terminations": {"done": 3, "env_error": 1}, "tool_errors": {"timeout": 2}}, 10)
    assert line.startswith("it 7/10 | reward 0.250±- | success - | steps - | loss 0.5000 | kl - |")
    assert line.endswith("| ends env_error:1 | tool errors timeout:2")


def test_export_full_model_loads_with_plain_transformers(tmp_path, tiny_model, smol_tokenizer):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ck.save_checkpoint(tmp_path / "run", 1, {"model_path": "unused"}, tiny_model, smol_tokenizer)
    out = export_model(tmp_path / "run", tmp_path / "export")
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    ids = tok("Hello", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, tiny_model(ids).logits, atol=1e-5)
        gen = model.generate(ids, max_new_tokens=3, do_sample=False)
    assert gen.shape[1] == ids.shape[1] + 3
    with pytest.raises(FileExistsError):
        export_model(tmp_path / "run", tmp_path / "export")


def test_export_without_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        export_model(tmp_path, tmp_path / "out")


def test_export_merges_lora(tmp_path, tiny_model, smol_tokenizer, monkeypatch):
    import copy

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base_dir = tmp_path / "base"
    tiny_model.save_pretrained(base_dir)
    smol_tokenizer.save_pretrained(base_dir)
    peft_model = get_peft_model(copy.deepcopy(tiny_model), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.fill_(0.05)  # a non-trivial adapter
    ck.save_checkpoint(tmp_path / "run", 1, {"model_path": str(base_dir)}, peft_model, smol_tokenizer)
    out = export_model(tmp_path / "run", tmp_path / "export")
    assert not (out / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(out)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        expected = peft_model(ids).logits
        assert not torch.allclose(expected, tiny_model(ids).logits, atol=1e-4)
        assert torch.allclose(merged(ids).logits, expected, atol=1e-4)
    assert json.loads((out / "config.json").read_text())["model_type"] == "llama"
