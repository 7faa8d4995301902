"""The ``env`` kind: a multi-turn ``AgentEnv`` in the user's words, with a number-guessing game as the example (guess
a whole number, told "higher" or "lower" after each guess).

The example env pays the reward itself (1.0 for finding the number; the config has ``reward: null``), rewrites its
observation every turn from its state (the task, the guesses so far, the numbers still possible) and has an expert
(``expert_action``: binary search) for the SFT warm start. Listing the numbers still possible, rather than only the
bounds, lets a small model make a valid guess by copying one; picking the middle one is what it has to learn. Each
row sets its game through ``env_kwargs``; its ``expert_actions`` list the expert's guesses for that game.
"""

from __future__ import annotations

import math
import random

from agentr1_core.scaffold.common import Kind, Rows

LOWS, SIZES, MAX_TURNS = range(1, 41), range(8, 21), 5  # binary search finds one of 20 numbers in 5 guesses


def _expert_guesses(low: int, high: int, target: int) -> list[str]:
    guesses = []
    while True:
        guess = (low + high) // 2
        guesses.append(str(guess))
        if guess == target:
            return guesses
        low, high = (guess + 1, high) if guess < target else (low, guess - 1)


def rows(fields: dict[str, str]) -> tuple[Rows, Rows]:
    """200 training and 32 held-out games (disjoint (range, number) pairs), seeded."""
    assert math.ceil(math.log2(max(SIZES) + 1)) <= MAX_TURNS
    rng = random.Random(0)
    seen: set[tuple[int, int, int]] = set()
    out: Rows = []
    while len(out) < 232:
        low, size = rng.choice(LOWS), rng.choice(SIZES)
        high = low + size - 1
        target = rng.randint(low, high)
        if (low, high, target) in seen:
            continue
        seen.add((low, high, target))
        out.append({
            "prompt": f"I am thinking of a whole number from {low} to {high}. Find it: after each guess I will say "
                      f"whether my number is higher or lower.",
            "data_source": f"{fields['ident']}_{'small' if size <= 12 else 'large'}",
            "reward_model": {"ground_truth": target},
            "expert_actions": _expert_guesses(low, high, target),
            "env_kwargs": {"low": low, "high": high, "target": target},
        })
    return out[:200], out[200:]


COMPONENT = '''\"\"\"$Title for agentr1: a multi-turn ``AgentEnv`` that answers each model turn and pays the reward.

``__init__`` takes the env's config (``env: {name: $ident, ...}``) merged with the row's ``env_kwargs``, so each row
can set its own episode; ``reset(row)`` starts an episode and returns the first ``Observation`` (the whole prompt of
the model's first turn); ``step(action)`` reads one model turn (``action.text``) and returns a ``StepResult``: the
next observation, the reward, ``done`` when the task is finished, ``truncated`` when the env cuts the episode, and a
``feedback`` text for the episode logs. ``expert_action()`` is the scripted expert whose episodes the SFT warm start
records; an env without one replays each row's ``expert_actions``.
\"\"\"

import re

from agentr1_core.envs import AgentEnv
from agentr1_core.mdp import Observation, StepResult


class $cls(AgentEnv):
    # EXAMPLE: replace from here to END EXAMPLE (the class's body) with your env's. The example is a game: guess a
    # whole number from ``low`` to ``high``, told "higher" or "lower" after each wrong guess. The observation is
    # rewritten from the state every turn: the task (the row's prompt), the guesses so far and the numbers still
    # possible, so the prompt stays short however long the episode runs. Reward 1.0 for finding the number (the run
    # config has ``reward: null``); the episode is cut after ``max_turns`` guesses. ``expert_action`` guesses the
    # middle number still possible (binary search).
    INTEGER = re.compile(r"-?\\d+")

    def __init__(self, target: int = 7, low: int = 1, high: int = 10, max_turns: int = 5) -> None:
        if not low <= target <= high:
            raise ValueError(f"target {target} is not from low={low} to high={high}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.target, self.low, self.high, self.max_turns = target, low, high, max_turns
        self.task = ""
        self.lo, self.hi, self.turn, self.notes = low, high, 0, []

    async def reset(self, row):
        self.task = str(row.get("prompt") or f"I am thinking of a whole number from {self.low} to {self.high}.")
        self.lo, self.hi, self.turn, self.notes = self.low, self.high, 0, []
        return self.observation()

    def observation(self):
        lines = [self.task]
        if self.notes:
            lines.append("Your guesses so far: " + ", ".join(self.notes) + ".")
        left = " ".join(str(n) for n in range(self.lo, self.hi + 1))
        lines.append(f"Numbers still possible: {left}. Reply with one of them.")
        return Observation(messages=[{"role": "user", "content": "\\n".join(lines)}], anchor=f"{self.lo}-{self.hi}")

    async def step(self, action):
        self.turn += 1
        found = self.INTEGER.search(action.text)
        if found is None:
            answer, note = "not a number", f"{action.text.strip()[:20]!r} is not a number"
        else:
            guess = int(found.group())
            if guess == self.target:
                return StepResult(observation=None, reward=1.0, done=True, feedback=f"{guess} is correct",
                                  info={"guesses": self.turn})
            answer = "higher" if guess < self.target else "lower"
            note = f"{guess} (my number is {answer})"
            if guess < self.target:
                self.lo = max(self.lo, guess + 1)
            else:
                self.hi = min(self.hi, guess - 1)
        self.notes.append(note)
        return StepResult(observation=self.observation(), reward=0.0, truncated=self.turn >= self.max_turns,
                          feedback=answer, info={"guesses": self.turn})

    def expert_action(self):
        \"\"\"Binary search: the middle of the numbers still possible.\"\"\"
        return str((self.lo + self.hi) // 2)
    # END EXAMPLE
'''

