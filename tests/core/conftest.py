"""Real third-party plugin distributions, pip-installed into a temporary target folder for the CLI tests."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PLUGINS = {
    "agentr1-good": ("good", '''
        from agentr1_core import CommandSpec, ToolSpec, hookimpl

        @hookimpl
        def agentr1_tools():
            return [ToolSpec("echo", "agentr1_good_impl:Echo", "echoes"),
                    ToolSpec("fragile", "agentr1_good_missing_dependency:Tool", "needs a missing package")]

        @hookimpl
        def agentr1_cli_commands():
            return [CommandSpec("hello", "agentr1_good_impl:register", "says hello", help="say hello")]
        ''', {"agentr1_good_impl": '''
        from agentr1_core.tools import BaseTool

        class Echo(BaseTool):
            name = "echo"
            description = "echo"
            parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

            async def execute(self, text):
                return text

        def register(parser):
            parser.add_argument("who")
            parser.set_defaults(func=lambda args: print(f"hello {args.who}") or 0)
        '''}),
    "agentr1-broken": ("broken", '''
        raise ImportError("agentr1-broken needs libfoo, which is not installed")
        ''', {}),
    "agentr1-dupe": ("dupe", '''
        from agentr1_core import ToolSpec, hookimpl

        @hookimpl
        def agentr1_tools():
            return [ToolSpec("calculator", "agentr1_dupe_plugin:X", "a second calculator")]
        ''', {}),
    "agentr1-typo": ("typo", '''
        from agentr1_core import ToolSpec, hookimpl

        @hookimpl
        def agentr1_toolz():
            return []
        ''', {}),
}


# What each test distribution declares in its metadata: agentr1.components entries and extras.
DECLARED = {
    "agentr1-good": (["tool.echo", "tool.fragile", "command.hello"],
                     'fragile = ["agentr1-good-missing-dependency"]'),
    "agentr1-broken": (["tool.libfoo"], ""),
}


def _write_dist(root: Path, dist: str, ep_name: str, plugin_src: str, extra: dict[str, str]) -> Path:
    module = dist.replace("-", "_") + "_plugin"
    folder = root / dist
    folder.mkdir()
    (folder / f"{module}.py").write_text(textwrap.dedent(plugin_src))
    for name, src in extra.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(src))
    modules = ", ".join(f'"{m}"' for m in [module, *extra])
    components, extras = DECLARED.get(dist, ([], ""))
    declared = "".join(f'\n"{entry}" = "{module}"' for entry in components)
    (folder / "pyproject.toml").write_text(textwrap.dedent(f'''
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "{dist}"
        version = "1.2.3"
        [project.optional-dependencies]
        {extras}
        [project.entry-points.agentr1]
        {ep_name} = "{module}"
        [tool.setuptools]
        py-modules = [{modules}]
        ''') + f'[project.entry-points."agentr1.components"]{declared}\n')
    return folder


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory) -> Path:
    """A folder with the four test distributions installed by pip (``--target``)."""
    root = tmp_path_factory.mktemp("dists")
    folders = [_write_dist(root, dist, *spec) for dist, spec in PLUGINS.items()]
    target = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), *map(str, folders)], check=True)
    return target


@pytest.fixture
def cli(plugin_site, tmp_path):
    """Run the installed ``agentr1-core`` with the test distributions importable; returns CompletedProcess."""

    def run(*args: str, env: dict[str, str] | None = None, site: bool = True) -> subprocess.CompletedProcess:
        full_env = dict(os.environ)
        full_env.pop("AGENTR1_PLUGINS_ALLOW", None)
        full_env.pop("AGENTR1_PLUGINS_BLOCK", None)
        if site:
            full_env["PYTHONPATH"] = os.pathsep.join([str(plugin_site), full_env.get("PYTHONPATH", "")])
        full_env.update(env or {})
        return subprocess.run([sys.executable, "-m", "agentr1_core.cli", *args], capture_output=True, text=True,
                              env=full_env, cwd=tmp_path, timeout=120)

    return run
