"""Fault injection for robustness tests of a whole run: faulty tools, a faulty env, and an engine wrapper that
injects faulty model outputs.

Every fault is chosen per dataset row (``fault_rows``): the row's prompt carries ``[[fault:KIND]]`` (what the engine
wrapper reads) and its ``env_kwargs`` carry ``fault=KIND`` (what the env reads); its ``data_source`` is
``fault_KIND``, so validation reports every fault separately.

``FaultInjectingEngine`` wraps the real ``TransformersEngine``. For a fault row it answers the first turn with the
faulty text of that kind (a call of a tool that raises / hangs / floods / returns non-UTF-8 bytes, malformed JSON, an
unknown tool, wrong argument types, a call that makes the env fail; or an empty response, or NaN log-probs) and the
next turn with ``<answer>N</answer>``; token ids are the encoded text plus EOS and log-probs the wrapped model's own
(``score``), so the update sees real numbers. Rows of kind ``none`` are sampled by the wrapped engine as usual.

Register the module as a plugin (``registry.register_module(faults, name="faults")``) to use the names below in a
config. Nothing here is imported by the core.
"""

from __future__ import annotations

import asyncio
import random
import sys
from typing import Any

from agentr1_core.envs import ToolEnv
from agentr1_core.hookspecs import hookimpl
from agentr1_core.mdp import Action, Observation, StepResult
from agentr1_core.rollout.base import Generation, SamplingParams
from agentr1_core.specs import DatasetSpec, EngineSpec, EnvSpec, ToolSpec
from agentr1_core.tools import BaseTool

TOOL_FAULTS = {  # kind -> (first-turn text, the tool_errors kind it must produce)
    "tool_raises": ('<tool_call>{"name": "raise_tool", "arguments": {}}</tool_call>', "exception"),
    "tool_hangs": ('<tool_call>{"name": "hang_tool", "arguments": {}}</tool_call>', "timeout"),
    "tool_huge_output": ('<tool_call>{"name": "huge_tool", "arguments": {}}</tool_call>', "output_truncated"),
    "tool_non_utf8": ('<tool_call>{"name": "binary_tool", "arguments": {}}</tool_call>', "invalid_utf8"),
    "bad_json": ('<tool_call>{"name": "echo", "arguments": {"text": "hi"</tool_call>', "parse_error"),
    "unknown_tool": ('<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>', "unknown_tool"),
    "wrong_argument_types": ('<tool_call>{"name": "echo", "arguments": {"text": 5}}</tool_call>', "bad_arguments"),
}
ENV_FAULTS = {  # kind -> termination it must produce (the call itself is valid)
    "env_step_raises": "env_error",
    "env_process_dies": "env_error",
}
ENGINE_FAULTS = {"empty_response": "engine_error", "nan_logprobs": None}
VALID_CALL = '<tool_call>{"name": "echo", "arguments": {"text": "hi"}}</tool_call>'
KINDS = tuple(TOOL_FAULTS) + tuple(ENV_FAULTS) + tuple(ENGINE_FAULTS) + ("none",)


# -- tools ------------------------------------------------------------------------------------------------------------
class EchoTool(BaseTool):
    name = "echo"
    description = "Echo a text back."
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

    async def execute(self, text: str) -> str:
        return text


class RaisingTool(BaseTool):
    name = "raise_tool"
    description = "Always fails."

    async def execute(self) -> str:
        raise RuntimeError("injected tool failure")


class HangingTool(BaseTool):
    name = "hang_tool"
    description = "Never answers in time."
    timeout = 0.05

    async def execute(self) -> str:
        await asyncio.sleep(3600)
        return "unreachable"


class HugeOutputTool(BaseTool):
    name = "huge_tool"
    description = "Answers with a megabyte."

    async def execute(self) -> str:
        return "x" * 1_000_000


class NonUtf8Tool(BaseTool):
    name = "binary_tool"
    description = "Answers with bytes that are not UTF-8."

    async def execute(self) -> Any:
        return b"result: \xff\xfe\xc3\x28 end"


