"""Fast checks of the opd component: registration, parameters, advantages (clip, masks, mixing), tokenizer check and
teacher prompts with the real SmolLM2 tokenizer."""

from __future__ import annotations

import pytest
import torch

from agentr1_core.algorithms.base import StepBatch
from agentr1_core.algorithms.components import GRPO
from agentr1_core.components import check_components
from agentr1_core.config import ConfigError, load_config
from agentr1_core.flows import render_prompt
from agentr1_core.mdp import Observation, Step
from agentr1_core.plugins import configure_registry, get_registry
from agentr1_core.trainers.batching import StepRow
from agentr1_opd.algorithm import OnPolicyDistillation
from agentr1_opd.teacher import (
    Teacher, TokenizerMismatchError, check_tokenizers, ground_truth_text, teacher_prompt, tokenizer_mismatch,
)



def make_batch(old, teacher, mask, rewards=(0.0, 1.0), groups=(0, 0)) -> StepBatch:
    s = len(old)
    return StepBatch(
        traj_ids=torch.arange(s), group_ids=torch.tensor(groups), step_index=torch.zeros(s, dtype=torch.long),
        rewards=torch.tensor(rewards), dones=torch.ones(s, dtype=torch.bool),
        truncated=torch.zeros(s, dtype=torch.bool), action_mask=torch.tensor(mask),
        old_logprobs=torch.tensor(old), teacher_logprobs=torch.tensor(teacher))


def test_opd_is_registered_by_its_own_distribution():
    reg = get_registry()
    assert reg.components["algorithm"]["opd"].distribution == "agentr1-opd"
    assert "opd-student" in reg.names("command")
    assert reg.load("algorithm", "opd") is OnPolicyDistillation


def test_the_opd_recipe_config_validates():
    cfg = load_config("opd")
    check_components(cfg, configure_registry(cfg.plugins.allow, cfg.plugins.block))
    assert cfg.algorithm.name == "opd" and float(cfg.rollout.temperature) == 1.0


def test_bad_parameters_are_clear_errors():
    with pytest.raises(ValueError, match="context"):
        OnPolicyDistillation(context="secret")
    with pytest.raises(ValueError, match="clip_log_ratio"):
        OnPolicyDistillation(clip_log_ratio=0.0)
    with pytest.raises(ValueError, match="not opd"):
        OnPolicyDistillation(mix_algorithm="opd")
    cfg = load_config("opd", ["algorithm.teacher_temp=2"])
    with pytest.raises(ConfigError, match="teacher_temp"):
        check_components(cfg, configure_registry(cfg.plugins.allow, cfg.plugins.block))


