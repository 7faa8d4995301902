"""Agent functions the gateway tests run: ordinary OpenAI-client code, some of it misbehaving on purpose."""

import time
from concurrent.futures import ThreadPoolExecutor


def ask(task, client):
    """One plain completion; returns the text."""
    reply = client.chat.completions.create(model="anything", messages=[{"role": "user", "content": task["prompt"]}],
                                           max_tokens=6)
    return reply.choices[0].message.content


def two_in_parallel(task, client):
    """Two calls at once, each with its own prompt."""
    def one(tag):
        messages = [{"role": "user", "content": f"{task['prompt']} ({tag})"}]
        return client.chat.completions.create(model="m", messages=messages).choices[0].message.content

    with ThreadPoolExecutor(2) as pool:
        return " | ".join(pool.map(one, ["first", "second"]))


def keeps_asking(task, client):
    """Calls until the gateway refuses, then reports what it saw."""
    while True:
        try:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": task["prompt"]}])
        except Exception as exc:  # the refusal, as the openai client raises it
            return f"{type(exc).__name__}: {getattr(exc, 'code', '')}"


def long_prompt(task, client):
    text = "word " * 500
    try:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
    except Exception as exc:
        return f"{type(exc).__name__}: {exc.code}"
    return "served"


def raises(task, client):
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    raise RuntimeError("agent bug")


def hangs(task, client):
    time.sleep(30)


def never_calls(task, client):
    return 1.0


def returns_reward(task, client):
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": task["prompt"]}])
    return {"reward": 0.75, "metrics": {"hops": 2}}


def sees_the_task(task, client):
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": task["prompt"]}])
    return ",".join(sorted(task))
