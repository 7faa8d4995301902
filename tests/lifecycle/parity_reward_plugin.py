"""A reward for the eval tests on the tiny random model, which never answers a question right: 1.0 when the first
token the model sampled in an episode has an even id, else 0.0. Sampled at temperature 1, about half the attempts
of a row succeed, so pass@k differs from mean@K. Loaded through ``AGENTR1_PLUGIN_MODULES`` (an unpackaged plugin)."""

from __future__ import annotations

from typing import Any

from agentr1_core import RewardSpec, hookimpl


def first_token_parity(traj: Any, row: dict[str, Any]) -> float:
    first = traj.steps[0].response_ids if traj.steps else []
    return 1.0 if first and first[0] % 2 == 0 else 0.0


@hookimpl
def agentr1_rewards():
    return [RewardSpec("first_token_parity", "parity_reward_plugin:first_token_parity",
                       "1 when the episode's first sampled token id is even")]
