"""``agentr1-core eval`` as users run it: every row tried ``--attempts K`` times with pass@k and mean@K per data
source, rows from a JSONL file or a ``datasets`` dataset through a field mapping (``--rows``, ``--field``), and the
model from a checkpoint's run folder or a model folder (``--model``).

The tiny random model never answers a question right, so the real evals score episodes with ``response_parity``
(agentr1_core.testing.rewards: 1 when the reply token ids sum to an even number): about half the attempts of a row
succeed, and pass@k, mean@K and the episode files have something to agree on."""

from __future__ import annotations

import itertools
import json
import math
import sys
from collections import defaultdict
from fractions import Fraction
from pathlib import Path

import pytest

from agentr1_core.cli import main
from agentr1_core.pass_at_k import k_values, pass_at_k

ROWS = [("What is 12 + 30?", "42", "alpha"), ("What is 7 * 6?", "42", "alpha"),
        ("What is 100 - 1?", "99", "beta"), ("What is 9 * 9?", "81", "beta")]


def brute_force_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """The share of the ways to pick k of n attempts (c of them successes) that hold at least one success."""
    picks = list(itertools.combinations(range(n), k))
    return Fraction(sum(any(i < c for i in pick) for pick in picks), len(picks))


def test_pass_at_k_is_the_share_of_k_subsets_with_a_success():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(float(brute_force_pass_at_k(n, c, k)), abs=1e-12), (n, c, k)
    # large n: the product form needs no binomial coefficient (C(2000, 1000) overflows a float)
    exact = 1 - Fraction(math.comb(2000 - 7, 1000), math.comb(2000, 1000))
    assert pass_at_k(2000, 7, 1000) == pytest.approx(float(exact), rel=1e-12)
    assert k_values(1) == [1] and k_values(4) == [1, 2, 4] and k_values(6) == [1, 2, 4, 6]
    assert k_values(16) == [1, 2, 4, 8, 16]
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(3, 1, 4)


@pytest.fixture
def parity_reward(monkeypatch):
    from agentr1_core.plugins import reset_registry

    monkeypatch.setenv("AGENTR1_PLUGIN_MODULES", "agentr1_core.testing.rewards")
    reset_registry()
    yield
    reset_registry()


def _write_rows(path: Path) -> Path:
    path.write_text("".join(json.dumps({"prompt": q, "data_source": src, "reward_model": {"ground_truth": a}}) + "\n"
                            for q, a, src in ROWS))
    return path


