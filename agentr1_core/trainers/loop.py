"""The one training loop, shared by every backend (``local``, ``ray``, ``verl``).

``TrainingLoop(config, registry, backend).fit()`` reads top-down:

1. check the run directory, seed, build the datasets (once) and the algorithm;
2. ``backend.build``; resume from the newest checkpoint when ``trainer.resume=auto``;
3. validate (``before_sft`` / ``before_rl``) -> SFT on expert episodes -> validate (``after_sft``; a warm start that
   did not take is said out loud: ``lifecycle.warm_start``) -> RL iterations
   (rollout -> step rows -> ``backend.rl_update`` -> ``backend.publish_weights``), validating every
   ``validation.every`` iterations -> validate (``after_rl``);
4. a checkpoint every ``trainer.checkpoint_every`` iterations and at the end (0: only at the end, < 0: never); the
   final one is written before the last validation, after which a backend may free its optimizer's state
   (``release_optimizer_state``);
5. ``summary.json`` (with the memory account: each phase's peak resident set by part; the wall time of every
   process of the run, resumes included) and the ``[done]`` line.

After every rollout, episodes that failed are reported and a rollout whose every episode hit an env error stops the
run (``lifecycle.episode_errors``). Callbacks get ``on_iteration_end(loop, metrics)`` after each RL iteration and,
when they define them, ``on_backend_ready(loop)`` after the backend is built and ``on_stage_end(loop, stage)`` after
SFT; ``GracefulStop`` uses them to stop with a checkpoint.
The loop knows nothing about models, engines or workers: that is the backend's (``trainers.backend``).
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from agentr1_core.config import ConfigError, component
from agentr1_core.lifecycle import warm_start
from agentr1_core.lifecycle.checkpoint import check_run_dir
from agentr1_core.lifecycle.episode_errors import check_expert_steps, report_episode_errors
from agentr1_core.lifecycle.metrics import MetricsLogger, truncate_metrics, write_episodes, write_train_episodes
from agentr1_core.memory import (
    PhasePeaks, account, account_line, child_processes_mb, device_account, rss_mb, trim,
)
from agentr1_core.rollout.base import SamplingParams
from agentr1_core.rollout.driver import split_greedy
from agentr1_core.trainers.backend import Backend, RunInputs
from agentr1_core.trainers.batching import trajectories_to_rows
from agentr1_core.trainers.console import console_line, console_notes, critic_fit_note
from agentr1_core.trainers.data_order import Curriculum, DataOrder, as_tuples
from agentr1_core.trainers.metrics import (
    episode_metric_means, expert_problems, peak_rss_mb, rollout_metrics, validation_metrics,
)
from agentr1_core.trainers.overlong import apply_overlong
from agentr1_core.trainers.pipeline import InlineRollouts, PipelinedRollouts, staleness_metrics, tag_versions
from agentr1_core.trainers.seeding import seed_everything
from agentr1_core.trainers.settings import LoopSettings


class TrainingLoop:
    """``rows``: the dataset rows the run's checks already read (``preflight.Checked.rows``, by config key), so
    that they are not read again; a key without rows is read here."""

    def __init__(self, config: Any, registry: Any, backend: Backend, callbacks: list[Any] | None = None,
                 rows: dict[str, list[dict[str, Any]]] | None = None) -> None:
        self.cfg = config
        self.settings = LoopSettings.from_config(config)  # what the loop reads from the config, typed once
        self.registry = registry
        self.backend = backend
        self.callbacks = list(callbacks or [])
        self.given_rows = dict(rows or {})
        self.run_dir = Path(str(config.run_dir))
        self.iteration = 0
        self.history: dict[str, Any] = {}
        self.last_checkpoint: tuple[int, Path] | None = None
        self.resumed_from: Path | None = None
        self.writer: Any = None
        self.last_metrics: dict[str, Any] = {}  # the last RL iteration's record (the end of the run looks back)
        self.peaks = PhasePeaks()
        # per phase: its highest peak (MiB) and the parts the backend measured right after that occurrence
        self.phase_accounts: dict[str, tuple[float, dict[str, float]]] = {}
        # the data order as of the last rollout trained, when rollouts run ahead of the update (else the live one)
        self.consumed_data_state: dict[str, Any] | None = None
        self.started = time.perf_counter()  # this process's share of the run's wall time starts here (``fit``)
        self.earlier_wall_seconds: list[float] = []  # the processes before a resume, each up to its checkpoint
        self._setup_done = False
        self.stages = list(self.settings.stages)
        self.sampling, self.val_sampling = self.settings.train_sampling, self.settings.val_sampling

    # -- setup ------------------------------------------------------------------------------------------------------
    def setup(self) -> None:
        if self._setup_done:
            return
        cfg, settings = self.cfg, self.settings
        check_run_dir(self.run_dir, settings.min_free_bytes)
        seed_everything(settings.seed)
        self.train_rows = self.dataset_rows("data.train")
        if not self.train_rows:
            raise ConfigError("config error at data.train: the dataset produced no rows")
        self.val_rows = self.dataset_rows("data.val") if OmegaConf.select(cfg, "data.val") else []
        if settings.validation_max_rows > 0:
            self.val_rows = self.val_rows[:settings.validation_max_rows]
        curriculum = (Curriculum(settings.curriculum_window, settings.curriculum_skip_solved,
                                 settings.curriculum_skip_failed) if settings.curriculum else None)
        self.data = DataOrder(self.train_rows, settings.seed, curriculum)
        name, params = component(cfg, "algorithm")
        self.algorithm = self.registry.build("algorithm", name, params, where="algorithm")
        # ReMax: each training rollout adds one greedy episode per row, its baseline (never trained on)
        self.greedy_baseline = bool(getattr(self.algorithm, "needs_greedy_baseline", False))
        trim()  # measured as each phase starts: after what was freed went back to the OS
        self.baseline_mb = rss_mb()  # before any model: interpreter, libraries, datasets
        self.backend_line = self.backend.build(RunInputs(config=cfg, registry=self.registry, run_dir=self.run_dir,
                                                         algorithm=self.algorithm, train_rows=self.train_rows,
                                                         val_rows=self.val_rows))
        self._call_back("on_backend_ready")  # e.g. signal handlers back from a library that replaced them
        self._setup_done = True
        offset = None
        if settings.resume:
            found = self.backend.load_latest_checkpoint(self.run_dir)
            if found is not None:
                self.resumed_from, state, offset = found
                self.load_state_dict(state)
                self.last_checkpoint = (self.iteration, self.resumed_from)
        self.writer = self.make_writer()
        if offset is not None:
            dropped = truncate_metrics(self.run_dir, int(offset))
            print(f"[resume] {self.resumed_from} (iteration {self.iteration}); dropped {dropped} metric records "
                  f"written after it", flush=True)

    def dataset_rows(self, key: str) -> list[dict[str, Any]]:
        """The rows of the dataset at ``key``: those handed over (once), else read now."""
        rows = self.given_rows.pop(key, None)
        if rows is not None:
            return list(rows)
        name, params = component(self.cfg, key)
        return list(self.registry.build("dataset", name, params, where=key))

    def make_writer(self) -> Any:
        from agentr1_core.lifecycle.trackers import logging_settings

        return MetricsLogger(self.run_dir, config=OmegaConf.to_container(self.cfg, resolve=True),
                             purge_step=self.iteration + 1 if self.resumed_from is not None else None,
                             **logging_settings(self.cfg))

    # -- state ------------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        data = self.consumed_data_state if self.consumed_data_state is not None else self.data.state_dict()
        return {"iteration": self.iteration, "history": json.loads(json.dumps(self.history, default=str)),
                "data": data, "python_rng": random.getstate(), "seed": self.settings.seed,
                "wall_seconds": self.wall_seconds_by_process()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iteration = int(state["iteration"])
        self.history = dict(state.get("history") or {})
        self.data.load_state_dict(state["data"])
        random.setstate(as_tuples(state["python_rng"]))
        self.earlier_wall_seconds = [float(s) for s in state.get("wall_seconds") or []]

    def wall_seconds_by_process(self) -> list[float]:
        """The run's wall time so far, one entry per process: those before a resume (each up to the checkpoint
        this one resumed from) and this one."""
        return [*self.earlier_wall_seconds, time.perf_counter() - self.started]

    def save_checkpoint(self) -> Path:
        """A checkpoint of the current iteration, unless one was just written for it."""
        if self.last_checkpoint is not None and self.last_checkpoint[0] == self.iteration:
            return self.last_checkpoint[1]
        t0 = time.perf_counter()
        path = self.backend.save_checkpoint(self.run_dir, self.iteration, self.state_dict(), self.writer.offset())
        self.last_checkpoint = (self.iteration, path)
        print(f"[checkpoint] {path} in {time.perf_counter() - t0:.1f}s", flush=True)
        return path

    def checkpoint_due(self) -> bool:
        every, total = self.settings.checkpoint_every, self.settings.total_steps
        return every >= 0 and (self.iteration >= total or (every > 0 and self.iteration % every == 0))

    # -- rollouts ---------------------------------------------------------------------------------------------------
    def rollout(self, rows: list[dict[str, Any]], n: int, sampling: SamplingParams, policy: str = "model",
                desc: str = "rollout", prefix: str = "", greedy_baseline: bool = False) -> tuple[list[Any], float]:
        t0 = time.perf_counter()
        extra = {"greedy_baseline": True} if greedy_baseline else {}  # only ReMax's backends need to know it
        trajs = self.backend.rollout(rows, n, sampling, policy=policy, desc=desc, prefix=prefix, **extra)
        return trajs, time.perf_counter() - t0

    def validate(self, label: str) -> dict[str, Any] | None:
        if not self.val_rows:
            return None
        with self.peaks.phase("validation"):
            trajs, seconds = self.rollout(self.val_rows, self.settings.validation_n, self.val_sampling,
                                          desc=f"validate ({label})", prefix=f"val-{label}-")
        tag_versions(trajs, self.iteration)  # validation samples the trainer's weights, after this many RL updates
        result = validation_metrics(trajs)
        result.update(label=label, seconds=seconds, iteration=self.iteration, peak_rss_mb=peak_rss_mb(),
                      **self.memory_metrics(("validation",)))
        report_episode_errors(self, trajs, f"validation {label}", result)
        self.history.setdefault("validation", {})[label] = result
        self.writer.write({"event": "validation", **result})
        write_episodes(self.run_dir / "episodes" / f"{label}.jsonl", trajs)
        by = ", ".join(f"{k} {v['success_rate']:.3f}" for k, v in result["by_source"].items())
        means = "".join(f" {k} {result[k]:.3f}" for k in episode_metric_means(trajs) if k != "num_steps")
        print(f"[validation {label}] success {result['success_rate']:.3f} reward {result['reward_mean']:.3f}{means} "
              f"on {result['cases']} cases ({by}) in {seconds:.0f}s", flush=True)
        return result

    # -- stages -----------------------------------------------------------------------------------------------------
    def run_sft(self) -> dict[str, Any]:
        rows = self.data.take(min(self.settings.sft_rows, len(self.train_rows)))
        trajs, seconds = self.rollout(rows, 1, self.sampling, policy="expert", desc="expert rollouts", prefix="sft-")
        expert = rollout_metrics(trajs, seconds)
        record: dict[str, Any] = {"event": "sft", "expert_episodes": len(trajs),
                                  "expert_success_rate": expert["success_rate"],
                                  "expert_reward_mean": expert["reward_mean"],
                                  "expert_terminations": expert["terminations"],
                                  "expert_tool_errors": expert["tool_errors"]}
        report_episode_errors(self, trajs, "sft expert rollouts", record)
        steps = trajectories_to_rows(trajs)
        check_expert_steps(trajs, len(steps.rows))
        with self.peaks.phase("sft"):
            record.update(sft_steps=len(steps.rows), **self.backend.sft_update(steps))
            record.update(self.backend.publish_weights())
        record.update(self.memory_metrics(("sft",)), peak_rss_mb=peak_rss_mb())
        self.writer.write(record)
        tok_s = f", {record['update_tok_s']:.0f} tok/s" if "update_tok_s" in record else ""
        print(f"[sft] {len(trajs)} expert episodes (success {expert['success_rate']:.2f}{expert_problems(expert)}), "
              f"{len(steps.rows)} steps, {record.get('optimizer_steps', '?')} updates, "
              f"nll {record.get('sft_nll', float('nan')):.3f}{tok_s}", flush=True)
        self.history["sft"] = record
        return record

    def rollout_source(self) -> Any:
        """Where RL rollouts come from: in turn, or ahead of the update (``trainer.max_staleness`` > 0)."""
        staleness = self.settings.max_staleness
        return PipelinedRollouts(self, staleness) if staleness > 0 else InlineRollouts(self)

    def train_iteration(self, source: Any = None) -> dict[str, Any]:
        settings = self.settings
        started = time.perf_counter()
        self.iteration += 1
        source = source if source is not None else InlineRollouts(self)
        batch = source.next(self.iteration)
        trajs = batch.trajectories
        sampled, _ = split_greedy(trajs)  # the greedy baseline episodes are not part of the training metrics
        metrics: dict[str, Any] = {"iteration": self.iteration, "data_epoch": batch.data_epoch,
                                   **rollout_metrics(sampled, batch.seconds)}
        report_episode_errors(self, trajs, f"iteration {self.iteration}", metrics)
        write_train_episodes(self.run_dir, self.iteration, trajs, settings.keep_train_episodes)
        metrics.update(batch.metrics)  # what the rollout's producer measured (a pipeline's counters and waits)
        if batch.train_trajectories is not None:  # dynamic sampling kept the informative groups only
            trajs = batch.train_trajectories
        if source.max_staleness > 0:
            trajs, ages = staleness_metrics(trajs, self.iteration - 1, source.max_staleness)
            metrics.update(ages)
            metrics["async/policy_version"] = batch.version
        metrics.update(apply_overlong(trajs, settings))  # episodes cut by a limit: masked or penalised
        steps = trajectories_to_rows(trajs)
        metrics.update(train_steps=len(steps.rows), nonfinite_logprob_steps=steps.nonfinite_logprob_steps)
        if steps.rows:
            with self.peaks.phase("update"):
                metrics.update(self.backend.rl_update(steps, trajs, self.iteration))
                metrics.update(source.after_update(self.iteration))
        metrics.update(source.stats())
        metrics.update(self.memory_metrics(("rollout", "update")))
        total, every = settings.total_steps, settings.validation_every
        if every > 0 and self.iteration % every == 0 and self.iteration < total:
            with source.paused():
                metrics["validation"] = self.validate(f"iter{self.iteration}")
        metrics["iteration_seconds"] = time.perf_counter() - started
        metrics["peak_rss_mb"] = peak_rss_mb()
        # iterations whose update was skipped because no row carried a gradient, over the whole run
        self.history["skipped_updates"] = int(self.history.get("skipped_updates", 0)) + int(
            bool(metrics.get("update_skipped")))
        self.writer.write(metrics)
        self.last_metrics = metrics
        print(console_line(metrics, total), flush=True)
        for note in console_notes(metrics):
            print(note, flush=True)
        if self.checkpoint_due():
            self.save_checkpoint()
        source.iteration_end(self.iteration)
        for callback in self.callbacks:
            callback.on_iteration_end(self, metrics)
        return metrics

    # -- memory -----------------------------------------------------------------------------------------------------
    def memory_metrics(self, phases: tuple[str, ...]) -> dict[str, float]:
        """``memory/<phase>_peak_mb`` of the phases just run and ``memory/<part>_mb`` of what the backend holds.
        Each phase keeps the parts measured after its highest peak, for the account."""
        parts = dict(self.backend.memory_parts())
        children = child_processes_mb()
        if children:
            parts["child_processes"] = children
        for phase in phases:
            peak = self.peaks.last.get(phase)
            if peak is not None and peak >= self.phase_accounts.get(phase, (-1.0, {}))[0]:
                self.phase_accounts[phase] = (peak, dict(parts))
        out = {f"memory/{p}_peak_mb": self.peaks.last[p] for p in phases if p in self.peaks.last}
        for phase in phases:  # on CUDA: the device's peaks of the phase
            for key, mb in self.peaks.device_last.get(phase, {}).items():
                out[f"memory/{phase}_device_{key}_mb"] = mb
        out.update({f"memory/{k}_mb": v for k, v in parts.items()})
        return out

    def parts_on_device(self) -> bool:
        """Whether the tensors the backend measures live on an accelerator (``model.device`` cuda): then they are
        no part of the host's resident set."""
        return not str(self.backend.device).startswith("cpu")

    def memory_account(self) -> dict[str, dict[str, Any]]:
        """Each phase's highest peak, laid out by the parts measured after it (``memory.account``). The
        engine's KV buffers and its prefix cache count in the generating phases only (the idle engine frees both
        once the model trains), gradients and activations in the training phases only. When they live on an
        accelerator the host's peak is laid out as baseline + unexplained, and ``device`` beside it holds the
        device's peaks of the phase and those tensors (``memory.device_account``)."""
        out = {}
        on_device = self.parts_on_device()
        engine_parts = ("kv_peak", "prefix_cache")
        training_parts = ("gradients", "activations")
        for phase, peak in self.peaks.highest.items():
            generating = phase in ("rollout", "validation")
            measured = self.phase_accounts.get(phase, (peak, {}))[1]
            parts = {k: v for k, v in measured.items()
                     if (k not in engine_parts or generating) and (k not in training_parts or not generating)}
            children = parts.pop("child_processes", 0.0)  # beside this process: not part of its peak
            out[phase] = account({} if on_device else parts, peak, self.baseline_mb)
            if children:
                out[phase]["child_processes"] = round(children, 1)
            device_peaks = self.peaks.device_highest.get(phase)
            if on_device or device_peaks:
                out[phase]["device"] = device_account(device_peaks, parts if on_device else {})
        return out

    def _call_back(self, name: str, *args: Any) -> None:
        """Call ``name(loop, *args)`` on every callback that defines it (``on_iteration_end`` is required)."""
        for callback in self.callbacks:
            hook = getattr(callback, name, None)
            if callable(hook):
                hook(self, *args)

    # -- run --------------------------------------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        try:
            return self._fit()
        finally:
            self.close()

    def _fit(self) -> dict[str, Any]:
        self.started = time.perf_counter()
        self.setup()
        stages = self.stages
        print(f"[setup] {self.backend_line}; {len(self.train_rows)} train rows, {len(self.val_rows)} validation rows; "
              f"stages {stages}", flush=True)
        if self.iteration == 0 and self.resumed_from is None and self.settings.validate_before:
            self.validate("before_sft" if "sft" in stages else "before_rl")
        if "sft" in stages and "sft" not in self.history:
            self.run_sft()
            hint = warm_start.advice(self.history.get("sft"), self.validate("after_sft"), self.cfg,
                                     len(self.train_rows))
            if hint:  # no held-out success and the demonstrations not learnt: say what to try, then go on
                print(hint, flush=True)
            self._call_back("on_stage_end", "sft")
        if "rl" in stages:
            self.backend.start_rl(after_sft="sft" in self.history)
            with self.rollout_source() as source:
                while self.iteration < self.settings.total_steps:
                    self.train_iteration(source)
        if self.settings.checkpoint_every >= 0:
            self.save_checkpoint()  # the final state (a no-op when the last iteration just wrote it)
        if "rl" in stages:
            self.backend.release_optimizer_state()  # trained and saved: the last validation does not need it
            self.validate("after_rl")
        by_process = self.wall_seconds_by_process()
        self.history.update(wall_seconds=sum(by_process), wall_seconds_by_process=by_process,
                            peak_rss_mb=peak_rss_mb(), iterations=self.iteration, seed=self.settings.seed,
                            memory=self.memory_account())
        for phase, acc in self.history["memory"].items():
            print(account_line(phase, acc), flush=True)
        lagging = critic_fit_note(self.last_metrics)
        if lagging:  # said under the last iteration already; the end of the run is where a user looks
            print(f"{lagging} (at the last iteration)", flush=True)
        summary = dict(self.history)
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str), encoding="utf-8")
        val = summary.get("validation", {})
        line = ", ".join(f"{k} {v['success_rate']:.3f}" for k, v in val.items())
        print(f"[done] {self.iteration} iterations in {summary['wall_seconds']:.0f}s, peak RSS "
              f"{summary['peak_rss_mb']:.0f} MiB; held-out success: {line}", flush=True)
        return summary

    def close(self) -> None:
        if self.writer is not None and hasattr(self.writer, "close"):
            self.writer.close()
        self.backend.close()
