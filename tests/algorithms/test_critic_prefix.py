"""The asymmetric critic's prefix (``critic.prefix``): rendered from a row, tokenised once and joined by token ids;
read by the critic only, at the value positions it reads without one.

Rendering and checks use the real SmolLM2 tokenizer; the critic passes a tiny random Llama with that tokenizer and a
random (non-zero) value head, so that a value that moved shows. The same bad prefixes through the CLI (one line,
exit code 2, before the model loads) are cases of ``tests/cli/test_bad_input.py``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from agentr1_core.algorithms.components import ALGORITHM_CLASSES
from agentr1_core.algorithms.critic_prefix import CriticPrefixes, PrefixSpec, critic_prefixes, render
from agentr1_core.config import ConfigError, load_config
from agentr1_core.flows import render_prompt
from agentr1_core.mdp import Observation, Step, Trajectory
from agentr1_core.rollout.driver import task_id
from agentr1_core.testing.models import tiny_llama
from agentr1_core.trainers.batching import build_step_batch, critic_view, trajectories_to_rows
from agentr1_core.trainers.roles import bootstrap_values
from agentr1_core.trainers.update import Critic, Policy, UpdateSettings, policy_update, score_batch

CLI = str(Path(sys.executable).parent / "agentr1-core")
STEPPO = ALGORITHM_CLASSES["steppo"]()
GSM_ROW = {"prompt": "Tom has 3 apples and buys 4. How many?", "data_source": "gsm8k",
           "reward_model": {"ground_truth": "7"},
           "extra_info": {"question": "Tom has 3 apples and buys 4. How many?", "solution": "3+4=<<3+4=7>>7\n#### 7",
                          "index": 12, "critic_prefix": "The answer is 7."}}


def spec(**node) -> PrefixSpec | None:
    return PrefixSpec.from_config(OmegaConf.create({"critic": {"prefix": node}}))


def cfg_with(algorithm: str = "steppo", **node):
    return OmegaConf.create({"algorithm": {"name": algorithm}, "model": {"path": "unused"},
                             "critic": {"prefix": node}})


# -- rendering ----------------------------------------------------------------------------------------------------
def test_template_reads_named_variables_and_dotted_paths():
    template = ("[{data_source}] Q: {question} | truth {ground_truth} | {reference_solution} | "
                "row {extra_info.index} {{literal}}")
    text = render(spec(template=template), GSM_ROW)
    assert text == ("[gsm8k] Q: Tom has 3 apples and buys 4. How many? | truth 7 | 3+4=<<3+4=7>>7\n#### 7 | "
                    "row 12 {literal}")


def test_named_variables_fall_back_to_their_other_sources():
    row = {"prompt": "What is 6*7?", "reward_model": {"ground_truth": 42}, "extra_info": {"answer": "6*7=42"}}
    assert render(spec(template="{question}|{reference_solution}|{ground_truth}"), row) == "What is 6*7?|6*7=42|42"


def test_field_mode_reads_one_field_and_an_empty_string_is_an_empty_prefix(smol_tokenizer):
    s = spec(field="extra_info.critic_prefix")
    assert render(s, GSM_ROW) == "The answer is 7."
    empty = {**GSM_ROW, "extra_info": {**GSM_ROW["extra_info"], "critic_prefix": ""}}
    built = CriticPrefixes.build(s, smol_tokenizer, [empty])
    assert built.by_task == {task_id(empty): []}


def test_no_template_and_no_field_means_no_prefix():
    assert spec() is None and spec(max_tokens=10) is None


@pytest.mark.parametrize("node,rows,match", [
    ({"template": "truth {answer_key}"}, [GSM_ROW], r"training row 0 .*\{answer_key\} is missing.*named variables"),
    ({"template": "truth {ground_truth}"}, [GSM_ROW, {"prompt": "x", "reward_model": {}}],
     r"training row 1 .*\{ground_truth\} is missing"),
    ({"template": "truth {ground_truth}"}, [{"prompt": "x", "reward_model": {"ground_truth": [7, 8]}}],
     r"\{ground_truth\} \(reward_model.ground_truth\) is a list, not text"),
    ({"template": "{extra_info}"}, [GSM_ROW], r"\{extra_info\} \(extra_info\) is a dict"),
    ({"field": "extra_info.missing"}, [GSM_ROW], r"field 'extra_info.missing' is missing"),
    ({"template": "truth {ground_truth:>5}"}, [GSM_ROW], r"format specs are not allowed"),
    ({"template": "truth {ground_truth!r}"}, [GSM_ROW], r"conversions and format specs"),
    ({"template": "truth {}"}, [GSM_ROW], r"has no name"),
    ({"template": "truth {extra_info[index]}"}, [GSM_ROW], r"dotted path"),
    ({"template": "truth {ground_truth", }, [GSM_ROW], r"template is not valid"),
    ({"template": "a", "field": "b"}, [GSM_ROW], r"either template or field"),
    ({"template": "The answer is {ground_truth}.", "max_tokens": 3}, [GSM_ROW],
     r"training row 0 .*the prefix has 6 tokens, more than max_tokens=3 \(it is never cut"),
])
def test_bad_prefixes_are_one_line_config_errors(node, rows, match, smol_tokenizer):
    with pytest.raises(ConfigError, match=match) as err:
        critic_prefixes(cfg_with(**node), STEPPO, rows, smol_tokenizer)
    assert "\n" not in str(err.value) and str(err.value).startswith("config error at critic.prefix: ")


@pytest.mark.parametrize("algorithm", ["grpo", "rloo", "remax"])
def test_a_prefix_with_a_critic_free_estimator_is_an_error(algorithm):
    from agentr1_core.plugins import get_registry

    algo = get_registry().build("algorithm", algorithm, {}, where="algorithm")
    with pytest.raises(ConfigError, match=f"algorithm '{algorithm}' has no critic.*ppo, steppo"):
        critic_prefixes(cfg_with(algorithm, template="{ground_truth}"), algo, [GSM_ROW], tokenizer=object())


def test_two_rows_with_one_id_and_different_prefixes_are_an_error(smol_tokenizer):
    a = {"id": "q1", "prompt": "x", "reward_model": {"ground_truth": "1"}}
    b = {"id": "q1", "prompt": "y", "reward_model": {"ground_truth": "2"}}
    with pytest.raises(ConfigError, match="rows 0 and 1 share the task id 'q1'"):
        critic_prefixes(cfg_with(template="{ground_truth}"), STEPPO, [a, b], smol_tokenizer)
    same = critic_prefixes(cfg_with(template="{ground_truth}"), STEPPO, [a, {**a}], smol_tokenizer)
    assert list(same.by_task) == ["q1"]


# -- tokenised once, joined by token ids ------------------------------------------------------------------------------
def test_the_prefix_is_tokenised_on_its_own_and_joined_by_ids(smol_tokenizer, tmp_path):
    prefixes = critic_prefixes(cfg_with(template="Answer: {ground_truth}\n"), STEPPO, [GSM_ROW], smol_tokenizer)
    want = smol_tokenizer.encode("Answer: 7\n", add_special_tokens=False)
    assert prefixes.by_task == {task_id(GSM_ROW): want} and len(want) > 0
    traj = Trajectory(steps=[Step([11, 12, 13], [14, 15], [-1.0, -1.0]), Step([11, 12, 13, 14, 15, 16], [17], [-1.0])],
                      uid="g/0", group_id="g")
    traj.info["task_id"] = task_id(GSM_ROW)
    rows = trajectories_to_rows([traj]).rows
    metrics = prefixes.attach(rows, [traj])
    assert metrics["critic_prefix_tokens_mean"] == len(want)
    for row, prompt in zip(rows, ([11, 12, 13], [11, 12, 13, 14, 15, 16])):
        assert row.prompt_ids == prompt  # the actor's rows are untouched
        view = critic_view(row)
        assert view.prompt_ids == want + prompt and view.response_ids == row.response_ids
    record = json.loads(prefixes.record(tmp_path).read_text())
    body = {"template": "Answer: {ground_truth}\n", "field": None, "max_tokens": 256}
    assert record["sha256"] == hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    assert record["template"] == body["template"] and record["tokens_max"] == len(want)
    other = critic_prefixes(cfg_with(template="Answer: {ground_truth}"), STEPPO, [GSM_ROW], smol_tokenizer)
    assert other.spec.describe()["sha256"] != record["sha256"]


# -- the critic reads the prefix, nothing else does ------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_model(smol_tokenizer):
    return tiny_llama(smol_tokenizer)


PREFIX = [301, 302, 303, 304, 305]


def step_rows(prefix: list[int] | None, joined: bool = False):
    """Two trajectories of two and one steps; ``prefix`` on every row as ``critic_prefix_ids`` (None: no feature),
    or, with ``joined``, written into the prompts themselves (what the critic must read with the feature)."""
    gen = torch.Generator().manual_seed(5)
    trajs = []
    for t, shape in enumerate([((6, 3), (11, 2)), ((8, 4),)]):
        steps = []
        for p, r in shape:
            prompt = torch.randint(10, 2000, (p,), generator=gen).tolist()
            resp = torch.randint(10, 2000, (r,), generator=gen).tolist()
            steps.append(Step((PREFIX if joined else []) + prompt, resp, [-1.0] * r, reward=float(t)))
        steps[-1].done = True
        trajs.append(Trajectory(steps=steps, uid=f"t{t}", group_id="g"))
    rows = trajectories_to_rows(trajs).rows
    for row in rows:
        row.critic_prefix_ids = list(prefix) if prefix is not None else None
    return rows, build_step_batch(rows)


def make_policy(model, separate: bool, seed: int = 3) -> Policy:
    torch.manual_seed(seed)
    head = torch.nn.Linear(model.config.hidden_size, 1)
    actor = copy.deepcopy(model)
    if not separate:
        return Policy(model=actor, pad_id=0, value_head=head, params=list(actor.parameters()) + list(head.parameters()))
    cm = copy.deepcopy(model)
    cparams = list(cm.parameters()) + list(head.parameters())
    critic = Critic(model=cm, head=head, optimizer=torch.optim.SGD(cparams, lr=1.0), params=cparams,
                    max_grad_norm=0.0)
    return Policy(model=actor, pad_id=0, critic=critic, params=list(actor.parameters()))


def scored(policy, rows, batch, share_prefix: int = 0):
    b = copy.deepcopy(batch)
    policy.share_prefix = share_prefix
    policy.ref_model = policy.model
    score_batch(policy, rows, b, 2, 1.0, recompute_old=True, need_ref=True, need_values=True)
    return b


@pytest.mark.parametrize("separate", [False, True], ids=["head_on_trunk", "separate_critic"])
def test_a_zero_length_prefix_reads_the_values_of_no_prefix(tiny_model, separate):
    """The prefix pass with no prefix tokens gives each step the value the critic gives without the feature (the
    joint pass on the trunk, or the separate critic's pass over the whole row): the value positions line up."""
    policy = make_policy(tiny_model, separate)
    plain_rows, batch = step_rows(None)
    empty_rows, _ = step_rows([])
    plain, empty = scored(policy, plain_rows, batch), scored(policy, empty_rows, batch)
    assert plain.values.abs().min() > 1e-3  # a random head: values that would show a shifted position
    assert torch.allclose(empty.values, plain.values, atol=1e-5, rtol=0)
    assert torch.equal(empty.old_logprobs, plain.old_logprobs) and torch.equal(empty.ref_logprobs, plain.ref_logprobs)


@pytest.mark.parametrize("separate", [False, True], ids=["head_on_trunk", "separate_critic"])
@pytest.mark.parametrize("share_prefix", [0, 4])
def test_a_prefix_changes_only_the_critics_inputs(tiny_model, separate, share_prefix):
    """Values with the prefix are the critic's values of the prompts with the prefix ids written in front; the
    actor's recomputed and reference log-probs are those without the prefix, bit for bit."""
    policy = make_policy(tiny_model, separate)
    plain_rows, batch = step_rows(None)
    rows, _ = step_rows(PREFIX)
    joined_rows, joined_batch = step_rows(None, joined=True)
    plain, got = scored(policy, plain_rows, batch, share_prefix), scored(policy, rows, batch, share_prefix)
    joined = scored(policy, joined_rows, joined_batch, share_prefix)
    assert torch.equal(got.old_logprobs, plain.old_logprobs) and torch.equal(got.ref_logprobs, plain.ref_logprobs)
    assert torch.allclose(got.values, joined.values, atol=1e-5, rtol=0)
    assert (got.values - plain.values).abs().min() > 1e-4  # every step's value moved
    assert [r.prompt_ids for r in rows] == [r.prompt_ids for r in plain_rows]


def update(policy, rows, batch):
    """One StepPO update (plain SGD at lr 1) from fixed values and rewards; returns the metrics."""
    b = copy.deepcopy(batch)
    b.values = torch.tensor([0.1, -0.2, 0.3])
    b.old_logprobs = scored(policy, rows, batch).old_logprobs
    algo = ALGORITHM_CLASSES["steppo"](loss_type="ppo", clip_ratio=0.2, loss_agg="token-mean")
    adv = algo.compute_advantages(b)
    params = policy.params
    return policy_update(policy, algo, torch.optim.SGD(params, lr=1.0), rows, b, adv.advantages, adv.returns,
                         UpdateSettings(micro_batch_size=2, max_grad_norm=0.0, progress=False))


def test_with_a_separate_critic_the_prefix_leaves_the_policy_update_alone(tiny_model):
    plain_rows, batch = step_rows(None)
    rows, _ = step_rows(PREFIX)
    plain_policy, policy = make_policy(tiny_model, True), make_policy(tiny_model, True)
    plain_m, m = update(plain_policy, plain_rows, batch), update(policy, rows, batch)
    for a, b in zip(plain_policy.model.parameters(), policy.model.parameters()):
        assert torch.equal(a, b)
    critic_gap = sum(float((a - b).detach().abs().sum()) for a, b in zip(plain_policy.critic.model.parameters(),
                                                                  policy.critic.model.parameters()))
    assert critic_gap > 0 and m["vf_loss"] != plain_m["vf_loss"]


def test_with_the_head_on_the_trunk_the_policy_pass_is_unchanged(tiny_model):
    """The policy's own loss terms are those without the prefix; only the value loss (its own prefixed pass through
    the shared trunk) differs."""
    plain_rows, batch = step_rows(None)
    rows, _ = step_rows(PREFIX)
    plain_m = update(make_policy(tiny_model, False), plain_rows, batch)
    m = update(make_policy(tiny_model, False), rows, batch)
    for key in ("pg_loss", "entropy", "clip_fraction", "approx_kl"):
        assert m[key] == pytest.approx(plain_m[key], abs=1e-7), key
    assert m["vf_loss"] != pytest.approx(plain_m["vf_loss"], abs=1e-6)


def test_bootstrap_values_read_the_next_observation_after_the_prefix(tiny_model, smol_tokenizer):
    policy = make_policy(tiny_model, False)
    nxt = Observation(text="Calculator result: 42")
    traj = Trajectory(steps=[Step([5, 6, 7], [8, 9], [-1.0, -1.0], next_observation=nxt, truncated=True)], uid="x")
    rows = trajectories_to_rows([traj]).rows
    rows[0].critic_prefix_ids = list(PREFIX)
    boot, from_obs = bootstrap_values(policy, [traj], rows, torch.zeros(1), smol_tokenizer, micro_batch_size=1)
    ids = PREFIX + render_prompt(smol_tokenizer, nxt)
    with torch.no_grad():
        hidden = policy.model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[-1]
        expected = policy.value_head(hidden[0, -1]).item()
    assert from_obs == 1 and boot[0].item() == pytest.approx(expected, abs=1e-5)


# -- the config ------------------------------------------------------------------------------------------------------
def test_the_config_accepts_a_prefix_from_yaml_and_dotlist(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("base: tiny\ncritic:\n  prefix:\n    template: \"Answer: {ground_truth}\\n\"\n    max_tokens: 16\n")
    cfg = load_config(str(path), ["critic.prefix.max_tokens=32"])
    assert PrefixSpec.from_config(cfg) == PrefixSpec(template="Answer: {ground_truth}\n", max_tokens=32)
    with pytest.raises(ConfigError, match="critic.prefix.colour"):
        load_config(str(path), ["critic.prefix.colour=1"])


@pytest.mark.slow
def test_steppo_with_a_critic_prefix_on_the_local_backend(tiny_model_dir, tmp_path):
    """The CLI end to end: the prefix of every training row is checked and recorded, every step row the critic
    reads carries its row's prefix, and the update runs with the critic's own pass."""
    run_dir = tmp_path / "run"
    template = "The correct answer is {ground_truth}. "
    args = ["run", "tiny", f"model.path={tiny_model_dir}", f"run_dir={run_dir}", "algorithm.name=steppo",
            "stages=[rl]", "data.val=null", "trainer.total_steps=1", "trainer.checkpoint_every=-1",
            "algorithm.entropy_coef=0.01", f"critic.prefix.template='{template}'", "critic.prefix.max_tokens=32"]
    env = {**os.environ, "TQDM_DISABLE": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([CLI, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    record = json.loads((run_dir / "critic_prefix.json").read_text())
    assert record["template"] == template and record["rows"] == 16 and 6 <= record["tokens_max"] <= 32
    assert f"critic prefix {record['sha256'][:12]} on 16 rows" in proc.stdout
    [it] = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if '"iteration"' in line and '"event"' not in line]
    assert record["tokens_mean"] - 2 <= it["critic_prefix_tokens_mean"] <= record["tokens_max"]
    assert it["train_steps"] > 0 and math.isfinite(it["vf_loss"]) and it["weight_change"] > 0
