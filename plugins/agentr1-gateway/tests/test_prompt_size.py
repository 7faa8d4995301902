"""Prompts are measured off the shared event loop, and a prompt whose length alone proves it too long is refused
without being tokenised: one episode's huge prompt never holds up another episode's request; the length bound is
sound (it never refuses a prompt that fits) and absent for tokenizers that can drop characters."""

from __future__ import annotations

import asyncio
import copy
import threading

import openai
import pytest
from tokenizers import normalizers, pre_tokenizers

from agentr1_gateway.prompts import COMPOSITION, char_limit, most_chars_per_token

USER = {"role": "user", "content": "hi"}


class WatchedTokenizer:
    """The real tokenizer, with every text it encodes recorded; encoding one longer than ``long`` characters waits
    until ``release`` is set (at most a minute, so that a test of a loop it blocks fails instead of hanging)."""

    def __init__(self, inner, long: int) -> None:
        self.inner, self.long = inner, long
        self.encoded: list[int] = []  # lengths of the texts encoded
        self.events: list[str] = []
        self.blocked, self.release = threading.Event(), threading.Event()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, text, **kwargs):
        self.encoded.append(len(text))
        if len(text) > self.long:
            self.blocked.set()
            self.release.wait(timeout=60)
        out = self.inner(text, **kwargs)
        if len(text) > self.long:
            self.events.append("big prompt tokenised")
        return out

    def apply_chat_template(self, messages, tokenize=True, **kwargs):
        text = self.inner.apply_chat_template(messages, tokenize=False, **kwargs)
        return self(text, add_special_tokens=False)["input_ids"] if tokenize else text


def test_another_episodes_request_is_answered_while_a_big_prompt_is_tokenised(serve, tokenizer, openai_client):
    watched = WatchedTokenizer(tokenizer, long=20_000)

    async def go():
        async with serve(["big"], tokenizer=watched, max_prompt_tokens=100_000) as big_episode, \
                serve(["small"], tokenizer=watched) as small_episode:
            big_client, small_client = openai_client(big_episode), openai_client(small_episode)
            try:
                big = asyncio.ensure_future(asyncio.to_thread(
                    big_client.chat.completions.create, model="m",
                    messages=[{"role": "user", "content": "lorem ipsum " * 5000}]))
                await asyncio.to_thread(watched.blocked.wait, 60)  # the big prompt is being tokenised now
                small = await asyncio.to_thread(small_client.chat.completions.create, model="m", messages=[USER])
                watched.events.append("small request answered")
                watched.release.set()
                return (await big).choices[0].message.content, small.choices[0].message.content
            finally:
                watched.release.set()
                big_client.close()
                small_client.close()

    assert asyncio.run(go()) == ("big", "small")
    assert watched.events == ["small request answered", "big prompt tokenised"]


def test_a_prompt_too_long_by_its_length_alone_is_refused_without_being_tokenised(serve, tokenizer, openai_client):
    watched = WatchedTokenizer(tokenizer, long=10 ** 9)
    huge = "word " * 720_000  # 3.6 MB

    async def go():
        async with serve(tokenizer=watched, max_prompt_tokens=4096) as gateway:
            client = openai_client(gateway)
            try:
                with pytest.raises(openai.BadRequestError) as refused:
                    await asyncio.to_thread(client.chat.completions.create, model="m",
                                            messages=[{"role": "user", "content": huge}])
                served = await asyncio.to_thread(client.chat.completions.create, model="m", messages=[USER])
            finally:
                client.close()
            return refused.value, served

    refused, served = asyncio.run(go())
    assert refused.code == "context_length_exceeded" and refused.body["param"] == "messages"
    assert "characters" in refused.message and served.choices[0].message.content == "ok"
    assert max(watched.encoded) < 1000  # only the small prompt was ever encoded


def test_the_length_bound_never_refuses_a_prompt_that_fits_even_at_the_most_characters_per_token(serve, tokenizer,
                                                                                                 openai_client):
    longest = max(tokenizer.get_vocab(), key=len)
    assert most_chars_per_token(tokenizer) == len(longest) == 81  # "\n" and 80 spaces, one byte-level symbol each
    content = tokenizer.convert_tokens_to_string([longest]) * 1000
    messages = [{"role": "user", "content": content}]
    exact = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    exact = list(exact["input_ids"] if hasattr(exact, "keys") else exact)
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert len(text) / len(exact) > 78  # the prompt is as dense as this tokenizer's text gets: the bound is tight

    async def ask(limit):
        async with serve(max_prompt_tokens=limit) as gateway:
            client = openai_client(gateway)
            try:
                return await asyncio.to_thread(client.chat.completions.create, model="m", messages=messages)
            except openai.BadRequestError as exc:
                return exc
            finally:
                client.close()

    served = asyncio.run(ask(len(exact)))
    assert served.choices[0].message.content == "ok" and served.usage.prompt_tokens == len(exact)
    refused = asyncio.run(ask(len(exact) - 1))  # one token short: refused by the exact count, not by the bound
    assert refused.code == "context_length_exceeded" and f"has {len(exact)} tokens" in refused.message