def _table(out: str) -> dict[str, list[str]]:
    """The rows of the printed table, by data source (``all`` included), and its header under ``header``."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("data source"))
    table = {"header": lines[start].split()[2:]}
    for line in lines[start + 1:]:
        if line.startswith("[eval]"):
            break
        source, *values = line.split()
        table[source] = values
    return table


def _tiny_checkpoint_run(folder: Path, model_dir: str) -> Path:
    """A run folder with one checkpoint, written by the trainer's own writer: other weights (a tiny Llama of another
    seed) on the model ``model_dir``, and a saved config that is not YAML (``--model`` must not read it)."""
    from agentr1_core.lifecycle.checkpoint import save_checkpoint
    from agentr1_core.models import load_tokenizer
    from agentr1_core.testing.models import tiny_llama

    tokenizer = load_tokenizer(model_dir)
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("model: [not yaml\n")
    state = {"model_path": model_dir, "lora": False, "loop": {"iteration": 3}}
    return save_checkpoint(folder, 3, state, model=tiny_llama(tokenizer, seed=1), tokenizer=tokenizer)


def test_attempts_give_pass_at_k_per_data_source_that_agree_with_the_episodes(
        tmp_path, tiny_run_config, tiny_model_dir, parity_reward, capsys):
    rows = _write_rows(tmp_path / "rows.jsonl")
    run = tmp_path / "trained"
    ckpt = _tiny_checkpoint_run(run, tiny_model_dir)
    config = tiny_run_config()
    common = [str(config), f"run_dir={tmp_path / 'cfg_run'}", "reward.name=response_parity",
              "validation.temperature=1.0", "rollout.max_new_tokens=8", "--rows", str(rows), "--attempts", "4"]
    assert main(["eval", *common, "--model", str(run)]) == 0
    out = capsys.readouterr().out
    report_file = run / "eval_step_000003_rows.json"  # beside the checkpoint, named after it and the rows
    report = json.loads(report_file.read_text())
    assert report["checkpoint"] == str(ckpt) and report["iteration"] == 3 and report["model_path"] == tiny_model_dir
    assert report["attempts"] == 4 and report["temperature"] == 1.0 and report["data"]["path"] == str(rows)
    episodes = [json.loads(line) for line in report_file.with_suffix(".episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == report["cases"] == 16

    by_row: dict[str, list[dict]] = defaultdict(list)  # uid eval-<row>/<attempt>
    for e in episodes:
        by_row[e["uid"].rsplit("/", 1)[0]].append(e)
    assert len(by_row) == 4 and all(len(es) == 4 for es in by_row.values())
    counts = {row: (es[0]["data_source"], sum(e["success"] for e in es)) for row, es in by_row.items()}
    assert any(0 < c < 4 for _, c in counts.values())  # mixed rows: pass@k and mean@K differ
    table = _table(out)
    assert table["header"] == ["rows", "pass@1", "pass@2", "pass@4", "mean@4"]
    for source in ("alpha", "beta", "all"):
        cs = [c for src, c in counts.values() if source in (src, "all")]
        want = {f"pass@{k}": float(sum(brute_force_pass_at_k(4, c, k) for c in cs) / len(cs)) for k in (1, 2, 4)}
        want["mean@4"] = sum(cs) / (4 * len(cs))
        got = report if source == "all" else report["by_source"][source]
        assert got["rows"] == len(cs) and int(table[source][0]) == len(cs)
        for column, value in want.items():
            assert got[column] == pytest.approx(value, abs=1e-12), (source, column)
            assert table[source][table["header"].index(column)] == f"{value:.3f}", (source, column)
        assert got["success_rate"] == pytest.approx(want["mean@4"])
    assert f"-> {report_file}" in out

    # the checkpoint's weights were evaluated: the model it was trained from, as it is, acts otherwise
    assert main(["eval", *common, "--model", tiny_model_dir, "--out", str(tmp_path / "base.json")]) == 0
    base = [json.loads(line) for line in (tmp_path / "base.episodes.jsonl").read_text().splitlines()]
    assert [e["steps"][0]["action"] for e in base] != [e["steps"][0]["action"] for e in episodes]
    assert json.loads((tmp_path / "base.json").read_text())["checkpoint"] is None


def test_model_names_a_lora_checkpoint_on_the_model_it_was_trained_from(tmp_path, tiny_run_config, tiny_model_dir):
    """A LoRA checkpoint (adapter on every layer) evaluated from a config without LoRA that trains the top layer only:
    --model takes the adapter's settings and layers from the checkpoint, and its weights change what the model
    does."""
    import torch
    from peft import LoraConfig, get_peft_model

    from agentr1_core.lifecycle.checkpoint import save_checkpoint
    from agentr1_core.models import load_tokenizer
    from agentr1_core.testing.models import tiny_llama

    tokenizer = load_tokenizer(tiny_model_dir)
    model = get_peft_model(tiny_llama(tokenizer), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                             task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(0))
    ckpt = save_checkpoint(tmp_path / "lora_run", 2, {"model_path": tiny_model_dir, "lora": True}, model=model,
                           tokenizer=tokenizer)
    rows = _write_rows(tmp_path / "rows.jsonl")
    common = [str(tiny_run_config()), f"run_dir={tmp_path / 'run'}", "rollout.max_new_tokens=8",  # sampled: greedy,
              "trainer.train_layers=1", "validation.temperature=1.0", "--rows", str(rows)]  # it writes newlines only
    assert main(["eval", *common, "--model", str(ckpt), "--out", str(tmp_path / "lora.json")]) == 0
    report = json.loads((tmp_path / "lora.json").read_text())
    assert report["checkpoint"] == str(ckpt) and report["model_path"] == tiny_model_dir and report["attempts"] == 1
    assert main(["eval", *common, "--out", str(tmp_path / "base.json")]) == 0  # the config's model: the same base
    actions = [[json.loads(line)["steps"][0]["action"] for line in (tmp_path / f"{name}.episodes.jsonl").open()]
               for name in ("lora", "base")]
    assert len(actions[0]) == 4 and actions[0] != actions[1]


def test_a_bad_rows_file_lists_every_bad_line_before_the_model_loads(tmp_path, tiny_model_dir, capsys):
    rows = tmp_path / "bad.jsonl"
    rows.write_text("\n".join([
        json.dumps({"prompt": "What is 1 + 1?", "reward_model": {"ground_truth": "2"}}),
        '{"prompt": "What is 2 + 2?", "reward_model": {"ground_truth": "4"}',  # cut short
        '["a list"]',
        json.dumps({"data_source": "x", "reward_model": {"ground_truth": "3"}}),
        json.dumps({"prompt": "What is 3 + 3?"}),
        json.dumps({"prompt": "What is 4 + 4?", "reward_model": {"ground_truth": "8"}, "env_kwargs": {"max_turnz": 2}}),
    ]) + "\n")
    assert main(["eval", "tiny", f"run_dir={tmp_path / 'run'}", "--model", tiny_model_dir, "--rows", str(rows),
                 "--attempts", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert all(line.startswith("agentr1-core: error: ") for line in err)
    expected = [f"{rows}:2: not valid JSON", f"{rows}:3: each line must be a JSON object, got list",
                f"{rows}:4: missing prompt, which", f"{rows}:5: missing reward_model.ground_truth",
                f"{rows}:6: env_kwargs.max_turnz is not a parameter of env 'tool_env' (did you mean 'max_turns'?)",
                "config error at validation.temperature: --attempts 3 needs sampling, but validation.temperature is 0"]
    for want in expected:
        assert sum(want in line for line in err) == 1, (want, err)
    assert len(err) == len(expected)
    assert not (tmp_path / "run").exists()  # nothing ran

    for args, message in [(["--attempts", "0"], "argument --attempts: must be a whole number >= 1, got '0'"),
                          (["--field", "prompt=q"], "--field maps the columns of a dataset given as --rows hf:"),
                          (["--rows", "hf:a:b:c:d"], "--rows hf:a:b:c:d: write hf:PATH, hf:PATH:SPLIT or"),
                          (["--model", tiny_model_dir, "--checkpoint", "latest"], "give --model or --checkpoint")]:
        assert _exit_code(["eval", "tiny", f"run_dir={tmp_path / 'run'}", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (args, err)


def _exit_code(argv: list[str]) -> int:
    """``main``'s exit code, usage mistakes included (argparse exits through ``SystemExit``)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


