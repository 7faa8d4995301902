"""Fixtures of the gateway tests: the real SmolLM2 tokenizer, a tiny random Llama behind the real transformers
engine, and a scripted engine (fixed answers, real token ids) for the round trips whose text must be known."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentr1_core.rollout.base import Generation

AGENTS = Path(__file__).with_name("agents.py")


def agent(name: str) -> str:
    """The config value that names one of tests/agents.py's functions."""
    return f"{AGENTS}:{name}"


@pytest.fixture(scope="session")
def tokenizer():
    from agentr1_core.models import load_model_and_tokenizer

    return load_model_and_tokenizer("smollm2-135m-instruct")[1]


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
