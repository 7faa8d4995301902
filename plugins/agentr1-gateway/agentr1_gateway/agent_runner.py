"""Where the user's agent function runs, and how an episode that has ended stops it.

``call_agent`` calls ``agent(task, client, **params)`` with an ``openai.OpenAI`` client pointed at the episode's
gateway. Once the episode has ended (``ended`` is set) that client raises ``EpisodeEnded`` at the agent's next model
call. ``EpisodeEnded`` derives from ``BaseException``, so the ``except Exception`` of an agent's retry loop does not
catch it: a looping agent ends at its next model call.

Two runners, chosen by the flow's ``isolation``:

* ``AgentThread`` (``thread``, the default): a daemon thread, which nothing joins, so an abandoned agent never keeps
  the process from ending. An agent past its timeout is also sent ``EpisodeEnded`` as an asynchronous exception
  (``PyThreadState_SetAsyncExc``), which stops Python code at its next bytecode: a pure-Python loop ends there.
  What a thread cannot stop is a long call into C (a huge ``**``, ``time.sleep``, a blocking read, a regular
  expression that backtracks) nor code that catches ``BaseException``: such an agent runs on, unobserved, and holds
  the GIL whenever it runs Python, until it returns to Python code or makes a model call.
* ``AgentProcess`` (``process``): the agent runs in a child Python process (``python -m
  agentr1_gateway.agent_runner``) with the parent's ``sys.path``, and is killed when its episode ends. The task, the
  agent's parameters and its return value travel pickled, so they must pickle; starting the process (about a
  second) counts as the agent's own time.

Neither knows the engine; the module imports nothing heavy, so the child starts fast.
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib
import importlib.util
import inspect
import os
import pickle
import shutil
import sys
import tempfile
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

MODEL_CALL_TIMEOUT = 3600.0  # seconds the client waits for one completion (a batch of long generations on a CPU)


class EpisodeEnded(BaseException):
    """Raised in an agent whose episode has ended: at its next model call, or asynchronously in its thread."""


class AgentFailed(Exception):
    """The agent raised in its own process; the message is its traceback."""


@dataclass
class Endpoint:
    base_url: str
    api_key: str
    model: str


def load_agent(spec: str) -> Callable[..., Any]:
    """``package.module:function`` or ``path/to/file.py:function``."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise ValueError(f"agent must look like 'package.module:function' or 'file.py:function', got {spec!r}")
    if target.endswith(".py"):
        path = Path(target).expanduser()
        if not path.is_file():
            raise ValueError(f"agent file not found: {path}")
        module_name = f"agentr1_user_agent_{abs(hash(str(path.resolve())))}"
        module = sys.modules.get(module_name)
        if module is None:
            loaded = importlib.util.spec_from_file_location(module_name, path)
            assert loaded is not None and loaded.loader is not None
            module = importlib.util.module_from_spec(loaded)
            sys.modules[module_name] = module
            loaded.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise ValueError(f"cannot import the agent's module {target!r}: {exc}") from exc
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"{target} has no function {name!r}")
    return fn


def call_agent(agent: Callable[..., Any], task: dict[str, Any], base_url: str, key: str, model_name: str,
               params: dict[str, Any], ended: threading.Event) -> Any:
    """``agent(task, client, **params)`` (and ``endpoint=`` when it takes one); its client refuses every call once
    ``ended`` is set."""
    import openai

    def refuse_after_end(request: Any) -> None:
        if ended.is_set():
            raise EpisodeEnded("the episode has ended; its endpoint takes no more calls")

    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=MODEL_CALL_TIMEOUT,
                           http_client=openai.DefaultHttpxClient(trust_env=False,
                                                                 event_hooks={"request": [refuse_after_end]}))
    kwargs = dict(params)
    if "endpoint" in inspect.signature(agent).parameters:
        kwargs["endpoint"] = Endpoint(base_url, key, model_name)
    try:
        return agent(task, client, **kwargs)
    finally:
        client.close()


