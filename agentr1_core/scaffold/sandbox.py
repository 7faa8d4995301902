"""The ``sandbox`` kind: a ``Sandbox`` (``agentr1_core.sandbox``) in the user's words, with the shape an adapter of a
remote sandbox takes as the example, run on this machine.

The example's ``start()`` creates the "machine" (a temporary folder), ``run()`` executes a command there (``/bin/sh``
in a session of its own, the environment stripped to PATH, HOME and LANG, its process group killed at the wall-time
limit and when the command ends, each output stream capped) and ``close()`` deletes it; ``check()`` says yes in one
line, where a real adapter checks its credentials or its CLI. Its params (``wall_seconds``, ``output_bytes``) are set
in the config.

A sandbox is not trained on by itself: the named config runs the terminal recipe of ``agentr1-env-terminal``
(``base: terminal-cpu``) with its commands in this sandbox (``env: {sandbox: {name: ..., **params}}``), so the
package depends on that plugin and ships no rows (``rows=None``: its README, conftest and package tests are this
kind's own). Its tests need only agentr1-core: they build the sandbox through the entry point with every param the
config sets (the config read as a file, without its base) and check it against the interface, training nothing.
"""

from __future__ import annotations

from agentr1_core.scaffold.common import Kind

COMPONENT = '''"""$Title for agentr1: where the commands of an episode run (a ``Sandbox``).

The terminal env of agentr1-env-terminal builds one per episode from the config's ``env.sandbox`` (``{name: $ident,
...}``: every key besides ``name`` is a keyword argument of ``$cls``); the constructor starts nothing (the checks
before a run build one to read its params). Then ``start()`` is called once, ``host_path(name)`` gives the folder
``name`` (``app``, where every command starts; ``tests``, ``logs``) on the host, where the task's files are copied
in, and ``path(name)`` where commands see it; ``run(command, timeout=..., stdin=..., env=...)`` runs every command of
the agent's tools and of the task's tests, from several threads at a time (it must be thread-safe), and returns a
``CommandResult``: it never raises for what the command does (a failing command has its exit code; one killed has
``exit_code=None`` and ``killed``, ``"wall_time"`` at the time limit). ``close()`` ends the episode: it kills what
is still running and removes everything, and a second call does nothing. ``check()`` (a class method) says in one
line whether the sandbox can run on this machine: a run refuses one that cannot, with that line.
"""

from agentr1_core.sandbox import Availability, CommandResult, Sandbox


# EXAMPLE: replace from here to END EXAMPLE with your sandbox, keeping the class's name, $cls (plugin.py
# registers it), and its ``name``. The example runs commands on this machine in a temporary folder: ``start()``
# creates it, ``run()`` executes a command there under ``wall_seconds`` with its output capped at ``output_bytes``,
# ``close()`` deletes it; an adapter of a remote sandbox creates, uses and deletes its machine the same way.
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

KEPT_ENV = ("PATH", "HOME", "LANG")  # what a command sees of this process's environment
CHUNK = 65536


class $cls(Sandbox):
    """Commands on this machine, in a temporary folder per episode. ``wall_seconds``: a command's time limit (a
    caller's ``timeout`` can only lower it); ``output_bytes``: what is kept of each of its output streams."""

    name = "$ident"

    def __init__(self, wall_seconds: float = 120.0, output_bytes: int = 65536) -> None:
        if not wall_seconds > 0:
            raise ValueError(f"wall_seconds must be positive, got {wall_seconds}")
        if output_bytes < 1:
            raise ValueError(f"output_bytes must be at least 1, got {output_bytes}")
        self.wall_seconds, self.output_bytes = float(wall_seconds), int(output_bytes)
        self.root = None  # the temporary folder, from start() to close()
        self.closed = False
        self.lock = threading.Lock()
        self.groups = set()  # the process groups of the commands running now

    @classmethod
    def check(cls):
        # a real adapter looks for its credentials or its CLI here and returns Availability(False, one line saying
        # what is missing and how to get it)
        return Availability(True, "none: commands run as this user on this machine, in a temporary folder")

    def start(self):
        with self.lock:
            if self.root is not None or self.closed:
                raise RuntimeError("start() is called once, before any run()")
            self.root = Path(tempfile.mkdtemp(prefix=f"agentr1-{self.name}-"))
        self.host_path("app")

    def host_path(self, name="app"):
        if self.root is None:
            raise RuntimeError("the sandbox is closed" if self.closed else "start() the sandbox first")
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def path(self, name="app"):
        return str(self.host_path(name))  # no file system of its own: commands see the host's folders

    def run(self, command, *, timeout=None, stdin=None, env=None):
        limit = self.wall_seconds if timeout is None else min(float(timeout), self.wall_seconds)
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else [str(part) for part in command]
        environment = {key: os.environ[key] for key in KEPT_ENV if key in os.environ}
        environment.update(env or {})
        started = time.monotonic()
        with self.lock:  # no command starts once close() has begun
            cwd = self.host_path("app")
            try:
                proc = subprocess.Popen(argv, cwd=cwd, env=environment, start_new_session=True,
                                        stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            except OSError as exc:  # an argv whose program is missing or not executable: the command's fault
                code = 127 if isinstance(exc, FileNotFoundError) else 126
                return CommandResult(code, stderr=f"{argv[0]}: {exc.strerror}\\n",
                                     seconds=time.monotonic() - started)
            self.groups.add(proc.pid)  # in a new session the group's id is the command's pid
        kept = {"stdout": bytearray(), "stderr": bytearray()}
        cut = set()
        readers = [threading.Thread(target=self._read, args=(stream, kept[key], key, cut), daemon=True)
                   for key, stream in (("stdout", proc.stdout), ("stderr", proc.stderr))]
        if stdin is not None:
            readers.append(threading.Thread(target=self._write, args=(proc.stdin, stdin), daemon=True))
        for thread in readers:
            thread.start()
        killed = None
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            killed = "wall_time"
        finally:
            self._kill(proc.pid)  # at the limit, and whatever the command left running in the background
            proc.wait()
            with self.lock:
                self.groups.discard(proc.pid)
        for thread in readers:
            thread.join(timeout=5)
        code = proc.returncode
        if killed is None and code < 0:  # ended by a signal: its own, or close() from another thread
            killed = f"signal {signal.Signals(-code).name if -code in signal.valid_signals() else -code}"
        return CommandResult(None if killed else code, stdout=kept["stdout"].decode("utf-8", "replace"),
                             stderr=kept["stderr"].decode("utf-8", "replace"), killed=killed, truncated=bool(cut),
                             seconds=time.monotonic() - started, info={"wall_limit": limit})

    def _read(self, stream, buffer, key, cut):
        """Keep the first ``output_bytes`` of ``stream``; read the rest to its end, so the command never blocks."""
        while chunk := stream.read1(CHUNK):
            room = self.output_bytes - len(buffer)
            if len(chunk) > room:
                cut.add(key)
            buffer += chunk[:max(room, 0)]
        stream.close()

    @staticmethod
    def _write(stream, text):
        try:
            stream.write(text.encode("utf-8"))
            stream.close()
        except (BrokenPipeError, ValueError):  # the command stopped reading, or ended
            pass

    @staticmethod
    def _kill(group):
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # the group is gone already
            pass

    def close(self):
        with self.lock:
            if self.closed:
                return
            self.closed = True
            groups, self.groups = set(self.groups), set()
            root, self.root = self.root, None
        for group in groups:
            self._kill(group)
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
# END EXAMPLE
'''

