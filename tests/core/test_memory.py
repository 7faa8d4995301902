"""The memory account: the run peak as outside tools see it, per-phase peaks, tensors counted once, the sums."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import torch

from agentr1_core import memory
from agentr1_core.memory import PhasePeaks, account, account_line, module_mb, optimizer_mb, tensor_mb

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="phase peaks read /proc/self")


def _touch(mb: int) -> bytearray:
    block = bytearray(mb * 2 ** 20)
    block[:: 4096] = b"x" * len(block[:: 4096])  # every page written: resident
    return block


@linux
def test_each_phase_reports_its_own_peak_and_the_run_peak_stays_the_processes():
    peaks = PhasePeaks()
    with peaks.phase("big"):
        block = _touch(300)
        del block
    with peaks.phase("small"):
        small = bytearray(2 ** 20)
        del small
    assert peaks.last["big"] - peaks.last["small"] > 250  # the second phase does not carry the first one's peak
    assert memory.overall_peak_mb() >= peaks.last["big"]  # the process peak keeps it
    from agentr1_core.trainers.metrics import peak_rss_mb

    assert peak_rss_mb() == memory.overall_peak_mb()
    with peaks.phase("big"):
        pass
    assert peaks.highest["big"] > peaks.last["big"]  # the highest of a phase is kept


@linux
def test_a_phase_below_the_process_peak_is_measured_by_sampling():
    """A phase that does not raise the high-water mark still reports what it held: 150 MiB held for 20 readings.
    In a fresh process: a test worker's resident memory moves with what earlier tests left running in it."""
    import json
    import subprocess

    code = """
import json, time
from agentr1_core import memory
from agentr1_core.memory import PhasePeaks

def touch(mb):
    block = bytearray(mb * 2 ** 20)
    block[:: 4096] = b"x" * len(block[:: 4096])  # every page written: resident
    return block

peaks = PhasePeaks()
with peaks.phase("high"):
    touch(400)  # the process peak: 400 MiB above what follows, freed at once
with peaks.phase("low"):
    start = memory.rss_mb()
    block = touch(150)
    time.sleep(20 * memory.SAMPLE_SECONDS)
    del block
print(json.dumps({"overall": memory.overall_peak_mb(), "start": start, **peaks.last}))
"""
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True).stdout)
    assert out["overall"] >= out["high"] > out["low"], out
    assert 140 < out["low"] - out["start"] < 200, out


# what /usr/bin/time -v prints as "Maximum resident set size" is the ru_maxrss that wait4 returns for its child
PHASES_THEN_REPORT = """
import json
from agentr1_core import memory
peaks = memory.PhasePeaks()
with peaks.phase("big"):
    block = bytearray(300 * 2 ** 20); block[::4096] = b"x" * len(block[::4096]); del block
with peaks.phase("small"):
    pass
print(json.dumps({"overall": memory.overall_peak_mb(), "big": peaks.last["big"], "small": peaks.last["small"]}))
"""
# GNU time's way: fork, exec, wait4. A process started by vfork (Python's subprocess) would carry this test
# process's own peak in its ru_maxrss; a small launcher that forks keeps the child's figure its own.
LAUNCH = """
import json, os, sys
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.dup2(w, 1)
    os.execv(sys.executable, [sys.executable, "-c", sys.argv[1]])
os.close(w)
out = os.read(r, 4096).decode()
_, status, usage = os.wait4(pid, 0)
print(json.dumps({"report": json.loads(out), "outside_mb": usage.ru_maxrss / 1024, "status": status}))
"""


