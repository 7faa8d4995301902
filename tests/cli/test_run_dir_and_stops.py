"""The run-directory rule (one run per run_dir, the config saved there), the stop when every episode ends in an env
error, the stop on SIGTERM at a safe point, and quiet exits into a closed pipe."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from agentr1_core.cli import main
from agentr1_core.config import load_config
from agentr1_core.lifecycle.checkpoint import list_checkpoints
from agentr1_core.lifecycle.episode_errors import AllEpisodesFailed, first_errors, report_episode_errors
from agentr1_core.lifecycle.metrics import read_metrics
from agentr1_core.lifecycle.run_dir import RunDirInUseError, prepare_run_dir
from agentr1_core.lifecycle.stop import GracefulStop, RunStopped
from agentr1_core.mdp import Trajectory

CLI = str(Path(sys.executable).parent / "agentr1-core")


def _cfg(run_dir: Path, *overrides: str):
    return load_config("tiny", [f"run_dir={run_dir}", *overrides])


def test_run_dir_rule_fresh_used_overwrite_and_resume(tmp_path, capsys):
    run_dir = tmp_path / "run"
    prepare_run_dir(_cfg(run_dir))  # absent: a fresh run; its config is saved
    saved = OmegaConf.load(run_dir / "config.yaml")
    assert saved.run_dir == str(run_dir) and saved.trainer.total_steps == 1
    with pytest.raises(RunDirInUseError, match=r"is not empty \(config.yaml\); pass --resume .* --overwrite"):
        prepare_run_dir(_cfg(run_dir))
    with pytest.raises(RunDirInUseError, match="nothing to resume: .* no complete checkpoint"):
        prepare_run_dir(_cfg(run_dir, "trainer.resume=auto"))
    with pytest.raises(RunDirInUseError, match="exclude each other"):
        prepare_run_dir(_cfg(run_dir, "trainer.resume=auto"), overwrite=True)

    for name in ("metrics.jsonl", "summary.json", "eval_step_000001.json", "notes.txt"):
        (run_dir / name).write_text("{}\n")
    (run_dir / "checkpoints" / "step_000001").mkdir(parents=True)
    (run_dir / "checkpoints" / "step_000001" / "COMPLETE").write_text("1\n")
    prepare_run_dir(_cfg(run_dir, "trainer.resume=auto"))  # a checkpoint: resuming is allowed
    prepare_run_dir(_cfg(run_dir, "seed=7"), overwrite=True)  # the previous run's files go, the user's stay
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.yaml", "notes.txt"]
    assert OmegaConf.load(run_dir / "config.yaml").seed == 7
    assert "removed the previous run" in capsys.readouterr().out


@pytest.mark.slow
def test_rerun_into_a_used_run_dir_is_refused_then_overwritten_and_eval_export_use_the_saved_config(
        tmp_path, tiny_model_dir, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(OmegaConf.to_yaml({
        "base": "tiny", "stages": ["rl"], "model": {"path": tiny_model_dir},
        "rollout": {"max_new_tokens": 8}, "validation": {"every": 0, "max_rows": 2},
        "trainer": {"total_steps": 1, "checkpoint_every": 0, "train_layers": 0, "min_free_gb": 0.01},
    }))
    run_dir = tmp_path / "run"
    assert main(["run", str(config), f"run_dir={run_dir}"]) == 0
    first = (run_dir / "metrics.jsonl").read_text()
    capsys.readouterr()

    assert main(["run", str(config), f"run_dir={run_dir}"]) == 2  # the same command again: refused
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not empty" in err and "--overwrite" in err
    assert (run_dir / "metrics.jsonl").read_text() == first

    assert main(["run", str(config), f"run_dir={run_dir}", "--overwrite", "seed=9"]) == 0
    iterations = [r["iteration"] for r in read_metrics(run_dir) if "event" not in r]
    assert iterations == [1]  # one run's records, not two
    assert [p.name for p in list_checkpoints(run_dir)] == ["step_000001"]
    assert OmegaConf.load(run_dir / "config.yaml").seed == 9
    capsys.readouterr()

    assert main(["eval", str(run_dir), "--out", str(tmp_path / "eval.json")]) == 0  # nothing retyped
    out = capsys.readouterr().out
    assert f"[eval] checkpoint {run_dir / 'checkpoints' / 'step_000001'}" in out
    assert json.loads((tmp_path / "eval.json").read_text())["checkpoint"].endswith("step_000001")
    assert main(["export", str(run_dir), str(tmp_path / "hf")]) == 0
    assert "[export] checkpoint" in capsys.readouterr().out and (tmp_path / "hf" / "config.json").is_file()


def _traj(termination: str, error: str = "") -> Trajectory:
    traj = Trajectory(data_source="x", termination=termination)
    if error:
        traj.info["error"] = error
    return traj


class _Writer:
    def __init__(self) -> None:
        self.records: list[dict] = []

    def write(self, record: dict) -> None:
        self.records.append(record)


class _Run:
    """What ``report_episode_errors`` reads of a trainer: a metrics writer."""

    def __init__(self) -> None:
        self.writer = _Writer()


def test_first_error_of_each_kind_is_reported_once_and_all_env_errors_stop(capsys):
    run = _Run()
    tb = "Traceback (most recent call last):\n  File x\nCorpusError: corpus file not found: /nope.jsonl\n"
    record: dict = {}
    report_episode_errors(run, [_traj("done"), _traj("env_error", tb), _traj("engine_error", "boom")], "it 1",
                          record)
    assert record["first_errors"] == {"env_error": "CorpusError: corpus file not found: /nope.jsonl",
                                      "engine_error": "boom"}
    assert "[it 1] first env_error: CorpusError: corpus file not found: /nope.jsonl" in capsys.readouterr().out
    record = {}
    report_episode_errors(run, [_traj("done"), _traj("env_error", "other")], "it 2", record)
    assert "first_errors" not in record and capsys.readouterr().out == ""  # known kinds are not repeated
    with pytest.raises(AllEpisodesFailed, match=r"every episode of it 3 ended in an env error \(2 of 2\).*: "
                                                r"CorpusError: corpus file not found: /nope.jsonl"):
        report_episode_errors(run, [_traj("env_error", tb), _traj("env_error", tb)], "it 3", {})
    assert run.writer.records[-1]["event"] == "stopped"
    assert first_errors([_traj("done")]) == {}


def test_each_distinct_error_keeps_its_full_traceback_in_errors_log(tmp_path, capsys):
    run = _Run()
    run.run_dir = tmp_path
    deep = ("Traceback (most recent call last):\n  File \"loop.py\", line 1, in run\n"
            "  File \"my_env.py\", line 9, in step\n    scores[key]\nKeyError: 'scoreboard missing'\n")
    report_episode_errors(run, [_traj("env_error", deep), _traj("env_error", deep), _traj("done")], "it 1", {})
    out = capsys.readouterr().out
    assert f"first env_error: KeyError: 'scoreboard missing' (traceback in {tmp_path / 'errors.log'})" in out
    report_episode_errors(run, [_traj("env_error", deep), _traj("engine_error", "boom")], "it 2", {})
    log = (tmp_path / "errors.log").read_text()
    assert log.count("KeyError: 'scoreboard missing'") == 1 and 'File "my_env.py", line 9, in step' in log
    assert "it 1, episode" in log and "it 2, episode" in log and log.count("boom") == 1
    assert run._logged_errors == {"env_error: KeyError: 'scoreboard missing'": 3, "engine_error: boom": 1}


def test_resume_takes_the_saved_config_and_names_what_differs(tmp_path, capsys):
    from agentr1_core.lifecycle.run_dir import ResumeMismatch, resume_config, save_config

    run_dir = tmp_path / "run"
    assert resume_config(_cfg(run_dir), []).trainer.total_steps == 1  # nothing saved: the config as given
    save_config(_cfg(run_dir, "trainer.total_steps=4"), run_dir)
    kept = resume_config(_cfg(run_dir), [])
    assert kept.trainer.total_steps == 4
    assert "trainer.total_steps: keeping the run's 4 (the config given says 1)" in capsys.readouterr().out
    longer = resume_config(_cfg(run_dir, "trainer.total_steps=6"), ["trainer.total_steps=6"])
    assert longer.trainer.total_steps == 6 and "trainer.total_steps: 4 -> 6" in capsys.readouterr().out
    with pytest.raises(ResumeMismatch, match=r"env.max_turns \(saved 3, now 5\), seed \(saved 0, now 1\)"):
        resume_config(_cfg(run_dir, "trainer.total_steps=4", "env.max_turns=5", "seed=1"), ["env.max_turns=5"])
    with pytest.raises(ResumeMismatch, match=r"at env.name \(saved 'tool_env', now 'other'\)"):
        resume_config(_cfg(run_dir, "trainer.total_steps=4", "env.name=other"), [])


@pytest.mark.slow
def test_a_run_whose_every_episode_hits_an_env_error_stops_with_the_first_error(tmp_path, tiny_model_dir):
    from agentr1_core.plugins import configure_registry
    from agentr1_core.testing import faults
    from agentr1_core.trainers.local import LocalTrainer

    path = tmp_path / "c.yaml"
    path.write_text(OmegaConf.to_yaml({
        "base": "default", "run_dir": str(tmp_path / "run"), "stages": ["rl"], "model": {"path": tiny_model_dir},
        "env": {"name": "faulty_env", "tools": ["calculator"], "max_turns": 2},
        "data": {"train": {"name": "fault_rows", "repeats": 4, "kinds": ["env_step_raises"]}, "val": None},
        "rollout": {"batch_size": 2, "n": 2, "max_new_tokens": 8, "max_turns": 2},
        "trainer": {"total_steps": 3, "threads": 1, "min_free_gb": 0.01, "train_layers": 0},
    }))
    registry = configure_registry()
    registry.register_module(faults, name="faults")
    trainer = LocalTrainer(load_config(str(path)), registry)
    with pytest.raises(AllEpisodesFailed, match=r"iteration 1 ended in an env error \(4 of 4\).*: "
                                                r"RuntimeError: injected env failure in step\(\)"):
        trainer.fit()
    stopped = [r for r in read_metrics(tmp_path / "run") if r.get("event") == "stopped"]
    assert stopped and "injected env failure" in stopped[0]["first_errors"]["env_error"]
    assert trainer.iteration == 1 and not list_checkpoints(tmp_path / "run")


class _Trainer:
    """What ``GracefulStop`` reads of a trainer: its run_dir, iteration and ``save_checkpoint``."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir, self.iteration, self.saved = run_dir, 3, []

    def save_checkpoint(self) -> Path:
        path = self.run_dir / "checkpoints" / f"step_{self.iteration:06d}"
        self.saved.append(path)
        return path