def _questions(tmp_path: Path):
    import datasets

    return datasets.Dataset.from_list([{"question": q, "answer": a, "topic": src} for q, a, src in ROWS])


def test_a_datasets_dataset_through_a_field_mapping(tmp_path, tiny_model_dir, capsys):
    import datasets

    saved = tmp_path / "questions"
    datasets.DatasetDict({"train": _questions(tmp_path).select([0]), "test": _questions(tmp_path)}).save_to_disk(
        str(saved))
    assert main(["eval", "tiny", f"run_dir={tmp_path / 'run'}", "rollout.max_new_tokens=8",
                 "validation.temperature=1.0", "--model", tiny_model_dir, "--rows", f"hf:{saved}:test",
                 "--field", "prompt=question", "--field", "ground_truth=answer", "--field", "data_source=topic",
                 "--attempts", "2"]) == 0
    out = capsys.readouterr().out
    report_file = tmp_path / "run" / f"eval_{Path(tiny_model_dir).name}_questions-test.json"
    report = json.loads(report_file.read_text())
    assert report["data"] == {"name": "hf", "path": str(saved), "subset": "", "split": "test",
                              "fields": {"prompt": "question", "ground_truth": "answer", "data_source": "topic"}}
    assert report["cases"] == 8 and report["rows"] == 4 and set(report["by_source"]) == {"alpha", "beta"}
    assert {"pass@1", "pass@2", "mean@2"} <= set(report["by_source"]["beta"])
    episodes = [json.loads(line) for line in report_file.with_suffix(".episodes.jsonl").read_text().splitlines()]
    assert sorted({(e["task"], e["data_source"]) for e in episodes}) == sorted((q, src) for q, _, src in ROWS)
    assert _table(out)["all"][0] == "4"


def test_a_field_that_names_a_missing_column_is_one_error(tmp_path, tiny_model_dir, capsys, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    folder = tmp_path / "parquet"
    folder.mkdir()
    _questions(tmp_path).to_parquet(str(folder / "test.parquet"))  # a local data folder, read by load_dataset
    base = ["eval", "tiny", f"run_dir={tmp_path / 'run'}", "--model", tiny_model_dir, "--rows", f"hf:{folder}:test"]
    capsys.readouterr()
    assert main([*base, "--field", "prompt=qestion", "--field", "ground_truth=answer"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"agentr1-core: error: config error at data.val: fields name columns that hf:{folder}:test does "
                   f"not have: prompt=qestion (did you mean 'question'?); its columns: question, answer, topic"]

    assert main([*base[:-1], f"hf:{folder}:tset", "--field", "prompt=question"]) == 2  # a misspelled split
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no split 'tset' (did you mean 'test'?)" in err[0]

    monkeypatch.setitem(sys.modules, "datasets", None)  # as where the optional package is not installed
    assert main([*base, "--field", "prompt=question"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["agentr1-core: error: config error at data.val: the hf dataset needs the package 'datasets', "
                   "which is not installed; pip install datasets"]