@linux
def test_the_run_peak_is_what_time_v_reports_for_the_process():
    """The run's peak and the outside figure (``wait4``'s ``ru_maxrss`` of the child, which ``/usr/bin/time -v``
    prints) agree within 2 MiB, phases and all. Resetting the kernel's high-water mark per phase made the outside
    figure the last phase's peak instead (300 MiB lower here)."""
    import json
    import subprocess

    done = subprocess.run([sys.executable, "-S", "-c", LAUNCH, PHASES_THEN_REPORT], capture_output=True, text=True,
                          check=True)
    result = json.loads(done.stdout)
    report, outside_mb = result["report"], result["outside_mb"]
    assert result["status"] == 0
    assert abs(report["overall"] - outside_mb) < 2, result
    assert report["big"] - report["small"] > 250 and report["overall"] >= report["big"]


@linux
@pytest.mark.skipif(not Path("/usr/bin/time").exists(), reason="GNU time is not installed")
def test_the_run_peak_matches_usr_bin_time_v():
    import json
    import re
    import subprocess

    done = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-c", PHASES_THEN_REPORT], capture_output=True,
                          text=True, check=True)
    outside_mb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)[1]) / 1024
    report = json.loads(done.stdout)
    assert abs(report["overall"] - outside_mb) < 2 and report["big"] - report["small"] > 250, (report, outside_mb)


def test_tensors_are_counted_once_per_storage():
    a = torch.zeros(2 ** 18)  # 1 MiB
    assert tensor_mb([a, a.view(512, 512), a[:10]]) == pytest.approx(1.0)
    head = torch.nn.Linear(512, 512, bias=False)
    tied = torch.nn.Sequential(head, torch.nn.Linear(512, 512, bias=False))
    tied[1].weight = head.weight  # tied weights, as an LM head tied to its embeddings
    assert module_mb(tied) == pytest.approx(1.0)
    opt = torch.optim.AdamW(head.parameters())
    assert optimizer_mb(opt) == 0.0  # no state before the first step
    head(torch.ones(1, 512)).sum().backward()
    opt.step()
    assert optimizer_mb(opt) == pytest.approx(2.0, abs=0.01)  # two moments of 1 MiB


def test_the_account_leaves_the_rest_unexplained():
    acc = account({"weights": 500.0, "kv_peak": 100.0}, peak_mb=1200.0, baseline_mb=250.0)
    assert acc == {"weights": 500.0, "kv_peak": 100.0, "baseline": 250.0, "unexplained": 350.0, "peak": 1200.0}
    assert account_line("rollout", acc) == ("[memory rollout] peak 1200 MiB = baseline 250 + weights 500 + kv_peak 100 "
                                            "+ unexplained 350")


