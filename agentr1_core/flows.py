"""Agent flows: ``AgentFlowBase`` (full control of one episode) and ``AgentEnvLoop`` (the generic env loop).

A flow turns one dataset row into one ``Trajectory``. ``AgentEnvLoop`` builds the configured env (config params merged
with the row's ``env_kwargs``), then alternates engine ``generate`` and env ``step``. The prompt ids of each step are
exactly the ids sent to the engine and the response ids exactly the ids it returned: nothing is re-tokenised.
Failures never escape: an env that raises or an engine error ends the episode with a ``termination`` reason.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from agentr1_core.mdp import Action, Observation, Step, Trajectory
from agentr1_core.rollout.base import SamplingParams


@dataclass
class FlowContext:
    """What a flow may use: the engine, its tokenizer, sampling settings, the env config, a reward function."""

    engine: Any
    tokenizer: Any
    sampling: SamplingParams
    env_config: dict[str, Any] = field(default_factory=dict)  # {name: ..., **params}
    reward_fn: Callable[[Trajectory, dict[str, Any]], float] | None = None
    max_turns: int = 8
    max_prompt_tokens: int = 4096
    policy: str = "model"  # model | expert (scripted expert actions, for warm-start SFT data)


def render_prompt(tokenizer: Any, obs: Observation) -> list[int]:
    """Token ids for an observation: chat messages through the chat template, text encoded, ids passed through."""
    if obs.token_ids is not None:
        return list(obs.token_ids)
    if obs.text is not None:
        return list(tokenizer.encode(obs.text, add_special_tokens=False))
    out = tokenizer.apply_chat_template(obs.messages, tools=obs.tools, add_generation_prompt=True, tokenize=True)
    if hasattr(out, "keys") and "input_ids" in out:
        out = out["input_ids"]
    return list(out)


class AgentFlowBase:
    """Subclass and implement ``async run(row) -> Trajectory``. Constructor: ``(ctx, **params)`` where params come
    from ``agent_flow: {name: ..., **params}``."""

    def __init__(self, ctx: FlowContext) -> None:
        self.ctx = ctx

    async def run(self, row: dict[str, Any]) -> Trajectory:
        raise NotImplementedError

    async def act(self, prompt_ids: list[int], env: Any = None) -> Action:
        """One action: sampled by the engine, or the env's scripted expert when ``ctx.policy == 'expert'``."""
        if self.ctx.policy == "expert":
            text = env.expert_action() if env is not None else None
            if text is None:
                return Action("", [], [], finish_reason="error")
            ids = list(self.ctx.tokenizer.encode(text, add_special_tokens=False))
            eos = self.ctx.tokenizer.eos_token_id
            if eos is not None:
                ids.append(int(eos))
            return Action(text, ids, [0.0] * len(ids), finish_reason="stop")
        gen = await self.ctx.engine.generate(prompt_ids, self.ctx.sampling)
        return Action(gen.text, list(gen.token_ids), list(gen.logprobs), finish_reason=gen.finish_reason)

    def finish(self, traj: Trajectory, row: dict[str, Any]) -> Trajectory:
        """Set the episode's reward by the one rule every stage uses (training, validation, metrics, episode logs):
        the reward function's result when the config names one (it is added to the last step's reward), else the
        sum of the env's step rewards. The row's ``reward_model`` (ground truth) is kept in ``traj.info`` for
        algorithms that use privileged information. A flow that overrides ``run`` ends with ``self.finish``."""
        if row.get("reward_model") is not None:
            traj.info["reward_model"] = row["reward_model"]
        if self.ctx.reward_fn is not None and traj.steps:
            try:
                traj.final_reward = float(self.ctx.reward_fn(traj, row))
            except Exception:
                traj.final_reward = 0.0
                traj.info["reward_error"] = traceback.format_exc()
            traj.steps[-1].reward += traj.final_reward
            traj.info["reward_source"] = "reward_fn"
        elif self.ctx.reward_fn is None:
            traj.final_reward = traj.total_reward
            traj.info["reward_source"] = "env"
        traj.metrics.setdefault("num_steps", float(len(traj.steps)))
        return traj


class AgentEnvLoop(AgentFlowBase):
    """The generic loop: ``reset`` the env, then ``generate`` / ``step`` until done, truncated or ``max_turns``."""

    def __init__(self, ctx: FlowContext, max_turns: int | None = None) -> None:
        super().__init__(ctx)
        self.max_turns = max_turns or ctx.max_turns

    def make_env(self, row: dict[str, Any]) -> Any:
        from agentr1_core.plugins import get_registry

        cfg = dict(self.ctx.env_config)
        name = cfg.pop("name")
        cfg.update(row.get("env_kwargs") or {})
        return get_registry().build("env", name, cfg, where="env")

    async def run(self, row: dict[str, Any]) -> Trajectory:
        traj = Trajectory(data_source=str(row.get("data_source", "default")))
        env = self.make_env(row)
        try:
            load_expert = getattr(env, "load_expert", None)
            if callable(load_expert):
                load_expert(row)
            obs = await env.reset(row)
            await self._loop(env, obs, traj)
        except Exception:
            traj.termination = "env_error"
            traj.info["error"] = traceback.format_exc()
            if traj.steps:
                traj.steps[-1].truncated = True
        finally:
            try:
                await env.close()
            except Exception:
                traj.info.setdefault("close_error", traceback.format_exc())
        for key in ("tool_errors",):
            counts: dict[str, int] = {}
            for s in traj.steps:
                for k, v in (s.info.get(key) or {}).items():
                    counts[k] = counts.get(k, 0) + v
            if counts:
                traj.info[key] = counts
        return self.finish(traj, row)

    async def _loop(self, env: Any, obs: Observation, traj: Trajectory) -> None:
        for _ in range(self.max_turns):
            prompt_ids = render_prompt(self.ctx.tokenizer, obs)
            if len(prompt_ids) > self.ctx.max_prompt_tokens:
                traj.termination = "context_limit"
                if traj.steps:
                    traj.steps[-1].truncated = True
                return
            action = await self.act(prompt_ids, env)
            if action.finish_reason == "error" or not action.token_ids:
                traj.termination = "engine_error" if self.ctx.policy == "model" else "expert_exhausted"
                if traj.steps:
                    traj.steps[-1].truncated = True
                return
            step = Step(prompt_ids, action.token_ids, action.logprobs, action_text=action.text, anchor=obs.anchor,
                        observation=obs)
            traj.steps.append(step)
            try:
                result = await env.step(action)
            except Exception:
                step.truncated = True
                traj.termination = "env_error"
                traj.info["error"] = traceback.format_exc()
                return
            step.reward, step.feedback, step.info = float(result.reward), result.feedback, dict(result.info)
            step.done, step.truncated, step.next_observation = result.done, result.truncated, result.observation
            step.info["finish_reason"] = action.finish_reason
            if result.done:
                traj.termination = "done"
                return
            if result.truncated or result.observation is None:
                step.truncated = True
                traj.termination = "truncated"
                return
            obs = result.observation
        traj.termination = "max_turns"
        if traj.steps:
            traj.steps[-1].truncated = True
