"""Agent functions the gateway tests run: ordinary OpenAI-client code, some of it misbehaving on purpose."""

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

THREADS = {}  # task prompt -> the thread an agent ran in (for the tests that check it ended)


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


def retries_past_its_timeout(task, client):
    """A retrying agent: it retries every error, spends its own time between calls, and even swallows an interrupt
    while it waits."""
    THREADS[task["prompt"]] = threading.current_thread()
    while True:
        try:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": task["prompt"]}])
        except Exception:
            pass
        try:
            time.sleep(0.2)
        except BaseException:
            pass


def spins_after_one_call(task, client):
    """One call, then a pure-Python loop that never calls again."""
    THREADS[task["prompt"]] = threading.current_thread()
    if task.get("pid_file"):
        with open(task["pid_file"], "w") as out:
            out.write(str(os.getpid()))
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": task["prompt"]}])
    count = 0
    while True:
        count += 1


def stuck_in_c_after_one_call(task, client):
    """One call, then waits in C (time.sleep) forever, swallowing every interrupt: nothing in a thread stops it."""
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": task["prompt"]}])
    while True:
        try:
            time.sleep(3600)
        except BaseException:
            pass
