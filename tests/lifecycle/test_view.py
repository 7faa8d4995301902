"""``agentr1-core view``: the data the page is built from (stage alignment by task id, flipped-task filters, step
diffs, tags, curves, the validation table, eval reports), the page file itself (one file, data escaped, its stated
size), 10,000 episodes, files another program wrote (any uid, NaN and Infinity, lines that are not JSON objects,
records of another shape), the episode records a run writes (prompts, tool calls, task ids, kept training episodes)
and a real run end to end; then the page in headless Chromium (rendering, filters, model output as text, every uid,
NaN shown, the episode pane in view beside the tables)."""

from __future__ import annotations

import asyncio
import json
import re
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentr1_core.cli import main
from agentr1_core.lifecycle.metrics import episode_record, write_train_episodes
from agentr1_core.lifecycle.view import (
    apply_diff, build_view, first_episode, flipped, line_diff, lines, prompt_text, render_messages, seen_text,
)
from agentr1_core.lifecycle.view_page import embed_json, render_page, write_view
from agentr1_core.mdp import Observation, Step, Trajectory
from agentr1_core.rollout.driver import task_id
from agentr1_core.testing.ci import missing

SYSTEM = "Solve it. Call the calculator, then answer <answer>N</answer>.\n" + "tool schema line\n" * 8


def _msgs(task: str, *turns: tuple[str, str]) -> list[dict]:
    out = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    for action, output in turns:
        out += [{"role": "assistant", "content": action}, {"role": "tool", "name": "calculator", "content": output}]
    return out


def _episode(tid: str, task: str, ok: bool, termination: str = "done", source: str = "arith", uid: str = "x/0",
             two_steps: bool = True, **extra) -> dict:
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>'
    steps = [{"action": call, "feedback": "4", "reward": 0.0, "done": False, "truncated": False, "prompt_tokens": 90,
              "response_tokens": 20, "prompt": _msgs(task), "finish_reason": "stop",
              "calls": [{"name": "calculator", "arguments": {"expression": "2+2"}, "output": "4"}]}]
    if two_steps:
        steps.append({"action": "<answer>4</answer>" if ok else "<answer>5</answer>", "feedback": "",
                      "reward": 1.0 if ok else 0.0, "done": True, "truncated": False, "prompt_tokens": 120,
                      "response_tokens": 8, "prompt": _msgs(task, (call, "4")), "answer": "4" if ok else "5"})
    return {"uid": uid, "task_id": tid, "data_source": source, "task": task, "reward": 1.0 if ok else 0.0,
            "success": ok, "termination": termination, "metrics": {"num_steps": float(len(steps))}, "steps": steps,
            **extra}


def _write_jsonl(path: Path, records: list[dict]) -> None:
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
    _write_jsonl(run / "metrics.jsonl", [val[0], {"event": "sft", "sft_nll": 0.7}, val[1], iters[0], iters[1], val[2]])
    (run / "summary.json").write_text(json.dumps({"wall_seconds": 90.0, "validation": {}}), encoding="utf-8")
    eps = run / "episodes"
    _write_jsonl(eps / "before_sft.jsonl", [
        _episode("a", "task a", False, uid="val-before_sft-0/0"), _episode("b", "task b", True),
        _episode("c", "task c", False, tool_errors={"parse_error": 1}), _episode("d", "task d", True)])
    _write_jsonl(eps / "after_sft.jsonl", [
        _episode("c", "task c", False, termination="context_limit"), _episode("a", "task a", True),
        _episode("b", "task b", False, source="arith")])
    _write_jsonl(eps / "after_rl.jsonl", [
        _episode("d", "task d", True), _episode("b", "task b", False, termination="env_error",
                                                   error="Traceback ...\nRuntimeError: boom", two_steps=False),
        _episode("a", "task a", True), _episode("c", "task c", False)])
    _write_jsonl(eps / "train" / "iter_000001.jsonl", [_episode("t1", "train task", True, uid="it1-0/0")])
    return run


def test_stages_are_aligned_by_task_id_not_by_position(tmp_path):
    view = build_view(make_run(tmp_path))
    assert view["kind"] == "run" and view["stages"] == ["before_sft", "after_sft", "after_rl"]
    assert view["train_stages"] == ["train it 1"]
    tasks = {t["id"]: t for t in view["tasks"]}
    assert sorted(tasks) == ["a", "b", "c", "d"]  # the training task is not a held-out task
    assert tasks["a"]["share"] == [0.0, 1.0, 1.0] and tasks["b"]["share"] == [1.0, 0.0, 0.0]
    assert tasks["d"]["share"] == [1.0, None, 1.0] and tasks["d"]["eps"][1] == []
    for t in view["tasks"]:  # every cell points at episodes of that task at that stage
        for stage, ids in zip(view["stages"], t["eps"]):
            assert all(view["episodes"][i]["tid"] == t["id"] and view["episodes"][i]["stage"] == stage for i in ids)
    assert len(view["episodes"]) == 12 and [e["i"] for e in view["episodes"]] == list(range(12))


