"""No module of agentr1_core imports itself back through others, and no import goes back up a floor.

The floors (docs/architecture.md, "Floors"), lowest first: the base (data model, errors, specs, checks of plain
values, model files, memory, trust), the run files (``lifecycle/``, a leaf: it imports the base only), the engines and
algorithms, the front door (plugins, config, components, envs and flows, preflight), the backends (trainers, ray,
verl), and the commands (cli, runner, eval, scaffold, testing helpers). A module may import its own floor and the
floors below it.

The graph is read from the source with ``ast``: every ``import`` and ``from ... import`` anywhere in a module, inside
functions too (a deferred import still ties the two modules together). A package counts as its ``__init__``;
``from pkg import name`` counts as importing ``pkg.name`` when that is a module, and ``pkg`` otherwise.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "agentr1_core"
FLOORS = [  # lowest first; a module is on the floor of the longest prefix listed
    ("base", ["agentr1_core", "agentr1_core.errors", "agentr1_core.kinds", "agentr1_core.specs",
              "agentr1_core.params", "agentr1_core.declared", "agentr1_core.hookspecs", "agentr1_core.mdp",
              "agentr1_core.tools", "agentr1_core.tool_formats", "agentr1_core.rows", "agentr1_core.jsonl",
              "agentr1_core.memory", "agentr1_core.trust", "agentr1_core.fetch", "agentr1_core.attention",
              "agentr1_core.cpu_linears", "agentr1_core.models", "agentr1_core.validation",
              "agentr1_core.named_configs", "agentr1_core.http_service", "agentr1_core.pass_at_k"]),
    ("run files", ["agentr1_core.lifecycle"]),
    ("engines and algorithms", ["agentr1_core.rollout", "agentr1_core.algorithms"]),
    ("front door", ["agentr1_core.plugins", "agentr1_core.components", "agentr1_core.config", "agentr1_core.builtin",
                    "agentr1_core.envs", "agentr1_core.flows", "agentr1_core.preflight", "agentr1_core.tool_rows",
                    "agentr1_core.tool_sources", "agentr1_core.sandbox"]),
    ("backends", ["agentr1_core.trainers", "agentr1_core.distributed", "agentr1_core.verl"]),
    ("commands", ["agentr1_core.cli", "agentr1_core.runner", "agentr1_core.evaluate", "agentr1_core.scaffold",
                  "agentr1_core.testing"]),
]


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (a package is its ``__init__``)."""
    found = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module name a ``from`` import refers to (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _nearest(name: str, modules: dict[str, Path]) -> str | None:
    """``name`` or its closest enclosing module of the package (``a.b.attr`` -> ``a.b``)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(name, is_package, node)
                targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                           for alias in node.names]
            for target in targets:
                if target.split(".")[0] != PACKAGE:
                    continue
                found = _nearest(target, modules)
                if found is not None and found != name:
                    edges.add(found)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle ``[a, b, ..., a]`` of ``graph``, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def all_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected knot: remove an edge of each cycle found and look again."""
    graph = {k: set(v) for k, v in graph.items()}
    cycles = []
    while (cycle := find_cycle(graph)) is not None:
        cycles.append(cycle)
        graph[cycle[-2]].discard(cycle[-1])
    return cycles


def test_the_graph_sees_deferred_and_relative_imports():
    graph = import_graph()
    assert "agentr1_core.plugins" in graph["agentr1_core.cli"]
    assert "agentr1_core.specs" in graph["agentr1_core.plugins"]


def test_cycle_finder():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles():
    cycles = all_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def floor_of(module: str) -> int:
    """The index in ``FLOORS`` of ``module``: the floor of its longest listed prefix."""
    best, level = -1, None
    for index, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, level = len(prefix), index
    assert level is not None, f"{module} is on no floor: add it to FLOORS and to docs/architecture.md"
    return level


def test_every_module_is_on_a_floor():
    for module in import_graph():
        floor_of(module)


def test_no_import_goes_back_up_a_floor():
    graph = import_graph()
    upward = sorted(f"{a} ({FLOORS[floor_of(a)][0]}) imports {b} ({FLOORS[floor_of(b)][0]})"
                    for a, targets in graph.items() for b in targets if floor_of(b) > floor_of(a))
    assert not upward, "imports that go up a floor:\n" + "\n".join(upward)


def test_lifecycle_is_a_leaf_over_the_base():
    graph = import_graph()
    for module, targets in graph.items():
        if module.startswith("agentr1_core.lifecycle"):
            above = [t for t in targets if not t.startswith("agentr1_core.lifecycle") and floor_of(t) != 0]
            assert not above, f"{module} imports {above}"


def test_the_floor_check_sees_an_upward_import():
    assert floor_of("agentr1_core.rollout.transformers_engine") < floor_of("agentr1_core.trainers.loop")
    assert floor_of("agentr1_core.lifecycle.checkpoint") == 1 and floor_of("agentr1_core.memory") == 0