CONFIG = '''# $Title: SFT on expert episodes, then GRPO (minutes on a 2-core CPU)
# The env pays the reward, so the config names no reward function. The rows ship in this package (data/); each
# row's env_kwargs are merged into the env's constructor arguments.
seed: 0
run_dir: runs/$name
stages: [sft, rl]
model: {path: smollm2-135m-instruct, dtype: float32, device: auto}
engine: {name: transformers, max_batch_size: 64}
agent_flow: {name: agent_env_loop}
reward: null  # the env pays the reward
algorithm: {name: grpo}
data:
  train: {name: jsonl, path: "$${package_data:$package,data/train.jsonl}"}
  val: {name: jsonl, path: "$${package_data:$package,data/val.jsonl}"}
validation: {every: 0, before: true, max_rows: 32, n: 1, temperature: 0.0}
sft: {rows: 32, epochs: 1, lr: 1.0e-4, batch_size: 8}
trainer: {name: local, total_steps: 6, lr: 2.0e-5, micro_batch_size: 8, micro_batch_tokens: 2048, max_grad_norm: 1.0,
          train_layers: 10}
# EXAMPLE: set the env's arguments and the caps on turns and tokens for your task (these fit the example game: at
# most $max_turns guesses, each a short number)
env: {name: $ident, max_turns: $max_turns}
rollout: {batch_size: 4, n: 4, temperature: 0.7, max_new_tokens: 8, max_turns: $max_turns, max_prompt_tokens: 512}
# END EXAMPLE
'''

