"""``agentr1-core view``: the data the page is built from (stage alignment by task id, flipped-task filters, step
diffs, tags, curves, the validation table, eval reports), the page file itself (one file, data escaped, its stated
size), 10,000 episodes, files another program wrote (any uid, NaN and Infinity, lines that are not JSON objects,
records of another shape), the episode records a run writes (prompts, tool calls, task ids, kept training episodes)
and branched episodes. The page in headless Chromium and a real run end to end: test_view_browser.py."""

from __future__ import annotations

import asyncio
import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from agentr1_core.cli import main
from agentr1_core.lifecycle.metrics import episode_record, write_train_episodes
from agentr1_core.lifecycle.view import (
    apply_diff, build_view, first_episode, flipped, line_diff, lines, prompt_text, render_messages, seen_text,
)
from agentr1_core.lifecycle.view_page import embed_json, write_view
from agentr1_core.mdp import Observation, Step, Trajectory
from agentr1_core.rollout.driver import task_id
from agentr1_core.testing import view_runs as runs


def test_stages_are_aligned_by_task_id_not_by_position(tmp_path):
    view = build_view(runs.make_run(tmp_path))
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
    view = build_view(runs.make_run(tmp_path))
    tasks, stages = view["tasks"], view["stages"]
    assert flipped(tasks, stages, "before_sft", "after_rl", "up") == ["a"]
    assert flipped(tasks, stages, "before_sft", "after_rl", "down") == ["b"]
    assert sorted(flipped(tasks, stages, "before_sft", "after_rl", "changed")) == ["a", "b"]
    assert flipped(tasks, stages, "after_sft", "after_rl", "changed") == []
    assert flipped(tasks, stages, "before_sft", "after_sft", "down") == ["b"]  # d has no after_sft episode: left out


