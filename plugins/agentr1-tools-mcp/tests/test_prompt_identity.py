"""The core's native ``calculator`` and the example MCP server's ``calculator`` (the named config ``calculator-mcp``)
give the model the same prompts, token for token with the real SmolLM2 tokenizer: the system prompt that lists the
tool, and every turn of an expert episode of the default task with the tool's results in it."""

from __future__ import annotations

import asyncio

from agentr1_core import tool_sources
from agentr1_core.builtin.datasets import arithmetic_rows
from agentr1_core.config import load_config
from agentr1_core.envs import ToolEnv
from agentr1_core.flows import render_prompt
from agentr1_core.mdp import Action
from agentr1_core.plugins import get_registry


def _episode_prompts(env: ToolEnv, row: dict, tokenizer) -> list[list[int]]:
    """The token ids of each prompt of the row's expert episode (an extra call with an error result included)."""

    async def play() -> list[list[int]]:
        obs = await env.reset(row)
        prompts = [render_prompt(tokenizer, obs)]
        actions = ['<tool_call>{"name": "calculator", "arguments": {"expression": "1 / 0"}}</tool_call>',
                   *row["expert_actions"]]
        for text in actions:
            result = await env.step(Action(text, [], []))
            if result.observation is None:
                break
            prompts.append(render_prompt(tokenizer, result.observation))
        return prompts

    return asyncio.run(play())


def test_a_native_and_an_mcp_calculator_give_the_same_prompts_token_for_token(smol_tokenizer):
    cfg = load_config("calculator-mcp")
    tool_sources.configure(cfg, get_registry())
    native = ToolEnv(tools=["calculator"], system_prompt=cfg.env.system_prompt, max_turns=4)
    served = ToolEnv(tools=list(cfg.env.tools), system_prompt=cfg.env.system_prompt, max_turns=4)
    assert type(served.tools["calculator"]).__name__ == "MCPTool"
    assert served.system_message() == native.system_message()
    for row in arithmetic_rows("val", train_size=0, val_size=4):
        expected = _episode_prompts(native, row, smol_tokenizer)
        got = _episode_prompts(served, row, smol_tokenizer)
        assert len(got) == len(expected) == 3  # the first prompt, after the 1 / 0 call, after the expert's call
        assert got == expected
        assert smol_tokenizer.decode(got[-1]).count("<tool_response>") == 2
