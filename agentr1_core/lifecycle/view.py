"""The data behind ``agentr1-core view``: one run directory (or one ``agentr1-core eval`` report) read into one
JSON-ready dict that the page (``view_page``) embeds.

What it reads: ``config.yaml`` (a summary of the components and sizes, and the file's text), ``metrics.jsonl`` (the
learning curves and the ``event: validation`` records; ``summary.json`` stands in when there are none),
``episodes/<label>.jsonl`` (the validations) and ``episodes/train/iter_<N>.jsonl`` (the training episodes a run
kept), or an eval report ``<report>.json`` with its ``<report>.episodes.jsonl``.

What it builds:

* ``tasks``: the held-out tasks side by side, aligned across validation stages by ``task_id`` (the dataset row's own
  id or a hash of its prompt, see ``rollout.driver.task_id``; older episode files without one are aligned by a hash
  of their data source and task text), each with the episodes it had at every stage; ``flipped`` picks those whose
  success went up or down between two stages; ``first_episode`` is the one the page opens with (the first task
  that changed between stages, else the first episode).
* ``episodes``: every episode, compact, with ``tags`` (termination, tool error kinds, reward error) for filtering.
  A step's prompt is stored as line operations against the previous step's prompt plus its response
  (``line_diff``), so what the env changed between two turns is explicit, and an append-only context costs its new
  lines only; long added texts are interned once in ``strings`` (a system prompt shared by 10,000 episodes is kept
  once). An episode whose steps record branches (the gateway's ``parent``, ``branch``, ``branch_of``,
  ``shared_prefix_tokens``: a compacted history, a subagent, parallel calls) compares each prompt with the step it
  continues or branched from instead, and carries its branches as ``tree`` (``branch_tree``), which the page draws
  as a small tree; an episode of one branch looks as a chain does.

Prompts are the env's messages rendered role by role (``render_messages``) or the env's plain text as it was
encoded; the chat template's own markup is not shown (no tokenizer is loaded here). It reads files only: no model,
no torch.

Files agentr1 did not write are read as far as they can be: ``NaN`` and ``Infinity`` (and a number too large for a
float) become the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``, which the page shows as they are; a line that
is not a JSON object is skipped, and each file with such lines gives one line in ``warnings`` (``skipped FILE:LINE:
...``, with the count of the others), which ``agentr1-core view`` prints and the page shows; any ``uid`` shows as
text (``uid_text``); steps, calls and messages of another shape are left out rather than failing the page.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

from agentr1_core import jsonl

CURVES = (  # (title, keys); "val/..." are the validation records' values
    ("reward", ("reward_mean", "val/reward_mean")),
    ("success rate", ("success_rate", "val/success_rate")),
    ("loss", ("loss", "policy_loss", "value_loss")),
    ("kl", ("kl", "approx_kl")),
    ("entropy", ("entropy",)),
    ("throughput (tok/s)", ("rollout_tok_s", "update_tok_s")),
)
SUMMARY_KEYS = ("model.path", "stages", "seed", "env.name", "env.tools", "agent_flow.name", "reward.name",
                "algorithm.name", "engine.name", "trainer.name", "trainer.total_steps", "trainer.lr",
                "rollout.batch_size", "rollout.n", "rollout.max_turns", "rollout.temperature", "validation.n",
                "data.train.name", "data.val.name")
INTERN_MIN = 64  # added texts at least this long are kept once in ``strings``
_LINES = re.compile(r"[^\n]*\n|[^\n]+\Z")  # the page splits the same way: /[^\n]*\n|[^\n]+$/g


# -- prompts and their diffs ----------------------------------------------------------------------------------------
def lines(text: str) -> list[str]:
    """``text`` cut after every newline (the last piece may lack one); ``"".join(lines(t)) == t``."""
    return _LINES.findall(text)


def _content(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def render_messages(messages: list[dict[str, Any]]) -> str:
    """Chat messages as readable text: a ``── role (name) ──`` line, the content, then any other keys (the tool
    calls of an OpenAI-style history) as JSON; a message that is not an object, as JSON."""
    out = []
    for m in messages:
        if not isinstance(m, dict):
            out.append(f"{_content(m)}\n")
            continue
        name = f" ({m['name']})" if m.get("name") else ""
        out.append(f"── {m.get('role', '?')}{name} ──\n{_content(m.get('content', ''))}\n")
        for key, value in m.items():
            if key not in ("role", "content", "name"):
                out.append(f"[{key}] {_content(value)}\n")
    return "".join(out)


def prompt_text(step: dict[str, Any]) -> str:
    """A step's prompt as text: its messages rendered, or its plain text (exact), or ``""`` when it was token ids."""
    if isinstance(step.get("prompt"), list):
        return render_messages(step["prompt"])
    return str(step.get("prompt_text") or "")


