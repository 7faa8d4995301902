"""``trainer.optimizer_kernel``: AdamW's fused or multi-tensor (foreach) kernel, chosen by the device or by name, so
that the kernel CUDA runs by default also runs (and is tested) on a CPU."""

from __future__ import annotations

import pytest
import torch

from agentr1_core.config import ConfigError, load_config
from agentr1_core.trainers.optimizer_steps import make_optimizer
from agentr1_core.validation import check_values


def _params(seed: int = 0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(5, 3, generator=gen)), torch.nn.Parameter(torch.randn(7, generator=gen))]


def _kernel(optimizer: torch.optim.Optimizer) -> str:
    return "fused" if optimizer.defaults.get("fused") else "foreach" if optimizer.defaults.get("foreach") else "?"


@pytest.mark.parametrize("device, kernel, expected", [
    ("cpu", "auto", "foreach"), ("cuda", "auto", "fused"), ("cuda:1", "auto", "fused"),
    ("cpu", "fused", "fused"), ("cpu", "foreach", "foreach"), ("cuda", "foreach", "foreach"),
])
def test_auto_is_fused_on_cuda_and_foreach_elsewhere_and_a_named_kernel_wins(device, kernel, expected):
    # the parameters live on the CPU: the fused kernel runs there too, so only the choice depends on ``device``
    optimizer = make_optimizer([{"params": _params(), "lr": 1e-3}], lr=1e-3, device=device, kernel=kernel)
    assert _kernel(optimizer) == expected


def test_an_unknown_kernel_is_refused():
    with pytest.raises(ValueError, match="auto, fused, foreach"):
        make_optimizer([{"params": _params(), "lr": 1e-3}], lr=1e-3, kernel="fast")


def test_fused_and_foreach_give_the_same_update_but_only_foreach_bumps_the_version_counters():
    runs = {}
    for kernel in ("fused", "foreach"):
        params = _params()
        optimizer = make_optimizer([{"params": params, "lr": 0.1}], lr=0.1, betas=(0.8, 0.9), weight_decay=0.01,
                                   kernel=kernel)
        versions = [p._version for p in params]
        for step in range(3):
            loss = sum((p * (step + 1)).pow(2).sum() for p in params)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        runs[kernel] = ([p.detach().clone() for p in params], [p._version - v for p, v in zip(params, versions)])
    (fused, fused_bumps), (foreach, foreach_bumps) = runs["fused"], runs["foreach"]
    for a, b, start in zip(fused, foreach, _params()):
        assert not torch.equal(a, start)  # the steps moved the weights
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    assert fused_bumps == [0, 0]  # why the engine cannot infer a fused update: the trainer announces it
    assert all(b > 0 for b in foreach_bumps)


def test_the_config_key_defaults_to_auto_and_a_typo_is_one_line_naming_the_choices():
    assert load_config("tiny").trainer.optimizer_kernel == "auto"
    check_values(load_config("tiny", ["trainer.optimizer_kernel=fused"]))
    with pytest.raises(ConfigError) as err:
        check_values(load_config("tiny", ["trainer.optimizer_kernel=fuse"]))
    assert str(err.value) == ("config error at trainer.optimizer_kernel: 'fuse' is not valid (did you mean "
                              "'fused'?); valid: auto, fused, foreach")
