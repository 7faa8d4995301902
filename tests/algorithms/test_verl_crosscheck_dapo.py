"""Dynamic sampling keeps and drops the groups verl's DAPO filter keeps and drops.

verl's filter is ``ReplayBuffer._dapo_filtered_keys`` (verl/trainer/ppo/v1/replay_buffer.py): a finished group of
more than one trajectory whose summed reward scores have ``np.std == 0`` is evicted. It reads the scores from
TransferQueue's store; here that one read (``tq.kv_batch_get``) is replaced by the scores of the case, no store being
started, and the filter's own code runs unchanged. Runs in verl's environment (tests/distributed/
test_in_verl_environment.py); skipped where verl is not importable."""

from __future__ import annotations

import random
from collections import defaultdict
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
replay_buffer = pytest.importorskip("verl.trainer.ppo.v1.replay_buffer")

from agentr1_core.mdp import Step, Trajectory  # noqa: E402
from agentr1_core.trainers.dynamic_sampling import group_returns, is_informative  # noqa: E402


def verl_filtered(groups: dict[str, list[float]], monkeypatch) -> set[str]:
    keys = {f"{uid}_{k}": {} for uid, scores in groups.items() for k in range(len(scores))}
    scores = {f"{uid}_{k}": s for uid, ss in groups.items() for k, s in enumerate(ss)}

    def kv_batch_get(keys, partition_id, select_fields):
        assert select_fields == ["rm_scores"]
        return {"rm_scores": [torch.tensor([0.0, scores[k]]) for k in keys]}  # a token-level score row

    monkeypatch.setattr(replay_buffer.tq, "kv_batch_get", kv_batch_get, raising=False)
    buffer = SimpleNamespace(filter_groups_metric=replay_buffer.FILTER_GROUPS_REWARD_METRIC,
                             finished_keys={"train": set(groups)}, partitions={"train": keys},
                             _dapo_classification_cache=defaultdict(dict))
    filtered, _counts = replay_buffer.ReplayBuffer._dapo_filtered_keys(buffer, "train")
    return set(filtered)


@pytest.mark.parametrize("seed", range(6))
def test_the_groups_dropped_are_the_ones_verls_filter_evicts(seed, monkeypatch):
    rng = random.Random(seed)
    groups = {}
    for g in range(12):
        size = rng.choice([2, 3, 4, 8])
        kind = rng.choice(["binary", "equal", "graded"])
        if kind == "equal":
            groups[f"g{g}"] = [rng.choice([0.0, 1.0, 0.25])] * size
        elif kind == "binary":
            groups[f"g{g}"] = [float(rng.random() < 0.5) for _ in range(size)]
        else:
            groups[f"g{g}"] = [round(rng.random(), 3) for _ in range(size)]
    trajs = [Trajectory(steps=[Step([1], [2], [-1.0], reward=r)], uid=f"{uid}/{k}", group_id=uid, final_reward=r)
             for uid, rewards in groups.items() for k, r in enumerate(rewards)]
    ours = {uid for uid, returns in group_returns(trajs).items() if not is_informative(returns)}
    assert ours == verl_filtered(groups, monkeypatch)
    assert ours and ours != set(groups)  # both kinds are in every case
