"""Registered algorithm components: registry entries, constructor signatures, option validation, wiring."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import typing

import pytest
import torch

from agentr1_core.algorithms.base import Algorithm, StepBatch
from agentr1_core.algorithms.components import ALGORITHM_CLASSES
from agentr1_core.algorithms.registry_entries import ALGORITHMS

EXPECTED = {"grpo", "drgrpo", "rloo", "reinforce", "reinforce_pp", "ppo", "steppo", "gigpo", "remax"}


def load(path: str):
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def test_registry_entries_resolve():
    names = [e[0] for e in ALGORITHMS]
    assert set(names) == EXPECTED and len(names) == len(set(names))
    for name, path, description, needs_critic in ALGORITHMS:
        cls = load(path)
        assert issubclass(cls, Algorithm) and cls is ALGORITHM_CLASSES[name]
        assert cls.needs_critic is needs_critic and cls().needs_critic is needs_critic
        assert description and "\n" not in description


def test_registry_entries_import_without_torch():
    code = ("import sys; sys.modules['torch'] = None; "
            "from agentr1_core.algorithms.registry_entries import ALGORITHMS; print(len(ALGORITHMS))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "9"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_constructor_is_plain_typed_keywords(name):
    cls = ALGORITHM_CLASSES[name]
    params = [p for n, p in inspect.signature(cls.__init__).parameters.items() if n != "self"]
    hints = typing.get_type_hints(cls.__init__)
    assert params, name
    for p in params:
        assert p.kind is p.POSITIONAL_OR_KEYWORD, (name, p.name)
        assert p.default is not inspect.Parameter.empty, (name, p.name)
        assert p.name in hints, (name, p.name)
    assert {"loss_agg", "kl_coef", "kl_estimator", "entropy_coef", "clip_ratio"} <= {p.name for p in params}


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("option", ["loss_agg", "loss_type", "kl_estimator"])
def test_unknown_option_values_raise(name, option):
    with pytest.raises(ValueError, match="choose one of"):
        ALGORITHM_CLASSES[name](**{option: "foo"})


@pytest.mark.parametrize("name", ["reinforce", "reinforce_pp"])
def test_unknown_baseline_raises(name):
    with pytest.raises(ValueError, match="group"):
        ALGORITHM_CLASSES[name](baseline="foo")


def test_defaults_and_flags():
    assert ALGORITHM_CLASSES["drgrpo"]().norm_by_std is False
    assert ALGORITHM_CLASSES["drgrpo"]().loss_config.loss_agg == "seq-mean-token-sum"
    assert ALGORITHM_CLASSES["steppo"]().loss_config.loss_type == "gspo"
    assert ALGORITHM_CLASSES["ppo"]().loss_config.loss_type == "ppo"
    assert ALGORITHM_CLASSES["reinforce"]().loss_config.loss_type == "reinforce"
    assert ALGORITHM_CLASSES["grpo"]().needs_groups and not ALGORITHM_CLASSES["reinforce"]().needs_groups
    assert ALGORITHM_CLASSES["reinforce"](baseline="group").needs_groups
    assert not ALGORITHM_CLASSES["grpo"]().needs_reference
    assert ALGORITHM_CLASSES["grpo"](kl_coef=0.01).needs_reference
    cfg = ALGORITHM_CLASSES["grpo"](clip_ratio=0.1, clip_ratio_high=0.3).loss_config
    assert (cfg.clip_ratio_low, cfg.clip_ratio_high) == (0.1, 0.3)


def batch() -> StepBatch:
    return StepBatch(
        traj_ids=torch.tensor([0, 0, 1]), group_ids=torch.tensor([0, 0, 0]), step_index=torch.tensor([0, 1, 0]),
        rewards=torch.tensor([0.0, 1.0, 0.0]), dones=torch.tensor([False, True, True]),
        truncated=torch.zeros(3, dtype=torch.bool), action_mask=torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]]),
        old_logprobs=torch.full((3, 2), -1.0), values=torch.tensor([0.2, 0.4, 0.1]),
        extras={"greedy_returns": torch.full((3,), 0.5, dtype=torch.float64)},  # ReMax's greedy episode
    )


def batch4() -> StepBatch:
    """Four steps of 1, 3, 1 and 3 action tokens (two trajectories of two steps, one group)."""
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    return StepBatch(
        traj_ids=torch.tensor([0, 0, 1, 1]), group_ids=torch.tensor([0, 0, 0, 0]),
        step_index=torch.tensor([0, 1, 0, 1]), rewards=torch.tensor([0.0, 1.0, 0.0, 0.0]),
        dones=torch.tensor([False, True, False, True]), truncated=torch.zeros(4, dtype=torch.bool),
        action_mask=mask, old_logprobs=torch.full((4, 3), -1.0) * mask,
        values=torch.tensor([0.2, 0.4, 0.1, -0.3]), anchors=["s0", "s1", "s0", "s1"],
        extras={"greedy_returns": torch.full((4,), 0.25, dtype=torch.float64)})  # ReMax's greedy episode


def _loss_and_grads(algo, b, adv, returns, lp_all, v_all, parts):
    """Sum of micro-batch losses (micro-batches ``parts``, each divided by the whole batch's counts) and the
    gradients w.r.t. all rows' log-probs and values."""
    lp = lp_all.clone().requires_grad_()
    v = v_all.clone().requires_grad_()
    denominators = algo.loss_denominators(b, adv)
    total = 0.0
    for part in parts:
        idx = torch.tensor(part)
        mb = b.select(idx)
        mb.extras = {**mb.extras, "loss_denominators": denominators}
        loss = algo.policy_loss(lp[idx], mb, adv[idx]).loss
        if algo.needs_critic:
            loss = loss + algo.value_loss(v[idx], mb, returns[idx]).loss
        loss.backward()
        total += float(loss.detach())
    return total, lp.grad, v.grad


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_microbatch_loss_matches_rows(name, loss_agg):
    """Splitting the rows into micro-batches (1, 2 or 3 rows, short and long rows apart) gives the loss and the
    gradient of the whole batch, for every algorithm and aggregation (policy and value loss)."""
    algo = ALGORITHM_CLASSES[name](loss_agg=loss_agg, kl_coef=0.0)
    b = batch4()
    adv = algo.compute_advantages(b)
    assert bool((adv.advantages != 0).any())
    gen = torch.Generator().manual_seed(0)
    lp = ((b.old_logprobs + 0.05 * torch.randn(4, 3, generator=gen)) * b.action_mask).double()
    v = torch.tensor([0.5, 0.3, -0.2, 0.1], dtype=torch.float64)
    whole, g_lp, g_v = _loss_and_grads(algo, b, adv.advantages, adv.returns, lp, v, [[0, 1, 2, 3]])
    assert g_lp.abs().sum() > 0
    for parts in ([[0], [1], [2], [3]], [[0, 2], [1, 3]], [[0, 2, 1], [3]]):
        total, p_lp, p_v = _loss_and_grads(algo, b, adv.advantages, adv.returns, lp, v, parts)
        assert total == pytest.approx(whole, rel=1e-6, abs=1e-9), parts
        assert torch.allclose(p_lp, g_lp, rtol=1e-6, atol=1e-9), parts
        if algo.needs_critic:
            assert torch.allclose(p_v, g_v, rtol=1e-6, atol=1e-9), parts
    assert torch.all(g_lp[b.action_mask == 0] == 0)  # padding gets no gradient


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_microbatch_loss_masks_and_counts(name):
    algo = ALGORITHM_CLASSES[name]()
    b = batch()
    adv = algo.compute_advantages(b)
    assert adv.advantages.shape == (3, 2) and adv.returns.shape == (3,)
    idx = torch.tensor([1, 0])
    mb = b.select(idx)
    lp = (mb.old_logprobs + torch.tensor([[0.05, 0.0], [-0.05, 0.1]])).requires_grad_()
    out = algo.policy_loss(lp, mb, adv.advantages[idx])
    out.loss.backward()
    assert torch.isfinite(out.loss) and torch.isfinite(lp.grad).all()
    assert lp.grad[0, 1].item() == 0.0  # masked token gets no gradient
    assert out.metrics["valid_tokens"] == 3.0
    if algo.needs_critic:
        v = torch.tensor([0.5, 0.3, 9.0], requires_grad=True)
        vl = algo.value_loss(v, b, adv.returns)
        vl.loss.backward()
        assert v.grad[2].item() == 0.0  # the step without action tokens is not in the value loss
        assert vl.loss.item() > 0


def test_select_slices_per_step_extras_and_keeps_the_rest_whole():
    b = batch4()
    denominators = object()
    b.extras = {"bootstrap_values": torch.tensor([0.5, 0.6, 0.7, 0.8]),
                "rollout_logprobs": torch.arange(12.0).reshape(4, 3), "scale": torch.tensor(2.0),
                "reasons": ["a", "b", "c", "d"], "loss_denominators": denominators}
    sub = b.select(torch.tensor([3, 1]))
    assert sub.extras["bootstrap_values"].tolist() == pytest.approx([0.8, 0.6])
    assert sub.extras["rollout_logprobs"].tolist() == [[9.0, 10.0, 11.0], [3.0, 4.0, 5.0]]
    assert float(sub.extras["scale"]) == 2.0 and sub.extras["reasons"] == ["a", "b", "c", "d"]
    assert sub.extras["loss_denominators"] is denominators and sub.anchors == ["s1", "s1"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_loss_parameters_are_checked_by_name_and_type_before_the_build(name):
    """The loss parameters, written once (``PolicyLossConfig``), are in every component's signature: the registry
    accepts them, and a misspelled one or one of the wrong type is a one-line error naming the key."""
    from agentr1_core.errors import ConfigError
    from agentr1_core.plugins import get_registry

    registry = get_registry()
    algo = registry.build("algorithm", name, {"clip_ratio_high": 0.3, "kl_coef": 0.01}, where="algorithm")
    assert algo.loss_config.clip_ratio_high == 0.3 and algo.needs_reference
    for params, said in (({"clip_ratoi": 0.1}, "algorithm.clip_ratoi: unknown parameter"),
                         ({"entropy_coef": "high"}, "algorithm.entropy_coef: expected float")):
        with pytest.raises(ConfigError) as err:
            registry.build("algorithm", name, params, where="algorithm")
        assert said in str(err.value) and "\n" not in str(err.value), str(err.value)
    with pytest.raises(TypeError, match="clip_ratoi"):
        ALGORITHM_CLASSES[name](clip_ratoi=0.1)


def test_a_subclass_takes_the_loss_parameters_with_its_own_defaults():
    """A component that writes only its own parameters and ``**loss_options`` gets the loss parameters after them
    (by position too), with its ``loss_defaults``; a default for a parameter that does not exist is refused."""
    from agentr1_core.algorithms.components import LOSS_PARAMETERS, PolicyGradientAlgorithm

    class Weighted(PolicyGradientAlgorithm):
        loss_defaults = {"loss_agg": "seq-mean-token-mean"}

        def __init__(self, weight: float = 2.0, **loss_options: typing.Any) -> None:
            self.weight = weight
            self.set_loss(**loss_options)

    assert list(inspect.signature(Weighted.__init__).parameters) == ["self", "weight", *LOSS_PARAMETERS]
    assert typing.get_type_hints(Weighted.__init__)["clip_ratio_c"] == float | None
    algo = Weighted(3.0, "gspo", 0.1)
    assert algo.weight == 3.0 and algo.loss_config.loss_type == "gspo"
    assert algo.loss_config.clip_ratio_low == algo.loss_config.clip_ratio_high == 0.1
    assert algo.loss_config.loss_agg == "seq-mean-token-mean"

    class Unweighted(Weighted):  # inherits the constructor and the loss defaults, changes one
        loss_defaults = {**Weighted.loss_defaults, "entropy_coef": 0.01}

    assert Unweighted().loss_config.entropy_coef == 0.01 and Unweighted().loss_config.loss_agg == "seq-mean-token-mean"
    with pytest.raises(TypeError, match="clip_ratoi"):
        class Misspelled(PolicyGradientAlgorithm):
            loss_defaults = {"clip_ratoi": 0.1}

            def __init__(self, **loss_options: typing.Any) -> None:
                self.set_loss(**loss_options)