CONFIG = '''# $Title: SFT on expert episodes, then GRPO, on the terminal tasks, every command run in it
# The terminal recipe of agentr1-env-terminal, sized for a 2-core CPU (base: terminal-cpu, that plugin's config; its
# terminal env builds a sandbox per episode from env.sandbox), with $title in place of the local one.
# Install agentr1-env-terminal first.
base: terminal-cpu
run_dir: runs/$name
# EXAMPLE: the example's limits; set your sandbox's params (every key of env.sandbox besides name is a keyword
# argument of $cls)
env:
  sandbox: {name: $ident, wall_seconds: 120, output_bytes: 65536}
# END EXAMPLE
'''

TESTS = '''"""$Title against the sandbox interface: built through the entry point with every param the config sets (the
``box`` fixture: started, closed after the test), commands, exit codes, time limits, the working folder, the output
cap, ``close()`` and commands from several threads at once."""

import time
from concurrent.futures import ThreadPoolExecutor

from agentr1_core.sandbox import Availability, CommandResult

from $package.$module import $cls


def test_built_from_the_config_through_the_entry_point(box, sandbox_spec):
    assert type(box) is $cls and box.name == sandbox_spec["name"] == "$ident"
    found = $cls.check()
    assert isinstance(found, Availability) and found.ok, found.isolation
    assert found.isolation.strip() and "\\n" not in found.isolation


def test_a_command_runs_in_the_working_folder_and_its_output_comes_back(box):
    result = box.run("echo hello && echo made > made.txt")
    assert isinstance(result, CommandResult) and result.ok and result.exit_code == 0, result
    assert result.stdout == "hello\\n" and result.killed is None and not result.truncated and result.seconds >= 0
    assert (box.host_path("app") / "made.txt").read_text() == "made\\n"
    assert box.run(["printf", "%s|%s", "two words", "x"]).stdout == "two words|x"  # an argv list, no shell
    assert box.run("cat", stdin="from stdin").stdout == "from stdin"
    assert box.run("echo $$GREETING", env={"GREETING": "hi"}).stdout == "hi\\n"
    assert box.run("echo hello").describe() == "hello\\n[exit code 0]"


def test_a_failing_command_is_a_result_not_an_exception(box):
    failed = box.run("echo oops >&2; exit 3")
    assert failed.exit_code == 3 and not failed.ok and failed.stderr == "oops\\n" and failed.killed is None
    assert failed.describe() == "oops\\n[exit code 3]"
    assert box.run("no-such-command-here").exit_code == 127
    assert box.run(["no-such-program-here"]).exit_code == 127


def test_a_command_past_its_time_limit_is_killed_with_what_it_started(box):
    started = time.monotonic()
    result = box.run("(sleep 2; echo late > late.txt) & echo begun; sleep 60", timeout=1)
    assert result.killed == "wall_time" and result.exit_code is None and not result.ok, result
    assert time.monotonic() - started < 15 and "[killed: wall_time]" in result.describe()
    time.sleep(2.5)  # the background writer would have written by now
    assert not (box.host_path("app") / "late.txt").exists()
    assert box.run("ls").stdout == "" and box.run("echo still here").ok


def test_what_a_command_leaves_in_the_background_does_not_outlive_it(box):
    assert box.run("(sleep 1; echo late > late.txt) > /dev/null 2>&1 &").ok
    time.sleep(2)
    assert not (box.host_path("app") / "late.txt").exists()


def test_the_working_folder_persists_and_the_host_sees_it_both_ways(box):
    assert box.run("mkdir -p src && echo 'print(1)' > src/main.py").ok
    assert box.run("cat src/main.py").stdout == "print(1)\\n"  # the next command starts in the same folder
    assert (box.host_path("app") / "src" / "main.py").read_text() == "print(1)\\n"
    (box.host_path("app") / "input.txt").write_text("from the host\\n")
    assert box.run("cat input.txt").stdout == "from the host\\n"
    (box.host_path("tests") / "test.sh").write_text("echo tests ran\\n")  # another folder, where commands see it
    assert box.run(["sh", box.path("tests") + "/test.sh"]).stdout == "tests ran\\n"
    assert box.run(f"cat {box.path('app')}/input.txt").stdout == "from the host\\n"
    assert isinstance(box.path("logs"), str) and box.host_path("logs").is_dir()


def test_a_large_output_comes_back_capped(box):
    result = box.run("head -c 4000000 /dev/zero | tr '\\\\0' x")
    assert result.ok and result.truncated and 0 < len(result.stdout) < 4000000, len(result.stdout)
    assert set(result.stdout) == {"x"} and result.describe().endswith("[output truncated]\\n[exit code 0]")


def test_close_removes_everything_and_a_second_close_does_nothing(make_sandbox):
    box = make_sandbox()
    app = box.host_path("app")
    assert box.run("mkdir -p deep/er && echo x > deep/er/file").ok
    box.close()
    assert not app.exists()
    box.close()


def test_commands_from_several_threads_at_once(box):
    def work(i):
        return box.run(f"echo {i} > f{i}.txt; sleep 0.2; cat f{i}.txt; echo err{i} >&2")

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(work, range(16)))
    for i, result in enumerate(results):
        assert result.ok and result.stdout == f"{i}\\n" and result.stderr == f"err{i}\\n", (i, result)
    assert sorted(p.name for p in box.host_path("app").iterdir()) == sorted(f"f{i}.txt" for i in range(16))


# EXAMPLE: replace from here to END EXAMPLE with tests of your sandbox's own rules (these check the example's
# stripped environment, its wall_seconds and output_bytes, a temporary folder on this machine and a close() that
# kills a command still running).
def test_a_command_sees_only_path_home_and_lang_of_the_environment(box, monkeypatch):
    monkeypatch.setenv("AGENTR1_TEST_SECRET", "do not leak")
    monkeypatch.setenv("LANG", "C.UTF-8")
    seen = dict(line.split("=", 1) for line in box.run("env").stdout.splitlines())
    assert "AGENTR1_TEST_SECRET" not in seen and set(seen) <= {"PATH", "HOME", "LANG", "PWD", "SHLVL", "_", "OLDPWD"}
    assert seen["LANG"] == "C.UTF-8" and "PATH" in seen


def test_wall_seconds_is_the_limit_a_timeout_only_lowers(make_sandbox):
    box = make_sandbox(wall_seconds=0.5)
    result = box.run("sleep 30", timeout=60)
    assert result.killed == "wall_time" and result.seconds < 10 and result.info["wall_limit"] == 0.5


def test_each_output_stream_keeps_its_first_output_bytes(make_sandbox):
    box = make_sandbox(output_bytes=100)
    result = box.run("head -c 1000 /dev/zero | tr '\\\\0' x; echo short >&2")
    assert result.stdout == "x" * 100 and result.truncated and result.stderr == "short\\n"
    assert not box.run("head -c 100 /dev/zero | tr '\\\\0' x").truncated


def test_a_temporary_folder_on_this_machine_which_close_deletes_killing_what_still_runs(make_sandbox):
    box = make_sandbox()
    root = box.root
    assert box.path("app") == str(box.host_path("app")) and box.host_path("app").parent == root
    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(box.run, "sleep 60")
        time.sleep(0.5)
        box.close()
        result = running.result(timeout=15)
    assert result.killed == "signal SIGKILL" and result.exit_code is None
    assert not root.exists()


def test_bad_params_are_refused():
    for params in ({"wall_seconds": 0}, {"output_bytes": 0}):
        try:
            $cls(**params)
        except ValueError:
            continue
        raise AssertionError(f"{params} was accepted")
# END EXAMPLE
'''

