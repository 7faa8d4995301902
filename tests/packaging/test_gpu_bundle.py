"""The offline bundle as a user makes and installs it, on a small CPU set: ``scripts/gpu_bundle.sh`` builds our core
wheel from this checkout, resolves it and python-dateutil against the package index for this Python (keeping what a
``--have`` file says the target has: torch, transformers, ...; leaving out what ``--exclude`` names), downloads the
rest and splits every file above 50 KiB into parts; ``scripts/gpu_install.sh`` checks, joins and installs it into a
new virtual environment with no index. A damaged or missing part is refused with exit 2 before anything is
installed. ``bench/gpu_check.sh`` (the GPU measurements) is checked as far as a CPU allows: its plan, its refusal
without a GPU, the smoke run's overrides against the config checker, and a bundle carried in batches.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentr1_core.testing.ci import missing

ROOT = Path(__file__).resolve().parents[2]
BUNDLE_SH = ROOT / "scripts" / "gpu_bundle.sh"
INSTALL_SH = ROOT / "scripts" / "gpu_install.sh"
CHECK_SH = ROOT / "bench" / "gpu_check.sh"
SMOKE_SH = ROOT / "bench" / "gpu_smoke.sh"
PART_BYTES = int(0.05 * 1048576)  # --split-mb 0.05
CORE_DEPS_ON_TARGET = ["torch", "transformers", "accelerate", "gguf", "numpy", "omegaconf", "tensorboard",
                       "matplotlib", "agentr1-model-smollm2"]  # pluggy is left to the bundle, tqdm is excluded


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "OUT"))}
    env.update(extra)
    return env


def _run(cmd: list, cwd: Path = ROOT, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env or _env(), capture_output=True, text=True,
                          timeout=timeout)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest(folder: Path) -> dict[str, tuple[int, str, int]]:
    rows = [line.split() for line in (folder / "MANIFEST").read_text().splitlines() if not line.startswith("#")]
    return {file: (int(size), sha, int(parts)) for file, size, sha, parts in rows}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """python-dateutil and our core wheel for this Python, with the core's heavy dependencies on the 'target'."""
    work = tmp_path_factory.mktemp("bundle")
    have = work / "target-freeze.txt"
    have.write_text("".join(f"{name}=={md.version(name)}\n" for name in CORE_DEPS_ON_TARGET))
    out = work / "bundle"
    made = _run(["bash", BUNDLE_SH, "--out", out, "--python", sys.executable,
                 "--python-version", "%d.%d" % sys.version_info[:2], "--only", "python-dateutil==2.9.0.post0",
                 "--ours", "core", "--have", have, "--exclude", "tqdm", "--split-mb", "0.05"], cwd=work)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    assert "left out (1, --have or --exclude): tqdm==" in made.stdout
    return out