def test_sigterm_stops_after_the_iteration_with_a_checkpoint(tmp_path, capsys):
    trainer = _Trainer(tmp_path)
    with GracefulStop() as stop:
        stop.on_iteration_end(trainer, {})  # no signal: nothing happens
        assert trainer.saved == []
        os.kill(os.getpid(), signal.SIGTERM)  # handled: the process goes on
        assert "SIGTERM received; stopping after the current iteration" in capsys.readouterr().err
        with pytest.raises(RunStopped, match="stopped by SIGTERM after iteration 3; checkpoint .*step_000003") as exc:
            stop.on_iteration_end(trainer, {})
        assert exc.value.exit_code == 128 + signal.SIGTERM and len(trainer.saved) == 1
        with pytest.raises(KeyboardInterrupt):  # a second signal: at once
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))


def test_output_into_a_closed_pipe_exits_quietly(tmp_path):
    proc = subprocess.run(f"'{CLI}' plugins --json | head -c 10", shell=True, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.stdout.startswith("{") and "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


def test_base_config_can_switch_env_without_inheriting_its_params(tmp_path):
    path = tmp_path / "switch.yaml"
    path.write_text("base: tiny\nenv: {name: search_qa, max_turns: 3}\nreward: {name: qa_em}\n")
    cfg = load_config(str(path))
    assert OmegaConf.to_container(cfg.env) == {"name": "search_qa", "max_turns": 3}  # no calculator tools
    cfg = load_config("tiny", ["env.max_turns=5", "env.name=search_qa"])  # name overrides apply first
    assert OmegaConf.to_container(cfg.env) == {"name": "search_qa", "max_turns": 5}
    assert load_config("tiny", ["env.name=tool_env"]).env.tools == ["calculator"]  # same name: merged as before
    proc = subprocess.run([CLI, "config", "show", str(path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "name: search_qa" in proc.stdout, proc.stderr
