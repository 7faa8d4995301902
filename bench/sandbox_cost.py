"""What one command costs in each host sandbox (``local``, ``bwrap``): milliseconds per ``run()`` of ``true`` and of
``python3 -c pass`` (median and p90 over ``--runs`` runs, after a few warm-up runs), against a plain
``subprocess.run`` of the same command as the floor (all with the system's PATH, so the same ``python3``). One
sandbox per kind, started once: the numbers are the cost per command, not per episode. A table and
``<results>/sandbox_cost.json``, with the machine (CPU model, vector extensions, cores) and the isolation line each
sandbox's ``check()`` gives.

It times nothing else (no start/close, no concurrency) and asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_avg, machine_info, parse_args, print_table, write_result  # noqa: E402

from agentr1_env_terminal.sandboxes.process import DEFAULT_PATH  # noqa: E402

COMMANDS = {"true": "true", "python3 -c pass": "python3 -c pass"}
WARMUP = 3
ENV = {"PATH": DEFAULT_PATH}  # the same python3 for all (a sandbox's uid may not reach the caller's PATH entries)


def summary(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {"median_ms": round(statistics.median(ordered), 2),
            "p90_ms": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 2), "runs": len(ordered)}


def time_calls(call, runs: int) -> dict[str, float]:
    for _ in range(WARMUP):
        call()
    ms = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        ms.append((time.perf_counter() - start) * 1000)
    return summary(ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="timed runs per sandbox and command")
    args = parse_args(parser, smoke={"runs": 5})
    from agentr1_env_terminal.sandboxes.bwrap import BwrapSandbox
    from agentr1_env_terminal.sandboxes.local import LocalSandbox

    machine = machine_info()
    results: dict = {"plain subprocess": {}, "isolation": {}}
    rows = []
    for label, command in COMMANDS.items():
        stats = time_calls(lambda: subprocess.run(["bash", "-c", command], env=ENV, check=True), args.runs)
        results["plain subprocess"][label] = stats
        rows.append(["plain subprocess", label, stats["median_ms"], stats["p90_ms"]])
    for cls in (LocalSandbox, BwrapSandbox):
        availability = cls.check()
        results["isolation"][cls.name] = availability.isolation
        if not availability.ok:
            results[cls.name] = {"skipped": availability.isolation}
            rows.append([cls.name, "-", None, None])
            continue
        box = cls()
        box.start()
        try:
            results[cls.name] = {}
            for label, command in COMMANDS.items():
                def call(command=command):
                    result = box.run(command, env=ENV)
                    if result.exit_code != 0:
                        raise SystemExit(f"{cls.name}: {command!r} failed: {result.describe()}")
                stats = time_calls(call, args.runs)
                results[cls.name][label] = stats
                rows.append([cls.name, label, stats["median_ms"], stats["p90_ms"]])
        finally:
            box.close()
    print(f"{machine['cpu_model']} ({machine['cpu_isa']}, {machine['nproc']} cores), load {load_avg()}, "
          f"{args.runs} runs each")
    print_table(["sandbox", "command", "median ms", "p90 ms"], rows)
    for name, line in results["isolation"].items():
        print(f"{name}: {line}")
    path = write_result("sandbox_cost", {"machine": machine, "load_avg": load_avg(), "runs": args.runs,
                                         "results": results})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
