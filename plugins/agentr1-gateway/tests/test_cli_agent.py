"""The ``cli_agent`` flow: a program per episode against the episode's endpoint. The example shell agent solves
generated terminal tasks with the tasks' solutions as the expert's answers (reward 1 from the tasks' own tests, 0
when it does nothing); the endpoint, key, task and placeholders reach the command; a command past its timeout is
killed with everything in its process group; a crash, a command that never calls the model and a missing program
end as env_error with their stderr kept while the next episodes run; a verifier's exit code, printed number or
reward file is the reward."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
import time

import pytest

from agentr1_core.flows import FlowContext
from agentr1_core.lifecycle.episode_errors import error_line
from agentr1_core.rollout.base import SamplingParams
from agentr1_core.rollout.driver import rollout_async
from agentr1_gateway.cli_flow import CLIAgentFlow, expand

SHELL_AGENT = [sys.executable, "-m", "agentr1_gateway.examples.shell_agent"]
# a command that calls the model once through the openai client (OPENAI_BASE_URL / OPENAI_API_KEY) and prints it
ASK_ONCE = [sys.executable, "-c", "import openai; r = openai.OpenAI(max_retries=0).chat.completions.create("
            "model='m', messages=[{'role': 'user', 'content': 'hi'}]); print(r.choices[0].message.content)"]


def context(engine=None, tokenizer=None, policy="model", max_turns=8):
    return FlowContext(engine=engine, tokenizer=tokenizer, sampling=SamplingParams(max_new_tokens=16),
                       max_turns=max_turns, policy=policy)


def run(rows, ctx, **params):
    return asyncio.run(rollout_async(rows, 1, lambda: CLIAgentFlow(ctx, **params), progress=False))


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def terminal_rows(terminal_rows_of):
    return terminal_rows_of(("count", "find", "sort", "csv_sum"))  # one task of each of four families


def test_the_shell_agent_solves_terminal_tasks_with_their_solutions_and_fails_them_doing_nothing(
        tokenizer, terminal_rows):
    from agentr1_env_terminal.harbor import read_task, solution_commands

    ctx = context(tokenizer=tokenizer, policy="expert")
    idle = [dict(row, expert_actions=["Done."]) for row in terminal_rows]  # answers at once, runs nothing
    trajs = run(terminal_rows + idle, ctx, command=SHELL_AGENT, timeout=120, test_sandbox="local")
    for row, traj in zip(terminal_rows, trajs[:4]):
        commands = solution_commands(read_task(row["env_kwargs"]["task_dir"]))
        assert traj.termination == "done", traj.info
        assert traj.final_reward == 1.0 and traj.info["tests"]["reward"] == 1.0, traj.info
        assert len(traj.steps) == len(commands) + 1 and traj.info["answer"] == "Done."
        assert json.dumps(commands[0]) in traj.steps[0].action_text  # the solution as bash tool calls
        assert traj.steps[0].info["finish_reason"] == "stop" and traj.info["exit_code"] == 0
        assert f"$ {commands[0]}" in traj.info["stderr"]  # what the agent ran, kept
    for traj in trajs[4:]:
        assert traj.termination == "done" and len(traj.steps) == 1
        assert traj.final_reward == 0.0 and traj.info["tests"]["exit_code"] == 1


def test_the_endpoint_key_task_and_placeholders_reach_the_command(tokenizer, scripted, tmp_path):
    dump = tmp_path / "seen.json"
    script = textwrap.dedent("""
        import json, os, sys, urllib.request
        import openai
        reply = openai.OpenAI(max_retries=0).chat.completions.create(
            model=os.environ["AGENTR1_MODEL"], messages=[{"role": "user", "content": os.environ["AGENTR1_TASK"]}])
        request = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/models",
                                         headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"]})
        models = json.load(urllib.request.urlopen(request))
        keys = [k for k in os.environ if k.startswith(("OPENAI_", "ANTHROPIC_", "AGENTR1_")) or k == "EXTRA"]
        json.dump({"env": {k: os.environ[k] for k in keys}, "argv": sys.argv[1:], "cwd": os.getcwd(),
                   "task": json.load(open(os.environ["AGENTR1_TASK_FILE"])), "models": models,
                   "reply": reply.choices[0].message.content}, open(os.environ["DUMP"], "w"))
        open("made.txt", "w").write("x")
        print("the answer is 42")
    """)
    row = {"prompt": "say hi", "data_source": "probe", "level": 3, "reward_model": {"ground_truth": "42"},
           "expert_actions": ["secret"]}
    command = [sys.executable, "-c", script, "{prompt}", "{data_source}-{level}", "{workdir}", "{unknown}", '{"a": 1}']
    engine = scripted(["hello there"])
    [traj] = run([row], context(engine, tokenizer), command=command, timeout=60,
                 env={"DUMP": str(dump), "EXTRA": "yes"}, verifier=["sh", "-c", "test -f made.txt"])
    assert traj.termination == "done", traj.info
    seen = json.loads(dump.read_text())
    env = seen["env"]
    assert env["OPENAI_BASE_URL"].startswith("http://127.0.0.1:") and env["OPENAI_BASE_URL"].endswith("/v1")
    assert env["ANTHROPIC_BASE_URL"] == env["OPENAI_BASE_URL"].removesuffix("/v1")
    assert env["OPENAI_API_KEY"] == env["ANTHROPIC_API_KEY"] and env["OPENAI_API_KEY"].startswith("agentr1-")
    assert env["AGENTR1_TASK"] == "say hi" and env["EXTRA"] == "yes" and env["AGENTR1_MODEL"] == "agentr1-policy"
    assert seen["models"]["data"][0]["id"] == "agentr1-policy" and seen["reply"] == "hello there"
    assert seen["task"] == {"prompt": "say hi", "data_source": "probe", "level": 3}  # no answer, no demonstrations
    assert seen["cwd"] == env["AGENTR1_WORKDIR"]
    assert seen["argv"] == ["say hi", "probe-3", seen["cwd"], "{unknown}", '{"a": 1}']
    assert len(traj.steps) == 1 and "say hi" in tokenizer.decode(traj.steps[0].prompt_ids)
    assert traj.info["answer"] == "the answer is 42" and traj.info["exit_code"] == 0
    assert traj.final_reward == 1.0 and traj.info["verifier"]["reward_from"] == "exit code"
    assert not os.path.exists(seen["cwd"])  # the working folder goes with its episode


def test_the_run_s_secrets_stay_out_of_the_command_s_environment_unless_pass_env_names_them(
        tokenizer, scripted, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws_secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-user-s-own")
    monkeypatch.setenv("MY_SETTING", "kept")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    dump = tmp_path / "env.json"
    script = ("import json, os, openai; openai.OpenAI(max_retries=0).chat.completions.create(model='m', "
              "messages=[{'role': 'user', 'content': 'hi'}]); json.dump(dict(os.environ), open(os.environ['DUMP'], 'w'))")
    verifier = [sys.executable, "-c", "import os; print(0.0 if 'HF_TOKEN' in os.environ else 1.0)"]
    ctx = context(scripted(["ok"]), tokenizer)
    [traj] = run([{"prompt": "p"}], ctx, command=[sys.executable, "-c", script], timeout=60,
                 env={"DUMP": str(dump)}, pass_env=["MY_*"], verifier=verifier)
    seen = json.loads(dump.read_text())
    assert "HF_TOKEN" not in seen and "AWS_SECRET_ACCESS_KEY" not in seen
    assert seen["OPENAI_API_KEY"].startswith("agentr1-")  # the episode's key, never the user's
    assert seen["MY_SETTING"] == "kept" and seen["LC_ALL"] == "C.UTF-8" and seen["HOME"] == os.environ["HOME"]
    assert traj.final_reward == 1.0, traj.info  # the verifier does not see it either
    [everything] = run([{"prompt": "p"}], context(scripted(["ok"]), tokenizer), command=[sys.executable, "-c", script],
                       timeout=60, env={"DUMP": str(dump)}, pass_env=["*"])
    assert everything.termination == "done" and json.loads(dump.read_text())["HF_TOKEN"] == "hf_secret"
    with pytest.raises(Exception, match="agent_flow.pass_env"):
        CLIAgentFlow(ctx, command=["true"], pass_env="HF_TOKEN")


def test_at_most_concurrency_commands_run_at_once_and_their_time_starts_with_them(tokenizer, scripted, tmp_path):
    log = tmp_path / "spans"
    # each command: asks the model once, then holds its slot a while; its start and end go to the log
    script = ("import os, time, openai; start = time.time(); openai.OpenAI(max_retries=0).chat.completions.create("
              "model='m', messages=[{'role': 'user', 'content': 'hi'}]); time.sleep(3.0); "
              f"open({str(log)!r}, 'a').write(f'{{start}} {{time.time()}}\\n')")
    rows = [{"prompt": str(i)} for i in range(6)]
    trajs = run(rows, context(scripted(["ok"]), tokenizer), command=[sys.executable, "-c", script], timeout=10,
                concurrency=2)
    # three rounds of two take longer than one command's timeout: none timed out, waiting did not count
    assert all(t.termination == "done" for t in trajs), [t.info.get("error") for t in trajs]
    spans = [tuple(map(float, line.split())) for line in log.read_text().splitlines()]
    assert len(spans) == 6
    overlap = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
    assert overlap == 2  # two at a time, never more (six at once without the limit)
    with pytest.raises(Exception, match="agent_flow.concurrency"):
        CLIAgentFlow(context(tokenizer=tokenizer), command=["true"], concurrency=0)


def test_a_verifier_s_printed_number_reward_file_or_exit_code_is_the_reward(tokenizer, scripted):
    ctx = context(scripted(["ok"]), tokenizer)
    printed = run([{"prompt": "a"}], ctx, command=ASK_ONCE, timeout=60,
                  verifier=[sys.executable, "-c", "import os; print('checking', os.environ['AGENTR1_ANSWER']); "
                            "print(0.25)"])
    assert printed[0].final_reward == 0.25 and printed[0].info["verifier"]["reward_from"] == "last line"
    assert "checking ok" in printed[0].info["verifier"]["stdout"]
    filed = run([{"prompt": "b"}], ctx, command=ASK_ONCE, timeout=60, reward_file="score.txt",
                verifier=["sh", "-c", "echo 0.5 > score.txt; echo no number here; exit 1"])
    assert filed[0].final_reward == 0.5 and filed[0].info["verifier"]["reward_from"] == "reward_file"
    failed = run([{"prompt": "c"}], ctx, command=ASK_ONCE, timeout=60, verifier=["sh", "-c", "exit 2"])
    assert failed[0].final_reward == 0.0 and failed[0].info["verifier"]["exit_code"] == 2
    assert failed[0].termination == "done"


def test_a_command_past_its_timeout_is_killed_with_its_process_group(tokenizer, scripted, tmp_path):
    pids = tmp_path / "pids"
    script = textwrap.dedent(f"""
        import os, subprocess, sys, time
        child = subprocess.Popen(["sleep", "1000"])
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        print("hanging on purpose", file=sys.stderr, flush=True)
        time.sleep(1000)
    """)
    started = time.monotonic()
    [traj] = run([{"prompt": "x"}], context(scripted(["ok"]), tokenizer), command=[sys.executable, "-c", script],
                 timeout=3)
    assert time.monotonic() - started < 60
    assert traj.termination == "env_error" and "did not exit within 3s" in traj.info["error"]
    # the line the run prints (an error's last line) says why, and what the command said last
    assert error_line(traj.info["error"]) == ("TimeoutError: the command did not exit within 3s "
                                              "(its last stderr line: hanging on purpose)")
    for pid in map(int, pids.read_text().split()):
        deadline = time.monotonic() + 5
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(pid), pid  # the command and the child it started: nothing left


def test_a_crash_a_command_that_never_calls_the_model_and_a_missing_program_are_env_errors_and_the_run_goes_on(
        tokenizer, scripted):
    class PerRow(CLIAgentFlow):
        async def run(self, row):
            self.command = row["command"]
            return await super().run(row)

    crash = [sys.executable, "-c", "import sys; print('bad config: no model named x', file=sys.stderr); sys.exit(3)"]
    silent = [sys.executable, "-c", "print('42, without asking anyone')"]
    rows = [{"prompt": "a", "command": crash}, {"prompt": "b", "command": silent},
            {"prompt": "c", "command": ["/nonexistent/harness"]}, {"prompt": "d", "command": ASK_ONCE}]
    ctx = context(scripted(["ok"]), tokenizer)
    crashed, silent_traj, missing, fine = asyncio.run(rollout_async(
        rows, 1, lambda: PerRow(ctx, command=["true"], timeout=60), progress=False))
    assert crashed.termination == "env_error" and not crashed.steps
    assert "exited with code 3 without calling the model" in crashed.info["error"]
    assert "bad config: no model named x" in crashed.info["error"]
    assert silent_traj.termination == "env_error" and "exited with code 0" in silent_traj.info["error"]
    assert silent_traj.info["answer"] == "42, without asking anyone"
    assert missing.termination == "env_error" and "cannot start '/nonexistent/harness'" in missing.info["error"]
    assert fine.termination == "done" and len(fine.steps) == 1 and fine.info["answer"] == "ok"


def test_more_calls_than_max_turns_end_the_episode_as_max_turns(tokenizer, scripted):
    call = '<tool_call>{"name": "bash", "arguments": {"command": "echo hi"}}</tool_call>'
    [traj] = run([{"prompt": "loop"}], context(scripted([call]), tokenizer, max_turns=2), command=SHELL_AGENT,
                 timeout=60)
    assert traj.termination == "max_turns" and len(traj.steps) == 2 and traj.steps[-1].truncated
    assert "RateLimitError" in traj.info["stderr"]  # the harness saw the refusal as its client's error


def test_a_task_row_without_the_terminal_plugin_is_one_line_naming_the_install(tokenizer, monkeypatch):
    monkeypatch.setitem(sys.modules, "agentr1_env_terminal", None)  # import fails as if not installed
    [traj] = run([{"prompt": "t", "env_kwargs": {"task_dir": "/somewhere"}}], context(tokenizer=tokenizer),
                 command=["true"], timeout=10)
    assert traj.termination == "env_error"
    assert "pip install ./plugins/agentr1-env-terminal" in traj.info["error"]
    assert "\n" not in traj.info["error"]


def test_placeholders_leave_other_braces_alone():
    assert expand(["{a}", "x{b}y", "{c}", "{}"], {"a": "1", "b": "2"}) == ["1", "x2y", "{c}", "{}"]


def test_in_a_sandbox_the_command_runs_as_its_own_user_reaches_the_endpoint_and_its_task_s_tests_pass(
        tokenizer, terminal_rows):
    from agentr1_env_terminal.sandboxes.local import LocalSandbox

    if not os.path.exists("/usr/bin/python3") or not LocalSandbox.check().ok:
        pytest.skip("needs /usr/bin/python3 and the local sandbox")
    # the system Python (its standard library only): the sandbox's user may not read the run's interpreter
    script = textwrap.dedent("""
        import json, os, urllib.request
        print(os.getuid(), os.getcwd(), json.load(open(os.environ["AGENTR1_TASK_FILE"]))["prompt"])
        body = {"model": "m", "messages": [{"role": "user", "content": os.environ["AGENTR1_TASK"]}]}
        request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", json.dumps(body).encode(),
                                         {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                                          "Content-Type": "application/json"})
        call = json.load(urllib.request.urlopen(request))["choices"][0]["message"]["tool_calls"][0]
        os.system(json.loads(call["function"]["arguments"])["command"])
    """)
    row = terminal_rows[0]  # count: its solution is one command
    sandbox = {"name": "local", "network": True, "wall_seconds": 60, "cpu_seconds": 60, "memory_mb": 4096}
    [traj] = run([row], context(tokenizer=tokenizer, policy="expert"), command=["/usr/bin/python3", "-c", script],
                 timeout=60, sandbox=sandbox)
    assert traj.termination == "done" and traj.final_reward == 1.0, traj.info
    uid, cwd, prompt = traj.info["stdout"].split(" ", 2)
    if os.geteuid() == 0:
        assert int(uid) != 0  # the sandbox's own unprivileged user
    assert cwd.endswith("/app") and prompt == row["prompt"].splitlines()[0]
    with pytest.raises(Exception, match="network: true"):
        CLIAgentFlow(context(tokenizer=tokenizer), command=["true"], sandbox="local")
