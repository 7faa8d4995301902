"""pytest fixtures for plugin authors: ``pytest_plugins = ["agentr1_core.testing.fixtures"]``.

``agentr1_registry`` is a fresh process-wide registry (entry points loaded) for the duration of one test; register an
in-process plugin with ``agentr1_registry.register_module(module_or_object, name="my-plugin")``. The previous registry
is restored afterwards.

``ray_lock`` keeps the tests that start Ray apart, the core's and the plugins' alike (a plugin's conftest, which may
not declare ``pytest_plugins`` below the root, imports it: ``from agentr1_core.testing.fixtures import ray_lock``).

``ctrl_c_reaches_it``: a ``preexec_fn`` for a command a test stops with SIGINT, as Ctrl-C in a terminal would. A
test suite started in the background by a shell without job control inherits SIGINT ignored, and Python then
installs no KeyboardInterrupt handler in the command; this gives it back the default disposition first.
"""

from __future__ import annotations

import contextlib
import fcntl
import signal
from typing import Iterator

import pytest

from agentr1_core import plugins


@pytest.fixture
def agentr1_registry() -> Iterator[plugins.Registry]:
    saved = plugins._default
    registry = plugins.configure_registry()
    try:
        yield registry
    finally:
        plugins._default = saved


@pytest.fixture(scope="session")
def ray_lock(tmp_path_factory):
    """``with ray_lock(): ...`` holds the lock of the tests that start Ray (themselves, through verl, or with ``ray
    start``): ``ray.init()`` joins a Ray instance it finds running on the machine and ``ray stop --force`` stops every
    one, so two of them must not overlap. The lock file sits beside the worker processes' own temporary folders,
    where every worker process of the session finds the same one."""

    @contextlib.contextmanager
    def hold():
        with open(tmp_path_factory.getbasetemp().parent / "agentr1-ray.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # blocks until the other worker's Ray test is over
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    return hold


def ctrl_c_reaches_it() -> None:
    """``subprocess.Popen(..., preexec_fn=ctrl_c_reaches_it)``: SIGINT as in a terminal (module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