EXAMPLE = '''`$package/$module.py` runs commands on this machine, in a temporary folder per episode, in the shape
an adapter of a remote sandbox (Daytona, Modal, E2B, a machine over SSH) takes: `start()` creates the machine (here the
folder), `run()` executes a command on it and `close()` deletes it. A command runs under `/bin/sh -c` (an argv list
runs as it is) in a session of its own, with the environment stripped to PATH, HOME and LANG plus what the caller
passes. At `wall_seconds` (or a caller's lower `timeout`) its process group is killed (`killed: wall_time`), and
what it leaves running in the background is killed when it ends; each output stream keeps its first
`output_bytes` bytes (`truncated`). `close()` kills what still runs and deletes the folder. Its `check()` says yes:
it needs nothing but a shell, and it isolates nothing (commands run as you and see your files).

The config sets its params:

    env:
      sandbox: {name: $ident, wall_seconds: 120, output_bytes: 65536}
'''

README = '''# $dist

$Title for agentr1: where the commands of an episode run.
Its run config trains SmolLM2-135M-Instruct on the terminal tasks of agentr1-env-terminal with every command run in
it; its tests check it against the sandbox interface and need only agentr1-core.

## Make it yours

The package starts with a working example, so that it installs and passes its tests as written. Each file that
holds a part of the example marks that part with one block, from `# EXAMPLE:` to `# END EXAMPLE` (in this README,
HTML comments): replace those blocks, keep the rest, and run `pytest`.

| file | what it is | what to replace |
|---|---|---|
$component_rows
| `$package/configs/$name.yaml` | the run: the terminal recipe (`base: terminal-cpu`) with its commands in $title | its `EXAMPLE` block: the sandbox's params |
$test_rows
| `tests/conftest.py`, `tests/test_package.py` | the config, the registration, a started sandbox for each test | nothing |
| `$package/plugin.py` | registers $registered_as and every `configs/*.yaml` as a named config | nothing |
| `pyproject.toml` | the distribution (it depends on `agentr1-env-terminal`); its `agentr1` entry point names `$package.plugin` | nothing |

## What a sandbox does

The terminal env (and any env that runs commands) builds one per episode from `env.sandbox`, a name or
`{name: $ident, ...}` whose other keys are the constructor's keyword arguments; the constructor starts nothing.
Then:

- `start()`, once: create the machine and the working folder `app`.
- `host_path(name)`: where the host reads and writes the folder `name` (`app`, `tests`, `logs`); the env copies
  the task's files in there. `path(name)`: where commands see it.
- `run(command, timeout=None, stdin=None, env=None)`: a shell line (or an argv list) in `app`, under the
  sandbox's limits; `timeout` lowers the time limit for one command. It returns a `CommandResult` (`exit_code`,
  `stdout`, `stderr`, `killed`, `truncated`, `seconds`) and never raises for what the command does: a command
  killed at the time limit has `exit_code=None` and `killed="wall_time"`. The tools call it from several threads
  at once: it must be thread-safe.
- `close()`: kill what still runs and delete everything; a second call does nothing.
- `check()`, a class method: whether the sandbox can run on this machine, in one line. A real adapter checks its
  credentials or its CLI there (an API key in the environment, the provider's command on PATH) and returns
  `Availability(False, "<what is missing and how to get it>")`: a run that names the sandbox stops with that line
  before the model loads, and so do these tests.

<!-- EXAMPLE: what the example does; replace this section with what $title does -->
## The example

$example<!-- END EXAMPLE -->

## Install, test, run

    pip install agentr1-env-terminal   # first: the terminal env and terminal-cpu, the config this one starts from
    pip install -e .                   # then: agentr1-core plugins; agentr1-core config list
    pip install -e '.[test]' && pytest # the tests need only agentr1-core and train nothing
    agentr1-core run $name             # from any folder: writes runs/$name/ (summary.json, episodes/, metrics.jsonl)
    agentr1-core run $name trainer.total_steps=2 sft.rows=8    # any key.path=value overrides

The tests read the config as a file (its base comes from agentr1-env-terminal) and build the sandbox through the
entry point with every param it sets. Any other config of the terminal env runs in it too: set its `env.sandbox`
to `{name: $ident, ...}`.

Every YAML file added to `$package/configs/` becomes a named config (`agentr1-core run FILE_NAME`).
'''