def test_flipped_tasks_between_two_stages(tmp_path):
    view = build_view(make_run(tmp_path))
    tasks, stages = view["tasks"], view["stages"]
    assert flipped(tasks, stages, "before_sft", "after_rl", "up") == ["a"]
    assert flipped(tasks, stages, "before_sft", "after_rl", "down") == ["b"]
    assert sorted(flipped(tasks, stages, "before_sft", "after_rl", "changed")) == ["a", "b"]
    assert flipped(tasks, stages, "after_sft", "after_rl", "changed") == []
    assert flipped(tasks, stages, "before_sft", "after_sft", "down") == ["b"]  # d has no after_sft episode: left out


def test_the_page_opens_the_first_task_that_changed_else_the_first_episode(tmp_path):
    view = build_view(make_run(tmp_path))
    # task a (first in the table) failed before SFT and succeeds after RL: its after_rl episode, number 9
    assert view["start"]["episode"] == 9
    assert view["episodes"][9]["tid"] == "a" and view["episodes"][9]["stage"] == "after_rl"
    assert "failure → success" in view["start"]["why"] and "before_sft and after_rl" in view["start"]["why"]
    tasks, stages = view["tasks"], view["stages"]
    b_first = [t for t in tasks if t["id"] == "b"] + [t for t in tasks if t["id"] != "b"]
    assert first_episode(b_first, stages, view["episodes"])["episode"] == 8  # b after RL: success -> failure
    assert "success → failure" in first_episode(b_first, stages, view["episodes"])["why"]
    # the first and the last stage agree but a stage between differs: the first change, at its later stage
    wobble = [{"id": "w", "share": [0.0, 1.0, 0.0], "eps": [[20], [21], [22]]}]
    assert first_episode(wobble, stages, view["episodes"]) == {
        "episode": 21, "why": "the first held-out task that changed (failure → success), before_sft to after_sft"}
    unchanged = [t for t in tasks if t["id"] in ("c", "d")]
    assert first_episode(unchanged, stages, view["episodes"])["episode"] == 0
    assert first_episode([], [], []) is None


def test_tags_curves_validation_table_and_config(tmp_path):
    view = build_view(make_run(tmp_path))
    tags = {(e["stage"], e["tid"]): e["tags"] for e in view["episodes"]}
    assert tags[("before_sft", "c")] == ["done", "parse_error", "answered"]
    assert tags[("after_sft", "c")][0] == "context_limit" and tags[("after_rl", "b")] == ["env_error"]
    failed = next(e for e in view["episodes"] if e["stage"] == "after_rl" and e["tid"] == "b")
    assert failed["error"].endswith("RuntimeError: boom")
    panels = {p["title"]: {s["name"]: s["points"] for s in p["series"]} for p in view["curves"]}
    assert panels["reward"]["reward_mean"] == [[1, 0.1], [2, 0.2]]
    assert [p[0] for p in panels["success rate"]["val/success_rate"]] == [0, 0, 2]
    assert set(panels) == {"reward", "success rate", "loss", "kl", "entropy", "throughput (tok/s)"}
    assert [r["label"] for r in view["validation"]] == ["before_sft", "after_sft", "after_rl"]
    assert view["validation"][2]["by_source"] == {"arith": {"success_rate": 0.5, "reward_mean": None, "cases": 4}}
    rows = dict(view["config"]["rows"])
    assert rows["model.path"] == "smollm2-135m-instruct" and rows["env.tools"] == '["calculator"]'
    assert rows["trainer.total_steps"] == 2 and "max_turns: 4" in view["config"]["text"]
    assert view["wall_seconds"] == 90.0


def test_validation_table_falls_back_to_summary_json(tmp_path):
    run = tmp_path / "run"
    (run / "episodes").mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"validation": {
        "after_rl": {"success_rate": 0.75, "cases": 4, "by_source": {}},
        "before_rl": {"success_rate": 0.25, "cases": 4, "by_source": {}}}}), encoding="utf-8")
    assert [r["label"] for r in build_view(run)["validation"]] == ["before_rl", "after_rl"]


def test_step_diffs_show_what_the_env_added():
    ep = _episode("a", "what is 2+2?", True)
    first, second = ep["steps"]
    assert line_diff("", prompt_text(first)) == [["+", prompt_text(first)]]
    ops = line_diff(seen_text(first), prompt_text(second))
    new, segments = apply_diff(seen_text(first), ops)
    assert new == prompt_text(second)
    added = "".join(text for op, text in segments if op == "+")
    assert added == "── tool (calculator) ──\n4\n"  # the tool's output; the system prompt and the call are kept
    assert ops[0] == ["=", len(lines(seen_text(first)))]
    window = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "q"},  # a window drops a turn
              {"role": "assistant", "content": "call 2"}, {"role": "tool", "content": "out 2"}]
    dropped = [{"role": "assistant", "content": "call 1"}, {"role": "tool", "content": "out 1"}]
    before = render_messages(window[:2] + dropped + [{"role": "assistant", "content": "call 2"}])
    new, segments = apply_diff(before, line_diff(before, render_messages(window)))
    assert new == render_messages(window)
    assert "call 1\n" in "".join(t for op, t in segments if op == "-") and "out 2\n" in "".join(
        t for op, t in segments if op == "+")


text_lines = st.lists(st.sampled_from(["a\n", "b\n", "ccc\n", "\n", "── tool ──\n", "x", "yy"]), max_size=12)


