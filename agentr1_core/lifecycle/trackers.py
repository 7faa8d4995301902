"""Experiment trackers: where a run's numbers go besides ``metrics.jsonl``, chosen by ``logging.trackers``.

One small class per tracker with one interface: opened with the run (``TrackerRun``: run folder, project, run name,
resolved config, whether it resumes and what an earlier process of the run saved), ``log(step, values)`` with the
numbers of one record under the names TensorBoard gets (``metrics.tracker_scalars``: ``reward_mean``,
``tool_errors/timeout``, ``val/success_rate``), ``close()``. Every tracker gets the same names and values.

* ``tensorboard``: event files in ``<run_dir>/tb`` (a core dependency).
* ``wandb``: ``wandb.init(dir=<run_dir>)``, files in ``<run_dir>/wandb``; offline (``mode="offline"``, no account,
  ``wandb sync`` uploads later) unless ``WANDB_MODE`` is set or W&B credentials are there (``WANDB_API_KEY`` or a
  netrc entry from ``wandb login``). ``AGENTR1_WANDB_PROJECT`` still turns it on and names its project.
* ``mlflow``: an MLflow file store in ``<run_dir>/mlruns`` (experiment = ``logging.project``), or the server of
  ``MLFLOW_TRACKING_URI``; the config goes in as params and as the artifact ``config.json``.
* ``trackio``: Trackio's local project store (``TRACKIO_DIR``, default ``~/.cache/huggingface/trackio``; ``trackio
  show`` opens it), run name ``logging.run_name``.

Resume: TensorBoard purges its events from the first repeated iteration on. The others reopen the run they logged to
(its id is kept in ``<run_dir>/trackers.json``: W&B's ``id``, offline as a second offline run of that id that ``wandb
sync`` joins to the first, online with ``resume="allow"``; MLflow's ``run_id``; Trackio's run by name) and skip every
metric at a step an earlier process already logged (the last step of each name is kept in the same file), so no
iteration is logged twice there; for the repeated iterations they keep the values first logged. A tracker's package
is imported only when a run opens it; ``tracker_problems`` finds unknown names and missing packages for the run's
checks. This module computes and reads no metrics.
"""

from __future__ import annotations

import importlib.util
import json
import math
import netrc
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from agentr1_core.errors import suggest

STATE_FILE = "trackers.json"  # per tracker: the id of the run it logs to and the last step of each metric name


@dataclass
class TrackerRun:
    """What a tracker is opened with."""

    run_dir: Path
    project: str
    run_name: str
    config: dict[str, Any] = field(default_factory=dict)
    resumed: bool = False
    purge_step: int | None = None  # the first iteration a resumed run logs again
    saved: dict[str, Any] = field(default_factory=dict)  # what this tracker saved in an earlier process of the run