CONFTEST = '''"""Helpers of the tests of $dist: the run config read as a file (its base, terminal-cpu, comes from
agentr1-env-terminal, which these tests do not need), and sandboxes built from it as the terminal env builds them."""

from importlib import resources

import pytest
from omegaconf import OmegaConf

from agentr1_core.sandbox import build_sandbox

CONFIG = "$name"
PACKAGE = "$package"


def read_config():
    """The run config ``$name`` as written in the package (its own keys, not its base's): a plain dict."""
    text = resources.files(PACKAGE).joinpath(f"configs/{CONFIG}.yaml").read_text(encoding="utf-8")
    return OmegaConf.to_container(OmegaConf.create(text), resolve=True)


@pytest.fixture
def config():
    return read_config()


@pytest.fixture
def sandbox_spec(config):
    """The config's ``env.sandbox`` as ``{name: ..., **params}``."""
    spec = config["env"]["sandbox"]
    return {"name": spec} if isinstance(spec, str) else dict(spec)


@pytest.fixture
def make_sandbox(sandbox_spec):
    """``make_sandbox(**params)``: a started sandbox, built through the registry (the entry point) from the config's
    ``env.sandbox`` with ``params`` over its own; closed after the test."""
    made = []

    def make(**params):
        box = build_sandbox({**sandbox_spec, **params})
        made.append(box)
        box.start()
        return box

    yield make
    for box in made:
        box.close()


@pytest.fixture
def box(make_sandbox):
    """A started sandbox with the config's params."""
    return make_sandbox()
'''

