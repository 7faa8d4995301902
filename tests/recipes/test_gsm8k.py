"""The GSM8K recipe of the core: the ``gsm8k`` loader on release lines (commas, negative numbers, decimals), the
expert replays through the real ``tool_env`` and calculator, ``agentr1-core gsm8k prepare`` through the CLI, the
named configs ``gsm8k`` and ``gsm8k-cpu``, and a smoke-size run of ``gsm8k-cpu``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentr1_core.builtin.calculator import evaluate, format_number
from agentr1_core.builtin.gsm8k import (
    GSM8KFormatError, annotations, expert_replay, final_number, gsm8k_rows, parse_lines, replay_stats, sample_path,
)
from agentr1_core.config import ConfigError, load_config

CHECKOUT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_data_variables(monkeypatch):
    monkeypatch.delenv("GSM8K_TRAIN", raising=False)
    monkeypatch.delenv("GSM8K_TEST", raising=False)


def line(question: str, answer: str) -> str:
    return json.dumps({"question": question, "answer": answer})


def raw_lines(split: str) -> list[dict]:
    return [json.loads(t) for t in sample_path(split).read_text(encoding="utf-8").splitlines() if t.strip()]


def calls_of(actions: list[str]) -> list[str]:
    return [json.loads(m)["arguments"]["expression"]
            for a in actions for m in re.findall(r"<tool_call>(.*?)</tool_call>", a)]


# -- the loader -------------------------------------------------------------------------------------------------------

def test_final_number_drops_commas_and_keeps_signs_and_decimals():
    assert final_number("He pays 1,000+200 = <<1000+200=1200>>1,200.\n#### 1,200") == "1200"
    assert final_number("The total is 12,345,678\n#### 12,345,678") == "12345678"
    assert final_number("She is short by <<20-23=-3>>-3.\n#### -3") == "-3"
    assert final_number("Each gets 5/2=<<5/2=2.5>>2.5 pies\n#### 2.5") == "2.5"
    assert final_number("#### 1,234.75 ") == "1234.75"
    assert final_number("a #### in the middle <<1+1=2>>\n#### 2") == "2"  # the last marker counts
    for bad in ("no marker, 72", "#### seventy-two", "#### 3 apples", "#### "):
        with pytest.raises(ValueError):
            final_number(bad)


def test_rows_from_lines_with_commas_negatives_and_decimals():
    lines = [
        line("A house costs $1,000 and repairs $200. Total?", "1000+200 = <<1000+200=1200>>1,200\n#### 1,200"),
        line("Tom has 20 and owes 23. Balance?", "20-23=<<20-23=-3>>-3\n#### -3"),
        line("5 pies for 2 kids?", "5/2=<<5/2=2.5>>2.5\n#### 2.5"),
        line("Three steps?", "<<2*3=6>>6 then <<6+4=10>>10 then <<10/4=2.5>>2.5\n#### 2.5"),
    ]
    rows = parse_lines(lines, "mem.jsonl", "train")
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["1200", "-3", "2.5", "2.5"]
    assert all(r["data_source"] == "gsm8k" and r["extra_info"]["expert"] == "ok" for r in rows)
    assert rows[0]["prompt"] == "A house costs $1,000 and repairs $200. Total?"
    assert rows[1]["expert_actions"][-1] == "<answer>-3</answer>"
    assert calls_of(rows[3]["expert_actions"]) == ["2*3", "6+4", "10/4"]
    assert len(rows[3]["expert_actions"]) == 4  # one call per turn, then the answer
    bundled = parse_lines(lines[3:], "mem.jsonl", "train", calls_per_turn=0)[0]["expert_actions"]
    assert len(bundled) == 2 and calls_of(bundled) == ["2*3", "6+4", "10/4"]
    pairs = parse_lines(lines[3:], "mem.jsonl", "train", calls_per_turn=2)[0]["expert_actions"]
    assert [len(calls_of([a])) for a in pairs] == [2, 1, 0]


def test_rows_that_cannot_be_replayed_keep_no_expert_actions():
    lines = [
        line("No annotations?", "It is 4 + 4 = 8.\n#### 8"),
        line("Last step unannotated?", "<<2*3=6>>6, and 6 - 1 = 5\n#### 5"),
        line("Bad expression?", "<<2 apples * 3=6>>6\n#### 6"),
    ]
    rows = parse_lines(lines, "mem.jsonl", "test")
    assert [r["extra_info"]["expert"] for r in rows] == ["no_annotations", "wrong_final", "calculator_error"]
    assert not any("expert_actions" in r for r in rows)
    assert replay_stats(rows) == {"rows": 3, "ok": 0, "no_annotations": 1, "calculator_error": 1, "wrong_final": 1}
    assert expert_replay("<<1+1=2>>", "3") == (None, "wrong_final")


@pytest.mark.parametrize("bad, message", [
    ("{not json", "not valid JSON"),
    ('["a list"]', "JSON object"),
    ('{"question": "Q?"}', "'answer' must be a string"),
    ('{"question": "", "answer": "#### 1"}', "non-empty"),
    ('{"question": "Q?", "answer": "no final line"}', "no '#### N' line"),
    ('{"prompt": "Q?"}', "not a GSM8K line"),
])
def test_a_malformed_line_names_file_and_line(bad, message):
    lines = [line("Fine?", "<<1+1=2>>2\n#### 2"), "", bad]
    with pytest.raises(GSM8KFormatError, match=re.escape(f"data.jsonl:3: ") + ".*" + re.escape(message)):
        parse_lines(lines, "data.jsonl", "train")


def test_shipped_sample_rows_follow_the_release_lines():
    for split, size in (("train", 300), ("test", 100)):
        raw = raw_lines(split)
        rows = gsm8k_rows(split=split)
        assert len(raw) == len(rows) == size
        for rec, row in zip(raw, rows):
            assert row["prompt"] == rec["question"]
            truth = rec["answer"].split("####")[-1].strip().replace(",", "")
            assert row["reward_model"]["ground_truth"] == truth
            found = re.findall(r"<<(.*?)=(.*?)>>", rec["answer"])
            status = row["extra_info"]["expert"]
            if not found:
                assert status == "no_annotations"
            elif abs(evaluate(found[-1][0]) - float(truth)) > 1e-6:
                assert status == "wrong_final"
            else:
                assert status == "ok"
                assert calls_of(row["expert_actions"]) == [e.strip() for e, _ in found]
                assert row["expert_actions"][-1] == f"<answer>{truth}</answer>"
        assert sum("expert_actions" in r for r in rows) == replay_stats(rows)["ok"]
    assert replay_stats(gsm8k_rows(split="train"))["ok"] >= 270  # the release's annotations are nearly complete


def test_loader_params_split_limit_expert_only_and_path(tmp_path):
    all_rows = gsm8k_rows(split="train")
    replayable = gsm8k_rows(split="train", expert_only=True)
    assert len(replayable) == replay_stats(all_rows)["ok"] and all("expert_actions" in r for r in replayable)
    assert [r["prompt"] for r in gsm8k_rows(split="test", limit=5)] == [r["question"] for r in raw_lines("test")[:5]]
    assert all(r["extra_info"]["split"] == "test" for r in gsm8k_rows(split="test", limit=3))
    own = tmp_path / "mine.jsonl"
    own.write_text(line("Q?", "<<6*7=42>>42\n#### 42") + "\n")
    assert gsm8k_rows(path=str(own))[0]["expert_actions"][-1] == "<answer>42</answer>"
    with pytest.raises(ConfigError, match="split must be 'train' or 'test'"):
        gsm8k_rows(split="val")
    with pytest.raises(ConfigError, match="not found"):
        gsm8k_rows(path=str(tmp_path / "missing.jsonl"))


# -- expert replay through the real env ---------------------------------------------------------------------------------

@pytest.mark.parametrize("calls_per_turn", [1, 0])
def test_expert_replays_reach_the_ground_truth_through_tool_env(smol_tokenizer, calls_per_turn):
    from omegaconf import OmegaConf

    from agentr1_core.builtin.rewards import AnswerMatch
    from agentr1_core.flows import AgentEnvLoop, FlowContext
    from agentr1_core.rollout.base import SamplingParams
    from agentr1_core.testing import run_async

    cfg = load_config("gsm8k-cpu")
    env = OmegaConf.to_container(cfg.env, resolve=True)
    ctx = FlowContext(engine=None, tokenizer=smol_tokenizer, sampling=SamplingParams(), env_config=env,
                      reward_fn=AnswerMatch(), max_turns=int(cfg.rollout.max_turns),
                      max_prompt_tokens=int(cfg.rollout.max_prompt_tokens), policy="expert")
    rows = gsm8k_rows(split="train", calls_per_turn=calls_per_turn, expert_only=True)
    assert len(rows) >= 270
    for row in rows:
        traj = run_async(AgentEnvLoop(ctx).run(row))
        assert traj.termination == "done" and traj.final_reward == 1.0, row["extra_info"]["index"]
        results = [text for step in traj.steps[:-1] for text in step.feedback.split("\n")]
        expected = [format_number(evaluate(e)) for e in calls_of(row["expert_actions"])]
        assert results == expected and not traj.info.get("tool_errors")
        turns = row["extra_info"]["annotations"] + 1 if calls_per_turn == 1 else 2
        assert len(traj.steps) == turns


# -- the prepare command ----------------------------------------------------------------------------------------------

def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("GSM8K_TRAIN", "GSM8K_TEST")}
    return subprocess.run([sys.executable, "-m", "agentr1_core.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def test_prepare_writes_rows_from_a_folder_and_a_url(tmp_path):
    release = sample_path("train").parent  # the shipped sample has the release's file names
    out = cli("gsm8k", "prepare", "--src", str(release), "--out", str(tmp_path / "rows"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    written = {s: [json.loads(t) for t in (tmp_path / "rows" / f"{s}.jsonl").read_text().splitlines()]
               for s in ("train", "test")}
    assert [len(written["train"]), len(written["test"])] == [300, 100]
    ok = replay_stats(gsm8k_rows(split="train"))["ok"]
    assert f"300 rows, {ok} with an expert replay" in out.stdout and "export GSM8K_TRAIN=" in out.stdout
    assert [r["prompt"] for r in written["test"]] == [r["question"] for r in raw_lines("test")]
    assert written["train"] == gsm8k_rows(split="train")
    # the written rows read back through the loader's path (the configs' GSM8K_TRAIN / GSM8K_TEST)
    assert gsm8k_rows(path=str(tmp_path / "rows" / "train.jsonl")) == written["train"]

    url = cli("gsm8k", "prepare", "--src", release.as_uri(), "--out", str(tmp_path / "from_url"), "--quiet",
              cwd=tmp_path)
    assert url.returncode == 0, url.stderr
    assert (tmp_path / "from_url" / "test.jsonl").read_text() == (tmp_path / "rows" / "test.jsonl").read_text()


def test_prepare_reports_a_malformed_line_with_exit_code_2(tmp_path):
    src = tmp_path / "release"
    src.mkdir()
    lines = sample_path("train").read_text(encoding="utf-8").splitlines()[:5]
    lines[2] = lines[2].replace("####", "##")
    (src / "train.jsonl").write_text("\n".join(lines) + "\n")
    (src / "test.jsonl").write_text(sample_path("test").read_text(encoding="utf-8"))
    out = cli("gsm8k", "prepare", "--src", str(src), "--out", str(tmp_path / "rows"), cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert f"{src / 'train.jsonl'}:3: the answer has no '#### N' line" in out.stderr
    assert not (tmp_path / "rows").exists()  # nothing is written before every line is checked

    (src / "train.jsonl").write_text(sample_path("train").read_text(encoding="utf-8"))
    (src / "test.jsonl").unlink()
    missing = cli("gsm8k", "prepare", "--src", str(src), "--out", str(tmp_path / "rows"), cwd=tmp_path)
    assert missing.returncode == 2 and "test.jsonl not found" in missing.stderr
    bad_url = cli("gsm8k", "prepare", "--src", (tmp_path / "nowhere").as_uri(), "--out", str(tmp_path / "r"),
                  cwd=tmp_path)
    assert bad_url.returncode == 2 and "cannot fetch" in bad_url.stderr and "Traceback" not in bad_url.stderr


# -- the named configs ------------------------------------------------------------------------------------------------

def test_named_configs_resolve(tmp_path, monkeypatch):
    from agentr1_core.components import check_components
    from agentr1_core.plugins import get_registry

    out = cli("config", "show", "gsm8k-cpu", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "run_dir: runs/gsm8k-cpu" in out.stdout and "path: smollm2-135m-instruct" in out.stdout
    monkeypatch.chdir(tmp_path)
    cpu, ref = load_config("gsm8k-cpu"), load_config("gsm8k", ["model.device=auto"])
    for cfg in (cpu, ref):
        check_components(cfg, get_registry())
        assert cfg.data.train.name == cfg.data.val.name == "gsm8k" and cfg.data.val.split == "test"
        assert cfg.reward.name == "answer_match" and cfg.env.tools == ["calculator"]
    assert list(cpu.stages) == ["sft", "rl"] and cpu.engine.name == "transformers" and cpu.trainer.name == "local"
    assert cpu.data.train.expert_only and cpu.validation.max_rows > 0
    assert ref.model.path == "Qwen/Qwen3-4B-Instruct-2507" and ref.rollout.n == 5 and ref.rollout.batch_size == 256
    # every replayable training row fits the CPU config's turn cap: its annotations, one per turn, and the answer
    longest = max(r["extra_info"]["annotations"] for r in gsm8k_rows(split="train", expert_only=True)) + 1
    assert longest <= min(int(cpu.env.max_turns), int(cpu.rollout.max_turns))
    assert cpu.data.train.path == ""  # the shipped sample unless GSM8K_TRAIN names a file
    monkeypatch.setenv("GSM8K_TRAIN", "/data/gsm8k/train.jsonl")
    assert load_config("gsm8k-cpu").data.train.path == "/data/gsm8k/train.jsonl"


def test_sample_and_licence_ship_as_package_data():
    folder = sample_path("train").parent
    assert {p.name for p in folder.iterdir()} >= {"train.jsonl", "test.jsonl", "LICENSE", "README.md"}
    assert "MIT License" in (folder / "LICENSE").read_text()
    pyproject = (CHECKOUT / "pyproject.toml").read_text()
    assert '"data/gsm8k/*"' in pyproject


# -- smoke run --------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_gsm8k_cpu_recipe_runs_end_to_end_at_smoke_size(tmp_path):
    from agentr1_core.cli import main

    run_dir = tmp_path / "run"
    overrides = [
        f"run_dir={run_dir}", "validation.max_rows=2", "sft.rows=2", "sft.epochs=1", "sft.batch_size=4",
        "rollout.batch_size=1", "rollout.n=2",
        "trainer.total_steps=1", "trainer.micro_batch_size=4", "trainer.train_layers=2", "trainer.threads=1",
    ]
    assert main(["run", "gsm8k-cpu", *overrides]) == 0
    records = [json.loads(t) for t in (run_dir / "metrics.jsonl").read_text().splitlines()]
    validations = {r["label"]: r for r in records if r.get("event") == "validation"}
    assert set(validations) == {"before_sft", "after_sft", "after_rl"}
    for v in validations.values():
        assert v["cases"] == 2 and set(v["by_source"]) == {"gsm8k"}
    sft = next(r for r in records if r.get("event") == "sft")
    # two replayed solutions: at least one calculator turn and the answer each, all reaching the ground truth
    assert sft["expert_episodes"] == 2 and sft["expert_success_rate"] == 1.0 and 4 <= sft["sft_steps"] <= 18
    assert sft["weight_change"] > 0
    iters = [r for r in records if "iteration" in r and "event" not in r]
    assert [r["iteration"] for r in iters] == [1] and iters[0]["episodes"] == 2
    episodes = [json.loads(t) for t in (run_dir / "episodes" / "after_rl.jsonl").read_text().splitlines()]
    assert len(episodes) == 2
