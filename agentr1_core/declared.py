"""What installed distributions declare in their packaging metadata, read without importing them.

A plugin distribution lists every component its hooks register (configs aside, see ``agentr1_core.kinds``) in the
``agentr1.components`` entry-point group, ``KIND.NAME = plugin.module``::

    [project.entry-points."agentr1.components"]
    "env.webshop" = "agentr1_env_webshop.plugin"

so that a run naming a component that did not load can say which distribution has it and why it is missing
(blocked, failed to import), instead of the core naming other distributions' components. The extras of a
distribution (``agentr1-core[vllm]``) come from its ``Requires-Dist`` metadata.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata

GROUP = "agentr1.components"


@dataclass(frozen=True)
class Declaration:
    kind: str
    name: str
    distribution: str
    module: str


def canonical(name: str) -> str:
    """A distribution name compared the way packaging does (``Agentr1_Env.Webshop`` -> ``agentr1-env-webshop``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def declarations() -> list[Declaration]:
    """Every ``agentr1.components`` entry of every installed distribution."""
    found = []
    for ep in metadata.entry_points(group=GROUP):
        kind, _, name = ep.name.partition(".")
        dist = ep.dist.name if ep.dist is not None else "unknown"
        found.append(Declaration(kind, name, dist, ep.value))
    return found


def declared_by(kind: str, name: str) -> list[Declaration]:
    return [d for d in declarations() if (d.kind, d.name) == (kind, name)]


def extra_with(distribution: str, module: str, prefer: str = "") -> str | None:
    """The extra of ``distribution`` that installs the top-level ``module`` (matched by distribution name), or None;
    of several, the one named ``prefer`` (the component's name) or ``module``."""
    try:
        requires = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return None
    wanted = canonical(module.partition(".")[0])
    extras = []
    for requirement in requires:
        name = re.match(r"[A-Za-z0-9._-]+", requirement)
        extra = re.search(r"""extra\s*==\s*['"]([^'"]+)['"]""", requirement)
        if name and extra and canonical(name[0]) == wanted:
            extras.append(extra[1])
    if not extras:
        return None
    return next((e for e in (prefer, wanted) if e in extras), sorted(extras)[0])
