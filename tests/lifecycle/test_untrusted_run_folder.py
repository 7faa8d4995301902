"""A run folder from someone else is data: a crafted checkpoint runs nothing through any command that loads one, and
code its config names is shown and refused unless the user trusts it.

The crafted ``trainer_state.pt`` pickles a call of ``os.system`` that would create a marker file; every test checks
the command's exit and that the marker was never written. The commands run as the installed console script, from
outside the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

CLI = str(Path(sys.executable).parent / "agentr1-core")


class _RunsACommand:
    """Unpickling this object calls ``os.system(command)``: what a malicious checkpoint would hold."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def _tiny_config(run_dir: Path, model_dir: str, extra: list[str] = ()) -> None:
    from agentr1_core.config import load_config
    from agentr1_core.lifecycle.run_dir import save_config

    cfg = load_config("tiny", [f"run_dir={run_dir}", f"model.path={model_dir}", "validation.max_rows=2",
                               "trainer.min_free_gb=0.01", "trainer.total_steps=2", *extra])
    save_config(cfg, run_dir)


def _crafted_run_folder(root: Path, model_dir: str, lora: bool = False, extra: list[str] = ()) -> tuple[Path, Path]:
    """A run folder with a saved config and one complete checkpoint whose state runs ``touch MARKER`` if loaded
    with the full unpickler; returns (the folder, the marker's path)."""
    run_dir, marker = root / "downloaded_run", root / "PWNED"
    ckpt = run_dir / "checkpoints" / "step_000001"
    shutil.copytree(model_dir, ckpt / "model")
    if lora:
        (ckpt / "model" / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    torch.save({"loop": {"iteration": 1}, "model_path": model_dir, "payload": _RunsACommand(f"touch {marker}")},
               ckpt / "trainer_state.pt")
    (ckpt / "COMPLETE").write_text("1\n")
    _tiny_config(run_dir, model_dir, list(extra))
    return run_dir, marker


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_crafted_state_runs_its_command_with_the_full_unpickler(tmp_path, tiny_model_dir):
    """The fixture is a real exploit: loaded the way checkpoints used to be, it runs its command."""
    run_dir, marker = _crafted_run_folder(tmp_path, tiny_model_dir)
    torch.load(run_dir / "checkpoints" / "step_000001" / "trainer_state.pt", weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize("command", [
    ["run", "{run}", "--resume"],
    ["run", "tiny", "run_dir={run}", "model.path={model}", "validation.max_rows=2", "trainer.min_free_gb=0.01",
     "trainer.total_steps=2", "--resume"],
    ["eval", "{run}"],
    ["eval", "tiny", "model.path={model}", "--checkpoint", "{run}/checkpoints/step_000001"],
    ["export", "{run}", "{out}"],  # a LoRA checkpoint: export reads the state for the base model's path
], ids=["resume_run_dir", "resume_config", "eval_run_dir", "eval_checkpoint", "export_lora"])
def test_a_crafted_checkpoint_runs_nothing(tmp_path, tiny_model_dir, command):
    run_dir, marker = _crafted_run_folder(tmp_path, tiny_model_dir, lora="export" in command)
    args = [a.format(run=run_dir, model=tiny_model_dir, out=tmp_path / "exported") for a in command]
    proc = _cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert not marker.exists(), "the checkpoint's payload ran"
    line = proc.stderr.strip().splitlines()[-1]
    assert "trainer_state.pt holds Python objects other than data" in line and "nothing of it ran" in line, line
    assert "Traceback" not in proc.stderr


def test_exporting_a_full_model_never_reads_the_state(tmp_path, tiny_model_dir):
    run_dir, marker = _crafted_run_folder(tmp_path, tiny_model_dir)
    proc = _cli("export", str(run_dir), str(tmp_path / "exported"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "exported" / "config.json").is_file() and not marker.exists()


def test_a_real_checkpoint_state_loads_as_data(tmp_path):
    """What the trainer writes (optimizer moments, RNG states of torch, Python and NumPy, the loop's state) loads
    with the data-only unpickler."""
    import random

    import numpy as np

    from agentr1_core.lifecycle.checkpoint import load_state, save_checkpoint

    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    state = {"optimizer": opt.state_dict(), "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                                                    "python": random.getstate()},
             "loop": {"iteration": 3, "history": {"validation": {"before": {"success_rate": 0.5}}}}}
    ckpt = save_checkpoint(tmp_path, 3, state)
    loaded = load_state(ckpt)
    assert loaded["loop"]["iteration"] == 3 and loaded["rng"]["numpy"][0] == "MT19937"
    assert torch.equal(loaded["optimizer"]["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])


def test_every_pickle_of_a_foreign_checkpoint_folder_is_checked_before_its_library_reads_it(tmp_path):
    """verl reads its shards with the full unpickler: the verl backend checks each first (``check_data_files``)."""
    from agentr1_core.errors import UserError
    from agentr1_core.trust import check_data_files

    folder = tmp_path / "verl_iter_000002" / "actor"
    folder.mkdir(parents=True)
    torch.save({"model": {"w": torch.ones(2)}}, folder / "model_world_size_1_rank_0.pt")
    torch.save({"rng": {"random": __import__("random").getstate()}}, folder / "extra_state_world_size_1_rank_0.pt")
    assert check_data_files(tmp_path) == 2
    marker = tmp_path / "PWNED"
    torch.save({"lr_scheduler": _RunsACommand(f"touch {marker}")}, folder / "optim_world_size_1_rank_0.pt")
    with pytest.raises(UserError, match="optim_world_size_1_rank_0.pt holds Python objects other than data"):
        check_data_files(tmp_path)
    assert not marker.exists()