# -- env --------------------------------------------------------------------------------------------------------------
class FaultyEnv(ToolEnv):
    """``ToolEnv`` whose ``step`` raises (``fault=env_step_raises``) or talks to a helper process that dies
    (``fault=env_process_dies``: the process exits on the first request and the env finds its pipe closed)."""

    def __init__(self, fault: str = "none", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fault = fault
        self.proc: asyncio.subprocess.Process | None = None

    async def reset(self, row: dict[str, Any]) -> Observation:
        if self.fault == "env_process_dies":
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-S", "-c", "import sys; sys.stdin.readline(); sys.exit(3)",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        return await super().reset(row)

    async def step(self, action: Action) -> StepResult:
        if self.fault == "env_step_raises":
            raise RuntimeError("injected env failure in step()")
        if self.proc is not None:
            self.proc.stdin.write(b"step\n")
            await self.proc.stdin.drain()
            line = await self.proc.stdout.readline()
            if not line:
                code = await self.proc.wait()
                raise ConnectionError(f"env process exited with code {code} in the middle of an episode")
        return await super().step(action)

    async def close(self) -> None:
        if self.proc is not None:
            if self.proc.returncode is None:
                self.proc.kill()
            await self.proc.wait()
            self.proc = None


# -- engine -----------------------------------------------------------------------------------------------------------
def fault_of(prompt_text: str) -> str:
    start = prompt_text.rfind("[[fault:")
    if start < 0:
        return "none"
    return prompt_text[start + 8:prompt_text.index("]]", start)]


class FaultInjectingEngine:
    """Wraps a ``TransformersEngine`` built on ``model``/``tokenizer``; see the module docstring. ``counts`` tallies
    the injected faults by kind."""

    def __init__(self, model: Any, tokenizer: Any, seed: int = 0, **engine_params: Any) -> None:
        from agentr1_core.rollout.transformers_engine import TransformersEngine

        self.inner = TransformersEngine(model, tokenizer, seed=seed, **engine_params)
        self.tokenizer = tokenizer
        self.rng = random.Random(seed)
        self.counts: dict[str, int] = {}

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        text = self.tokenizer.decode(prompt_ids)
        kind = fault_of(text)
        if kind == "none":
            return await self.inner.generate(prompt_ids, sampling)
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if kind == "empty_response":
            return Generation([], [], "", finish_reason="stop", info={"injected_fault": kind})
        first = TOOL_FAULTS.get(kind, (VALID_CALL, None))[0]
        if kind in ("nan_logprobs",) or first in text:  # answer turn
            truth = text[text.rfind("sum=") + 4:].split("]]")[0]
            reply = f"<answer>{truth if self.rng.random() < 0.5 else 'wrong'}</answer>"
        else:
            reply = first
        ids = list(self.tokenizer.encode(reply, add_special_tokens=False)) + [int(self.tokenizer.eos_token_id)]
        logprobs = await self.inner.score(prompt_ids, ids)
        if kind == "nan_logprobs":
            logprobs[len(logprobs) // 2] = float("nan")
        return Generation(ids, list(logprobs), reply, finish_reason="stop", info={"injected_fault": kind})

    async def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> list[float]:
        return await self.inner.score(prompt_ids, continuation_ids)

    def sync_weights(self, state: Any = None) -> None:
        self.inner.sync_weights(state)

    def take_prefix_stats(self) -> dict[str, float]:
        return self.inner.take_prefix_stats()

    def close(self) -> None:
        self.inner.close()


# -- data -------------------------------------------------------------------------------------------------------------
def fault_rows(repeats: int = 10, kinds: list[str] | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """``repeats`` rows per fault kind (all of ``KINDS`` by default), shuffled with ``seed``."""
    rng = random.Random(seed)
    rows = []
    for kind in kinds or KINDS:
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; valid: {', '.join(KINDS)}")
        for i in range(repeats):
            a, b = rng.randint(1, 9), rng.randint(1, 9)
            rows.append({"prompt": f"Task {i} [[fault:{kind}]] [[sum={a + b}]] What is {a}+{b}?",
                         "data_source": f"fault_{kind}", "env_kwargs": {"fault": kind},
                         "reward_model": {"ground_truth": str(a + b)}})
    rng.shuffle(rows)
    return rows


# -- plugin hooks -----------------------------------------------------------------------------------------------------
@hookimpl
def agentr1_tools():
    return [ToolSpec("echo", "agentr1_core.testing.faults:EchoTool", "Echo (fault tests)"),
            ToolSpec("raise_tool", "agentr1_core.testing.faults:RaisingTool", "Raises (fault tests)"),
            ToolSpec("hang_tool", "agentr1_core.testing.faults:HangingTool", "Hangs past its timeout (fault tests)"),
            ToolSpec("huge_tool", "agentr1_core.testing.faults:HugeOutputTool", "1 MB output (fault tests)"),
            ToolSpec("binary_tool", "agentr1_core.testing.faults:NonUtf8Tool", "Non-UTF-8 output (fault tests)")]


@hookimpl
def agentr1_envs():
    return [EnvSpec("faulty_env", "agentr1_core.testing.faults:FaultyEnv", "ToolEnv with injected env faults")]


@hookimpl
def agentr1_rollout_engines():
    return [EngineSpec("fault_injecting", "agentr1_core.testing.faults:FaultInjectingEngine",
                       "TransformersEngine wrapper that injects faulty model outputs")]


@hookimpl
def agentr1_datasets():
    return [DatasetSpec("fault_rows", "agentr1_core.testing.faults:fault_rows", "Rows that each inject one fault")]
