"""The ``Backend`` protocol declares every member the training loop uses, and every backend implements each of them.

Read from the source with ``ast``: every ``backend.X`` / ``self.backend.X`` in the loop and its rollout sources must
be a member of ``trainers.backend.Backend``, and ``local``, ``ray`` and ``verl`` define every member on their class
(``device`` once constructed), so the loop needs no ``getattr(backend, ..., default)``. The behaviour behind them is
the conformance suite's (``tests/distributed/test_backend_conformance.py``).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from agentr1_core.trainers import backend as backend_module
from agentr1_core.trainers.backend import Backend

ROOT = Path(__file__).resolve().parents[2]
LOOP_FILES = ["agentr1_core/trainers/loop.py", "agentr1_core/trainers/pipeline.py"]


def protocol_members() -> set[str]:
    methods = {name for name, value in vars(Backend).items()
               if inspect.isfunction(value) and not name.startswith("_")}
    return methods | set(getattr(Backend, "__annotations__", {}))


def members_used_by_the_loop() -> dict[str, set[str]]:
    used: dict[str, set[str]] = {}
    for file in LOOP_FILES:
        for node in ast.walk(ast.parse((ROOT / file).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute):
                owner = node.value
                name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
                if name == "backend":
                    used.setdefault(node.attr, set()).add(file)
    return used


def test_the_loop_uses_only_what_the_protocol_declares():
    used = members_used_by_the_loop()
    assert {"rollout", "rl_update", "memory_parts", "device"} <= set(used)  # the scan sees the loop's calls
    undeclared = {name: sorted(files) for name, files in used.items() if name not in protocol_members()}
    assert not undeclared, f"the loop uses backend members the protocol does not declare: {undeclared}"


def test_the_loop_asks_no_backend_member_for_a_default():
    for file in LOOP_FILES:
        source = (ROOT / file).read_text(encoding="utf-8")
        assert "getattr(self.backend" not in source and "getattr(backend" not in source, file


def _backends() -> dict[str, type]:
    from agentr1_core.distributed.ray_trainer import RayBackend
    from agentr1_core.trainers.local import LocalBackend
    from agentr1_core.verl.trainer import VerlBackend

    return {"local": LocalBackend, "ray": RayBackend, "verl": VerlBackend}


@pytest.mark.parametrize("name", ["local", "ray", "verl"])
def test_every_backend_defines_every_member(name, tiny_model_dir):
    from agentr1_core.config import load_config

    cls = _backends()[name]
    methods = protocol_members() - set(getattr(Backend, "__annotations__", {}))
    missing = sorted(m for m in methods if not callable(getattr(cls, m, None)))
    assert not missing, f"{cls.__name__} lacks {missing}"
    cfg = load_config("tiny", [f"model.path={tiny_model_dir}", f"trainer.name={name}"])
    if name == "ray":
        from agentr1_core.distributed.settings import ClusterSettings

        instance = cls(cfg, None, {}, ClusterSettings(), "test-run")
    else:
        instance = cls(cfg, None)
    assert isinstance(instance.device, str) and isinstance(instance, Backend)


def test_the_protocol_lists_what_its_docstring_promises():
    assert {"device", "memory_parts", "release_optimizer_state", "take_snapshot_metrics"} <= protocol_members()
    assert "conformance" in (backend_module.Backend.__doc__ or "")
