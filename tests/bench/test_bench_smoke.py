"""Every benchmark script runs: ``python bench/<script>.py --smoke`` in its own process, at the sizes its smoke mode
sets (seconds, the same code path), so that a change that breaks a benchmark fails here and not months later in
front of a user.

The scripts are found by glob (every ``bench/*.py`` with a ``__main__`` block), so a new benchmark is covered as
soon as it exists. Each run must exit 0, write its results to the folder this test gives it
(``AGENTR1_BENCH_RESULTS``), mark every JSON result ``"smoke": true``, report no method as skipped, and leave
``bench/results/`` untouched. The peer benchmarks run TRL's side in this environment (``scripts/setup.sh`` installs
the ``bench`` extra, TRL). The vLLM weight sync runs with ``.venv-vllm``'s Python, the verl one with ``.venv-verl``'s, and the rollout
benchmarks start their vLLM children there; without that environment these tests skip, except in CI
(``AGENTR1_CI=1``), where a missing environment is a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentr1_core.testing.ci import missing

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
RESULTS = BENCH / "results"
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if 'if __name__ == "__main__":' in p.read_text())
RUNS_IN = {"bench_vllm_weight_sync.py": ".venv-vllm", "bench_verl_weight_sync.py": ".venv-verl"}
STARTS_CHILDREN_IN = {"bench_peer_rollout.py": ".venv-vllm", "bench_recipe_rollout.py": ".venv-vllm"}
STARTS_RAY = {"bench_distributed.py", "bench_verl_weight_sync.py"}  # one at a time with other Ray tests (ray_lock)
SLOW = {  # over about 15 CPU-seconds each on the 2-core development machine (vLLM, verl and Ray start-ups, whole
    # runs, several processes, training passes)
    "bench_algorithms.py", "bench_alfworld.py", "bench_async.py", "bench_distributed.py", "bench_head.py",
    "bench_memory.py", "bench_peer_iteration.py", "bench_peer_rollout.py", "bench_peer_scaling.py",
    "bench_peer_update.py", "bench_recipe_rollout.py", "bench_response_forward.py", "bench_rollout.py",
    "bench_run_memory.py", "bench_verl_weight_sync.py", "bench_vllm_weight_sync.py",
}


def environment_python(venv: str) -> Path:
    python = REPO / venv / "bin" / "python"
    if not python.is_file():
        missing(f"{python} is missing (scripts/setup_{venv.removeprefix('.venv-')}.sh creates it)")
    return python


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


def skipped_entries(value, where: str = "") -> list[str]:
    """Where a result says that something was skipped (``{"skipped": reason}``)."""
    if isinstance(value, dict):
        found = [f"{where or '.'}: {value['skipped']}"] if "skipped" in value else []
        return found + [x for k, v in value.items() for x in skipped_entries(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [x for i, v in enumerate(value) for x in skipped_entries(v, f"{where}[{i}]")]
    return []


def test_the_glob_finds_the_benchmarks_and_leaves_out_the_shared_modules():
    assert {"bench_peer_iteration.py", "bench_peer_rollout.py", "bench_run_memory.py", "plot_peer.py"} <= set(SCRIPTS)
    assert not {"common.py", "latency_tools.py"} & set(SCRIPTS)
    assert SLOW | STARTS_RAY <= set(SCRIPTS), (SLOW | STARTS_RAY) - set(SCRIPTS)  # a renamed script keeps its marks


def test_skipped_entries_are_found_at_any_depth():
    result = {"results": {"engine": {"seconds": 1.0}, "vllm": {"skipped": "no venv"}}, "rows": [{"skipped": "x"}]}
    assert skipped_entries(result) == [".results.vllm: no venv", ".rows[0]: x"]
    assert skipped_entries({"results": {"engine": {"seconds": 1.0}}}) == []


@pytest.mark.parametrize("script", [pytest.param(s, marks=[pytest.mark.slow] if s in SLOW else []) for s in SCRIPTS])
def test_benchmark_runs_at_smoke_size(script, tmp_path, ray_lock):
    python = environment_python(RUNS_IN[script]) if script in RUNS_IN else Path(sys.executable)
    if script in STARTS_CHILDREN_IN:
        environment_python(STARTS_CHILDREN_IN[script])
    out = tmp_path / "results"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "AGENTR1_BENCH_SMOKE")}
    env.update(AGENTR1_BENCH_RESULTS=str(out), PYTHONUNBUFFERED="1")
    before = snapshot(RESULTS)
    with ray_lock() if script in STARTS_RAY else contextlib.nullcontext():
        proc = subprocess.run([str(python), str(BENCH / script), "--smoke"], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=900)
    log = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
    assert proc.returncode == 0, f"{script} --smoke exited {proc.returncode}:\n{log}"
    written = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    assert written, f"{script} --smoke wrote nothing to {out}:\n{log}"
    for path in out.glob("*.json"):
        result = json.loads(path.read_text())
        assert result.get("smoke") is True, f"{path.name} does not say it is a smoke result"
        assert not skipped_entries(result), f"{path.name}: {skipped_entries(result)}"
    assert snapshot(RESULTS) == before, "a smoke run changed bench/results/"
