"""Rollout engines that cannot generate stop the run with one clear error instead of iterations of empty episodes.

Real Ray workers with the transformers engine (the failure handling is the same for every engine; the vLLM-specific
part, a dead vLLM core process, is checked in ``test_vllm_engine.py``): a worker whose engine cannot load, and an
engine configured so that it refuses every request (a context window smaller than any prompt).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

SMALL = ["stages=[rl]", "data.val=null", "rollout.batch_size=2", "rollout.n=2", "rollout.max_new_tokens=8",
         "trainer.total_steps=1", "trainer.params.rollout_workers=1", "trainer.params.worker_cpus=0.5"]


def test_a_worker_whose_engine_cannot_load_stops_the_pool_with_its_reason(ray_cluster, tmp_path):
    from omegaconf import OmegaConf

    from agentr1_core.config import load_config
    from agentr1_core.distributed.pool import RolloutEngineError, RolloutPool
    from agentr1_core.distributed.settings import ClusterSettings

    missing = tmp_path / "no-such-model"
    cfg = OmegaConf.to_container(load_config("default", [f"model.path={missing}"]), resolve=True)
    with pytest.raises(RolloutEngineError, match=r"rollout worker 0 could not start engine 'transformers': .*"
                                                 r"no-such-model") as info:
        RolloutPool(cfg, ClusterSettings(rollout_workers=1, worker_cpus=0.5), run_name="broken-engine")
    assert "\n" not in str(info.value)


def test_an_engine_that_refuses_every_request_stops_the_ray_run(ray_cluster, tmp_path, tiny_model_dir):
    from agentr1_core.config import load_config
    from agentr1_core.distributed.pool import RolloutEngineError
    from agentr1_core.errors import UserError
    from agentr1_core.runner import run

    cfg = load_config("default", SMALL + [f"model.path={tiny_model_dir}", f"run_dir={tmp_path / 'run'}",
                                          "trainer.name=ray", "engine.max_context=8"])
    with pytest.raises(RolloutEngineError, match=r"every one of the 4 episodes of 'rollout 1' ended with an engine "
                                                 r"error before its first step; last error: .*") as info:
        run(cfg)
    assert isinstance(info.value, UserError)  # the CLI prints it as one line and exits with code 2
    assert "\n" not in str(info.value) and "Traceback" not in str(info.value)
