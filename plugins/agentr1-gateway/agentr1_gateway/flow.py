"""``openai_agent``: train an agent written against the OpenAI client, unchanged. Each completion call is one step.

For every row the flow starts an ``EpisodeGateway`` (its own port on 127.0.0.1 and its own key), then runs the user's
function ``agent(task, client)`` in a thread of its own (``isolation: thread``, the default) or a process of its own
(``isolation: process``), with ``client`` an ``openai.OpenAI`` already pointed at the gateway. ``task`` is the
dataset row without its answer (``reward_model``) and demonstrations (``expert_actions``). A function that also takes
``endpoint`` gets ``Endpoint(base_url, api_key, model)``, for clients other than ``openai`` (the gateway also
speaks Anthropic Messages and OpenAI Responses; ``agentr1_gateway.protocols``). The recorded calls become
the episode's steps in arrival order, each with exactly the prompt ids the engine saw and the response ids and
log-probs it returned.

What the function returns: a number (the episode's reward when the config has no reward function; recorded as the
metric ``agent_reward`` either way), a string (the answer, ``traj.info["answer"]``, which ``answer_match`` reads), a
dict with ``reward``, ``answer`` and ``metrics``, or None. With ``branch_rewards: per_branch`` the dict may also hold
``branch_rewards``, ``{branch index: reward}``: each is added to the reward of that branch's last step.

Branches: a call whose prompt does not extend an earlier call's prompt and reply (a compacted history, a subagent's
fresh context, parallel calls) starts a new branch of the episode (``agentr1_gateway.branches``, on token ids). Each
step's ``info`` has ``parent`` (the step it continues, or None) and ``branch``, a branch start also ``branch_of``
and ``shared_prefix_tokens``; ``traj.info["branches"]`` counts them. A step's ``feedback`` and
``next_observation`` come from the next call of its own branch.

How an episode ends: ``done`` when the function returns after at least one call; ``max_turns`` when it called more
than ``rollout.max_turns`` times; ``context_limit`` when a prompt was over ``rollout.max_prompt_tokens`` (or its body
over the gateway's size cap); ``engine_error`` when generation failed; ``env_error`` when the function raised, spent
more than ``timeout`` seconds of its own (time its calls spend in the gateway does not count), or returned without
calling the model. The agent sees each refusal as an OpenAI error (``openai.BadRequestError``, ``RateLimitError``,
...).

When the episode ends, whatever the reason, its endpoint closes and the agent's client raises ``EpisodeEnded`` (a
``BaseException``) at its next model call, so an agent that loops past its timeout stops there. In a thread, an
agent past its timeout is also interrupted at its next Python bytecode; one stuck in a long C call runs on unobserved
in its daemon thread, which the run never waits for. In a process, it is killed. ``agentr1_gateway.agent_runner``
has the details.

Warm-start SFT (``policy = "expert"``): the gateway answers the i-th call with the row's i-th ``expert_actions``
text instead of sampling, so the same agent code produces the demonstration episodes.
"""

from __future__ import annotations

import asyncio
import threading
import time
import traceback
from functools import partial
from typing import Any

from agentr1_core.flows import AgentFlowBase, FlowContext
from agentr1_core.mdp import Action, Step, Trajectory
from agentr1_core.rollout.base import SamplingParams
from agentr1_gateway.agent_runner import AgentFailed, AgentProcess, AgentThread, Endpoint, call_agent, load_agent
from agentr1_gateway.branches import link_calls, link_info
from agentr1_gateway.server import EpisodeGateway

__all__ = ["Endpoint", "OpenAIAgentFlow", "load_agent"]

HIDDEN_FROM_AGENT = ("reward_model", "expert_actions")
ENDINGS = {"max_turns": "max_turns", "context_length_exceeded": "context_limit", "request_too_large": "context_limit",
           "generation_failed": "engine_error"}
ISOLATIONS = ("thread", "process")
BRANCH_REWARDS = ("episode", "per_branch")


