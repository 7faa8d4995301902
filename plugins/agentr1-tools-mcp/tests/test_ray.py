"""The ``ray`` backend with two rollout workers: each worker starts its own MCP server (the example calculator,
which logs the process that started it), the expert episodes the workers play call it, and no server outlives the
run. A tiny random Llama with SmolLM2's tokenizer: what is tested is where the servers run, not what is learnt."""

from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_cluster(ray_lock):
    import ray

    with ray_lock():
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024 * 1024,
                 namespace="agentr1-mcp-test", log_to_driver=False)
        try:
            yield ray
        finally:
            ray.shutdown()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, smol_tokenizer) -> str:
    from agentr1_core.testing.models import save_tiny_llama

    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama-128"), smol_tokenizer, hidden_size=128, num_heads=2,
                           num_kv_heads=1)


def test_each_rollout_worker_starts_its_own_server(ray_cluster, tiny_model, tmp_path, toolbox, processes):
    from agentr1_core.config import load_config
    from agentr1_core.runner import run

    log = tmp_path / "servers.log"
    overrides = [f"model.path={tiny_model}", f"run_dir={tmp_path / 'run'}", "stages=[sft, rl]",
                 "validation.before=false", "data.val=null", "sft.rows=8", "sft.batch_size=8",
                 "trainer.total_steps=1", "rollout.max_new_tokens=16",
                 f"mcp.servers.calc={{command: python, args: [{toolbox.servers / 'logged_calculator.py'}, {log}]}}",
                 "env.tools=[mcp:calc]", "trainer.name=ray", "trainer.params.rollout_workers=2",
                 "trainer.params.worker_cpus=0.5"]
    run(load_config("tiny", overrides))
    started = [tuple(map(int, line.split())) for line in log.read_text().splitlines()]
    elsewhere = [parent for _, parent in started if parent != os.getpid()]  # not the checks before the run
    assert len(elsewhere) == len(set(elsewhere)) == 2, started  # the two workers, one server each
    sft = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
           if '"event": "sft"' in line][0]
    assert sft["expert_episodes"] == 8 and sft["expert_success_rate"] == 1.0  # each call answered by a server...
    assert sft["expert_tool_errors"] == {}  # ...of a worker: the episodes ran there
    assert processes.wait_until_gone([pid for pid, _ in started]) == []
