"""Fixtures for the distributed tests: a tiny random Llama with the real SmolLM2 tokenizer, and a local Ray cluster.

The tiny model (2 layers, hidden 128, head dim 64: the smallest vLLM's CPU attention accepts) is for tests about orchestration, where the model's quality does not matter;
its tokenizer and chat template are SmolLM2's, so prompts are rendered exactly as in a real run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentr1_core.testing.ci import missing

VERL_PYTHON = Path(__file__).resolve().parents[2] / ".venv-verl" / "bin" / "python"


@pytest.fixture(scope="module", autouse=True)
def one_ray_at_a_time(ray_lock):
    """These modules start Ray, verl and vLLM: one module at a time on the machine (see ``ray_lock``)."""
    with ray_lock():
        yield


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smol_tokenizer):
    from agentr1_core.testing.models import save_tiny_llama

    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama-128"), smol_tokenizer, hidden_size=128, num_heads=2,
                           num_kv_heads=1)


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="the Ray backend needs the extra agentr1-core[ray]")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024 * 1024, namespace="agentr1-test",
             log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def verl_python() -> Path:
    """verl's own environment (``bash scripts/setup_verl.sh``): missing, it skips here and fails in CI."""
    if not VERL_PYTHON.is_file():
        missing(f"{VERL_PYTHON} is missing (create it with: bash scripts/setup_verl.sh)")
    return VERL_PYTHON
