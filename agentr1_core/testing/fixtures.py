"""pytest fixtures for plugin authors: ``pytest_plugins = ["agentr1_core.testing.fixtures"]``.

``agentr1_registry`` is a fresh process-wide registry (entry points loaded) for the duration of one test; register an
in-process plugin with ``agentr1_registry.register_module(module_or_object, name="my-plugin")``. The previous registry
is restored afterwards.
"""

from __future__ import annotations

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
