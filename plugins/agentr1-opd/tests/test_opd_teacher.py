"""The teacher through the real ``transformers`` engine on the real SmolLM2: ``prepare_batch`` fills exactly the
teacher's log-probs of the student's tokens, a step the engine cannot score is counted and gets no advantage, and
the student construction is deterministic."""

from __future__ import annotations

import json

import pytest
import torch

from agentr1_core.algorithms.base import StepBatch
from agentr1_core.flows import render_prompt
from agentr1_core.mdp import Observation, Step, Trajectory
from agentr1_core.trainers.batching import build_step_batch, trajectories_to_rows
from agentr1_opd.algorithm import OnPolicyDistillation
from agentr1_opd.evaluate import response_distributions
from agentr1_opd.student import MARKER, make_student

pytestmark = pytest.mark.slow


def episode(tokenizer, question: str, answer: str, truth: str, filler: int = 0) -> Trajectory:
    system = "Answer with <answer>N</answer>." + " Think carefully." * filler
    obs = Observation(messages=[{"role": "system", "content": system}, {"role": "user", "content": question}])
    ids = render_prompt(tokenizer, obs)
    response = tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.eos_token_id]
    step = Step(ids, response, [-1.0] * len(response), observation=obs, done=True)
    return Trajectory(steps=[step], uid=question, group_id=question, info={"reward_model": {"ground_truth": truth}})


@pytest.fixture(scope="module")
def algorithm():
    algo = OnPolicyDistillation(teacher="smollm2-135m-instruct", teacher_device="cpu",
                                teacher_engine_params={"max_context": 160})
    tok = algo.teacher.load_tokenizer()
    algo.bind_policy("smollm2-135m-instruct", tok, "cpu")  # the teacher as its own student: same template
    yield algo
    algo.close()


def test_prepare_batch_scores_the_student_tokens_with_the_teacher(algorithm):
    tok = algorithm.teacher.tokenizer
    trajs = [episode(tok, "What is 12 * 34?", "<answer>408</answer>", "408"),
             episode(tok, "What is 7 + 5?", "The answer is <answer>12</answer>", "12"),
             episode(tok, "What is 3 * 3?", "<answer>9</answer>", "9", filler=100)]  # longer than max_context
    rows = trajectories_to_rows(trajs).rows
    batch = build_step_batch(rows)
    metrics = algorithm.prepare_batch(batch, rows, trajs)
    assert metrics["opd/scored_steps"] == 2 and metrics["opd/unscored_steps"] == 1
    model = algorithm.teacher.model
    for i in range(2):
        lp = response_distributions(model, rows[i].prompt_ids, rows[i].response_ids)
        direct = lp.gather(-1, torch.tensor(rows[i].response_ids).unsqueeze(-1)).squeeze(-1)
        n = len(rows[i].response_ids)
        assert torch.allclose(batch.teacher_logprobs[i, :n], direct, atol=1e-3)
    assert torch.isnan(batch.teacher_logprobs[2, :len(rows[2].response_ids)]).all()
    adv = algorithm.compute_advantages(batch).advantages
    assert (adv[2] == 0).all() and torch.isfinite(adv).all() and (adv[:2] != 0).any()
    expected_kl = float((batch.old_logprobs[:2] - batch.teacher_logprobs[:2])[batch.action_mask[:2] > 0].mean())
    assert metrics["opd/reverse_kl_token"] == pytest.approx(expected_kl, rel=1e-5)


def test_privileged_context_makes_the_teacher_surer_of_the_right_answer():
    algo = OnPolicyDistillation(teacher="smollm2-135m-instruct", teacher_device="cpu", context="privileged")
    plain = OnPolicyDistillation(teacher="smollm2-135m-instruct", teacher_device="cpu")
    try:
        tok = algo.teacher.load_tokenizer()
        for a in (algo, plain):
            a.bind_policy("smollm2-135m-instruct", tok, "cpu")
        plain.teacher.model = algo.teacher.model = None
        plain.teacher.load_model()
        algo.teacher.model = plain.teacher.model  # one copy of the weights for both
        trajs = [episode(tok, f"What is {a} * {b}?", f"<answer>{a * b}</answer>", str(a * b))
                 for a, b in ((347, 29), (812, 57), (66, 91))]
        rows = trajectories_to_rows(trajs).rows
        got = {}
        for name, a in (("privileged", algo), ("same", plain)):
            batch = build_step_batch(rows)
            metrics = a.prepare_batch(batch, rows, trajs)
            got[name] = (batch, metrics)
        assert got["privileged"][1]["opd/privileged_steps"] == 3 and got["same"][1]["opd/privileged_steps"] == 0
        mask = got["same"][0].action_mask > 0
        gain = (got["privileged"][0].teacher_logprobs - got["same"][0].teacher_logprobs)[mask]
        assert float(gain.sum()) > 1.0  # the answer digits become far more likely with the reference answer shown
    finally:
        algo.close()
        plain.close()


def test_make_student_is_deterministic_and_keeps_the_tokenizer(tmp_path):
    from agentr1_core.models import load_model_and_tokenizer

    a = make_student(tmp_path / "a", num_layers=2)
    b = make_student(tmp_path / "b", num_layers=2)
    assert json.loads((a / MARKER).read_text()) == {"teacher": "smollm2-135m-instruct", "num_layers": 2}
    ma, ta = load_model_and_tokenizer(str(a))
    mb, _ = load_model_and_tokenizer(str(b))
    assert ma.config.num_hidden_layers == 2 and len(ma.model.layers) == 2
    assert all(torch.equal(x, y) for x, y in zip(ma.state_dict().values(), mb.state_dict().values()))
    assert make_student(a, num_layers=2) == a  # same recipe: kept
    with pytest.raises(FileExistsError):
        make_student(a, num_layers=3)
    teacher = OnPolicyDistillation().teacher
    teacher.bind(ta, str(a))  # same tokenizer: no error
    ids = torch.tensor([ta.encode("What is 12 * 34?")])
    assert torch.isfinite(ma(input_ids=ids).logits).all()