@pytest.mark.slow
def test_the_bundle_holds_the_resolved_set_split_into_parts_with_checksums(bundle):
    rows = _manifest(bundle)
    names = {file.split("-")[0]: file.split("-")[1] for file in rows}
    # dateutil pulls six; the core pulls pluggy; torch & co. are on the target, tqdm is excluded
    assert names == {"agentr1_core": "0.1.0", "python_dateutil": "2.9.0.post0", "six": names["six"],
                     "pluggy": names["pluggy"]}
    assert sum(parts > 0 for _, _, parts in rows.values()) == 2  # the core wheel and dateutil exceed 50 KiB
    for file, (size, sha, parts) in rows.items():
        if size > PART_BYTES:
            assert parts == math.ceil(size / PART_BYTES) and not (bundle / file).exists()
            pieces = [bundle / f"{file}.part-{i:03d}" for i in range(parts)]
            assert all(p.stat().st_size == PART_BYTES for p in pieces[:-1])
            assert hashlib.sha256(b"".join(p.read_bytes() for p in pieces)).hexdigest() == sha
        else:
            assert parts == 0 and (bundle / file).stat().st_size == size and _sha256(bundle / file) == sha
    listed = dict(reversed(line.split()) for line in (bundle / "SHA256SUMS").read_text().splitlines())
    assert set(listed) == {p.name for p in bundle.iterdir()} - {"SHA256SUMS"}
    assert all(_sha256(bundle / name) == sha for name, sha in listed.items())
    assert _run(["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=bundle).returncode == 0


@pytest.mark.slow
def test_the_bundle_installs_into_a_new_environment_with_no_index(bundle, tmp_path):
    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", venv]).returncode == 0
    # an index that cannot answer: the install must not need one
    env = _env(PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_FIND_LINKS=str(tmp_path / "nothing"))
    done = _run(["bash", INSTALL_SH, bundle, "--venv", venv, "--no-deps"], cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\d+ files and 4 wheels checked", done.stdout)
    used = _run([venv / "bin" / "python", "-c", "import json, dateutil.parser, importlib.metadata as md, "
                 "importlib.resources as res, agentr1_core; print(json.dumps({"
                 "'date': dateutil.parser.parse('5 March 2024 10:30').isoformat(), "
                 "'core': agentr1_core.__version__, 'from': agentr1_core.__file__, "
                 "'plugins': [e.value for e in md.entry_points(group='agentr1')], "
                 "'config': res.files('agentr1_core').joinpath('configs/default.yaml').is_file(), "
                 "'dists': sorted(d.metadata['Name'].lower() for d in md.distributions())}))"], cwd=tmp_path)
    assert used.returncode == 0, used.stderr
    got = json.loads(used.stdout)
    assert got["date"] == "2024-03-05T10:30:00" and got["core"] == "0.1.0" and got["config"] is True
    assert got["plugins"] == ["agentr1_core.builtin.plugin"] and str(ROOT) not in got["from"]
    assert {"agentr1-core", "python-dateutil", "six", "pluggy"} <= set(got["dists"])
    assert not {"torch", "tqdm", "transformers"} & set(got["dists"])


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["flipped byte", "missing part", "parts and checksums both replaced"])
def test_a_damaged_bundle_is_refused_with_exit_2_and_nothing_installed(bundle, tmp_path, damage):
    copy = tmp_path / "bundle"
    shutil.copytree(bundle, copy)
    part = copy / "python_dateutil-2.9.0.post0-py2.py3-none-any.whl.part-002"
    if damage == "flipped byte":
        data = bytearray(part.read_bytes())
        data[100] ^= 0xFF
        part.write_bytes(bytes(data))
        expected = f"checksum mismatch: {part.name}"
    elif damage == "missing part":
        part.unlink()
        expected = f"missing: {part.name}"
    else:  # a part swapped for another file whose checksum line was updated too: the joined wheel is caught
        part.write_bytes(b"x" * PART_BYTES)
        sums = copy / "SHA256SUMS"
        sums.write_text(re.sub(rf"^\w+(  {re.escape(part.name)})$", hashlib.sha256(b"x" * PART_BYTES).hexdigest()
                               + r"\1", sums.read_text(), flags=re.M))
        expected = "checksum mismatch: python_dateutil-2.9.0.post0-py2.py3-none-any.whl (joined from 5 parts)"
    target = tmp_path / "site"
    refused = _run(["bash", INSTALL_SH, copy, "--target", target], cwd=tmp_path)
    assert refused.returncode == 2 and expected in refused.stderr, refused.stderr
    assert not target.exists()


@pytest.mark.slow
def test_a_bundle_carried_in_batches_arrives_whole(bundle, tmp_path):
    staged = _run(["bash", CHECK_SH, "--stage", bundle, "--batch-mb", "0.12", "--carry-dir", "carry"], cwd=tmp_path)
    assert staged.returncode == 0, staged.stderr
    batches = sorted((tmp_path / "carry").iterdir())
    assert len(batches) >= 3 and f"{len(batches)} batch(es) of at most 0.12 MiB" in staged.stdout
    assert {"SHA256SUMS", "MANIFEST"} <= {p.name for p in batches[0].iterdir()}
    assert all(sum(f.stat().st_size for f in b.iterdir()) <= 0.12 * 1048576 for b in batches)
    total = len((bundle / "SHA256SUMS").read_text().splitlines())  # every file but SHA256SUMS itself
    for i, batch in enumerate(batches):
        got = _run(["bash", CHECK_SH, "--receive", batch, "--bundle", tmp_path / "received"], cwd=tmp_path)
        assert got.returncode == 0, got.stderr
        held = int(re.search(r"holds (\d+) of (\d+) files", got.stdout)[1])
        assert (held == total) == (i == len(batches) - 1)
        assert not any(batch.iterdir())  # moved out of the checkout's copy
    checked = _run(["bash", INSTALL_SH, tmp_path / "received", "--check-only"], cwd=tmp_path)
    assert checked.returncode == 0 and "4 wheels checked" in checked.stdout, checked.stderr


def test_the_scripts_parse_and_pass_shellcheck():
    scripts = [BUNDLE_SH, INSTALL_SH, CHECK_SH, SMOKE_SH, ROOT / "bench" / "gpu_local.sh", ROOT / ".ci" / "run"]
    for script in scripts:
        parsed = _run(["bash", "-n", script])
        assert parsed.returncode == 0, f"{script.name}: {parsed.stderr}"
    if shutil.which("shellcheck") is None:
        missing("shellcheck is not installed (apt-get install shellcheck); bash -n passed")
    checked = _run(["shellcheck", *scripts])
    assert checked.returncode == 0, checked.stdout


@pytest.mark.parametrize("cmd, message", [
    ([BUNDLE_SH, "--split-mb", "abc"], "gpu_bundle: --split-mb must be a positive number of MiB, got 'abc'"),
    ([BUNDLE_SH, "--python-version", "12"], "gpu_bundle: --python-version must look like 3.12, got '12'"),
    ([BUNDLE_SH, "--ours", "nothing-here"], "gpu_bundle: --ours: no distribution 'nothing-here'"),
    ([INSTALL_SH], "gpu_install: no FOLDER given (see --help)"),
    ([INSTALL_SH, "/nonexistent/bundle"], "gpu_install: no such folder: /nonexistent/bundle"),
    ([INSTALL_SH, ROOT / "scripts"], "has no SHA256SUMS: not a folder written by scripts/gpu_bundle.sh"),
    ([CHECK_SH, "--parts", "a,x"], "gpu_check: --parts takes a comma list of a, b, c; got 'a,x'"),
    ([SMOKE_SH, "--fast"], "gpu_smoke: unknown argument '--fast'"),
])
def test_bad_arguments_are_one_line_and_exit_2(cmd, message):
    out = _run(["bash", *cmd])
    assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_help_describes_each_script():
    for script, words in [(BUNDLE_SH, "--split-mb"), (INSTALL_SH, "--target DIR"), (CHECK_SH, "--receive DIR"),
                          (SMOKE_SH, "--dry-run")]:
        out = _run(["bash", script, "--help"])
        assert out.returncode == 0 and words in out.stdout and "set -euo" not in out.stdout, script.name


def test_gpu_check_dry_run_prints_the_whole_plan(tmp_path):
    out = _run(["bash", CHECK_SH, "--dry-run", "--out", tmp_path / "results"], env=_env(PYTHON=sys.executable))
    assert out.returncode == 0, out.stderr
    plan = out.stdout
    for seed in (0, 1, 2):
        assert f"a seed {seed}  agentr1-core run default model.device=cuda seed={seed} " in plan
    assert plan.count("(limit 150 s)") == 3 and "(limit 420 s)" in plan and "(limit 300 s)" in plan
    assert "agentr1-core run hotpotqa-gpu " in plan and "trainer.total_steps=3" in plan
    assert "bench_gpu_rollout.py --concurrency 64,256 --max-new-tokens 128" in plan
    assert not (tmp_path / "results").exists()  # a dry run writes nothing
    if shutil.which("nvidia-smi") is None:
        assert "this machine lacks, for a real run:" in plan and "nvidia-smi" in plan


def test_gpu_check_refuses_to_run_without_a_gpu(tmp_path):
    if shutil.which("nvidia-smi") is not None:
        pytest.skip("this machine has an NVIDIA driver: the refusal is for machines without one")
    out = _run(["bash", CHECK_SH, "--parts", "a", "--out", tmp_path / "results"], env=_env(PYTHON=sys.executable))
    assert out.returncode == 2 and "gpu_check: cannot run here: no nvidia-smi" in out.stderr, out.stderr
    assert not (tmp_path / "results").exists()


def test_the_smoke_runs_overrides_pass_the_config_checker(tmp_path):
    """Every override bench/gpu_smoke.sh gives hotpotqa-gpu is a known key with a valid value (checked here, on a CPU,
    rather than on the GPU's clock)."""
    printed = _run(["bash", SMOKE_SH, "--dry-run"], env=_env(RUN_DIR=str(tmp_path / "smoke"), ITERATIONS="3"))
    assert printed.returncode == 0, printed.stderr
    args = printed.stdout.split()[1:]
    assert args[:2] == ["run", "hotpotqa-gpu"]
    overrides = [a.replace("$MODEL", "smollm2-135m-instruct") for a in args[2:]]
    shown = _run([sys.executable, "-c", "from agentr1_core.cli import entry; entry()", "config", "show",
                  "hotpotqa-gpu", *overrides], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    import yaml

    cfg = yaml.safe_load(shown.stdout)
    assert (cfg["trainer"]["name"], cfg["engine"]["name"], cfg["trainer"]["total_steps"]) == ("verl", "vllm", 3)
    assert cfg["model"]["path"] == "smollm2-135m-instruct" and cfg["engine"]["max_model_len"] == 2048
    assert cfg["rollout"]["max_prompt_tokens"] < cfg["engine"]["max_model_len"]
    assert cfg["run_dir"] == str(tmp_path / "smoke")


def test_gpu_check_skips_a_part_that_its_budget_cannot_hold(tmp_path):
    """A part whose minimum (60 s a seed) no longer fits the call's budget is skipped and said so; nothing runs."""
    env = _env(PYTHON=sys.executable, GPU_CHECK_DEVICE="cpu", GPU_CHECK_RUNS=str(tmp_path / "runs"))
    out = _run(["bash", CHECK_SH, "--parts", "a", "--seeds", "0,1", "--budget", "80", "--out", tmp_path / "results"],
               env=env)
    assert out.returncode == 0, out.stderr
    summary = (tmp_path / "results" / "gpu_check.txt").read_text()
    assert "a seed 0: skipped (budget)" in summary and "a seed 1: skipped (budget)" in summary
    assert not (tmp_path / "runs" / "a-seed0").exists()
    assert json.loads((tmp_path / "results" / "part_a.json").read_text()) == {
        "0": {"held_out": {}, "logprob_gap_max": [], "k3_kl_max": None, "ess_min": None, "iterations": 0},
        "1": {"held_out": {}, "logprob_gap_max": [], "k3_kl_max": None, "ess_min": None, "iterations": 0}}


@pytest.mark.slow
def test_gpu_check_part_a_rehearsed_on_the_cpu_writes_its_results(tmp_path):
    """Part a's flow on the CPU with the tiny config: the run, its summary row, part_a.json and the log archive."""
    import tarfile

    env = _env(PYTHON=sys.executable, GPU_CHECK_DEVICE="cpu", GPU_CHECK_CONFIG="tiny",
               GPU_CHECK_RUNS=str(tmp_path / "runs"), GPU_CHECK_SEED_S="900")
    out = _run(["bash", CHECK_SH, "--parts", "a", "--seeds", "3", "--budget", "1000", "--out", tmp_path / "results"],
               env=env, timeout=1100)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    results = tmp_path / "results"
    summary = (results / "gpu_check.txt").read_text()
    assert re.search(r"^a seed 3: exit 0 in \d+ s \(limit \d+ s\), GPU memory peak n/a MiB$", summary, re.M), summary
    assert "versions: torch " in summary and "agentr1_core 0.1.0" in summary
    got = json.loads((results / "part_a.json").read_text())["3"]
    metrics = [json.loads(line) for line in (tmp_path / "runs" / "a-seed3" / "metrics.jsonl").read_text().splitlines()]
    its = [r for r in metrics if "iteration" in r and "event" not in r]
    assert got["iterations"] == len(its) == 1 and got["logprob_gap_max"] == [its[0]["logprob_gap_max"]]
    assert set(got["held_out"]) == {"before_sft", "after_sft", "after_rl"}
    assert re.search(r"^\s+3 +\d+ +\d+ +\d+  \d\.\de[-+]\d\d / ", summary, re.M), summary
    with tarfile.open(results / "logs.tar.gz") as archive:
        names = set(archive.getnames())
    assert {"./a-seed3.log", "./a-seed3/metrics.jsonl", "./a-seed3/config.yaml"} <= names
    assert (results / "freeze.txt").read_text().strip()
