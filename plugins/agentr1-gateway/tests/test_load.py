"""A bounded load test: 32 clients at once (the official ``openai`` client, each in its own thread with its own
connection) against four episode gateways on one event loop, each sending well-formed calls, malformed ones and
prompts too long. Every request gets an answer, 200 or a well-formed 4xx; none is reset or left unanswered."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import openai

CLIENTS, EPISODES, MAX_CALLS = 32, 4, 10
USER = {"role": "user", "content": "What is 6*7?"}
REQUESTS = {  # what each client sends, in turn
    "fine": {"messages": [USER]},
    "malformed": {"messages": [USER], "stop": 5},
    "fine again": {"messages": [USER], "max_tokens": 4},
    "too long": {"messages": [{"role": "user", "content": "word " * 80_000}]},  # 400 KB: over the bound
}


def client_work(gateway) -> list[tuple[str, int, object]]:
    """(request, status, error body or answer) for each of ``REQUESTS``; a connection failure raises."""
    client = openai.OpenAI(base_url=gateway.base_url, api_key=gateway.key, max_retries=0, timeout=300,
                           http_client=openai.DefaultHttpxClient(trust_env=False))
    out = []
    try:
        for name, request in REQUESTS.items():
            try:
                reply = client.chat.completions.create(model="m", **request)
                out.append((name, 200, reply.choices[0].message.content))
            except openai.APIStatusError as exc:
                out.append((name, exc.status_code, exc.response.json()))
    finally:
        client.close()
    return out


def test_32_parallel_clients_against_four_episodes_are_each_answered(serve):
    async def go():
        async with serve(["ok"], max_calls=MAX_CALLS, max_prompt_tokens=4096) as a, serve(
                ["ok"], max_calls=MAX_CALLS) as b, serve(["ok"], max_calls=MAX_CALLS) as c, serve(
                ["ok"], max_calls=MAX_CALLS) as d:
            gateways = [a, b, c, d]
            loop = asyncio.get_running_loop()
            with ThreadPoolExecutor(CLIENTS) as pool:
                results = await asyncio.gather(*(loop.run_in_executor(pool, client_work, gateways[i % EPISODES])
                                                  for i in range(CLIENTS)))
            return results, gateways

    results, gateways = asyncio.run(go())
    answers = [answer for result in results for answer in result]
    assert len(answers) == CLIENTS * len(REQUESTS)
    for name, status, body in answers:
        if status == 200:
            assert name.startswith("fine") and body == "ok"
            continue
        assert 400 <= status < 500 and set(body) == {"error"}, (name, status, body)
        assert set(body["error"]) == {"message", "type", "param", "code"}
        # a malformed call is refused first; any other call once its episode reached its limit gets 429
        expected = {"malformed": [(400, "invalid_type")], "too long": [(400, "context_length_exceeded")]}.get(
            name, []) + ([] if name == "malformed" else [(429, "max_turns")])
        assert (status, body["error"]["code"]) in expected, (name, status, body)
    served = [a for a in answers if a[1] == 200]
    assert len(served) == EPISODES * MAX_CALLS  # each episode served exactly its limit, the rest were refused
    assert all(len(g.calls) == MAX_CALLS for g in gateways)