@linux
def test_the_mmap_threshold_and_the_trim_reach_glibc_in_a_fresh_process():
    """``trainer.mmap_threshold_kb`` reaches glibc's mallopt (0 leaves the allocator alone); ``trim`` runs."""
    import subprocess

    code = ("from agentr1_core.memory import set_mmap_threshold as s, trim; "
            "print(s(128), s(0), s(-1), trim())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[:3] == ["True", "False", "False"] and out[3] in ("True", "False")  # trim: False when nothing was free


@linux
def test_child_processes_count_their_peaks_and_their_own_children():
    """Game processes and tool servers run beside the trainer: their peaks are summed, grandchildren included, and
    the account shows them apart from the process's own peak."""
    import os
    import signal
    import subprocess

    hold = ("import sys, time; b = bytearray({mb} * 2 ** 20); b[::4096] = b'x' * len(b[::4096]); "
            "print('ready', flush=True); {then}")
    grandchild = hold.format(mb=80, then="time.sleep(60)")
    child = hold.format(mb=120, then=f"import subprocess; p = subprocess.Popen([sys.executable, '-c', {grandchild!r}], "
                                     "stdout=subprocess.PIPE); p.stdout.readline(); print('both', flush=True); "
                                     "time.sleep(60)")
    before = memory.child_processes_mb()
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready" and proc.stdout.readline().strip() == "both"
        measured = memory.child_processes_mb() - before
        assert 200 <= measured < 200 + 2 * 120  # 120 + 80 MiB touched, plus two interpreters
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the grandchild too
        proc.wait()
    acc = account({"weights": 500.0}, peak_mb=1000.0, baseline_mb=250.0)
    acc["child_processes"] = 830.0
    assert account_line("rollout", acc).endswith("+ unexplained 250; child processes 830 MiB besides")


# -- the account of a real backend ---------------------------------------------------------------------------------
@pytest.fixture
def tiny_trainer(tmp_path, tiny_model_dir):
    """The local trainer on the tiny model, set up (model built, nothing run)."""
    import textwrap

    from agentr1_core.config import load_config
    from agentr1_core.plugins import configure_registry
    from agentr1_core.trainers.local import LocalTrainer

    path = tmp_path / "run.yaml"
    path.write_text(textwrap.dedent(f"""\
        base: tiny
        run_dir: "{tmp_path / 'run'}"
        model: {{path: "{tiny_model_dir}"}}
        trainer: {{min_free_gb: 0.01, checkpoint_every: -1}}
        """))
    trainer = LocalTrainer(load_config(str(path), []), configure_registry())
    trainer.setup()
    yield trainer
    trainer.close()


def _one_update_phase(trainer) -> dict:
    with trainer.peaks.phase("update"):
        held = _touch(64)
    del held
    return trainer.memory_metrics(("update",))


def test_the_host_account_on_the_cpu_subtracts_the_tensors_it_holds(tiny_trainer):
    metrics = _one_update_phase(tiny_trainer)
    acc = tiny_trainer.memory_account()["update"]
    weights = module_mb(tiny_trainer.backend.policy.model)
    assert weights > 0 and acc["weights"] == pytest.approx(weights, abs=0.1)
    parts = sum(v for k, v in acc.items() if k not in ("peak", "baseline", "unexplained", "child_processes"))
    assert acc["unexplained"] == pytest.approx(acc["peak"] - acc["baseline"] - parts, abs=0.3)
    assert "device" not in acc and not any("device" in k for k in metrics)
    assert "device" not in account_line("update", acc)


def test_the_account_on_cuda_keeps_device_tensors_out_of_host_rss_cuda_mock(tiny_trainer, monkeypatch):
    """On CUDA the backend's tensors live on the device: the host's peak is baseline + unexplained, and the
    device's allocated and reserved peaks of the phase (reset at its start) sit beside it with those tensors.
    torch.cuda is mocked: no CUDA device here."""
    calls = []
    stats = {"allocated": 700 * memory.MB, "reserved": 1024 * memory.MB}
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: stats["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a: stats["reserved"])
    monkeypatch.setattr(tiny_trainer.backend, "device", "cuda")
    metrics = _one_update_phase(tiny_trainer)
    assert calls == ["reset"]  # once, as the phase began
    assert metrics["memory/update_device_allocated_peak_mb"] == 700.0
    assert metrics["memory/update_device_reserved_peak_mb"] == 1024.0
    stats.update(allocated=500 * memory.MB, reserved=900 * memory.MB)  # a later, lower occurrence: the highest is kept
    _one_update_phase(tiny_trainer)
    acc = tiny_trainer.memory_account()["update"]
    # nothing subtracted; peak, baseline and unexplained are each rounded to 0.1 MB, so they agree within 3 x 0.05
    assert acc["unexplained"] == pytest.approx(acc["peak"] - acc["baseline"], abs=0.16)
    assert "weights" not in acc and "optimizer" not in acc
    device = acc["device"]
    assert device["allocated_peak"] == 700.0 and device["reserved_peak"] == 1024.0
    assert device["tensors"]["weights"] == pytest.approx(module_mb(tiny_trainer.backend.policy.model), abs=0.1)
    assert all(v >= 0 for v in device["tensors"].values())
    line = account_line("update", acc)
    assert "device allocated peak 700 MiB, reserved peak 1024 MiB, holding weights" in line
    # the host line has no tensor parts: only what the process held before any model and the rest
    host = line.split(";")[0]
    assert f"baseline {acc['baseline']:.0f} + unexplained {acc['unexplained']:.0f}" in host and "weights" not in host