def seen_text(step: dict[str, Any]) -> str:
    """What the model had after this step: the prompt plus its response (as an assistant message for chat
    prompts, appended as it is to a text prompt)."""
    if isinstance(step.get("prompt"), list):
        return render_messages([*step["prompt"], {"role": "assistant", "content": step.get("action", "")}])
    return prompt_text(step) + str(step.get("action", ""))


def line_diff(old: str, new: str) -> list[list[Any]]:
    """Operations that turn ``old`` into ``new``, line by line: ``["=", n]`` keeps the next n lines of ``old``,
    ``["-", n]`` drops them, ``["+", text]`` inserts text."""
    a, b = lines(old), lines(new)
    if new.startswith(old) and (not old or old.endswith("\n")):  # append-only context: the common case
        return ([["=", len(a)]] if a else []) + ([["+", new[len(old):]]] if len(new) > len(old) else [])
    ops: list[list[Any]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            ops.append(["=", i2 - i1])
            continue
        if i2 > i1:
            ops.append(["-", i2 - i1])
        if j2 > j1:
            ops.append(["+", "".join(b[j1:j2])])
    return ops


def apply_diff(old: str, ops: list[list[Any]]) -> tuple[str, list[tuple[str, str]]]:
    """``(new, segments)``: the text ``line_diff`` ops give, and its pieces as ``("=" | "+" | "-", text)`` (the
    dropped lines included, as the page shows them)."""
    a, pos, segments = lines(old), 0, []
    for op, value in ops:
        if op == "+":
            segments.append(("+", value))
        else:
            segments.append((op, "".join(a[pos:pos + value])))
            pos += value
    return "".join(text for op, text in segments if op != "-"), segments


# -- reading files --------------------------------------------------------------------------------------------------
NONFINITE = ("NaN", "Infinity", "-Infinity")  # how a non-finite number reaches the page (JSON has none)


def _float(text: str) -> float | str:
    value = float(text)
    return value if math.isfinite(value) else NONFINITE[1 if value > 0 else 2]


def loads(text: str) -> Any:
    """JSON as the page can carry it: ``NaN``, ``Infinity``, ``-Infinity`` (which Python's ``json`` writes) and a
    number too large for a float become those words, as strings."""
    return json.loads(text, parse_constant=str, parse_float=_float)


def finite(value: Any) -> Any:
    """``value`` with every non-finite float written as in ``loads`` (for values that did not come from JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return NONFINITE[0 if value != value else 1 if value > 0 else 2]
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def read_jsonl(path: Path, warnings: list[str] | None = None) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file. A line that is not one (a torn last line, a foreign line) is skipped; the
    first is named in one line added to ``warnings``, with the count of the others (``agentr1_core.jsonl``)."""
    warn = warnings.append if warnings is not None else None
    return list(jsonl.read_jsonl(path, on_bad="skip", warn=warn, decode=loads))


def read_json(path: Path, warnings: list[str]) -> dict[str, Any]:
    """The JSON object of ``path`` ({} when absent; when it is not one, {} and a line in ``warnings``)."""
    if not path.is_file():
        return {}
    try:
        data = loads(path.read_text(encoding="utf-8", errors="replace"))
    except (json.JSONDecodeError, RecursionError) as exc:
        detail = f"{exc.msg} at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else "too deep"
        warnings.append(f"skipped {path}: not valid JSON ({detail})")
        return {}
    if not isinstance(data, dict):
        warnings.append(f"skipped {path}: not a JSON object ({type(data).__name__})")
        return {}
    return data


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> int | float | None:
    """``value`` when it is a finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def _dicts(value: Any) -> list[dict[str, Any]]:
    """The objects of a list (steps, calls); anything else is no list of them."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def stage_order(label: str) -> tuple[int, int, str]:
    """Validation labels in run order: before_*, after_sft, iterN (by N), after_rl, then anything else."""
    if label.startswith("before"):
        return (0, 0, label)
    if label == "after_sft":
        return (1, 0, label)
    match = re.fullmatch(r"iter(\d+)", label)
    if match:
        return (2, int(match[1]), label)
    return (3, 0, label) if label == "after_rl" else (4, 0, label)


def _select(cfg: Any, key: str) -> Any:
    for part in key.split("."):
        if not isinstance(cfg, dict) or part not in cfg:
            return None
        cfg = cfg[part]
    return cfg


def config_summary(path: Path) -> dict[str, Any]:
    """``{"rows": [[key, value], ...], "text": the file}`` of a saved ``config.yaml`` ({} when absent)."""
    if not path.is_file():
        return {}
    from omegaconf import OmegaConf

    text = path.read_text(encoding="utf-8")
    try:
        cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception:  # a config this version cannot read: show its text only
        return {"rows": [], "text": text}
    rows = []
    for key in SUMMARY_KEYS:
        value = _select(cfg, key)
        if key == "env.tools" and isinstance(value, list):
            value = [t.get("name") if isinstance(t, dict) else t for t in value]
        if value is not None:
            value = finite(value)
            rows.append([key, value if isinstance(value, (str, int, float, bool)) else json.dumps(value)])
    return {"rows": rows, "text": text}


def curves(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The learning curves: per panel, the series that have points (``[iteration, value]``)."""
    iters = [r for r in records if "event" not in r]
    vals = [r for r in records if r.get("event") == "validation"]
    panels = []
    for title, keys in CURVES:
        series = []
        for key in keys:
            rows, name = (vals, key[4:]) if key.startswith("val/") else (iters, key)
            points = [[int(_number(r.get("iteration")) or 0), float(r[name])] for r in rows
                      if _number(r.get(name)) is not None]
            if points:
                series.append({"name": key, "points": points})
        if series:
            panels.append({"title": title, "series": series})
    return panels


def validation_rows(records: list[dict[str, Any]], summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The validation records (``metrics.jsonl``, else ``summary.json``), one per label, in run order."""
    found = {r["label"]: r for r in records if r.get("event") == "validation" and isinstance(r.get("label"), str)
             and r["label"]}
    for label, r in _dict(summary.get("validation")).items():
        if isinstance(r, dict):
            found.setdefault(label, {"label": label, **r})
    keep = ("label", "iteration", "cases", "success_rate", "reward_mean", "steps_per_episode", "terminations")
    rows = []
    for label in sorted(found, key=stage_order):
        r = found[label]
        by = {src: {k: v.get(k) for k in ("success_rate", "reward_mean", "cases")}
              for src, v in _dict(r.get("by_source")).items() if isinstance(v, dict)}
        rows.append({**{k: r.get(k) for k in keep}, "label": label, "by_source": by})
    return rows


# -- episodes -------------------------------------------------------------------------------------------------------
def episode_task_id(ep: dict[str, Any]) -> str:
    """The episode's ``task_id``, or for an older record a hash of its data source and task text, or its row."""
    if ep.get("task_id"):
        return str(ep["task_id"])
    if ep.get("task"):
        text = f"{ep.get('data_source', '')}\n{ep['task']}"
        return "t" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]
    uid = uid_text(ep.get("uid", ""))
    return "row:" + uid.rsplit("/", 1)[0].rsplit("-", 1)[-1]


def uid_text(uid: Any) -> str:
    """An episode's uid as the page shows it: a string as it is, anything else (a number, null, a list) as JSON;
    ``""`` when the record has none."""
    return uid if isinstance(uid, str) else json.dumps(uid, ensure_ascii=False, default=str)


def episode_tags(ep: dict[str, Any]) -> list[str]:
    """What the page filters on: the termination, each tool error kind, ``reward_error``, ``cut_at_length`` (a
    response stopped by max_new_tokens) and ``answered`` (the last step answered without a tool call)."""
    tags = [str(ep.get("termination") or "unknown")]
    errors = ep.get("tool_errors")
    tags += sorted(str(k) for k, v in errors.items() if v) if isinstance(errors, dict) else []
    if ep.get("reward_error"):
        tags.append("reward_error")
    steps = _dicts(ep.get("steps"))
    if any(s.get("finish_reason") == "length" for s in steps):
        tags.append("cut_at_length")
    if steps and steps[-1].get("answer") is not None:
        tags.append("answered")
    return tags


class _Strings:
    """Long texts kept once: ``ref(text)`` is the text itself when short, else its index in ``items``."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.index: dict[str, int] = {}

    def ref(self, text: str) -> str | int:
        if len(text) < INTERN_MIN:
            return text
        if text not in self.index:
            self.index[text] = len(self.items)
            self.items.append(text)
        return self.index[text]


_HEADER = re.compile(r"(?m)^(?=── )")


def _compact_ops(ops: list[list[Any]], strings: _Strings) -> list[list[Any]]:
    """Added texts cut at message headers (so a system message is one piece that every episode shares), interned."""
    out: list[list[Any]] = []
    for op, value in ops:
        if op != "+":
            out.append([op, value])
            continue
        out.extend(["+", strings.ref(piece)] for piece in _HEADER.split(value) if piece)
    return out


def _prompt_kind(step: dict[str, Any]) -> str:
    """``messages`` | ``text`` | ``ids`` (an env that gave token ids: not readable here) | ``unrecorded`` (an episode
    file written before prompts were kept)."""
    if isinstance(step.get("prompt"), list):
        return "messages"
    if step.get("prompt_text") is not None:
        return "text"
    return "ids" if "prompt_tokens" in step else "unrecorded"


def _step_ref(value: Any, before: int) -> int | None:
    """``value`` when it is the index of a step before step ``before``, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < before else None


def step_bases(records: list[dict[str, Any]]) -> list[int]:
    """Per step, the step its prompt is compared with (-1: none, a first prompt): the previous step, or, in an
    episode whose steps record branches (``parent``, ``branch_of``), the step it continues or branched from."""
    if not any("branch" in s for s in records):
        return list(range(-1, len(records) - 1))
    bases = []
    for n, s in enumerate(records):
        parent, branch_of = _step_ref(s.get("parent"), n), _step_ref(s.get("branch_of"), n)
        bases.append(parent if parent is not None else branch_of if branch_of is not None else -1)
    return bases


def branch_tree(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The branches of an episode whose steps record them, in the order they started: ``b`` its index, ``steps``
    its step indices, ``depth`` (0 for the first call's branch, the depth of the branch it started from plus one
    for the others), and for a branch after the first, ``of`` (the step it branched from) and ``sp`` (the token ids
    it shares with that step). ``[]`` for an episode of one branch (a chain), which the page draws as a chain."""
    order: list[int] = []
    tree: dict[int, dict[str, Any]] = {}
    branch_of_step: list[int] = []
    for n, s in enumerate(records):
        b = s.get("branch")
        b = b if isinstance(b, int) and not isinstance(b, bool) and b >= 0 else 0
        branch_of_step.append(b)
        if b not in tree:
            origin = _step_ref(s.get("branch_of"), n)
            depth = tree[branch_of_step[origin]]["depth"] + 1 if origin is not None else (1 if order else 0)
            tree[b] = {"b": b, "depth": depth, "steps": []}
            if origin is not None:
                tree[b]["of"] = origin
                tree[b]["sp"] = _number(s.get("shared_prefix_tokens"))
            order.append(b)
        tree[b]["steps"].append(n)
    return [tree[b] for b in order] if len(order) > 1 else []


def compact_episode(ep: dict[str, Any], stage: str, index: int, strings: _Strings) -> dict[str, Any]:
    """One episode as the page holds it (short keys; prompts as diffs against the previous step, or, in an episode
    with branches, against the step each continues or branched from: ``b``; the branches as ``tree``)."""
    records = _dicts(ep.get("steps"))
    bases, tree = step_bases(records), branch_tree(records)
    steps, seen = [], []
    for n, s in enumerate(records):
        now = prompt_text(s)
        before = seen[bases[n]] if bases[n] >= 0 else ""
        step = {"p": _compact_ops(line_diff(before, now), strings), "r": str(s.get("action", "")),
                "f": str(s.get("feedback", "")), "rw": s.get("reward"), "d": bool(s.get("done")),
                "t": bool(s.get("truncated")), "pt": s.get("prompt_tokens"), "rt": s.get("response_tokens"),
                "k": _prompt_kind(s)}
        for short, key in (("fr", "finish_reason"), ("te", "tool_errors"), ("a", "answer"), ("tools", "tools")):
            if s.get(key) is not None:
                step[short] = s[key]
        if _dicts(s.get("calls")):
            step["c"] = _dicts(s["calls"])
        if tree:
            step["b"] = bases[n]
        steps.append(step)
        seen.append(seen_text(s) if step["k"] in ("messages", "text") else "")
    out = {"i": index, "stage": stage, "tid": episode_task_id(ep), "uid": uid_text(ep["uid"]) if "uid" in ep else "",
           "ds": str(ep.get("data_source", "default")), "task": strings.ref(str(ep.get("task", ""))),
           "reward": ep.get("reward"), "ok": ep.get("success") not in NONFINITE and bool(ep.get("success")),
           "term": ep.get("termination"),
           "tags": episode_tags(ep), "steps": steps}
    if tree:
        out["tree"] = tree
    for key in ("error", "reward_error", "close_error", "metrics"):
        if ep.get(key):
            out[key] = ep[key]
    return out


def align_tasks(episodes: list[dict[str, Any]], stages: list[str]) -> list[dict[str, Any]]:
    """Per held-out task (first seen first): its id, data source, task text and, per stage in ``stages``, the
    indices of its episodes there and their success share (``None`` where it had none)."""
    position = {s: i for i, s in enumerate(stages)}
    tasks: dict[str, dict[str, Any]] = {}
    for ep in episodes:
        if ep["stage"] not in position:
            continue
        task = tasks.setdefault(ep["tid"], {"id": ep["tid"], "ds": ep["ds"], "task": ep["task"],
                                            "eps": [[] for _ in stages]})
        task["eps"][position[ep["stage"]]].append(ep["i"])
    by_index = {ep["i"]: ep for ep in episodes}
    for task in tasks.values():
        task["share"] = [sum(by_index[i]["ok"] for i in ids) / len(ids) if ids else None for ids in task["eps"]]
    return list(tasks.values())


def flipped(tasks: list[dict[str, Any]], stages: list[str], a: str, b: str, direction: str) -> list[str]:
    """Ids of the tasks whose success share went ``up`` (fail -> success with one episode per stage), ``down``,
    or either way (``changed``) from stage ``a`` to stage ``b``; tasks missing at either stage are left out. The
    page's filter applies the same rule."""
    i, j = stages.index(a), stages.index(b)
    out = []
    for t in tasks:
        x, y = t["share"][i], t["share"][j]
        if x is None or y is None or x == y:
            continue
        if direction == "changed" or (direction == "up") == (y > x):
            out.append(t["id"])
    return out


def first_episode(tasks: list[dict[str, Any]], stages: list[str],
                  episodes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The episode the page opens with: ``{"episode": index, "why": text}``. The first held-out task (in table
    order) whose success share differs between the first and the last stage, at the last stage; else the first
    whose share changed between two stages in a row, at the later one; else the first episode. None when there is
    no episode."""
    for t in tasks:
        first, last = t["share"][0], t["share"][-1]
        if first is not None and last is not None and first != last:
            word = "failure → success" if last > first else "success → failure"
            return {"episode": t["eps"][-1][0], "why": f"the first held-out task that changed ({word}) between "
                                                       f"{stages[0]} and {stages[-1]}"}
    for t in tasks:
        seen = [(i, x) for i, x in enumerate(t["share"]) if x is not None]
        for (i, x), (j, y) in zip(seen, seen[1:]):
            if x != y:
                word = "failure → success" if y > x else "success → failure"
                return {"episode": t["eps"][j][0], "why": f"the first held-out task that changed ({word}), "
                                                          f"{stages[i]} to {stages[j]}"}
    if not episodes:
        return None
    return {"episode": 0, "why": "the first episode: no held-out task changed between stages"}


# -- one run or report ----------------------------------------------------------------------------------------------
def _episode_sets(path: Path) -> tuple[str, list[tuple[str, Path]], list[tuple[str, Path]]]:
    """(kind, validation sets, training sets) of a run directory or an eval report: ``[(stage, file), ...]``."""
    if path.is_dir():
        folder = path / "episodes"
        val = sorted(((p.stem, p) for p in folder.glob("*.jsonl")), key=lambda x: stage_order(x[0]))
        train = [(f"train it {int(p.stem.split('_')[-1])}", p) for p in sorted((folder / "train").glob("iter_*.jsonl"))
                 if p.stem.split("_")[-1].isdigit()]
        return "run", val, train
    episodes = path.with_suffix(".episodes.jsonl") if path.suffix == ".json" else path
    label = episodes.name.removesuffix(".episodes.jsonl").removesuffix(".jsonl")
    return "eval", ([(label, episodes)] if episodes.is_file() else []), []


def build_view(path: str | Path) -> dict[str, Any]:
    """Everything the page shows of a run directory or an eval report (``<report>.json`` or its
    ``.episodes.jsonl``); ``warnings``: one line per file with lines that could not be read."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"run directory or eval report not found: {path}")
    kind, val_sets, train_sets = _episode_sets(path)
    run_dir = path if path.is_dir() else path.parent
    warnings: list[str] = []
    metrics_file = run_dir / "metrics.jsonl"
    records = read_jsonl(metrics_file, warnings) if kind == "run" and metrics_file.is_file() else []
    summary = read_json(run_dir / "summary.json", warnings) if kind == "run" else {}
    report: dict[str, Any] = {}
    if kind == "eval":
        report_file = path if path.suffix == ".json" else path.with_name(path.name.replace(".episodes.jsonl", ".json"))
        report = read_json(report_file, warnings)
    if kind == "run" and not (records or val_sets or train_sets or summary):
        raise FileNotFoundError(f"nothing to show in {path}: no metrics.jsonl, summary.json or episodes/")
    if kind == "eval" and not (val_sets or report):
        raise FileNotFoundError(f"not an eval report: {path} (expected <report>.json or <report>.episodes.jsonl)")
    strings, episodes = _Strings(), []
    for stage, file in [*val_sets, *train_sets]:
        for ep in read_jsonl(file, warnings):
            episodes.append(compact_episode(ep, stage, len(episodes), strings))
    stages = [stage for stage, _ in val_sets]
    validation = validation_rows(records, summary)
    if report:
        validation = [{"label": stages[0] if stages else "eval", "iteration": report.get("iteration"),
                       **{k: report.get(k) for k in ("cases", "success_rate", "reward_mean", "steps_per_episode",
                                                     "terminations")},
                       "by_source": {s: {k: v.get(k) for k in ("success_rate", "reward_mean", "cases")}
                                     for s, v in _dict(report.get("by_source")).items() if isinstance(v, dict)}}]
    config = config_summary(run_dir / "config.yaml")
    if report:
        config.setdefault("rows", [])
        config["rows"] = [[f"eval.{k}", report[k]] for k in ("checkpoint", "iteration", "model_path", "n_per_row",
                                                              "temperature") if report.get(k) is not None] + \
            config["rows"]
    tasks = align_tasks(episodes, stages)
    return {"kind": kind, "title": (path.resolve().name or str(path)), "source": str(path), "config": config,
            "curves": curves(records), "validation": validation, "stages": stages,
            "train_stages": [stage for stage, _ in train_sets], "tasks": tasks,
            "start": first_episode(tasks, stages, episodes), "episodes": episodes, "strings": strings.items,
            "wall_seconds": summary.get("wall_seconds"), "warnings": warnings}
