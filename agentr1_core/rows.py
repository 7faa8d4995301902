"""Dataset rows checked against what the run's components read from them, before the model loads.

A reward, an env and a dataset loader declare on their spec the fields they need from every row (``row_fields``,
see ``agentr1_core.specs``): a dotted path (``reward_model.ground_truth``, ``extra_info.query``), or alternatives
``a|b`` when either will do. A field that is absent or ``null`` is missing. A row's ``env_kwargs`` must be a mapping
whose keys are keyword parameters of the env's constructor (they are merged into its arguments when the row is
played), so a misspelled key is found here, not when its row comes up.

``row_problems`` gives one line per distinct problem: where its first row is (``FILE:LINE`` for the rows of a loader
that returns ``FileRows``, as the ``jsonl`` loader does; else the row's number), what is wrong, which component needs
the field, and how many rows share the problem. It reads the rows once and imports nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from agentr1_core.errors import suggest
from agentr1_core.jsonl import FileRows  # noqa: F401  (rows of a file, importable from here too)

MAX_PROBLEMS = 10  # distinct problems listed; the count of the others follows


@dataclass(frozen=True)
class RowNeed:
    """A field (``a.b``, or ``a.b|c`` for either) that ``component`` (``"reward 'answer_match'"``) reads."""

    field: str
    component: str

    @property
    def paths(self) -> list[str]:
        return [p.strip() for p in self.field.split("|") if p.strip()]


def declared_fields(spec: Any) -> tuple[str, ...]:
    """A spec's ``row_fields`` as a tuple (a lone string counts as one field)."""
    fields = getattr(spec, "row_fields", ()) or ()
    return (fields,) if isinstance(fields, str) else tuple(fields)


def has_field(row: dict[str, Any], path: str | tuple[str, ...]) -> bool:
    """Whether the dotted ``path`` (or its parts) leads to a value other than None in ``row``."""
    node: Any = row
    for part in path.split(".") if isinstance(path, str) else path:
        if not isinstance(node, dict):
            return False
        node = node.get(part)
        if node is None:
            return False
    return True


def _missing(need: RowNeed) -> str:
    first, *others = need.paths
    alternatives = f" (or {', '.join(others)})" if others else ""
    return f"missing {first}{alternatives}, which {need.component} {'read' if ' and ' in need.component else 'reads'}"


def _merged(needs: Sequence[RowNeed]) -> list[RowNeed]:
    """One need per field, naming every component that declares it (``dataset 'jsonl' and env 'tool_env'``)."""
    readers: dict[str, list[str]] = {}
    for need in needs:
        readers.setdefault(need.field, [])
        if need.component not in readers[need.field]:
            readers[need.field].append(need.component)
    return [RowNeed(f, " and ".join(components)) for f, components in readers.items()]


def _bad_kwargs(kwargs: Any, env: str, accepted: frozenset[str] | None) -> list[tuple[tuple[str, ...], str]]:
    if kwargs is None:
        return []
    if not isinstance(kwargs, dict):
        return [(("env_kwargs",), f"env_kwargs must be a mapping of parameters for {env}, got "
                                  f"{type(kwargs).__name__}")]
    if accepted is None:
        return []
    valid = ", ".join(sorted(accepted)) or "none"
    return [(("env_kwargs", str(key)), f"env_kwargs.{key} is not a parameter of {env}"
                                       f"{suggest(str(key), accepted)}; valid: {valid}")
            for key in kwargs if key not in accepted]


def row_problems(rows: Sequence[Any], needs: Sequence[RowNeed], where: str, env: str = "",
                 env_params: frozenset[str] | None = None,
                 row_checks: Sequence[Callable[[dict[str, Any]], list[tuple[tuple[str, ...], str]]]] = (),
                 max_problems: int = MAX_PROBLEMS) -> list[str]:
    """One line per distinct problem of ``rows`` (the dataset at config key ``where``), earliest first.

    ``needs``: the fields every row must have. ``env`` (``"env 'guess'"``) and ``env_params`` (its constructor's
    keyword parameters, None when it takes any): what a row's ``env_kwargs`` may set. ``row_checks``: more per-row
    checks, each giving ``(problem key, message)`` pairs (``tool_rows.ToolRowCheck``); rows sharing a key count as
    one problem."""
    checks = [(("field", need.field), _missing(need), [tuple(p.split(".")) for p in need.paths])
              for need in _merged(needs)]
    first: dict[tuple[str, ...], tuple[int, str]] = {}
    count: Counter[tuple[str, ...]] = Counter()

    def found(key: tuple[str, ...], index: int, message: str) -> None:
        count[key] += 1
        first.setdefault(key, (index, message))

    for index, row in enumerate(rows):  # the hot loop: no allocation for a good row
        if not isinstance(row, dict):
            found(("row",), index, f"a row must be a mapping, got {type(row).__name__}")
            continue
        for key, message, paths in checks:
            for path in paths:
                if has_field(row, path):
                    break
            else:
                found(key, index, message)
        kwargs = row.get("env_kwargs")
        if env and kwargs is not None and (not isinstance(kwargs, dict) or env_params is not None and kwargs):
            for key, message in _bad_kwargs(kwargs, env, env_params):
                found(key, index, message)
        for check in row_checks:
            for key, message in check(row):
                found(("check", *key), index, message)
    ordered = sorted(first.items(), key=lambda item: item[1][0])
    lines = []
    for key, (index, message) in ordered[:max_problems]:
        located = rows.where(index) if isinstance(rows, FileRows) else None
        lines.append(f"{located or f'{where} row {index + 1}'}: {message} "
                     f"({count[key]} of {len(rows)} rows of {where})")
    if len(ordered) > max_problems:
        lines.append(f"{where}: {len(ordered) - max_problems} more problems of the same kinds")
    return lines