TESTS = '''\"\"\"The $ident env: its contract on every row, and each row's expert actions finishing its episode.\"\"\"

import pytest

from agentr1_core.config import component
from agentr1_core.mdp import Action
from agentr1_core.testing import check_env, run_async

from $package.env import $cls


def make_env(config, row):
    \"\"\"The env as a run builds it for ``row``: the config's ``env`` arguments, then the row's ``env_kwargs``.\"\"\"
    return $cls(**{**component(config, "env")[1], **row.get("env_kwargs", {})})


def play(env, actions, row):
    \"\"\"Reset, then one step per action until the episode ends; returns the step results.\"\"\"
    async def go():
        results = [await env.reset(row)]
        for text in actions:
            result = await env.step(Action(text, [0], [0.0]))
            results.append(result)
            if result.done or result.truncated:
                break
        return results
    return run_async(go())


def test_env_contract_on_a_held_out_row(config, load_rows):
    row = load_rows("val")[0]  # reset, a malformed action, reset again, then the expert's actions to the end
    assert check_env(make_env(config, row), row, actions=row["expert_actions"]) == len(row["expert_actions"])


def test_each_rows_expert_actions_win_its_episode(config, load_rows):
    for row in load_rows("train") + load_rows("val"):
        results = play(make_env(config, row), row["expert_actions"], row)
        assert results[-1].done and sum(r.reward for r in results[1:]) >= 1.0, row
        assert len(results) - 1 == len(row["expert_actions"]), row


def test_the_env_pays_the_reward(config, load_rows, expert_episode):
    assert config.reward is None
    row = load_rows("val")[0]
    traj = expert_episode(row)
    assert traj.final_reward == pytest.approx(sum(step.reward for step in traj.steps))
    assert traj.success()


# EXAMPLE: replace from here to END EXAMPLE with tests of your env's own rules (these check the example game's
# answers, its step cap, its binary-search expert and an episode that runs out of guesses).
ROW = {"prompt": "I am thinking of a whole number from 1 to 10."}


def test_answers_narrow_the_range_and_every_observation_keeps_the_task():
    first, low, high, win = play($cls(target=7, high=10), ["3", "I guess 9", "7"], ROW)
    assert (low.feedback, high.feedback, win.feedback) == ("higher", "lower", "7 is correct")
    assert (low.reward, high.reward, win.reward) == (0.0, 0.0, 1.0) and win.done
    for obs in (first, low.observation, high.observation):
        assert obs.messages[0]["content"].startswith(ROW["prompt"])
    assert "possible: 4 5 6 7 8." in high.observation.messages[0]["content"]


def test_a_reply_without_a_number_is_a_wasted_turn_and_the_episode_is_cut_after_max_turns():
    results = play($cls(target=7, high=10, max_turns=3), ["hello", "1", "2"], ROW)
    assert results[1].feedback == "not a number" and not results[1].truncated
    assert results[-1].truncated and not results[-1].done
    assert sum(r.reward for r in results[1:]) == 0.0


def test_a_target_outside_the_range_is_refused():
    with pytest.raises(ValueError, match="not from"):
        $cls(target=12, high=10)


@pytest.mark.parametrize("high", [8, 15, 31])
def test_the_binary_search_expert_finds_every_number_within_the_bound(high):
    bound = high.bit_length()  # guesses binary search needs for 1..high: ceil(log2(high + 1))
    for target in range(1, high + 1):
        env = $cls(target=target, high=high, max_turns=bound)

        async def go():
            await env.reset(ROW)
            for turn in range(1, bound + 1):
                result = await env.step(Action(env.expert_action(), [0], [0.0]))
                if result.done:
                    return turn
            return None
        assert run_async(go()) is not None, (high, target)


def test_an_episode_that_runs_out_of_guesses_earns_nothing(load_rows, expert_episode):
    row = next(r for r in load_rows("val") if len(r["expert_actions"]) > 1)
    assert row["reward_model"]["ground_truth"] == row["env_kwargs"]["target"]
    one_guess = dict(row, env_kwargs={**row["env_kwargs"], "max_turns": 1})  # env_kwargs reach the constructor
    losing = expert_episode(one_guess)
    assert losing.termination == "truncated" and losing.num_steps == 1
    assert losing.final_reward == 0.0 and not losing.success()
# END EXAMPLE
'''

EXAMPLE = '''`$package/env.py` is a multi-turn `AgentEnv`: guess a whole number from `low` to `high` (8 to 20
numbers in the shipped games); each wrong guess is answered "higher" or "lower". Every turn the env rewrites the
observation from its state (the task, the guesses so far, the numbers still possible), so the prompt stays short.
The env pays the reward itself, 1.0 for finding the number (the config has `reward: null`); after `max_turns`
guesses the episode is cut. Its `expert_action()` guesses the middle number still possible (binary search): the SFT warm start
records those episodes. Each row sets its game through `env_kwargs`, which are merged into the env's constructor
arguments:

    {"prompt": "I am thinking of a whole number from 21 to 40. ...", "data_source": "${ident}_large",
     "reward_model": {"ground_truth": 33}, "expert_actions": ["30", "35", "32", "33"],
     "env_kwargs": {"low": 21, "high": 40, "target": 33}}

The rows' `expert_actions` are the same binary-search guesses: an env without an `expert_action()` of its own
replays them.
'''


def _extra(fields: dict[str, str]) -> dict[str, str]:
    return {"max_turns": str(MAX_TURNS)}


KIND = Kind(kind="env", component=COMPONENT, config=CONFIG, tests=TESTS, example=EXAMPLE, rows=rows,
            extra_fields=_extra)
