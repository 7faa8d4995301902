"""The experiment trackers of ``logging.trackers`` (``agentr1_core.lifecycle.trackers``), read back from each one's
own files: TensorBoard's event files, W&B's offline run files, MLflow's file store through the MLflow client and
Trackio's local project store through Trackio. Every tracker gets the names and values of ``metrics.jsonl``; a
resumed run logs no iteration twice; an unknown tracker and a tracker whose package cannot be imported stop the run
at its checks, exit code 2, with one line each."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from agentr1_core.cli import main
from agentr1_core.lifecycle.metrics import MetricsLogger, read_metrics, tracker_scalars
from agentr1_core.lifecycle.trackers import TRACKERS, installed, mlflow_name, tracker_names
from agentr1_core.testing.ci import missing

ALL = ["tensorboard", "wandb", "mlflow", "trackio"]
Logged = dict[tuple[str, int], list[float]]  # (metric name, step) -> the values logged, in order


@pytest.fixture(scope="module")
def trackio_dir(tmp_path_factory):
    """Trackio's local store for this module (Trackio reads ``TRACKIO_DIR`` once, when it is imported)."""
    path = tmp_path_factory.mktemp("trackio")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRACKIO_DIR", str(path))
        yield path


@pytest.fixture
def tracker_env(monkeypatch, tmp_path, trackio_dir):
    """No W&B account or server, nor an MLflow server: W&B runs offline and MLflow uses the run folder's store."""
    absent = [name for name in ALL if not installed(TRACKERS[name].module)]
    if absent:
        missing(f"tracker packages not installed: {', '.join(absent)} (pip install -e '.[{','.join(absent)}]')")
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "WANDB_IDENTITY_TOKEN_FILE", "MLFLOW_TRACKING_URI",
                 "AGENTR1_WANDB_PROJECT", "AGENTR1_WANDB_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # for reading the file store back here
    return trackio_dir


# -- reading each tracker back ------------------------------------------------------------------------------------
def expected(records: list[dict]) -> Logged:
    out: Logged = defaultdict(list)
    for record in records:
        step, values = tracker_scalars(record)
        for key, value in values.items():
            out[(key, step)].append(value)
    return dict(out)


def read_tensorboard(run_dir: Path) -> Logged:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    out: Logged = defaultdict(list)
    for tag in acc.Tags()["scalars"]:
        for event in acc.Scalars(tag):
            out[(tag, event.step)].append(event.value)
    return dict(out)


def wandb_records(path: Path, timeout: float = 60.0) -> list:
    """The records of an offline W&B run file, once W&B's service has written its last one (``exit``): a run that
    finished in this process may still be being written for a moment."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal.datastore import DataStore

    deadline = time.monotonic() + timeout
    while True:
        store = DataStore()
        store.open_for_scan(str(path))
        records = []
        while (data := store.scan_data()) is not None:
            records.append(wandb_internal_pb2.Record())
            records[-1].ParseFromString(data)
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def read_wandb(run_dir: Path) -> tuple[Logged, list[str]]:
    """The history of every offline W&B run in ``run_dir`` (one row per step holds one value per name) and the
    run ids, from the runs' ``.wandb`` files."""
    out: Logged = defaultdict(list)
    ids = []
    for path in sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb")):
        for record in wandb_records(path):
            if record.WhichOneof("record_type") == "run":
                ids.append(record.run.run_id)
            if record.WhichOneof("record_type") != "history":
                continue
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                if not key.startswith("_"):  # _step, _runtime, _timestamp: W&B's own
                    out[(key, record.history.step.num)].append(json.loads(item.value_json))
    return dict(out), ids


def read_mlflow(run_dir: Path, project: str) -> tuple[Logged, list[str]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(run_dir / "mlruns").resolve().as_uri())
    experiment = client.get_experiment_by_name(project)
    runs = client.search_runs([experiment.experiment_id])
    out: Logged = defaultdict(list)
    for run in runs:
        for key in run.data.metrics:
            for metric in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.timestamp):
                out[(metric.key, metric.step)].append(metric.value)
    return dict(out), [r.info.run_id for r in runs]


