"""Fixtures of the gateway tests: the real SmolLM2 tokenizer, a tiny random Llama behind the real transformers
engine, a scripted engine (fixed answers, real token ids) for the round trips whose text must be known, and
``serve``: a real ``EpisodeGateway`` on 127.0.0.1 answering with the scripted engine, and ``openai_client``: the
official client pointed at one."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from agentr1_core.mdp import Action
from agentr1_core.rollout.base import Generation, SamplingParams
from agentr1_core.testing.ci import missing
from agentr1_core.tool_formats import HermesFormat
from agentr1_gateway.server import EpisodeGateway

AGENTS = Path(__file__).with_name("agent_functions.py")


def agent(name: str) -> str:
    """The config value that names one of tests/agent_functions.py's functions."""
    return f"{AGENTS}:{name}"


@pytest.fixture(scope="session")
def tokenizer():
    from agentr1_core.models import load_tokenizer

    return load_tokenizer("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, tokenizer):
    from transformers import AutoModelForCausalLM

    from agentr1_core.testing.models import save_tiny_llama

    folder = save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), tokenizer)
    return AutoModelForCausalLM.from_pretrained(folder).eval()


class ScriptedEngine:
    """Answers with fixed texts in turn (the last one repeats); records every prompt it was given."""

    def __init__(self, tokenizer, answers):
        self.tokenizer, self.answers, self.prompts = tokenizer, list(answers), []

    async def generate(self, prompt_ids, sampling):
        self.prompts.append(list(prompt_ids))
        text = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return Generation(ids, [-0.25] * len(ids), text, "stop")


@pytest.fixture
def scripted(tokenizer):
    return lambda answers: ScriptedEngine(tokenizer, answers)


@contextlib.asynccontextmanager
async def serving(tokenizer, answers=("ok",), **gateway_kw):
    """A started gateway whose model answers with ``answers`` in turn; closed on exit. ``gateway.engine`` holds
    the prompts it was given."""
    engine = ScriptedEngine(tokenizer, answers)

    async def respond(prompt_ids, sampling):
        gen = await engine.generate(prompt_ids, sampling)
        return Action(gen.text, list(gen.token_ids), list(gen.logprobs), finish_reason=gen.finish_reason)

    gateway_kw.setdefault("sampling", SamplingParams(max_new_tokens=16))
    gateway = EpisodeGateway(respond=respond, tokenizer=tokenizer, tool_format=HermesFormat(), **gateway_kw)
    gateway.engine = engine
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.close()


@pytest.fixture
def serve(tokenizer):
    """``async with serve(answers, **gateway_kw) as gateway``: see ``serving`` (``tokenizer=`` replaces the
    SmolLM2 tokenizer)."""
    return lambda answers=("ok",), **kw: serving(kw.pop("tokenizer", tokenizer), answers, **kw)


@pytest.fixture
def openai_client():
    """``openai_client(gateway)``: the official client, as the flow builds it, pointed at ``gateway``."""
    import openai

    def make(gateway):
        return openai.OpenAI(base_url=gateway.base_url, api_key=gateway.key, max_retries=0, timeout=120,
                             http_client=openai.DefaultHttpxClient(trust_env=False))

    return make


@pytest.fixture(scope="session")
def terminal_rows_of():
    """``rows(families) -> list``: the first held-out generated terminal task of each named family, in the order the
    generated split lists them (agentr1-env-terminal's tasks)."""
    pytest.importorskip("agentr1_env_terminal")
    from agentr1_env_terminal.tasks.generate import load_generated

    def rows(families: tuple[str, ...]) -> list[dict]:
        found, seen = [], set()
        for row in load_generated("val"):
            family = row["data_source"].split("/")[-1]
            if family in families and family not in seen:
                seen.add(family)
                found.append(row)
        assert len(found) == len(families), (families, seen)
        return found

    return rows


@pytest.fixture(scope="session")
def mini_program() -> str:
    """mini-swe-agent's ``mini``: $AGENTR1_MINI_SWE_AGENT, else .venv-mini/bin/mini (scripts/setup_mini_swe_agent.sh,
    which CI runs; missing there is a failure)."""
    found = os.environ.get("AGENTR1_MINI_SWE_AGENT") or str(Path(__file__).resolve().parents[3] / ".venv-mini" /
                                                            "bin" / "mini")
    if not os.access(found, os.X_OK):
        missing(f"mini-swe-agent is not installed at {found}: bash scripts/setup_mini_swe_agent.sh")
    return found