def test_the_bound_widens_for_composing_normalisers_and_is_dropped_where_characters_can_vanish(tokenizer):
    composing = copy.deepcopy(tokenizer)
    composing.backend_tokenizer.normalizer = normalizers.NFC()
    assert most_chars_per_token(composing) == COMPOSITION * 81
    # NFC composes four code points into one (alpha, psili, varia, ypogegrammeni): a token stands for 4x the input
    decomposed = "\u03b1\u0313\u0300\u0345" * 2000
    assert len(composing.backend_tokenizer.normalizer.normalize_str(decomposed)) * COMPOSITION == len(decomposed)

    dropping = copy.deepcopy(tokenizer)
    dropping.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                                       pre_tokenizers.ByteLevel()])
    assert len(dropping(" " * 100_000 + "a", add_special_tokens=False)["input_ids"]) == 1  # 100,001 characters
    assert most_chars_per_token(dropping) is None and char_limit(dropping, 4096) is None
    assert char_limit(tokenizer, 4096) == 4096 * 81


def test_a_call_still_being_tokenised_when_its_episode_ends_never_reaches_the_model(serve, tokenizer, openai_client):
    watched = WatchedTokenizer(tokenizer, long=20_000)

    async def go():
        async with serve(tokenizer=watched, max_prompt_tokens=100_000) as gateway:
            client = openai_client(gateway)
            try:
                call = asyncio.ensure_future(asyncio.to_thread(
                    client.chat.completions.create, model="m", messages=[{"role": "user", "content": "a " * 20_000}]))
                await asyncio.to_thread(watched.blocked.wait, 60)
                closing = asyncio.ensure_future(gateway.close())  # the episode ends while the call is tokenised
                await asyncio.sleep(0)
                watched.release.set()
                await closing
                with pytest.raises(openai.APIStatusError) as refused:
                    await call
            finally:
                watched.release.set()
                client.close()
            return refused.value, gateway

    refused, gateway = asyncio.run(go())
    assert refused.status_code == 410 and refused.code == "episode_ended"
    assert gateway.calls == [] and gateway.engine.prompts == []


@pytest.mark.parametrize("protocol", ["anthropic_messages", "anthropic_count_tokens", "openai_responses"])
def test_every_protocol_refuses_a_prompt_too_long_by_its_length_alone_without_tokenising_it(serve, tokenizer,
                                                                                          openai_client, protocol):
    import anthropic

    watched = WatchedTokenizer(tokenizer, long=10 ** 9)
    huge = "word " * 720_000  # 3.6 MB

    def ask(gateway, content):
        if protocol == "openai_responses":
            client = openai_client(gateway)
            error = openai.BadRequestError
            call = lambda: client.responses.create(model="m", input=content)  # noqa: E731
        else:
            client = anthropic.Anthropic(base_url=gateway.base_url.removesuffix("/v1"), api_key=gateway.key,
                                         max_retries=0, timeout=120,
                                         http_client=anthropic.DefaultHttpxClient(trust_env=False))
            error = anthropic.BadRequestError
            messages = [{"role": "user", "content": content}]
            call = (lambda: client.messages.count_tokens(model="m", messages=messages)) if protocol.endswith(
                "count_tokens") else (lambda: client.messages.create(model="m", max_tokens=8, messages=messages))
        try:
            if content is not huge:
                return call()
            with pytest.raises(error) as refused:
                call()
            return refused.value
        finally:
            client.close()

    async def go():
        async with serve(tokenizer=watched, max_prompt_tokens=4096) as gateway:
            return (await asyncio.to_thread(ask, gateway, huge), await asyncio.to_thread(ask, gateway, "hi"),
                    gateway)

    refused, served, gateway = asyncio.run(go())
    if protocol == "openai_responses":
        assert refused.code == "context_length_exceeded" and "characters" in refused.message
        assert served.output_text == "ok"
    else:
        assert refused.body["error"]["type"] == "invalid_request_error"
        assert refused.body["error"]["message"].startswith("prompt is too long: 3600") and "characters" in \
            refused.body["error"]["message"]
        assert getattr(served, "input_tokens", None) or served.content[0].text == "ok"
    assert max(watched.encoded) < 1000  # only the small prompt was ever encoded
    # a refused count is not a refused call: it ends nothing
    assert [r.code for r in gateway.refusals] == ([] if protocol.endswith("count_tokens") else
                                                  ["context_length_exceeded"])
