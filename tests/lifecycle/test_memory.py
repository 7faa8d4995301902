"""The memory account: per-phase peaks from the kernel's high-water mark, tensors counted once, the account's sums."""

from __future__ import annotations

import sys

import pytest
import torch

from agentr1_core.lifecycle import memory
from agentr1_core.lifecycle.memory import PhasePeaks, account, account_line, module_mb, optimizer_mb, tensor_mb

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="phase peaks read /proc/self")


@linux
def test_each_phase_reports_its_own_peak_and_the_overall_peak_survives_the_resets():
    peaks = PhasePeaks()
    with peaks.phase("big"):
        block = bytearray(300 * 2 ** 20)  # touched: resident
        block[:: 4096] = b"x" * len(block[:: 4096])
        del block
    with peaks.phase("small"):
        small = bytearray(2 ** 20)
        del small
    assert peaks.last["big"] - peaks.last["small"] > 250  # the reset forgot the first phase's peak
    assert memory.overall_peak_mb() >= peaks.last["big"]  # the process peak did not
    from agentr1_core.trainers.metrics import peak_rss_mb

    assert peak_rss_mb() >= peaks.last["big"]
    with peaks.phase("big"):
        pass
    assert peaks.highest["big"] > peaks.last["big"]  # the highest of a phase is kept


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

    code = ("from agentr1_core.lifecycle.memory import set_mmap_threshold as s, trim; "
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