PACKAGE_TESTS = '''"""The package as agentr1 sees it: the entry point, the named config, and the sandbox the config names
with params it takes."""

from agentr1_core.plugins import get_registry
from agentr1_core.sandbox import Sandbox, availability_of

REGISTERED = $registered


def test_registered_through_the_entry_point():
    registry = get_registry()
    assert "$name" in registry.names("config")
    for name in REGISTERED:
        assert name in registry.names("$registry_kind")
        assert registry.components["$registry_kind"][name].distribution == "$dist"
        assert issubclass(registry.load("$registry_kind", name), Sandbox)


def test_the_config_runs_the_terminal_recipe_in_this_sandbox_with_params_it_takes(config, sandbox_spec):
    assert config["base"] == "terminal-cpu" and config["run_dir"] == "runs/$name"
    params = dict(sandbox_spec)
    name = params.pop("name")
    assert name in REGISTERED
    taken = get_registry().get("$registry_kind", name).parameters()
    assert set(params) <= set(taken), f"env.sandbox sets {sorted(set(params) - set(taken))}, which {name} does not take"


def test_it_can_run_here_and_says_so_in_one_line():
    registry = get_registry()
    for name in REGISTERED:
        found = availability_of(registry.load("$registry_kind", name))
        assert found.ok, f"sandbox {name} cannot run here: {found.isolation}"
        assert found.isolation.strip() and "\\n" not in found.isolation
'''

KIND = Kind(kind="sandbox", component=COMPONENT, config=CONFIG, tests=TESTS, example=EXAMPLE,
            requires=("agentr1-env-terminal",), readme=README, conftest=CONFTEST, package_tests=PACKAGE_TESTS)