def test_advantage_is_the_clipped_teacher_student_log_ratio_on_action_tokens():
    nan = float("nan")
    batch = make_batch(old=[[-1.0, -2.0, -0.5], [-3.0, -1.0, 0.0]],
                       teacher=[[-0.5, -9.0, nan], [-1.0, nan, -4.0]],
                       mask=[[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    out = OnPolicyDistillation(clip_log_ratio=5.0).compute_advantages(batch)
    expected = torch.tensor([[0.5, -5.0, 0.0], [2.0, 0.0, 0.0]])  # -7 clipped; NaN teacher and padding give 0
    assert torch.allclose(out.advantages, expected)
    assert torch.allclose(out.returns, torch.tensor([-4.5, 2.0]))


def test_without_teacher_logprobs_advantages_refuse():
    batch = make_batch(old=[[-1.0]], teacher=[[-1.0]], mask=[[1.0]], rewards=(0.0,), groups=(0,))
    batch.teacher_logprobs = None
    with pytest.raises(ValueError, match="prepare_batch"):
        OnPolicyDistillation().compute_advantages(batch)


def test_mixing_adds_the_weighted_env_reward_advantage():
    batch = make_batch(old=[[-1.0, -1.0], [-2.0, 0.0]], teacher=[[-0.5, -1.5], [-1.0, 0.0]],
                       mask=[[1.0, 1.0], [1.0, 0.0]])
    alone = OnPolicyDistillation().compute_advantages(batch).advantages
    grpo = GRPO().compute_advantages(batch)
    mixed = OnPolicyDistillation(mix_algorithm="grpo", mix_weight=0.5).compute_advantages(batch)
    assert torch.allclose(mixed.advantages, alone + 0.5 * grpo.advantages * batch.action_mask)
    assert torch.allclose(mixed.returns, grpo.returns)
    assert not torch.allclose(mixed.advantages, alone)


def test_mixing_with_a_critic_algorithm_takes_its_critic():
    algo = OnPolicyDistillation(mix_algorithm="steppo", mix_params={"gamma": 0.9})
    assert algo.needs_critic and algo.mix.gamma == 0.9
    assert not OnPolicyDistillation().needs_critic
    with pytest.raises(NotImplementedError):
        OnPolicyDistillation().value_loss(torch.zeros(1), None, torch.zeros(1))


def test_metrics_report_reverse_kl_and_the_agreement_bound():
    batch = make_batch(old=[[-1.0, -2.0], [-0.1, 0.0]], teacher=[[-0.1, -3.0], [-2.0, 0.0]],
                       mask=[[1.0, 1.0], [1.0, 0.0]])
    m = OnPolicyDistillation().distillation_metrics(batch)
    assert m["opd/reverse_kl_token"] == pytest.approx((-0.9 + 1.0 + 1.9) / 3)
    assert m["opd/reverse_kl_step"] == pytest.approx(((-0.9 + 1.0) + 1.9) / 2)
    assert m["opd/agreement_lower_bound"] == pytest.approx(1 / 3)  # only -0.1 > log(0.5)


# -- tokenizers and prompts (real SmolLM2 tokenizer) ------------------------------------------------------------------

@pytest.fixture(scope="module")
def tokenizer():
    return Teacher("smollm2-135m-instruct").load_tokenizer()


@pytest.fixture(scope="module")
def other_tokenizer(tokenizer, tmp_path_factory):
    """The same tokenizer with one extra special token: a different tokenizer."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("tok")
    tokenizer.save_pretrained(folder)
    other = AutoTokenizer.from_pretrained(folder)
    other.add_special_tokens({"additional_special_tokens": ["<|teacher_only|>"]})
    return other


def test_same_tokenizer_passes_and_a_different_one_is_an_error_naming_both(tokenizer, other_tokenizer):
    assert tokenizer_mismatch(tokenizer, tokenizer) is None
    assert "<|teacher_only|>" in tokenizer_mismatch(tokenizer, other_tokenizer)
    with pytest.raises(TokenizerMismatchError, match="my-student") as err:
        check_tokenizers(tokenizer, "my-student", other_tokenizer, "big-teacher")
    assert "my-student" in str(err.value) and "big-teacher" in str(err.value)


def calculator_step(tokenizer):
    obs = Observation(messages=[{"role": "system", "content": "Use the calculator."},
                                {"role": "user", "content": "What is 12 * 34?"}])
    ids = render_prompt(tokenizer, obs)
    response = tokenizer.encode("<answer>408</answer>", add_special_tokens=False)
    step = Step(ids, response, [0.0] * len(response), observation=obs)
    row = StepRow(ids, response, [0.0] * len(response), traj=0, group=0, step_index=0, reward=0.0, done=True,
                  truncated=False)
    return step, row


def test_same_context_reuses_the_student_prompt_and_rendering_gives_the_same_ids(tokenizer):
    step, row = calculator_step(tokenizer)
    same = teacher_prompt(step, row.prompt_ids, tokenizer, "same", True, None)
    assert same.ids == row.prompt_ids and not same.rendered
    rendered = teacher_prompt(step, row.prompt_ids, tokenizer, "same", False, None)
    assert rendered.rendered and rendered.ids == row.prompt_ids


def test_a_different_teacher_template_renders_the_messages_its_own_way(tokenizer, other_tokenizer):
    other_tokenizer.chat_template = ("{% for m in messages %}### {{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                                     "{% if add_generation_prompt %}### assistant:{% endif %}")
    step, row = calculator_step(tokenizer)
    out = teacher_prompt(step, row.prompt_ids, other_tokenizer, "same", False, None)
    text = other_tokenizer.decode(out.ids)
    assert out.rendered and text.startswith("### system: Use the calculator.") and text.endswith("### assistant:")


def test_privileged_context_puts_the_ground_truth_in_the_teacher_prompt_only(tokenizer):
    step, row = calculator_step(tokenizer)
    out = teacher_prompt(step, row.prompt_ids, tokenizer, "privileged", True,
                         ground_truth_text({"ground_truth": "408"}))
    text = tokenizer.decode(out.ids)
    assert out.privileged and "Reference answer" in text and "408" in text and "Use the calculator." in text
    assert "408" not in tokenizer.decode(row.prompt_ids)
    no_truth = teacher_prompt(step, row.prompt_ids, tokenizer, "privileged", True, None)
    assert no_truth.ids == row.prompt_ids and not no_truth.privileged


def test_a_step_without_observation_is_unscorable_only_when_it_must_be_rendered(tokenizer):
    _, row = calculator_step(tokenizer)
    assert teacher_prompt(None, row.prompt_ids, tokenizer, "same", True, None).ids == row.prompt_ids
    missing = teacher_prompt(None, row.prompt_ids, tokenizer, "same", False, None)
    assert missing.ids is None and "observation" in missing.reason
