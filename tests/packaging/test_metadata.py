"""Package metadata agrees with itself and with the docs: SPDX licence strings, the Python versions the README
claims, and every ``pip install`` shown in the docs either a path that works from this checkout or a package that
is not one of this repository's (those are not on the package index yet); and each plugin's ``agentr1.components``
entry points list exactly the components its hooks register."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECTS = [ROOT / "pyproject.toml", *sorted((ROOT / "plugins").glob("*/pyproject.toml"))]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "plugins").glob("*/README.md"))]


def _project(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", PYPROJECTS, ids=lambda p: p.parent.name)
def test_licence_is_an_spdx_string_and_setuptools_understands_it(path):
    data = _project(path)
    assert data["project"]["license"] == "Apache-2.0"
    assert "setuptools>=77" in data["build-system"]["requires"]
    assert data["tool"]["setuptools"]["include-package-data"] is False  # package data is listed explicitly


def test_readme_python_claim_is_the_highest_any_distribution_needs():
    needs = {_project(p)["project"]["name"]: _project(p)["project"]["requires-python"] for p in PYPROJECTS}
    highest = max(tuple(int(x) for x in spec.removeprefix(">=").split(".")) for spec in needs.values())
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    claim = re.search(r"fresh machine with Python (\d+)\.(\d+)\+", readme)
    assert claim and (int(claim[1]), int(claim[2])) == highest, needs
    for name, spec in needs.items():
        if spec != ">=3.10":
            assert f"`{name}` needs {spec.removeprefix('>=')}+" in readme, f"README does not say why {name} needs {spec}"


def test_pip_install_commands_in_the_docs_work_today():
    ours = {_project(p)["project"]["name"] for p in PYPROJECTS}
    commands = [(doc.name, line) for doc in DOCS for line in doc.read_text(encoding="utf-8").splitlines()
                if "pip install" in line]
    assert commands
    for doc, line in commands:
        for args in re.findall(r"pip install ([^`#&|;]*)", line):
            for arg in args.split():
                name = re.split(r"[\[<>=!~ ]", arg.strip("\"'"), maxsplit=1)[0]
                assert name not in ours, f"{doc}: `{line.strip()}` installs {name} by name; not on PyPI yet"


PLUGIN_PYPROJECTS = [p for p in PYPROJECTS[1:] if "agentr1" in _project(p)["project"].get("entry-points", {})]


@pytest.mark.parametrize("path", PLUGIN_PYPROJECTS, ids=lambda p: p.parent.name)
def test_a_plugin_declares_exactly_the_components_its_hooks_register(path):
    """``agentr1.components`` (what a missing name's hint reads) lists every component the plugin's hooks return,
    configs aside, and nothing else."""
    import importlib

    from agentr1_core.kinds import BY_NAME
    from agentr1_core.plugins import Registry

    entry_points = _project(path)["project"]["entry-points"]
    (plugin_name, module), = entry_points["agentr1"].items()
    declared = entry_points.get("agentr1.components", {})
    assert set(declared.values()) <= {module}, "each entry points at the plugin module that registers it"
    info = Registry().register_module(importlib.import_module(module), name=plugin_name)
    assert info.status == "ok", info.error
    registered = {f"{kind}.{name}" for kind, names in info.components.items() if BY_NAME[kind].declared
                  for name in names}
    assert set(declared) == registered, f"{path.parent.name}/pyproject.toml [project.entry-points.\"agentr1.components\"]"
