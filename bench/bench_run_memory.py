"""Peak memory of whole runs: ``agentr1-core run NAME`` for each named config, one after the other, each in its own
process, with the run's own memory account (``summary.json``: each phase's peak by part) beside two outside
measurements: the training process's peak RSS and the peak of the summed RSS of its whole process tree (game
processes, tool servers, Ray workers), sampled every ``--every`` seconds from ``/proc``.

    python bench/bench_run_memory.py default                       # the embedded default run
    ALFWORLD_DATA=... WEBSHOP_DATA=... python bench/bench_run_memory.py hotpotqa-cpu alfworld-cpu webshop-cpu \\
        papersearch-cpu gsm8k-cpu --out run_memory_recipes
    python bench/bench_run_memory.py default --set trainer.micro_batch_tokens=1024 --label budget1024

Prints one table (peaks per phase, held-out results, wall and CPU time) and writes ``bench/results/<out>.json``
(merged with what an earlier call wrote under another label). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import load_avg, machine_info, parse_args, print_table, results_dir, write_result  # noqa: E402

MB = 1024  # /proc reports KiB


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_kib(root: int) -> tuple[int, int]:
    """(RSS of ``root``, summed RSS of ``root`` and all its descendants), KiB."""
    total, stack, own = 0, [root], _rss_kib(root)
    while stack:
        pid = stack.pop()
        total += _rss_kib(pid)
        stack.extend(_children(pid))
    return own, total


class TreeSampler(threading.Thread):
    def __init__(self, pid: int, every: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.own_peak = self.tree_peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            own, tree = tree_rss_kib(self.pid)
            self.own_peak, self.tree_peak = max(self.own_peak, own), max(self.tree_peak, tree)
            self.stop.wait(self.every)


def validation_line(summary: dict) -> dict:
    """Held-out success per validation label (``before_sft``, ``after_sft``, ``after_rl``) as solved/cases, with the
    mean reward (the recipe's score: F1, purchase reward, progress, recall)."""
    out = {}
    for label, v in (summary.get("validation") or {}).items():
        if isinstance(v, dict) and "success_rate" in v:
            out[label] = (f"{round(v['success_rate'] * v['cases'])}/{v['cases']} "
                          f"(reward {v.get('reward_mean', 0.0):.3f})")
    return out


def run_one(name: str, overrides: list[str], run_dir: Path, every: float) -> dict:
    cmd = [sys.executable, "-m", "agentr1_core.cli", "run", name, f"run_dir={run_dir}", *overrides, "--overwrite"]
    log = run_dir.with_suffix(".log")
    load = load_avg()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=os.environ.copy())
        sampler = TreeSampler(proc.pid, every)
        sampler.start()
        code = proc.wait()
        sampler.stop.set()
        sampler.join()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    memory = summary.get("memory", {})
    return {"config": name, "overrides": overrides, "exit_code": code, "wall_s": round(wall, 1),
            "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
            "load_before": load, "process_peak_mib": round(sampler.own_peak / MB, 1),
            "tree_peak_mib": round(sampler.tree_peak / MB, 1), "summary_peak_mib": summary.get("peak_rss_mb"),
            "phase_peaks_mib": {k: v.get("peak") for k, v in memory.items()}, "account": memory,
            "held_out": validation_line(summary), "log": str(log)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("configs", nargs="*", help="named configs or YAML paths (at least one)")
    ap.add_argument("--set", action="append", default=[], help="a config override for every run (repeatable)")
    ap.add_argument("--label", default="", help="names these runs in the result file (default: the overrides)")
    ap.add_argument("--out", default="run_memory")
    ap.add_argument("--runs", default="/tmp/agentr1-run-memory", help="where the run directories go")
    ap.add_argument("--every", type=float, default=0.5, help="seconds between RSS samples")
    tiny = ["sft.rows=2", "sft.batch_size=2", "validation.max_rows=2", "rollout.batch_size=1", "rollout.n=2",
            "rollout.max_new_tokens=8", "trainer.total_steps=1", "trainer.threads=1"]
    args = parse_args(ap, smoke={"configs": ["default"], "label": "smoke", "every": 0.2, "set": tiny})
    if not args.configs:
        ap.error("name at least one config")
    label = args.label or (" ".join(args.set) or "shipped")
    root = Path(args.runs)
    root.mkdir(parents=True, exist_ok=True)
    path = results_dir() / f"{args.out}.json"
    rows = []
    for name in args.configs:
        slug = f"{name}-{label}".replace(" ", "_").replace("=", "-").replace("/", "_")
        row = run_one(name, list(args.set), root / slug, args.every)
        # after every run, merged with what the file holds now: a long series keeps what finished, and two series
        # writing to one file keep each other's runs
        result = json.loads(path.read_text()) if path.exists() else {}
        result["machine"] = machine_info()
        result.setdefault("runs", {})[f"{name} [{label}]"] = row
        write_result(args.out, result)
        rows.append(row)
        print(f"[{name}] exit {row['exit_code']}, peak {row['process_peak_mib']:.0f} MiB "
              f"(tree {row['tree_peak_mib']:.0f}), {row['wall_s']:.0f} s", flush=True)
    phases = ("validation", "sft", "rollout", "update")
    print(print_table(["config", "label", *phases, "process peak", "tree peak", "held out", "wall s", "cpu s"],
                      [[r["config"], label, *[r["phase_peaks_mib"].get(p, "") for p in phases],
                        r["process_peak_mib"], r["tree_peak_mib"],
                        " -> ".join(r["held_out"].values()), r["wall_s"], r["cpu_s"]] for r in rows]))
    print(path)
    failed = [f"{r['config']} (exit {r['exit_code']}, log {r['log']})" for r in rows if r["exit_code"]]
    if failed:
        raise SystemExit(f"runs that failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
