"""A component's params from the config, checked against the keyword arguments of its factory.

``validate_params`` reports unknown names (with a close match and the valid ones), missing required ones and values
of the wrong basic type, each as a one-line ``ConfigError`` with the key path. It imports the factory (through the
spec) but never calls it.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

from agentr1_core.errors import ConfigError, suggest


def _type_ok(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint) or hint
    if hint is Any or origin is typing.Union or str(origin) == "types.UnionType":
        args = typing.get_args(hint)
        return not args or any(_type_ok(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (str, bool, list, dict, tuple):
        return isinstance(value, (list, tuple) if origin in (list, tuple) else origin)
    return True


def validate_params(spec: Any, params: dict[str, Any], where: str, reserved: set[str] = frozenset()) -> None:
    """Check ``params`` against the factory's keyword arguments: unknown names, missing required ones, basic types."""
    accepted = {n: p for n, p in spec.parameters().items() if n not in reserved}
    if not spec.accepts_any_keyword():
        for key in params:
            if key not in accepted:
                valid = ", ".join(sorted(accepted)) or "none"
                raise ConfigError(f"config error at {where}.{key}: unknown parameter for {spec.kind} "
                                  f"{spec.name!r}{suggest(key, accepted)}; valid: {valid}")
    missing = [n for n, p in accepted.items() if p.default is inspect.Parameter.empty and n not in params]
    if missing:
        raise ConfigError(f"config error at {where}: {spec.kind} {spec.name!r} needs {', '.join(missing)}")
    target = spec.load()
    try:
        hints = typing.get_type_hints(target.__init__ if inspect.isclass(target) else target)
    except Exception:
        hints = {}
    for key, value in params.items():
        hint = hints.get(key)
        if hint is not None and not _type_ok(value, hint):
            raise ConfigError(f"config error at {where}.{key}: expected {getattr(hint, '__name__', hint)}, "
                              f"got {type(value).__name__} {value!r}")