@settings(max_examples=200, deadline=None)
@given(text_lines, text_lines)
def test_line_diff_round_trips(old, new):
    old_text, new_text = "".join(old), "".join(new)
    assert "".join(lines(old_text)) == old_text
    rebuilt, segments = apply_diff(old_text, line_diff(old_text, new_text))
    assert rebuilt == new_text
    assert "".join(t for op, t in segments if op != "+") == old_text  # kept + dropped lines are the old text


def test_records_without_task_ids_align_by_task_text(tmp_path):
    run = tmp_path / "run"
    for label, ok in (("before_rl", False), ("after_rl", True)):
        records = [_episode("", "task z", ok, uid=f"val-{label}-1/0"), _episode("", "task y", False)]
        for r in records:
            del r["task_id"]
        _write_jsonl(run / "episodes" / f"{label}.jsonl", records[::-1] if ok else records)
    view = build_view(run)
    assert len(view["tasks"]) == 2
    assert flipped(view["tasks"], view["stages"], "before_rl", "after_rl", "up") == [view["tasks"][0]["id"]]


def test_an_eval_report_opens_the_same_way(tmp_path):
    report = tmp_path / "eval_step_000002.json"
    report.write_text(json.dumps({"checkpoint": "runs/x/checkpoints/step_000002", "iteration": 2, "cases": 2,
                                  "success_rate": 0.5, "reward_mean": 0.5, "by_source": {"arith": {
                                      "success_rate": 0.5, "cases": 2}}}), encoding="utf-8")
    _write_jsonl(tmp_path / "eval_step_000002.episodes.jsonl",
                 [_episode("a", "task a", True), _episode("b", "task b", False)])
    for source in (report, tmp_path / "eval_step_000002.episodes.jsonl"):
        out, view = write_view(source)
        assert out == tmp_path / "eval_step_000002.html" and view["kind"] == "eval"
        assert view["stages"] == ["eval_step_000002"] and len(view["tasks"]) == 2
        assert view["validation"][0]["success_rate"] == 0.5
        assert dict(view["config"]["rows"])["eval.iteration"] == 2


def test_page_is_one_file_with_its_data_escaped_and_its_size_stated(tmp_path):
    run = make_run(tmp_path)
    evil = '</script><script>window.__pwned=1</script><img src=x onerror="window.__pwned=2"> & <!--'
    path = run / "episodes" / "after_rl.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[0]["steps"][0]["action"] = evil
    records[0]["task"] = "{{DATA}} {{SCRIPT}} " + evil  # placeholders in the data stay data
    _write_jsonl(path, records)
    out, view = write_view(run, tmp_path / "page.html")
    page = out.read_bytes()
    text = page.decode("utf-8")
    assert re.search(r'<meta name="file-bytes" content="\s*(\d+)"', text)[1] == str(len(page))
    assert text.count("</script>") == 2 and text.count("<script") == 2  # the data block and the page's script
    assert "window.__pwned" in text and "<img" not in text.split('id="view-data">')[1]
    assert not re.search(r"https?://|src=\"//", text.replace("http://www.w3.org/2000/svg", ""))  # nothing fetched
    block = text.split('<script type="application/json" id="view-data">')[1].split("</script>")[0]
    assert json.loads(block) == json.loads(json.dumps(view))  # the escapes decode to the same data
    assert "<" not in embed_json({"x": "<b>"}) and json.loads(embed_json({"x": "<b>\u2028"})) == {"x": "<b>\u2028"}
    assert json.loads(embed_json({"x": float("nan"), "y": [float("inf"), -float("inf")]})) == {
        "x": "NaN", "y": ["Infinity", "-Infinity"]}  # JSON has no such numbers: the words, as the page shows them


def test_ten_thousand_episodes_stay_compact(tmp_path):
    run = tmp_path / "run"
    records = [_episode(f"t{i % 2500}", f"task {i % 2500}: what is {i} + {i}?", i % 3 == 0, uid=f"v-{i}/0")
               for i in range(2500)]
    for label in ("before_sft", "after_sft", "iter2", "after_rl"):
        _write_jsonl(run / "episodes" / f"{label}.jsonl", records)
    t0 = time.perf_counter()
    out, view = write_view(run)
    seconds = time.perf_counter() - t0
    page = out.read_text(encoding="utf-8")
    assert len(view["episodes"]) == 10_000 and len(view["tasks"]) == 2500
    assert page.count("tool schema line") == 8  # the system prompt shared by every episode is kept once
    assert out.stat().st_size < 12 * 1024 ** 2 and seconds < 60, (out.stat().st_size, seconds)