class _ExpertReplies:
    """The row's ``expert_actions``, one per call (what ``AgentFlowBase.act`` asks an env for in expert mode)."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.actions = list(row.get("expert_actions") or [])

    def expert_action(self) -> str | None:
        return self.actions.pop(0) if self.actions else None


async def _wait_for_agent(done: asyncio.Future[Any], gateway: EpisodeGateway, timeout: float) -> Any:
    """The agent's result; ``asyncio.TimeoutError`` once it has spent ``timeout`` seconds of its own, i.e. not
    counting the time its calls waited for the model (a busy engine does not time agents out)."""
    start = time.monotonic()
    while True:
        left = timeout - (time.monotonic() - start - gateway.model_seconds())
        if left <= 0:
            raise asyncio.TimeoutError
        finished, _ = await asyncio.wait({done}, timeout=left)
        if finished:
            return done.result()


def _news(before: Any, after: Any) -> str:
    """What the agent added between two calls (tool results, new user turns) when the second prompt extends the
    first with its answer; ``""`` when the agent rewrote its context or there is no next call."""
    if after is None:
        return ""
    old, new = before.messages or [], after.messages or []
    if new[:len(old)] != old:
        return ""
    added = new[len(old):]
    if added and added[0].get("role") == "assistant":
        added = added[1:]
    return "\n".join(str(m.get("content", "")) for m in added)


class OpenAIAgentFlow(AgentFlowBase):
    def __init__(self, ctx: FlowContext, agent: str, timeout: float = 300.0, tool_format: str = "hermes",
                 model_name: str = "agentr1-policy", agent_params: dict[str, Any] | None = None,
                 isolation: str = "thread", branch_rewards: str = "episode") -> None:
        super().__init__(ctx)
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        if isolation not in ISOLATIONS:
            raise ValueError(f"isolation must be one of {', '.join(ISOLATIONS)}, got {isolation!r}")
        if branch_rewards not in BRANCH_REWARDS:
            raise ValueError(f"branch_rewards must be one of {', '.join(BRANCH_REWARDS)}, got {branch_rewards!r}")
        from agentr1_core.plugins import get_registry

        self.agent_spec = agent
        self.agent = load_agent(agent)
        self.isolation = isolation
        self.timeout = float(timeout)
        self.tool_format = get_registry().build("tool_format", tool_format, where="agent_flow.tool_format")
        self.model_name = model_name
        self.agent_params = dict(agent_params or {})
        self.branch_rewards = branch_rewards

    async def _respond(self, prompt_ids: list[int], sampling: SamplingParams, expert: _ExpertReplies | None) -> Action:
        if expert is not None:
            return await self.act(prompt_ids, expert)
        gen = await self.ctx.engine.generate(prompt_ids, sampling)
        return Action(gen.text, list(gen.token_ids), list(gen.logprobs), finish_reason=gen.finish_reason)

    async def run(self, row: dict[str, Any]) -> Trajectory:
        traj = Trajectory(data_source=str(row.get("data_source", "default")))
        expert = _ExpertReplies(row) if self.ctx.policy == "expert" else None
        gateway = EpisodeGateway(respond=lambda ids, sampling: self._respond(ids, sampling, expert),
                                 tokenizer=self.ctx.tokenizer, tool_format=self.tool_format,
                                 sampling=self.ctx.sampling, max_prompt_tokens=self.ctx.max_prompt_tokens,
                                 max_calls=self.ctx.max_turns, model_name=self.model_name)
        task = {k: v for k, v in row.items() if k not in HIDDEN_FROM_AGENT}
        value, error = None, None
        base_url = await gateway.start()
        ended = threading.Event()  # set when the episode ends: the agent's client refuses every later call
        if self.isolation == "process":
            runner: AgentThread | AgentProcess = AgentProcess(self.agent_spec, task, base_url, gateway.key,
                                                              self.model_name, self.agent_params)
        else:
            runner = AgentThread(partial(call_agent, self.agent, task, base_url, gateway.key, self.model_name,
                                         self.agent_params, ended))
        try:
            value = await _wait_for_agent(await runner.start(), gateway, self.timeout)
        except asyncio.TimeoutError:
            error = f"TimeoutError: the agent did not return within {self.timeout:g}s"
        except AgentFailed as exc:
            error = str(exc)
        except Exception:
            error = traceback.format_exc()
        finally:
            ended.set()
            await runner.stop()
            await gateway.close()
        calls = sorted(gateway.calls, key=lambda c: c.index)
        links = link_calls([(call.prompt_ids, call.action.token_ids) for call in calls])
        following = {link.parent: k for k, link in enumerate(links) if link.parent is not None}
        for i, call in enumerate(calls):
            after = calls[following[i]].observation if i in following else None  # the next call of its branch
            traj.steps.append(Step(call.prompt_ids, call.action.token_ids, call.action.logprobs,
                                   action_text=call.action.text, observation=call.observation, next_observation=after,
                                   feedback=_news(call.observation, after),
                                   info={"finish_reason": call.action.finish_reason, "call": call.index,
                                         "requested_model": call.model, **link_info(links[i])}))
        traj.info["branches"] = len({link.branch for link in links})
        if error is None:
            error = self._branch_reward_error(value, traj.info["branches"])
        self._end(traj, gateway, error)
        if error is None:
            self._take_result(traj, value)
        if gateway.refusals:
            traj.info["refusals"] = [f"{r.status} {r.code}: {r.message}" for r in gateway.refusals]
        traj.metrics["model_calls"] = float(len(gateway.calls))
        traj.metrics["branches"] = float(traj.info["branches"])
        return self.finish(traj, row)

    @staticmethod
    def _end(traj: Trajectory, gateway: EpisodeGateway, error: str | None) -> None:
        limits = [ENDINGS[r.code] for r in gateway.refusals if r.code in ENDINGS]
        if limits:
            traj.termination = limits[0]
        elif error is not None:
            traj.termination = "env_error"
        elif not traj.steps:
            traj.termination = "env_error"
            error = "RuntimeError: the agent returned without calling the model"
        else:
            traj.termination = "done"
            traj.steps[-1].done = True
        if error is not None:
            traj.info["error"] = error
        if traj.termination != "done" and traj.steps:
            traj.steps[-1].truncated = True

    def _take_result(self, traj: Trajectory, value: Any) -> None:
        reward, answer = None, None
        if isinstance(value, dict):
            reward, answer = value.get("reward"), value.get("answer")
            for key, metric in (value.get("metrics") or {}).items():
                if isinstance(metric, (int, float)) and not isinstance(metric, bool):
                    traj.metrics[str(key)] = float(metric)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            reward = value
        elif isinstance(value, str):
            answer = value
        if answer is not None:
            traj.info["answer"] = str(answer)
        if reward is not None and not isinstance(reward, bool):
            traj.metrics["agent_reward"] = float(reward)
            if self.ctx.reward_fn is None and traj.steps:
                traj.steps[-1].reward += float(reward)
        if isinstance(value, dict) and value.get("branch_rewards"):
            last = {step.info["branch"]: step for step in traj.steps}  # each branch's last step
            for branch, branch_reward in value["branch_rewards"].items():
                last[int(branch)].reward += float(branch_reward)
                traj.metrics[f"branch_reward/{int(branch)}"] = float(branch_reward)

    def _branch_reward_error(self, value: Any, branches: int) -> str | None:
        """Why the ``branch_rewards`` the agent returned cannot be used (None when they can, or when there are
        none): they need ``branch_rewards: per_branch``, a mapping from branch indices of this episode to numbers."""
        given = value.get("branch_rewards") if isinstance(value, dict) else None
        if given is None or not branches:
            return None
        if self.branch_rewards != "per_branch":
            return ("ValueError: the agent returned branch_rewards, which only agent_flow.branch_rewards: per_branch "
                    "uses (this flow has branch_rewards: episode)")
        if not isinstance(given, dict):
            return f"ValueError: branch_rewards must map branch indices to rewards, got {type(given).__name__}"
        for branch, reward in given.items():
            index = branch if isinstance(branch, int) and not isinstance(branch, bool) else (
                int(branch) if isinstance(branch, str) and branch.isdigit() else None)
            if index is None or not 0 <= index < branches:
                return (f"ValueError: branch_rewards has branch {branch!r}; this episode has branches "
                        f"0..{branches - 1}")
            if isinstance(reward, bool) or not isinstance(reward, (int, float)):
                return f"ValueError: branch_rewards[{branch!r}] must be a number, got {type(reward).__name__}"
        return None
