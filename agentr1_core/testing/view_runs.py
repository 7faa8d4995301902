"""Run folders for the ``agentr1-core view`` tests (tests/lifecycle/test_view.py and test_view_browser.py): a
synthetic run over three validation stages, the same with uids that are not strings, one another program wrote
(NaN, Infinity, lines that are not JSON) and one with a branched (subagent) episode."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from agentr1_core.lifecycle.metrics import episode_record
from agentr1_core.mdp import Observation, Step, Trajectory

SYSTEM = "Solve it. Call the calculator, then answer <answer>N</answer>.\n" + "tool schema line\n" * 8


def messages(task: str, *turns: tuple[str, str]) -> list[dict]:
    out = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    for action, output in turns:
        out += [{"role": "assistant", "content": action}, {"role": "tool", "name": "calculator", "content": output}]
    return out


def episode(tid: str, task: str, ok: bool, termination: str = "done", source: str = "arith", uid: str = "x/0",
             two_steps: bool = True, **extra) -> dict:
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>'
    steps = [{"action": call, "feedback": "4", "reward": 0.0, "done": False, "truncated": False, "prompt_tokens": 90,
              "response_tokens": 20, "prompt": messages(task), "finish_reason": "stop",
              "calls": [{"name": "calculator", "arguments": {"expression": "2+2"}, "output": "4"}]}]
    if two_steps:
        steps.append({"action": "<answer>4</answer>" if ok else "<answer>5</answer>", "feedback": "",
                      "reward": 1.0 if ok else 0.0, "done": True, "truncated": False, "prompt_tokens": 120,
                      "response_tokens": 8, "prompt": messages(task, (call, "4")), "answer": "4" if ok else "5"})
    return {"uid": uid, "task_id": tid, "data_source": source, "task": task, "reward": 1.0 if ok else 0.0,
            "success": ok, "termination": termination, "metrics": {"num_steps": float(len(steps))}, "steps": steps,
            **extra}


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def make_run(root: Path) -> Path:
    """A synthetic run directory: 4 held-out tasks over 3 validation stages, listed in a different order at each
    stage; task d is missing after SFT. a: fail -> success -> success, b: success -> fail -> fail, c: fail throughout
    (a parse error, then the context limit), d: success at both ends."""
    run = root / "run"
    (run / "episodes").mkdir(parents=True)
    (run / "config.yaml").write_text(textwrap.dedent("""\
        seed: 3
        model: {path: smollm2-135m-instruct}
        env: {name: tool_env, tools: [{name: calculator}], max_turns: 4}
        algorithm: {name: grpo}
        trainer: {name: local, total_steps: 2, lr: 1.0e-05}
        stages: [sft, rl]
        """), encoding="utf-8")
    val = [{"event": "validation", "label": label, "iteration": it, "cases": 4, "success_rate": rate,
            "reward_mean": rate, "terminations": {"done": 4},
            "by_source": {"arith": {"success_rate": rate, "cases": 4}}}
           for label, it, rate in (("before_sft", 0, 0.5), ("after_sft", 0, 0.33), ("after_rl", 2, 0.5))]
    iters = [{"iteration": i, "reward_mean": 0.1 * i, "success_rate": 0.1 * i, "loss": 0.5 / i, "kl": 0.01 * i,
              "entropy": 1.0 - 0.1 * i, "rollout_tok_s": 100.0 + i, "update_tok_s": 900.0, "terminations": {"done": 4}}
             for i in (1, 2)]
    write_jsonl(run / "metrics.jsonl", [val[0], {"event": "sft", "sft_nll": 0.7}, val[1], iters[0], iters[1], val[2]])
    (run / "summary.json").write_text(json.dumps({"wall_seconds": 90.0, "validation": {}}), encoding="utf-8")
    eps = run / "episodes"
    write_jsonl(eps / "before_sft.jsonl", [
        episode("a", "task a", False, uid="val-before_sft-0/0"), episode("b", "task b", True),
        episode("c", "task c", False, tool_errors={"parse_error": 1}), episode("d", "task d", True)])
    write_jsonl(eps / "after_sft.jsonl", [
        episode("c", "task c", False, termination="context_limit"), episode("a", "task a", True),
        episode("b", "task b", False, source="arith")])
    write_jsonl(eps / "after_rl.jsonl", [
        episode("d", "task d", True), episode("b", "task b", False, termination="env_error",
                                                   error="Traceback ...\nRuntimeError: boom", two_steps=False),
        episode("a", "task a", True), episode("c", "task c", False)])
    write_jsonl(eps / "train" / "iter_000001.jsonl", [episode("t1", "train task", True, uid="it1-0/0")])
    return run


UIDS = [7, None, ["a", 1], {"k": 2}, 0]  # uids of the first five episodes: none of them a string
UID_TEXTS = ["7", "null", '["a", 1]', '{"k": 2}', "0"]


def make_odd_uid_run(root: Path) -> Path:
    """``make_run`` with uids that are not strings (a number, null, a list, an object, 0) and one record without."""
    run = make_run(root)
    path = run / "episodes" / "before_sft.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record, uid in zip(records, UIDS):
        record["uid"] = uid
    write_jsonl(path, records)
    path = run / "episodes" / "after_sft.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[0]["uid"] = 0
    del records[1]["uid"]
    write_jsonl(path, records)
    return run


def write_foreign_run(root: Path) -> Path:
    """A run whose files another program wrote: NaN and Infinity in metrics.jsonl, an episode file and
    summary.json, and lines that are not JSON objects."""
    run = make_run(root)
    metrics = run / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    lines[3] = lines[3].replace('"loss": 0.5', '"loss": NaN').replace('"kl": 0.01', '"kl": Infinity')
    lines.insert(2, "{not json")  # line 3
    lines.append("[1, 2]")
    metrics.write_text("\n".join(lines) + "\n")
    episodes = run / "episodes" / "after_rl.jsonl"
    records = [json.loads(line) for line in episodes.read_text().splitlines()]
    records[0]["reward"] = float("nan")
    records[0]["metrics"] = {"num_steps": float("inf"), "score": float("-inf")}
    records[0]["steps"][0]["reward"] = float("nan")
    episodes.write_text("".join(json.dumps(r) + "\n" for r in records[:2]) + "garbage\n\n"
                        + "".join(json.dumps(r) + "\n" for r in records[2:]))
    (run / "metrics.jsonl").write_text(metrics.read_text().replace('"success_rate": 0.33', '"success_rate": NaN'))
    (run / "summary.json").write_text('{"wall_seconds": NaN, "validation": {}}')
    return run


def branched_trajectory() -> Trajectory:
    """A subagent episode as the gateway records it: the main conversation asks (step 0), a helper with its own
    system prompt calls the calculator and answers (steps 1, 2: branch 1, from step 0, 5 token ids shared), the main
    conversation answers with the helper's answer as its tool result (step 3, continuing step 0)."""
    call = '<tool_call>{"name": "ask_helper", "arguments": {"question": "2+2?"}}</tool_call>'
    main = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "task m"}]
    helper = [{"role": "system", "content": "You are a helper.\n"}, {"role": "user", "content": "2+2?"}]
    helper_call = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>'
    links = [{"branch": 0}, {"branch": 1, "branch_of": 0, "shared_prefix_tokens": 5}, {"parent": 1, "branch": 1},
             {"parent": 0, "branch": 0}]
    prompts = [main, helper, [*helper, {"role": "assistant", "content": helper_call},
                              {"role": "tool", "name": "calculator", "content": "4"}],
               [*main, {"role": "assistant", "content": call}, {"role": "tool", "name": "ask_helper", "content": "4"}]]
    actions = [call, helper_call, "It is 4.", "<answer>4</answer>"]
    steps = [Step([1] * 9, [2] * 3, [0.0] * 3, action_text=a, observation=Observation(messages=m), info=dict(link))
             for a, m, link in zip(actions, prompts, links)]
    steps[-1].done, steps[-1].reward = True, 1.0
    return Trajectory(steps=steps, uid="val-after_rl-0/0", termination="done", final_reward=1.0,
                      info={"task_id": "m", "branches": 2})


def write_branched_run(root: Path) -> Path:
    run = root / "run"
    write_jsonl(run / "episodes" / "after_rl.jsonl", [episode_record(branched_trajectory()),
                                                        episode("c", "task chain", True)])
    return run