class Tracker:
    """One tracker: ``log`` a step's numbers, ``close`` at the end; ``saved()`` is what a resumed run reopens with."""

    name: ClassVar[str]
    module: ClassVar[str]  # what must be importable
    install: ClassVar[str]  # the pip install that brings it
    purges: ClassVar[bool] = False  # drops what it logged from the resumed step on by itself

    def __init__(self, run: TrackerRun) -> None:
        self.run = run

    def saved(self) -> dict[str, Any]:
        return {}

    def log(self, step: int, values: dict[str, float]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        return None


class TensorBoardTracker(Tracker):
    name, module, install, purges = "tensorboard", "tensorboard", "pip install tensorboard", True

    def __init__(self, run: TrackerRun) -> None:
        super().__init__(run)
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run.run_dir / "tb"), purge_step=run.purge_step)

    def log(self, step: int, values: dict[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def wandb_logged_in() -> bool:
    """Whether W&B credentials are there: ``WANDB_API_KEY``, ``WANDB_IDENTITY_TOKEN_FILE`` or a netrc entry for the
    W&B host (``WANDB_BASE_URL``, default api.wandb.ai), which ``wandb login`` writes."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = re.sub(r"^https?://", "", os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).split("/")[0]
    path = os.environ.get("NETRC") or str(Path.home() / ".netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


class WandbTracker(Tracker):
    name, module, install = "wandb", "wandb", "pip install wandb"

    def __init__(self, run: TrackerRun) -> None:
        super().__init__(run)
        import wandb

        self.id = str(run.saved.get("id") or os.environ.get("AGENTR1_WANDB_RUN_ID") or uuid.uuid4().hex[:12])
        mode = None if os.environ.get("WANDB_MODE") or wandb_logged_in() else "offline"
        # offline, a resumed run is a new offline run with the same id, which `wandb sync` adds to the first
        self.wandb = wandb.init(project=os.environ.get("AGENTR1_WANDB_PROJECT") or run.project, name=run.run_name,
                                id=self.id, resume=None if mode == "offline" else "allow", dir=str(run.run_dir),
                                config=run.config, mode=mode)

    def saved(self) -> dict[str, Any]:
        return {"id": self.id}

    def log(self, step: int, values: dict[str, float]) -> None:
        self.wandb.log(values, step=step)

    def close(self) -> None:
        self.wandb.finish()


_MLFLOW_NAME = re.compile(r"^[/\w.\- :]*$")  # the characters MLflow takes in a metric or param name


def mlflow_name(key: str) -> str:
    """``key`` as MLflow takes it: unchanged when valid (every name the trainer writes), else with each character
    MLflow refuses (and any ``..`` or leading ``/``) turned into ``_``."""
    if _MLFLOW_NAME.match(key) and os.path.normpath(key) == key and not key.startswith("/"):
        return key
    name = re.sub(r"[^/\w.\- :]", "_", key).replace("..", "__").lstrip("/")
    return "/".join(part or "_" for part in name.split("/"))


def _flat(config: Any, prefix: str = "") -> dict[str, str]:
    """The config as ``a.b`` -> str leaves (lists as JSON), for MLflow params."""
    if not isinstance(config, dict):
        return {prefix.rstrip("."): json.dumps(config, default=str) if isinstance(config, list) else str(config)}
    out: dict[str, str] = {}
    for key, value in config.items():
        out.update(_flat(value, f"{prefix}{key}."))
    return out


class MlflowTracker(Tracker):
    name, module, install = "mlflow", "mlflow", "pip install mlflow-skinny"

    def __init__(self, run: TrackerRun) -> None:
        super().__init__(run)
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:  # the run folder's own file store, which MLflow 3 opens only when allowed
            uri = (run.run_dir / "mlruns").resolve().as_uri()
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient

        self.Metric = Metric
        self.client = MlflowClient(tracking_uri=uri)
        self.run_id = run.saved.get("run_id")
        if self.run_id:
            self.client.update_run(self.run_id, status="RUNNING")
            return
        found = self.client.get_experiment_by_name(run.project)
        experiment = found.experiment_id if found is not None else self.client.create_experiment(run.project)
        self.run_id = self.client.create_run(experiment, run_name=run.run_name).info.run_id
        # MLflow keeps at most 6,000 characters of a param and 250 of a name; config.json below has it all
        params = [Param(mlflow_name(k), v[:6000]) for k, v in _flat(run.config).items() if 0 < len(k) <= 250]
        for i in range(0, len(params), 100):  # MLflow takes 100 params per batch
            self.client.log_batch(self.run_id, params=params[i:i + 100])
        self.client.log_dict(self.run_id, run.config, "config.json")

    def saved(self) -> dict[str, Any]:
        return {"run_id": self.run_id}

    def log(self, step: int, values: dict[str, float]) -> None:
        now = int(time.time() * 1000)
        metrics = [self.Metric(mlflow_name(k), v, now, step) for k, v in values.items()]
        for i in range(0, len(metrics), 1000):  # MLflow takes 1000 metrics per batch
            self.client.log_batch(self.run_id, metrics=metrics[i:i + 1000])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class TrackioTracker(Tracker):
    name, module, install = "trackio", "trackio", "pip install trackio"

    def __init__(self, run: TrackerRun) -> None:
        super().__init__(run)
        import trackio

        name = str(run.saved.get("name") or run.run_name)
        self.trackio = trackio.init(project=run.project, name=name, config=run.config,
                                    resume="allow" if run.saved.get("name") else "never",
                                    auto_log_cpu=False, auto_log_gpu=False, embed=False)
        if run.saved.get("id") and self.trackio.id != run.saved["id"]:
            print(f"[trackio] note: run {name!r} of project {run.project!r} resumed as the latest run of that name "
                  f"({self.trackio.id}), not {run.saved['id']}", flush=True)

    def saved(self) -> dict[str, Any]:
        return {"id": self.trackio.id, "name": self.trackio.name}

    def log(self, step: int, values: dict[str, float]) -> None:
        self.trackio.log(values, step=step)

    def close(self) -> None:
        import trackio

        current = getattr(getattr(trackio, "context_vars", None), "current_run", None)
        if current is not None and current.get() is self.trackio:
            trackio.finish()  # also forgets the run, which trackio would otherwise finish again at exit
        else:
            self.trackio.finish()


TRACKERS: dict[str, type[Tracker]] = {t.name: t for t in (TensorBoardTracker, WandbTracker, MlflowTracker,
                                                           TrackioTracker)}


def tracker_names(cfg: Any) -> list[str]:
    """The trackers a run opens: ``logging.trackers``, plus ``wandb`` when ``AGENTR1_WANDB_PROJECT`` is set."""
    from omegaconf import OmegaConf

    names = [str(n) for n in (OmegaConf.select(cfg, "logging.trackers", default=None) or [])]
    if os.environ.get("AGENTR1_WANDB_PROJECT") and "wandb" not in names:
        names.append("wandb")
    return names


def logging_settings(cfg: Any) -> dict[str, Any]:
    """``trackers``, ``project`` and ``run_name`` (the run folder's name when unset) for ``MetricsLogger``."""
    from omegaconf import OmegaConf

    run_name = OmegaConf.select(cfg, "logging.run_name", default=None)
    return {"trackers": tracker_names(cfg), "project": str(OmegaConf.select(cfg, "logging.project",
                                                                            default="agentr1")),
            "run_name": str(run_name) if run_name else Path(str(cfg.run_dir)).resolve().name}


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (found without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: a module set to None in sys.modules, which blocks its import
        return False


def tracker_problems(cfg: Any) -> list[str]:
    """One line per problem of ``logging``: an unknown tracker (with the nearest valid name and all of them), one
    listed twice, one whose package is not installed (with the pip install that brings it), an empty project."""
    from omegaconf import OmegaConf

    found: list[str] = []
    valid = ", ".join(TRACKERS)
    names = [str(n) for n in (OmegaConf.select(cfg, "logging.trackers", default=None) or [])]
    for i, name in enumerate(names):
        key = f"logging.trackers[{i}]"
        tracker = TRACKERS.get(name)
        if tracker is None:
            found.append(f"config error at {key}: unknown tracker {name!r}{suggest(name, TRACKERS)}; valid: {valid}")
        elif name in names[:i]:
            found.append(f"config error at {key}: {name!r} is listed twice")
        elif not installed(tracker.module):
            found.append(f"config error at {key}: tracker {name!r} needs the {tracker.module} package, which is not "
                         f"installed; run: {tracker.install}")
    if os.environ.get("AGENTR1_WANDB_PROJECT") and "wandb" not in names and not installed("wandb"):
        found.append(f"config error at AGENTR1_WANDB_PROJECT: W&B logging needs the wandb package, which is not "
                     f"installed; run: {WandbTracker.install}")
    if not str(OmegaConf.select(cfg, "logging.project", default="agentr1") or "").strip():
        found.append("config error at logging.project: is empty; give the project (experiment) name the trackers "
                     "file the run under")
    return found


def read_state(run_dir: str | os.PathLike) -> dict[str, Any]:
    """``trackers.json`` of ``run_dir`` ({} when absent or unreadable)."""
    try:
        state = json.loads((Path(run_dir) / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


class Trackers:
    """The trackers a run opened, in ``logging.trackers`` order. A resumed run (``purge_step`` given) reopens each
    with what it saved, and every tracker that does not purge by itself gets only the metrics at steps after the
    last step the earlier processes logged under that name."""

    def __init__(self, names: list[str], run_dir: str | os.PathLike, project: str, run_name: str,
                 config: dict[str, Any] | None = None, purge_step: int | None = None) -> None:
        self.run_dir = Path(run_dir)
        resumed = purge_step is not None
        state = read_state(self.run_dir) if resumed else {}
        self.open: list[Tracker] = []
        self.before: dict[str, dict[str, int]] = {}  # tracker -> metric -> last step an earlier process logged
        self.logged: dict[str, dict[str, int]] = {}
        try:
            for name in names:
                saved = state.get(name) if isinstance(state.get(name), dict) else {}
                tracker = TRACKERS[name](TrackerRun(self.run_dir, project, run_name, dict(config or {}), resumed,
                                                    purge_step, saved))
                self.open.append(tracker)
                steps = saved.get("logged") if isinstance(saved.get("logged"), dict) else {}
                self.logged[name] = dict(steps)
                self.before[name] = {} if tracker.purges else dict(steps)
        except BaseException:
            self.close()
            raise
        self.save()

    def log(self, step: int, values: dict[str, float]) -> None:
        for tracker in self.open:
            before, logged = self.before[tracker.name], self.logged[tracker.name]
            fresh = {k: v for k, v in values.items() if before.get(k, -math.inf) < step}
            if fresh:
                tracker.log(step, fresh)
                logged.update({k: max(step, logged.get(k, step)) for k in fresh})
        self.save()

    def save(self) -> None:
        if all(t.purges for t in self.open):  # TensorBoard alone (or nothing) needs no state
            return
        state = {t.name: {**t.saved(), "logged": self.logged[t.name]} for t in self.open}
        path = self.run_dir / STATE_FILE
        tmp = path.with_name(f".{STATE_FILE}.part")
        tmp.write_text(json.dumps(state), encoding="utf-8")
        tmp.replace(path)

    def close(self) -> None:
        while self.open:
            self.open.pop().close()