class AgentThread:
    """``fn()`` in a daemon thread; ``start()`` gives a future of its result, ``stop()`` interrupts it if it still
    runs (see the module docstring for what that can and cannot stop)."""

    def __init__(self, fn: Callable[[], Any], name: str = "agentr1-openai-agent") -> None:
        self.fn, self.name = fn, name
        self.thread: threading.Thread | None = None
        self._done: asyncio.Future[Any] | None = None
        self._lock = threading.Lock()  # held while interrupting: the thread cannot finish (and its id be reused)
        self._finished = False
        self._interrupted = False

    async def start(self) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if done.done():
                return
            if ok:
                done.set_result(value)
            else:
                done.set_exception(value)

        def work() -> None:
            try:
                try:
                    outcome: tuple[bool, Any] = (True, self.fn())
                except BaseException as exc:  # noqa: BLE001 - handed to the loop, raised there
                    outcome = (False, exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
                finally:
                    with self._lock:
                        self._finished = True
                loop.call_soon_threadsafe(settle, *outcome)
            except EpisodeEnded:  # the interrupt arrived as the agent finished: nobody waits for it any more
                pass
            except RuntimeError:  # the loop is closed: nobody waits for this result any more
                pass

        self.thread = threading.Thread(target=work, daemon=True, name=self.name)
        self.thread.start()
        self._done = done
        return done

    async def stop(self) -> None:
        """Send ``EpisodeEnded`` into the thread if it has not finished (once); its result is dropped."""
        if self._done is not None and not self._done.done():
            self._done.cancel()
        with self._lock:
            if self.thread is None or self._finished or self._interrupted or self.thread.ident is None:
                return
            self._interrupted = True
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread.ident),
                                                       ctypes.py_object(EpisodeEnded))


class AgentProcess:
    """The agent in a child process; ``start()`` gives a future of its result (``AgentFailed`` with its traceback
    when it raised), ``stop()`` kills it if it still runs."""

    def __init__(self, agent: str, task: dict[str, Any], base_url: str, key: str, model_name: str,
                 params: dict[str, Any]) -> None:
        self.job = {"agent": agent, "task": task, "base_url": base_url, "key": key, "model_name": model_name,
                    "params": params, "sys_path": list(sys.path)}
        self.folder = Path(tempfile.mkdtemp(prefix="agentr1-agent-"))
        self.proc: asyncio.subprocess.Process | None = None
        self._outcome: asyncio.Future[Any] | None = None

    async def start(self) -> asyncio.Future[Any]:
        job, result = self.folder / "job.pkl", self.folder / "result.pkl"
        try:
            job.write_bytes(pickle.dumps(self.job))
        except Exception as exc:
            raise ValueError(f"the task or agent_params cannot be sent to the agent's process: {exc}") from exc
        self.proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "agentr1_gateway.agent_runner",
                                                         str(job), str(result), stdin=asyncio.subprocess.DEVNULL)
        self._outcome = asyncio.ensure_future(self._result(self.proc, result))
        return self._outcome

    @staticmethod
    async def _result(proc: asyncio.subprocess.Process, result: Path) -> Any:
        code = await proc.wait()
        if not result.is_file():
            raise AgentFailed(f"RuntimeError: the agent's process exited with code {code} without a result")
        kind, value = pickle.loads(result.read_bytes())
        if kind == "error":
            raise AgentFailed(value)
        return value

    async def stop(self) -> None:
        """Kill the process if it still runs, reap it, and remove its files; its result is dropped."""
        if self._outcome is not None and not self._outcome.done():
            self._outcome.cancel()
        if self.proc is not None and self.proc.returncode is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
            await self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def _child(job_path: str, result_path: str) -> None:
    """The agent's process: run the job, write ``("value", v)`` or ``("error", traceback)``, exit at once (threads
    the agent left running do not hold the process)."""
    job = pickle.loads(Path(job_path).read_bytes())
    sys.path[:] = job["sys_path"]
    try:
        fn = load_agent(job["agent"])
        value = call_agent(fn, job["task"], job["base_url"], job["key"], job["model_name"], job["params"],
                           threading.Event())
        payload = pickle.dumps(("value", value))  # a value that does not pickle is reported as the agent's error
    except BaseException:  # noqa: BLE001 - reported to the parent
        payload = pickle.dumps(("error", traceback.format_exc()))
    Path(result_path).write_bytes(payload)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])