def read_trackio(store: Path, project: str, name: str) -> tuple[Logged, list[str]]:
    """The logs of the Trackio runs called ``name`` in ``project`` and their ids, through Trackio's local storage
    (in a process of its own, which reads ``TRACKIO_DIR`` as Trackio does)."""
    script = ("import json, sys; from trackio.sqlite_storage import SQLiteStorage as S; p, n = sys.argv[1:]; "
              "ids = [r['id'] for r in S.get_run_records(p) if r['name'] == n]; "
              "print(json.dumps({'ids': ids, 'logs': [S.get_logs(p, run=n, run_id=i) for i in ids]}))")
    done = subprocess.run([sys.executable, "-c", script, project, name], capture_output=True, text=True,
                          env={**os.environ, "TRACKIO_DIR": str(store)}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    out: Logged = defaultdict(list)
    for logs in found["logs"]:
        for row in logs:
            for key, value in row.items():
                if key not in ("step", "timestamp"):
                    out[(key, int(row["step"]))].append(value)
    return dict(out), found["ids"]


def assert_same(got: Logged, want: Logged, rel: float = 0.0) -> None:
    assert set(got) == set(want), (sorted(set(got) - set(want))[:5], sorted(set(want) - set(got))[:5])
    for key, values in want.items():
        assert got[key] == pytest.approx(values, rel=rel), key


def last_values(logged: Logged) -> Logged:
    """What a tracker with one value per name and step (W&B) holds of ``logged``: the last value."""
    return {key: values[-1:] for key, values in logged.items()}


# -- a real run --------------------------------------------------------------------------------------------------
def _run(run_dir: Path, model_dir: str, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "agentr1_core.cli", "run", "tiny", f"run_dir={run_dir}", f"model.path={model_dir}",
           "trainer.checkpoint_every=1", f"logging.trackers=[{','.join(ALL)}]", "logging.project=tiny-trackers",
           "rollout.max_new_tokens=24", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    env.pop("MLFLOW_ALLOW_FILE_STORE", None)  # the run allows its own file store
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_a_tiny_run_logs_the_names_and_values_of_metrics_jsonl_to_every_tracker_and_a_resume_logs_nothing_twice(
        tmp_path, tiny_model_dir, tracker_env):
    run_dir = tmp_path / "run"
    first = _run(run_dir, tiny_model_dir, "trainer.total_steps=2")
    assert first.returncode == 0, first.stderr[-3000:]
    records = read_metrics(run_dir)
    want = expected(records)
    # the names TensorBoard has always had: nested dicts flattened with "/", events under val/ and sft/
    names = {key for key, _ in want}
    assert {"reward_mean", "loss", "val/success_rate", "sft/expert_success_rate"} <= names
    assert any(n.startswith("terminations/") for n in names) and any(n.startswith("val/by_source/") for n in names)
    assert want[("val/success_rate", 0)] and len(want[("val/success_rate", 0)]) == 2  # before and after SFT

    assert_same(read_tensorboard(run_dir), want, rel=1e-6)  # float32 events
    wandb_logged, wandb_ids = read_wandb(run_dir)
    assert_same(wandb_logged, last_values(want))
    mlflow_logged, mlflow_runs = read_mlflow(run_dir, "tiny-trackers")
    assert_same(mlflow_logged, want)
    trackio_logged, trackio_runs = read_trackio(tracker_env, "tiny-trackers", "run")
    assert_same(trackio_logged, want)
    assert len(wandb_ids) == len(mlflow_runs) == len(trackio_runs) == 1

    # the last checkpoint lost, as when a run dies after logging iteration 2 and before checkpointing it: the
    # resumed run repeats iteration 2 (and its validation) and goes on to iteration 3
    shutil.rmtree(run_dir / "checkpoints" / "step_000002")
    resumed = _run(run_dir, tiny_model_dir, "trainer.total_steps=3", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "[resume]" in resumed.stdout and "(iteration 1)" in resumed.stdout
    again = read_metrics(run_dir)
    assert [r["iteration"] for r in again if "event" not in r] == [1, 2, 3]
    now = expected(again)
    # TensorBoard purged what the first process logged from iteration 2 on: it holds what metrics.jsonl holds
    assert_same(read_tensorboard(run_dir), now, rel=1e-6)
    # the others reopened their run and skipped what it had: each name at each step once (two validations at step
    # 0, as before); iteration 2 and its validation keep the first process's values, iteration 3 is the new one's
    kept = {**now, **{k: v for k, v in want.items() if k[1] == 2}}
    wandb_logged, wandb_ids = read_wandb(run_dir)
    assert_same(wandb_logged, last_values(kept))
    assert wandb_ids == [wandb_ids[0]] * 2  # two offline runs of one W&B run, which `wandb sync` joins
    mlflow_logged, mlflow_runs_after = read_mlflow(run_dir, "tiny-trackers")
    assert_same(mlflow_logged, kept)
    assert mlflow_runs_after == mlflow_runs
    trackio_logged, trackio_runs_after = read_trackio(tracker_env, "tiny-trackers", "run")
    assert_same(trackio_logged, kept)
    assert trackio_runs_after == trackio_runs
    assert all(len(v) == 1 for k, v in mlflow_logged.items() if k[1] > 0)  # nothing logged twice
    assert ("reward_mean", 3) in mlflow_logged and ("val/success_rate", 3) in mlflow_logged


# -- the logger alone, resumed ---------------------------------------------------------------------------------
def _iteration(i: int, scale: float) -> dict:
    return {"iteration": i, "reward_mean": scale * i, "loss": 1.0 - scale * i, "tool_errors": {"timeout": i},
            "note": "not a number", "bad": float("nan")}


def test_every_tracker_gets_the_same_names_and_a_resumed_logger_skips_the_steps_it_has(tmp_path, tracker_env):
    run_dir, project = tmp_path / "run", "logger-resume"
    first = [{"event": "validation", "label": "before_rl", "iteration": 0, "success_rate": 0.25,
              "by_source": {"a b": {"success_rate": 0.5}}}] + [_iteration(i, 0.1) for i in (1, 2, 3)]
    logger = MetricsLogger(run_dir, trackers=ALL, config={"seed": 1, "rollout": {"n": 2}}, project=project)
    for record in first:
        logger.write(record)
    logger.close()
    # resumed from a checkpoint after iteration 1: iterations 2 and 3 come again (other values), then 4
    second = [_iteration(i, 0.2) for i in (2, 3, 4)]
    logger = MetricsLogger(run_dir, trackers=ALL, config={"seed": 1, "rollout": {"n": 2}}, project=project,
                           purge_step=2)
    for record in second:
        logger.write(record)
    logger.close()

    names = {"reward_mean", "loss", "tool_errors/timeout", "val/success_rate", "val/by_source/a b/success_rate"}
    tensorboard = read_tensorboard(run_dir)
    assert_same(tensorboard, expected(first[:2] + second), rel=1e-6)  # purged from step 2 on, then logged anew
    kept = expected(first + [second[-1]])  # the first values of steps 2 and 3
    for logged in (read_wandb(run_dir)[0], read_mlflow(run_dir, project)[0],
                   read_trackio(tracker_env, project, "run")[0]):
        assert {key for key, _ in logged} == names  # the same names everywhere
        assert_same(logged, kept)
    assert (json.loads((run_dir / "trackers.json").read_text())["mlflow"]["logged"]["reward_mean"]) == 4
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(run_dir / "mlruns").resolve().as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name(project).experiment_id])
    assert run.data.params == {"seed": "1", "rollout.n": "2"} and run.info.status == "FINISHED"
    assert json.loads((Path(run.info.artifact_uri.removeprefix("file://")) / "config.json").read_text()) == {
        "seed": 1, "rollout": {"n": 2}}


def test_wandb_runs_offline_in_the_run_folder_and_agentr1_wandb_project_still_turns_it_on(tmp_path, tracker_env,
                                                                                           monkeypatch):
    from agentr1_core.config import load_config

    monkeypatch.setenv("AGENTR1_WANDB_PROJECT", "from-env")
    cfg = load_config("tiny")
    assert tracker_names(cfg) == ["tensorboard", "wandb"]
    logger = MetricsLogger(tmp_path / "run", trackers=tracker_names(cfg), project="agentr1")
    logger.write(_iteration(1, 0.5))
    logger.close()
    run_files = list((tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(run_files) == 1  # offline: no account, no network
    records = wandb_records(run_files[0])
    assert [r.run.project for r in records if r.WhichOneof("record_type") == "run"] == ["from-env"]
    assert read_wandb(tmp_path / "run")[0] == {("reward_mean", 1): [0.5], ("loss", 1): [0.5],
                                               ("tool_errors/timeout", 1): [1]}


def test_tensorboard_alone_keeps_no_tracker_state_and_an_empty_list_logs_to_metrics_jsonl_only(tmp_path):
    for trackers, tb in ((["tensorboard"], True), ([], False)):
        run_dir = tmp_path / str(tb)
        logger = MetricsLogger(run_dir, trackers=trackers)
        logger.write(_iteration(1, 0.5))
        logger.close()
        assert sorted(p.name for p in run_dir.iterdir()) == ["metrics.jsonl"] + (["tb"] if tb else [])


def test_a_name_mlflow_refuses_is_logged_with_its_odd_characters_replaced():
    assert mlflow_name("val/by_source/gsm8k/success_rate") == "val/by_source/gsm8k/success_rate"
    assert mlflow_name("val/by_source/a+b/success_rate") == "val/by_source/a_b/success_rate"
    assert mlflow_name("val/by_source/../x") == "val/by_source/__/x"


# -- the run's checks --------------------------------------------------------------------------------------------
def test_an_unknown_tracker_is_reported_with_the_other_problems_before_the_model_loads(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = main(["run", "tiny", f"run_dir={run_dir}", "logging.trackers=[tensorboard,wandbb]", "rollout.n=0"])
    assert code == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "config error" in ln]
    assert any("rollout.n" in ln for ln in lines)  # reported together
    (line,) = [ln for ln in lines if "logging.trackers" in ln]
    assert "logging.trackers[1]" in line and "'wandbb'" in line and "did you mean 'wandb'" in line
    assert line.endswith("valid: " + ", ".join(TRACKERS))
    assert not (run_dir / "metrics.jsonl").exists() and "[setup]" not in capsys.readouterr().out


PACKAGE = {"wandb": "wandb", "mlflow": "mlflow-skinny", "trackio": "trackio"}  # what pip installs for each


@pytest.mark.parametrize("tracker", ["wandb", "mlflow", "trackio"])
def test_a_tracker_whose_package_is_blocked_from_import_names_its_pip_install(tmp_path, capsys, monkeypatch,
                                                                              tracker):
    monkeypatch.setitem(sys.modules, tracker, None)  # what an environment without the package gives: no import
    code = main(["run", "tiny", f"run_dir={tmp_path / 'run'}", f"logging.trackers=[tensorboard,{tracker}]"])
    assert code == 2
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if "config error" in ln]
    assert line.endswith(f"config error at logging.trackers[1]: tracker {tracker!r} needs the {tracker} package, "
                         f"which is not installed; run: pip install {PACKAGE[tracker]}")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
