"""Helpers for plugin authors' tests: conformance checkers and an in-process plugin registration fixture.

``check_tool(tool)`` and ``check_env(env, row)`` exercise a component the way the framework will and raise
``AssertionError`` with a readable message on the first contract violation. The pytest fixture ``agentr1_registry``
(enabled by ``pytest_plugins = ["agentr1_core.testing.fixtures"]``) gives a fresh registry in which a test can
register a plugin module in-process.
"""

from agentr1_core.testing.conformance import check_env, check_tool, run_async

__all__ = ["check_env", "check_tool", "run_async"]