def test_cli_writes_the_page_and_reports_a_missing_run_in_one_line(tmp_path, capsys):
    run = make_run(tmp_path)
    assert main(["view", str(run)]) == 0
    assert (run / "view.html").is_file() and "12 episodes, 4 held-out tasks" in capsys.readouterr().out
    assert main(["view", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("agentr1-core: error:") and "not found" in err and len(err.splitlines()) == 1
    (tmp_path / "empty").mkdir()
    assert main(["view", str(tmp_path / "empty")]) == 2 and "nothing to show" in capsys.readouterr().err


UIDS = [7, None, ["a", 1], {"k": 2}, 0]  # uids of the first five episodes: none of them a string
UID_TEXTS = ["7", "null", '["a", 1]', '{"k": 2}', "0"]


def make_odd_uid_run(root: Path) -> Path:
    """``make_run`` with uids that are not strings (a number, null, a list, an object, 0) and one record without."""
    run = make_run(root)
    path = run / "episodes" / "before_sft.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record, uid in zip(records, UIDS):
        record["uid"] = uid
    _write_jsonl(path, records)
    path = run / "episodes" / "after_sft.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[0]["uid"] = 0
    del records[1]["uid"]
    _write_jsonl(path, records)
    return run


def test_any_uid_shows_as_text(tmp_path):
    view = build_view(make_odd_uid_run(tmp_path))
    assert [e["uid"] for e in view["episodes"][:7]] == UID_TEXTS[:4] + ["0", "", "x/0"]
    assert all(isinstance(e["uid"], str) for e in view["episodes"])


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


def test_nan_and_infinity_from_another_program_render_and_a_line_that_is_not_json_is_one_warning(tmp_path, capsys):
    run = write_foreign_run(tmp_path)
    assert main(["view", str(run)]) == 0
    captured = capsys.readouterr()
    warnings = captured.err.strip().splitlines()
    assert warnings == [
        f"[view] warning: skipped {run / 'metrics.jsonl'}:3: not valid JSON (Expecting property name enclosed in "
        f"double quotes at column 2) and 1 more unreadable lines",
        f"[view] warning: skipped {run / 'episodes' / 'after_rl.jsonl'}:3: not valid JSON (Expecting value at "
        f"column 1)"]
    assert "12 episodes, 4 held-out tasks" in captured.out  # the other lines of those files are all there
    page = (run / "view.html").read_text(encoding="utf-8")
    view = json.loads(page.split('id="view-data">')[1].split("</script>")[0])
    assert view["warnings"] == [w.removeprefix("[view] warning: ") for w in warnings]
    first = next(e for e in view["episodes"] if e["stage"] == "after_rl")
    assert first["reward"] == "NaN" and first["metrics"] == {"num_steps": "Infinity", "score": "-Infinity"}
    assert first["steps"][0]["rw"] == "NaN"
    assert [r["success_rate"] for r in view["validation"]] == [0.5, "NaN", 0.5] and view["wall_seconds"] == "NaN"
    panels = {p["title"]: {s["name"]: s["points"] for s in p["series"]} for p in view["curves"]}
    assert panels["loss"]["loss"] == [[2, 0.25]] and panels["kl"]["kl"] == [[2, 0.02]]  # NaN, Infinity: no point
    report = tmp_path / "eval.json"  # an eval report, and its episodes, with NaN too
    report.write_text('{"cases": 2, "success_rate": NaN, "reward_mean": -Infinity, "iteration": 2}')
    _write_jsonl(tmp_path / "eval.episodes.jsonl", [_episode("a", "task a", True, reward=float("nan"))])
    assert main(["view", str(report)]) == 0 and capsys.readouterr().err == ""
    out, view = write_view(report)
    assert view["validation"][0]["success_rate"] == "NaN" and view["validation"][0]["reward_mean"] == "-Infinity"
    (tmp_path / "bad.json").write_text("{oops")
    (tmp_path / "bad.episodes.jsonl").write_text(json.dumps(_episode("a", "task a", True)) + "\n")
    assert main(["view", str(tmp_path / "bad.json")]) == 0
    assert capsys.readouterr().err.strip() == (f"[view] warning: skipped {tmp_path / 'bad.json'}: not valid JSON "
                                               f"(Expecting property name enclosed in double quotes at line 1)")


def test_records_of_another_shape_are_left_out_not_fatal(tmp_path):
    run = make_run(tmp_path)
    path = run / "episodes" / "after_rl.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[0].update(steps={"not": "a list"}, tool_errors=["x"])
    records[2]["steps"] = [5, records[2]["steps"][0]]
    records[2]["steps"][1]["calls"] = [None, {"name": "calculator", "arguments": {}, "output": "4"}]
    records[2]["steps"][1]["prompt"] = [{"role": "user", "content": "q"}, "a bare string"]
    _write_jsonl(path, records)
    (run / "summary.json").write_text(json.dumps({"validation": ["not", "a", "dict"]}))
    metrics = run / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + json.dumps({"event": "validation", "label": ["x"], "iteration": "NaN",
                                                         "by_source": [1]}) + "\n"
                       + json.dumps({"iteration": {"x": 1}, "loss": 0.1}) + "\n")
    out, view = write_view(run)
    eps = [e for e in view["episodes"] if e["stage"] == "after_rl"]
    assert eps[0]["steps"] == [] and eps[0]["tags"] == ["done"]
    assert len(eps[2]["steps"]) == 1 and eps[2]["steps"][0]["c"] == [{"name": "calculator", "arguments": {},
                                                                      "output": "4"}]
    assert render_messages([{"role": "user", "content": "q"}, "a bare string"]).endswith("\na bare string\n")
    assert [r["label"] for r in view["validation"]] == ["before_sft", "after_sft", "after_rl"]


# -- what a run writes --------------------------------------------------------------------------------------------
def test_task_id_is_the_rows_id_or_a_hash_of_its_prompt():
    assert task_id({"id": 7, "prompt": "x"}) == "7" and task_id({"uid": "q-1"}) == "q-1"
    a, b = task_id({"prompt": "What is 2+2?", "data_source": "a"}), task_id({"prompt": "What is 2+2?", "seed": 9})
    assert a == b and a.startswith("h") and a != task_id({"prompt": "What is 2+3?"})
    assert task_id({"env_kwargs": {"game": "g1"}}) != task_id({"env_kwargs": {"game": "g2"}})


def test_episode_record_keeps_prompts_calls_and_token_counts():
    from agentr1_core.builtin.calculator import CalculatorTool
    from agentr1_core.envs import ToolEnv
    from agentr1_core.mdp import Action

    env = ToolEnv(tools=[CalculatorTool()], system_prompt="Use the calculator.")
    obs = asyncio.run(env.reset({"prompt": "What is 6*7?"}))
    text = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call><tool_call>{bad'
    result = asyncio.run(env.step(Action(text, [1, 2, 3], [0.0] * 3)))
    calls = result.info["calls"]
    assert calls[0] == {"name": "calculator", "arguments": {"expression": "6*7"}, "output": "42"}
    assert calls[1]["error"] == "parse_error" and calls[1]["raw"] == "{bad"
    step = Step([5] * 11, [1, 2, 3], [0.0] * 3, action_text=text, feedback=result.feedback, info=dict(result.info),
                observation=obs, next_observation=result.observation, truncated=True)
    traj = Trajectory(steps=[step], uid="val-after_rl-0/0", data_source="arith", termination="truncated",
                      info={"task_id": "h123"})
    record = episode_record(traj)
    assert record["task_id"] == "h123" and record["task"] == "What is 6*7?"
    s = record["steps"][0]
    assert s["prompt"] == obs.messages and s["prompt_tokens"] == 11 and s["response_tokens"] == 3
    assert s["calls"] == calls and s["truncated"] is True and s["done"] is False
    text_step = Step([1], [2], [0.0], observation=Observation(text="plain prompt"))
    assert episode_record(Trajectory(steps=[text_step]))["steps"][0]["prompt_text"] == "plain prompt"


def test_training_episodes_are_kept_spread_over_the_batch(tmp_path):
    trajs = [Trajectory(uid=f"it3-{i // 4}/{i % 4}") for i in range(16)]
    path = write_train_episodes(tmp_path, 3, trajs, keep=4)
    assert path == tmp_path / "episodes" / "train" / "iter_000003.jsonl"
    assert [json.loads(line)["uid"] for line in path.read_text().splitlines()] == [
        "it3-0/0", "it3-1/0", "it3-2/0", "it3-3/0"]
    assert write_train_episodes(tmp_path, 4, trajs, keep=0) is None
    assert len(write_train_episodes(tmp_path, 5, trajs[:2], keep=4).read_text().splitlines()) == 2


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
    _write_jsonl(run / "episodes" / "after_rl.jsonl", [episode_record(branched_trajectory()),
                                                        _episode("c", "task chain", True)])
    return run


def test_an_episode_with_branches_is_kept_as_a_tree_and_a_chain_as_before(tmp_path):
    record = episode_record(branched_trajectory())
    assert record["branches"] == 2
    assert [{k: s.get(k) for k in ("parent", "branch", "branch_of", "shared_prefix_tokens") if k in s}
            for s in record["steps"]] == [{"branch": 0}, {"branch": 1, "branch_of": 0, "shared_prefix_tokens": 5},
                                          {"parent": 1, "branch": 1}, {"parent": 0, "branch": 0}]
    view = build_view(write_branched_run(tmp_path))
    tree, chain = view["episodes"]
    assert tree["tree"] == [{"b": 0, "depth": 0, "steps": [0, 3]},
                            {"b": 1, "depth": 1, "steps": [1, 2], "of": 0, "sp": 5}]
    assert [s["b"] for s in tree["steps"]] == [-1, 0, 1, 0]  # each prompt is compared with the step it comes from
    steps = record["steps"]
    for n, base in ((2, 1), (3, 0)):  # the continuations only add to what the model had after their parent
        ops = [[op, view["strings"][v] if op == "+" and isinstance(v, int) else v] for op, v in tree["steps"][n]["p"]]
        assert [op for op, _ in ops] == ["=", "+"] and apply_diff(seen_text(steps[base]), ops)[0] == prompt_text(
            steps[n])
    # the helper's first prompt against the main step it branched from: the main system prompt dropped
    assert "-" in [op for op, _ in tree["steps"][1]["p"]]
    assert "tree" not in chain and all("b" not in s for s in chain["steps"])


# -- in a real browser (headless Chromium): required in CI, skipped locally without it ----------------------------
@pytest.fixture(scope="module")
def browser():
    from agentr1_core.testing.browser import find_browser, open_browser

    if find_browser() is None:
        missing("headless Chromium, chromedriver and selenium are needed (apt-get install chromium chromium-driver)")
    driver = open_browser(1280, 900)
    yield driver
    driver.quit()


def _load(driver, page: Path, fragment: str = ""):
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(page.resolve().as_uri() + fragment)
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.body.dataset.ready === '1'"))
    assert driver.get_log("browser") == [] if hasattr(driver, "get_log") else True  # no script error


def _count(driver, selector: str) -> int:
    return driver.execute_script("return document.querySelectorAll(arguments[0]).length", selector)


def _choose(driver, select_id: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", select_id)).select_by_value(value)


def _screenshot_colors(driver) -> int:
    from agentr1_core.testing.browser import png_colors

    return png_colors(driver.get_screenshot_as_png())


def test_the_page_in_a_browser_renders_filters_and_shows_model_output_as_text(browser, tmp_path):
    run = make_run(tmp_path)
    evil = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
    path = run / "episodes" / "after_rl.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[2]["steps"][1]["action"] = "answer " + evil  # task a, after RL
    records[2]["steps"][0]["calls"][0]["output"] = evil
    records[2]["steps"][1]["prompt"][-1]["content"] = evil  # the tool message the next prompt carries
    records[2]["uid"] = evil
    _write_jsonl(path, records)
    out, view = write_view(run)
    _load(browser, out)
    d = browser
    assert f" · uid {evil} · " in d.find_element("id", "episode-head").get_attribute("textContent")
    assert _count(d, "#stage-table tr.stage-row") == 3 and _count(d, "#curves .chart svg polyline") >= 8
    assert d.find_element("id", "episode-count").text == "12 episodes"
    assert d.find_element("id", "file-size").text.startswith("this file: ")
    assert _count(d, "#tasks tr.task-row") == 4 and _count(d, "#episodes tr.ep-row") == 12
    # opened without #episode-N: task a after RL (it went from failure to success), the page left at its top
    assert "after_rl" in d.find_element("id", "episode-head").text and "task a" in d.find_element(
        "id", "episode-task").text
    assert "changed (failure → success)" in d.find_element("id", "episode-why").text
    assert d.execute_script("return window.scrollY") == 0
    # every row carries its episode's link; the tasks table's cells are links too
    links = [a.get_attribute("href").split("#")[1] for a in d.find_elements("css selector", "#episodes tr.ep-row a")]
    assert links == [f"episode-{i}" for i in range(12)]
    assert d.find_element("css selector", '#episodes tr.ep-row[data-episode="3"] a').text == "#episode-3"
    cell = d.find_element("css selector", '#tasks tr.task-row[data-task="b"] td.cell:last-child a')
    assert cell.get_attribute("href").endswith("#episode-8")
    d.find_element("css selector", '#episodes tr.ep-row[data-episode="3"] a').click()
    assert d.execute_script("return location.hash") == "#episode-3"
    assert "before_sft" in d.find_element("id", "episode-head").text and _count(d, "#episode-why") == 0
    _choose(d, "task-change", "up")
    assert [r.get_attribute("data-task") for r in d.find_elements("css selector", "#tasks tr.task-row")] == ["a"]
    _choose(d, "task-change", "down")
    assert [r.get_attribute("data-task") for r in d.find_elements("css selector", "#tasks tr.task-row")] == ["b"]
    _choose(d, "task-change", "all")
    _choose(d, "task-tag", "context_limit")
    assert [r.get_attribute("data-task") for r in d.find_elements("css selector", "#tasks tr.task-row")] == ["c"]
    _choose(d, "ep-stage", "after_rl")
    assert _count(d, "#episodes tr.ep-row") == 4
    _choose(d, "ep-tag", "env_error")
    assert _count(d, "#episodes tr.ep-row") == 1
    _choose(d, "ep-tag", "")
    # open task a after RL from the side-by-side table: its response and tool output carry the markup, as text
    _choose(d, "task-tag", "")
    d.find_element("css selector", '#tasks tr.task-row[data-task="a"] td.cell:last-child').click()
    # an <img onerror> would fire once its load fails: give it the time to
    assert d.execute_async_script("setTimeout(function () { arguments[0](window.__pwned); }.bind(null, "
                                  "arguments[0]), 300)") is None
    responses = [e.get_attribute("textContent") for e in d.find_elements("css selector", "#episode pre.response")]
    assert responses[1] == "answer " + evil and d.find_element("css selector", "#episode pre.response").is_displayed()
    assert evil in d.find_element("css selector", "#episode pre.tool-output").get_attribute("textContent")
    assert d.execute_script("return window.__pwned") is None
    assert _count(d, "#episode img") == 0 and _count(d, "#episode script") == 0
    prompts = d.find_elements("css selector", "#episode details.prompt-box")
    assert len(prompts) == 2 and not any(p.get_attribute("open") for p in prompts)  # collapsed
    added = d.find_elements("css selector", '#episode .step[data-step="1"] pre.prompt span.add')
    assert [a.get_attribute("textContent") for a in added] == ["── tool (calculator) ──\n" + evil + "\n"]
    assert "4 held-out" not in d.find_element("id", "episode-task").text and "task a" in d.find_element(
        "id", "episode-task").text
    # the curves answer a hover
    from selenium.webdriver.common.action_chains import ActionChains

    d.execute_script("document.getElementById('curves-section').scrollIntoView()")
    chart = d.find_element("css selector", '#curves .chart[data-title="reward"] svg')
    ActionChains(d).move_to_element_with_offset(chart, 120, 0).perform()
    tip = d.find_element("id", "tip")
    assert tip.is_displayed() and "reward @ iteration" in tip.text and "reward_mean: " in tip.text
    d.execute_script("window.scrollTo(0, 0)")
    assert _screenshot_colors(d) > 100  # text, charts, colours: not a blank page


def test_ten_thousand_episodes_in_a_browser_are_paged(browser, tmp_path):
    run = tmp_path / "run"
    records = [_episode(f"t{i}", f"task {i}", i % 2 == 0, uid=f"v-{i}/0") for i in range(2500)]
    for label in ("before_sft", "after_sft", "iter2", "after_rl"):
        _write_jsonl(run / "episodes" / f"{label}.jsonl", records)
    out, _ = write_view(run)
    t0 = time.perf_counter()
    _load(browser, out)
    assert time.perf_counter() - t0 < 30
    d = browser
    assert d.find_element("id", "episode-count").text == "10000 episodes"
    assert _count(d, "#episodes tr.ep-row") == 50 and _count(d, "#tasks tr.task-row") == 50
    assert d.find_element("css selector", "#episodes-pager .page-label").text == "page 1 of 200"
    d.find_elements("css selector", "#episodes-pager button")[1].click()
    assert d.find_element("css selector", "#episodes tr.ep-row").get_attribute("data-episode") == "50"
    _load(browser, out, "#episode-9999")
    assert _count(d, "#episode .step") == 2 and "task 2499" in d.find_element("id", "episode-task").text


def _no_script_error(driver) -> None:
    assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []


def _episode_head(driver, i: int) -> str:
    """The text of the episode pane's head once episode ``i`` is open there (a link's hash change is handled
    after the click returns)."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, 10).until(lambda d: d.execute_script(
        "var h = document.getElementById('episode-head'); "
        "return h && h.textContent.indexOf(arguments[0]) === 0 ? h.textContent : null", f"#episode-{i} · "))


def test_every_uid_shows_and_its_episode_opens_in_a_browser(browser, tmp_path):
    out, view = write_view(make_odd_uid_run(tmp_path))
    _load(browser, out)
    d = browser
    uids = [td.get_attribute("textContent") for td in d.find_elements("css selector", "#episodes tr.ep-row td.uid")]
    assert uids[:7] == UID_TEXTS[:4] + ["0", "", "x/0"]
    for i, text in enumerate(UID_TEXTS[:4] + ["0", "-"]):  # each episode's link opens it, its uid in its head
        d.find_element("css selector", f'#episodes tr.ep-row[data-episode="{i}"] a').click()
        head = _episode_head(d, i)
        assert f" · uid {text} · " in head, (i, head)
        assert _count(d, "#episode .step") >= 1
        _no_script_error(d)


def test_nan_and_unreadable_lines_show_in_a_browser(browser, tmp_path):
    out, view = write_view(write_foreign_run(tmp_path))
    _load(browser, out, "#episode-7")  # the first episode of after_rl: its reward and a step reward are NaN
    d = browser
    stages = [r.text for r in d.find_elements("css selector", "#stage-table tr.stage-row")]
    assert "(NaN)" in stages[1] and "(50.0%)" in stages[0]
    row = d.find_element("css selector", '#episodes tr.ep-row[data-episode="7"]').text
    assert "after_rl task d arith NaN success" in row
    assert "reward NaN" in d.find_element("id", "episode-head").text
    assert d.find_element("css selector", '#episode .step[data-step="0"] .meta').text.startswith("reward NaN")
    assert "metrics: num_steps Infinity, score -Infinity" in d.find_element("id", "episode").text
    warnings = d.find_element("id", "warnings")
    assert warnings.is_displayed() and "metrics.jsonl:3: not valid JSON" in warnings.text
    assert "after_rl.jsonl:3: not valid JSON" in warnings.text
    assert "run wall time" not in d.find_element("id", "facts").text
    _no_script_error(d)


def _in_view(driver, element_id: str) -> bool:
    return driver.execute_script("var r = document.getElementById(arguments[0]).getBoundingClientRect(); "
                                 "return r.top >= 0 && r.bottom <= innerHeight", element_id)


def test_the_episode_is_in_view_without_scrolling_past_the_tables(browser, tmp_path):
    """A wide window: the episode pane stands beside the tables and stays in view while they scroll; opening
    another episode from a table changes it there, the page's scroll left alone. A narrow one: the pane comes after
    the tables, and the header's link, which names the open episode, leads to it."""
    run = make_run(tmp_path)
    out, view = write_view(run)
    d = browser
    _load(d, out)
    assert _in_view(d, "episode-head") and d.execute_script("return window.scrollY") == 0
    assert "after_rl" in d.find_element("id", "episode-head").text
    assert d.find_element("id", "nav-episode").text == "episode #9 (after_rl)"
    d.execute_script("document.getElementById('episodes-section').scrollIntoView()")
    scrolled = d.execute_script("return window.scrollY")
    assert scrolled > 0 and not _in_view(d, "tasks-section")
    d.find_element("css selector", '#episodes tr.ep-row[data-episode="3"] a').click()
    assert d.execute_script("return location.hash") == "#episode-3" and "task d" in _episode_head(d, 3)
    assert _in_view(d, "episode-head")
    assert d.execute_script("return window.scrollY") == scrolled  # the table stays where the user had it
    assert d.find_element("id", "nav-episode").text == "episode #3 (before_sft)"
    try:
        d.set_window_size(900, 800)
        _load(d, out)
        assert not _in_view(d, "episode-head") and d.execute_script("return window.scrollY") == 0
        d.find_element("id", "nav-episode").click()
        assert _in_view(d, "episode-head") and "task a" in d.find_element("id", "episode-task").text
    finally:
        d.set_window_size(1280, 900)


@pytest.fixture(scope="module")
def real_run(tmp_path_factory, tiny_model_dir):
    """A short real run on the tiny model: SFT, 2 GRPO iterations, a validation after each stage and iteration."""
    root = tmp_path_factory.mktemp("view-run")
    config = root / "run.yaml"
    config.write_text(textwrap.dedent(f"""\
        base: tiny
        seed: 5
        model: {{path: "{tiny_model_dir}"}}
        engine: {{name: transformers, max_batch_size: 1}}
        rollout: {{max_new_tokens: 24}}
        validation: {{every: 1, max_rows: 2}}
        trainer: {{total_steps: 2, keep_train_episodes: 2, checkpoint_every: -1, lr: 1.0e-3, min_free_gb: 0.01}}
        """))
    assert main(["run", str(config), f"run_dir={root / 'run'}"]) == 0
    return root / "run"


@pytest.mark.slow
def test_a_real_run_opens_in_the_view(real_run):
    """Every stage's episodes line up by task, prompts are recorded, the kept training episodes are there."""
    assert sorted(p.name for p in (real_run / "episodes" / "train").iterdir()) == [
        "iter_000001.jsonl", "iter_000002.jsonl"]
    view = build_view(real_run)
    assert view["stages"] == ["before_sft", "after_sft", "iter1", "after_rl"]
    assert len(view["tasks"]) == 2 and all(all(len(ids) == 1 for ids in t["eps"]) for t in view["tasks"])
    assert len(view["episodes"]) == 4 * 2 + 2 * 2
    first = view["episodes"][0]["steps"][0]
    assert first["k"] == "messages" and first["pt"] > 0 and first["rt"] > 0
    assert [r["label"] for r in view["validation"]] == view["stages"]
    assert {p["title"] for p in view["curves"]} >= {"reward", "success rate", "loss", "entropy"}
    page = render_page(view)
    assert len(page) == int(re.search(rb'name="file-bytes" content="\s*(\d+)"', page)[1])


@pytest.mark.slow
def test_a_real_run_in_a_browser(browser, real_run):
    assert main(["view", str(real_run)]) == 0
    _load(browser, real_run / "view.html", "#episode-0")
    d = browser
    assert _count(d, "#stage-table tr.stage-row") == 4 and _count(d, "#tasks tr.task-row") == 2
    assert _count(d, "#curves .chart") >= 4 and _count(d, "#episodes tr.ep-row") == 12
    assert _count(d, "#episode .step") >= 1
    prompt = d.find_element("css selector", "#episode pre.prompt").get_attribute("textContent")
    assert prompt.startswith("── system ──\n") and "── user ──\n" in prompt
    d.execute_script("window.scrollTo(0, 0)")
    assert _screenshot_colors(d) > 100


def test_an_episode_with_branches_is_drawn_as_a_tree_in_a_browser(browser, tmp_path):
    out, view = write_view(write_branched_run(tmp_path))
    _load(browser, out, "#episode-0")
    d = browser
    branches = [b.text for b in d.find_elements("css selector", "#branch-tree .branch")]
    assert branches == ["branch 0: steps 1 → 4", "└ branch 1, from step 1 (5 tokens shared): steps 2 → 3"]
    heads = [h.text for h in d.find_elements("css selector", "#episode .step h3")]
    assert heads == ["step 1 · branch 0", "step 2 · branch 1, from step 1 (5 tokens shared)", "step 3 · branch 1",
                     "step 4 · branch 0"]
    indent = d.execute_script("return Array.prototype.map.call(document.querySelectorAll('#episode .step'), "
                              "function (e) { return e.getBoundingClientRect().left; })")
    assert indent[1] == indent[2] > indent[0] == indent[3]  # the helper's branch is indented
    summaries = [e.get_attribute("textContent") for e in d.find_elements("css selector", "#episode details summary")]
    assert "since step 1's prompt and response" in summaries[3] and "dropped" in summaries[1]
    added = d.find_elements("css selector", '#episode .step[data-step="3"] pre.prompt span')
    assert [a.get_attribute("class") for a in added] == ["add"]  # step 4 only adds to step 1
    d.find_element("css selector", '#episodes tr.ep-row[data-episode="1"] a').click()
    _episode_head(d, 1)
    assert _count(d, "#branch-tree") == 0 and [h.text for h in d.find_elements(
        "css selector", "#episode .step h3")] == ["step 1", "step 2"]
    _no_script_error(d)
