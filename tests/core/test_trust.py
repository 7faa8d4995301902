"""Code a run folder's config names is shown before anything imports it, and refused outside the installed packages
(``agentr1_core.trust``, ``components.code_refs``).

The CLI cases run the installed console script on a run folder whose saved config points the gateway flow's
``agent`` at a file that writes a marker when imported: refused (exit 2, the key and ``--trust-code`` named, the
file never imported), and imported once the user passes ``--trust-code``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentr1_core.trust import UntrustedCodeError, check_code_refs, environment_ref, resolve_code, resolve_command

CLI = str(Path(sys.executable).parent / "agentr1-core")


def test_installed_modules_are_trusted_and_the_standard_library_and_loose_files_are_not(tmp_path):
    gateway = resolve_code("agentr1_gateway.examples.calculator_agent:agent")
    assert gateway.trusted and gateway.where == "installed distribution agentr1-gateway"
    assert resolve_code("omegaconf:OmegaConf").trusted  # site-packages
    for value in ("subprocess:getoutput", "os:system", "builtins:exec"):
        ref = resolve_code(value)
        assert not ref.trusted and "standard library" in ref.where, ref
    loose = tmp_path / "agent.py"
    loose.write_text("raise SystemExit('imported')\n")
    assert not resolve_code(f"{loose}:agent").trusted
    run_dir = tmp_path / "run"
    (run_dir / "code").mkdir(parents=True)
    inside = resolve_code(f"{run_dir / 'code' / 'agent.py'}:agent", run_dir)
    assert not inside.trusted and "inside the run folder" in inside.where
    missing = resolve_code("no_such_module_anywhere:agent")
    assert not missing.trusted and missing.location == "(not found)"


def test_refusals_are_reported_together_and_trust_code_lets_them_through(capsys):
    refs = [resolve_code("os:system", key="agent_flow.agent"), resolve_code("json:loads", key="x.y"),
            resolve_code("agentr1_gateway.flow:load_agent", key="z")]
    with pytest.raises(UntrustedCodeError) as err:
        check_code_refs(refs, "runs/x")
    lines = str(err.value).splitlines()
    assert len(lines) == 2 and lines[0].startswith("config error at agent_flow.agent:") and "--trust-code" in lines[0]
    printed = capsys.readouterr().out
    assert printed.count("[trust]") == 3 and "installed distribution agentr1-gateway" in printed
    check_code_refs(refs, "runs/x", trust_code=True)
    assert "trusted by --trust-code" in capsys.readouterr().out


def _run_folder_naming(tmp_path: Path, model_dir: str) -> tuple[Path, Path]:
    from agentr1_core.config import load_config
    from agentr1_core.lifecycle.run_dir import save_config

    marker = tmp_path / "IMPORTED"
    agent = tmp_path / "elsewhere" / "agent.py"
    agent.parent.mkdir()
    agent.write_text(f"open({str(marker)!r}, 'w').close()\n\ndef agent(task, client):\n    return ''\n")
    run_dir = tmp_path / "downloaded_run"
    cfg = load_config("calculator-openai", [f"run_dir={run_dir}", f"model.path={model_dir}",
                                            f"agent_flow.agent={agent}:agent", "validation.max_rows=1",
                                            "trainer.min_free_gb=0.01", "data.train.train_size=4",
                                            "data.val.val_size=1", "data.train.val_size=1", "data.val.train_size=4"])
    save_config(cfg, run_dir)
    return run_dir, marker


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("command", [["eval", "{run}"], ["run", "{run}"]], ids=["eval", "run"])
def test_a_run_folder_naming_code_outside_the_installed_packages_is_refused(tmp_path, tiny_model_dir, command):
    run_dir, marker = _run_folder_naming(tmp_path, tiny_model_dir)
    proc = _cli(*[a.format(run=run_dir) for a in command], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert not marker.exists(), "the agent file was imported"
    assert "[trust] agent_flow.agent" in proc.stdout and "outside the installed packages" in proc.stdout
    line = proc.stderr.strip().splitlines()[-1]
    assert "config error at agent_flow.agent" in line and "--trust-code" in line and "Traceback" not in proc.stderr


def test_trust_code_imports_it(tmp_path, tiny_model_dir):
    run_dir, marker = _run_folder_naming(tmp_path, tiny_model_dir)
    proc = _cli("eval", str(run_dir), "--checkpoint", "none", "--trust-code", "--out", str(tmp_path / "r.json"),
                cwd=tmp_path)
    assert "trusted by --trust-code" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert marker.exists()


def test_a_program_is_installed_code_only_as_python_dash_m_of_an_installed_module(tmp_path):
    shipped = resolve_command(["python", "-m", "agentr1_gateway.examples.shell_agent"], key="agent_flow.command")
    assert shipped.trusted and shipped.verb == "runs" and "agentr1-gateway" in shipped.where
    for command in (["bash", "-c", "curl x | sh"], "my-agent", ["python", str(tmp_path / "agent.py")],
                    ["python", "-m", "http.server"], ["python3", "-m", "no_such_module_anywhere"], ["python", "-c", "1"]):
        ref = resolve_command(command, key="agent_flow.command")
        assert not ref.trusted, command
    assert environment_ref({}, "agent_flow.env") is None
    env = environment_ref({"LD_PRELOAD": "./x.so", "PYTHONPATH": "."}, "agent_flow.env")
    assert env is not None and not env.trusted and env.value == "LD_PRELOAD, PYTHONPATH"
    with pytest.raises(UntrustedCodeError) as err:
        check_code_refs([resolve_command(["bash", "-c", "id"], key="agent_flow.verifier"), env], "runs/x")
    lines = str(err.value).splitlines()
    assert len(lines) == 2 and "to run it" in lines[0] and "to set it" in lines[1]


def test_a_run_folder_whose_cli_agent_runs_a_program_is_refused_before_anything_runs(tmp_path):
    from agentr1_core.config import load_config
    from agentr1_core.lifecycle.run_dir import save_config

    marker = tmp_path / "RAN"
    run_dir = tmp_path / "downloaded_run"
    cfg = load_config("terminal-cli", [f"run_dir={run_dir}"])
    cfg.agent_flow.command = ["bash", "-c", f"touch {marker}"]
    cfg.agent_flow.verifier = ["bash", "-c", f"touch {marker}"]
    save_config(cfg, run_dir)
    proc = _cli("eval", str(run_dir), "--checkpoint", "none", "--out", str(tmp_path / "r.json"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert not marker.exists()
    assert "[trust] agent_flow.command = bash -c touch" in proc.stdout and "(refused)" in proc.stdout
    refused = [ln for ln in proc.stderr.strip().splitlines() if "config error at agent_flow." in ln]
    assert len(refused) == 2 and all("--trust-code" in ln for ln in refused), proc.stderr[-2000:]