def test_the_page_opens_the_first_task_that_changed_else_the_first_episode(tmp_path):
    view = build_view(runs.make_run(tmp_path))
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
    view = build_view(runs.make_run(tmp_path))
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
    ep = runs.episode("a", "what is 2+2?", True)
    first, second = ep["steps"]
    assert line_diff("", prompt_text(first)) == [["+", prompt_text(first)]]
    ops = line_diff(seen_text(first), prompt_text(second))
    new, segments = apply_diff(seen_text(first), ops)
    assert new == prompt_text(second)
    added = "".join(text for op, text in segments if op == "+")
    assert added == "── tool (calculator) ──\n4\n"  # the tool's output; the system prompt and the call are kept
    assert ops[0] == ["=", len(lines(seen_text(first)))]
    window = [{"role": "system", "content": runs.SYSTEM}, {"role": "user", "content": "q"},  # a window drops a turn
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
        records = [runs.episode("", "task z", ok, uid=f"val-{label}-1/0"), runs.episode("", "task y", False)]
        for r in records:
            del r["task_id"]
        runs.write_jsonl(run / "episodes" / f"{label}.jsonl", records[::-1] if ok else records)
    view = build_view(run)
    assert len(view["tasks"]) == 2
    assert flipped(view["tasks"], view["stages"], "before_rl", "after_rl", "up") == [view["tasks"][0]["id"]]


def test_an_eval_report_opens_the_same_way(tmp_path):
    report = tmp_path / "eval_step_000002.json"
    report.write_text(json.dumps({"checkpoint": "runs/x/checkpoints/step_000002", "iteration": 2, "cases": 2,
                                  "success_rate": 0.5, "reward_mean": 0.5, "by_source": {"arith": {
                                      "success_rate": 0.5, "cases": 2}}}), encoding="utf-8")
    runs.write_jsonl(tmp_path / "eval_step_000002.episodes.jsonl",
                 [runs.episode("a", "task a", True), runs.episode("b", "task b", False)])
    for source in (report, tmp_path / "eval_step_000002.episodes.jsonl"):
        out, view = write_view(source)
        assert out == tmp_path / "eval_step_000002.html" and view["kind"] == "eval"
        assert view["stages"] == ["eval_step_000002"] and len(view["tasks"]) == 2
        assert view["validation"][0]["success_rate"] == 0.5
        assert dict(view["config"]["rows"])["eval.iteration"] == 2


def test_page_is_one_file_with_its_data_escaped_and_its_size_stated(tmp_path):
    run = runs.make_run(tmp_path)
    evil = '</script><script>window.__pwned=1</script><img src=x onerror="window.__pwned=2"> & <!--'
    path = run / "episodes" / "after_rl.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[0]["steps"][0]["action"] = evil
    records[0]["task"] = "{{DATA}} {{SCRIPT}} " + evil  # placeholders in the data stay data
    runs.write_jsonl(path, records)
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
    records = [runs.episode(f"t{i % 2500}", f"task {i % 2500}: what is {i} + {i}?", i % 3 == 0, uid=f"v-{i}/0")
               for i in range(2500)]
    for label in ("before_sft", "after_sft", "iter2", "after_rl"):
        runs.write_jsonl(run / "episodes" / f"{label}.jsonl", records)
    out, view = write_view(run)
    page = out.read_text(encoding="utf-8")
    assert len(view["episodes"]) == 10_000 and len(view["tasks"]) == 2500
    assert page.count("tool schema line") == 8  # the system prompt shared by every episode is kept once
    assert out.stat().st_size < 12 * 1024 ** 2, out.stat().st_size


def test_cli_writes_the_page_and_reports_a_missing_run_in_one_line(tmp_path, capsys):
    run = runs.make_run(tmp_path)
    assert main(["view", str(run)]) == 0
    assert (run / "view.html").is_file() and "12 episodes, 4 held-out tasks" in capsys.readouterr().out
    assert main(["view", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("agentr1-core: error:") and "not found" in err and len(err.splitlines()) == 1
    (tmp_path / "empty").mkdir()
    assert main(["view", str(tmp_path / "empty")]) == 2 and "nothing to show" in capsys.readouterr().err


def test_any_uid_shows_as_text(tmp_path):
    view = build_view(runs.make_odd_uid_run(tmp_path))
    assert [e["uid"] for e in view["episodes"][:7]] == runs.UID_TEXTS[:4] + ["0", "", "x/0"]
    assert all(isinstance(e["uid"], str) for e in view["episodes"])


def test_nan_and_infinity_from_another_program_render_and_a_line_that_is_not_json_is_one_warning(tmp_path, capsys):
    run = runs.write_foreign_run(tmp_path)
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
    runs.write_jsonl(tmp_path / "eval.episodes.jsonl", [runs.episode("a", "task a", True, reward=float("nan"))])
    assert main(["view", str(report)]) == 0 and capsys.readouterr().err == ""
    out, view = write_view(report)
    assert view["validation"][0]["success_rate"] == "NaN" and view["validation"][0]["reward_mean"] == "-Infinity"
    (tmp_path / "bad.json").write_text("{oops")
    (tmp_path / "bad.episodes.jsonl").write_text(json.dumps(runs.episode("a", "task a", True)) + "\n")
    assert main(["view", str(tmp_path / "bad.json")]) == 0
    assert capsys.readouterr().err.strip() == (f"[view] warning: skipped {tmp_path / 'bad.json'}: not valid JSON "
                                               f"(Expecting property name enclosed in double quotes at line 1)")


def test_records_of_another_shape_are_left_out_not_fatal(tmp_path):
    run = runs.make_run(tmp_path)
    path = run / "episodes" / "after_rl.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[0].update(steps={"not": "a list"}, tool_errors=["x"])
    records[2]["steps"] = [5, records[2]["steps"][0]]
    records[2]["steps"][1]["calls"] = [None, {"name": "calculator", "arguments": {}, "output": "4"}]
    records[2]["steps"][1]["prompt"] = [{"role": "user", "content": "q"}, "a bare string"]
    runs.write_jsonl(path, records)
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


def test_an_episode_with_branches_is_kept_as_a_tree_and_a_chain_as_before(tmp_path):
    record = episode_record(runs.branched_trajectory())
    assert record["branches"] == 2
    assert [{k: s.get(k) for k in ("parent", "branch", "branch_of", "shared_prefix_tokens") if k in s}
            for s in record["steps"]] == [{"branch": 0}, {"branch": 1, "branch_of": 0, "shared_prefix_tokens": 5},
                                          {"parent": 1, "branch": 1}, {"parent": 0, "branch": 0}]
    view = build_view(runs.write_branched_run(tmp_path))
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
