"""Named run configs that installed distributions ship as package data, and the ``package_data`` resolver.

A distribution contributes configs through the ``agentr1_configs`` hook; ``package_configs(package)`` turns every
``<package>/configs/*.yaml`` into a ``ConfigSpec`` named after its file (``webshop.yaml`` -> ``webshop``), so a file
added to that folder is available without code changes. Looking a name up (``agentr1-core run NAME``,
``base: NAME``) is ``config.find_config``.

Configs point at data shipped inside a package with ``${package_data:PACKAGE,relative/path}``, which resolves to
the absolute path of that file or folder in the installed package (never a path relative to the working directory);
``${oc.env:VAR,${package_data:...}}`` lets an environment variable point at the full data instead.

This module reads no YAML, imports no heavy library and knows nothing of the registry; loading and merging configs is
``agentr1_core.config``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from omegaconf import OmegaConf

from agentr1_core.specs import ConfigSpec

CONFIG_FOLDER = "configs"


def _description(path: Path) -> str:
    """The first comment line of a YAML file (its one-line summary), without the ``#``."""
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                text = line.strip()
                if text.startswith("#"):
                    return text.lstrip("#").strip().rstrip(":")
                if text:
                    break
    except OSError:
        pass
    return f"config {path.name}"


def package_configs(package: str) -> list[ConfigSpec]:
    """One ``ConfigSpec`` per ``<package>/configs/*.yaml`` (call it from an ``agentr1_configs`` hookimpl)."""
    folder = resources.files(package).joinpath(CONFIG_FOLDER)
    if not folder.is_dir():
        return []
    specs = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml") and entry.is_file():
            name = entry.name[: -len(".yaml")]
            specs.append(ConfigSpec(name, f"{package}:{CONFIG_FOLDER}/{entry.name}", _description(Path(str(entry)))))
    return specs


def package_data(package: str, relative: str = "") -> str:
    """Absolute path of ``relative`` inside the installed ``package`` (the ``${package_data:...}`` resolver)."""
    try:
        root = resources.files(str(package))
    except ModuleNotFoundError as exc:
        raise ValueError(f"package_data: package {package!r} is not installed") from exc
    target = Path(str(root.joinpath(str(relative)))) if relative else Path(str(root))
    if not target.exists():
        raise ValueError(f"package_data: {relative!r} is not shipped in {package} (looked for {target})")
    return str(target)


if not OmegaConf.has_resolver("package_data"):  # register_resolver since omegaconf 2.4, the older name before
    _register = getattr(OmegaConf, "register_resolver", None) or OmegaConf.register_new_resolver
    _register("package_data", package_data)
