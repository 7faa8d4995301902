"""GSM8K grade-school math word problems for the core's calculator recipe (``gsm8k``, ``gsm8k-cpu``).

The ``gsm8k`` dataset loader turns lines of the GSM8K release (``{"question", "answer"}``; the answer is a worked
solution with calculator annotations such as ``<<48/2=24>>`` and a last line ``#### 72``) into rows for
``tool_env`` with the ``calculator`` tool: ``prompt`` (the question), ``data_source: gsm8k``,
``reward_model.ground_truth`` (the number after ``####``, commas removed), ``expert_actions`` and ``extra_info``.

Expert replay: the solution's annotations become hermes ``calculator`` calls (``calls_per_turn`` of them per turn,
0 = all in one turn), then ``<answer>N</answer>``. Every annotation is evaluated with the core calculator and the
last one must equal the ground truth; a row that fails (no annotation, an expression the calculator refuses, or a
last annotation that is not the answer because the solution's final step is unannotated) gets no
``expert_actions`` at all, never an answer-only demonstration, which would teach the model to guess. Its
``extra_info.expert`` says why; ``expert_only: true`` drops such rows (what the SFT stage should see).

A sample of the release ships in ``agentr1_core/data/gsm8k`` (``train.jsonl``, ``test.jsonl``; provenance and
licence in that folder). ``agentr1-core gsm8k prepare --src FOLDER_OR_URL --out DIR`` reads a release's
``train.jsonl`` and ``test.jsonl`` and writes the recipe's rows (``DIR/train.jsonl``, ``DIR/test.jsonl``), which this
loader reads back through ``path`` (each prepared row keeps its question and solution).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import tempfile
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from agentr1_core.errors import ConfigError
from agentr1_core.jsonl import JsonlError, parse_jsonl

DATA_SOURCE = "gsm8k"
SPLITS = ("train", "test")
RELEASE_URL = "https://raw.githubusercontent.com/openai/grade-school-math/master/grade_school_math/data"
EXPERT_STATUSES = ("ok", "no_annotations", "calculator_error", "wrong_final")

_ANNOTATION = re.compile(r"<<([^<>]*?)=([^<>]*?)>>")
_NUMBER = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)")


class GSM8KFormatError(ConfigError):
    """A line that is not a GSM8K record (one line naming file and line, exit code 2)."""


def sample_path(split: str) -> Path:
    """The shipped sample file of ``split`` (``train`` or ``test``) inside the installed package."""
    from agentr1_core.named_configs import package_data

    return Path(package_data("agentr1_core", f"data/gsm8k/{split}.jsonl"))


def final_number(solution: str) -> str:
    """The number after the solution's last ``####``, commas and spaces removed (``"1,200"`` -> ``"1200"``)."""
    head, sep, tail = solution.rpartition("####")
    if not sep:
        raise ValueError("the answer has no '#### N' line")
    text = tail.strip().replace(",", "").replace(" ", "")
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"the final answer {tail.strip()!r} is not a number")
    return text


def annotations(solution: str) -> list[tuple[str, str]]:
    """The ``<<expression=result>>`` annotations of a solution, in order, as ``(expression, result)`` pairs."""
    return [(expr.strip(), result.strip()) for expr, result in _ANNOTATION.findall(solution)]


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


def _call(expression: str) -> str:
    return "<tool_call>" + json.dumps({"name": "calculator", "arguments": {"expression": expression}}) + "</tool_call>"


def expert_replay(solution: str, truth: str, calls_per_turn: int = 1) -> tuple[list[str] | None, str]:
    """``(actions, status)``: the annotations as calculator calls, ``calls_per_turn`` per action (0: all in one),
    then ``<answer>truth</answer>``; ``(None, reason)`` when the calculator cannot evaluate an annotation or the
    last annotation's value is not the ground truth (``status`` is one of ``EXPERT_STATUSES``)."""
    from agentr1_core.builtin.calculator import CalculatorError, evaluate

    found = annotations(solution)
    if not found:
        return None, "no_annotations"
    values = []
    for expression, _ in found:
        try:
            values.append(evaluate(expression))
        except CalculatorError:
            return None, "calculator_error"
    if not _close(float(values[-1]), float(truth)):
        return None, "wrong_final"
    calls = [_call(expression) for expression, _ in found]
    size = calls_per_turn if calls_per_turn > 0 else len(calls)
    turns = ["".join(calls[i:i + size]) for i in range(0, len(calls), size)]
    return turns + [f"<answer>{truth}</answer>"], "ok"


def gsm8k_row(question: str, solution: str, split: str, index: int, calls_per_turn: int = 1) -> dict[str, Any]:
    """One recipe row from a GSM8K record (``index``: its line number in the source file)."""
    truth = final_number(solution)
    actions, status = expert_replay(solution, truth, calls_per_turn)
    row: dict[str, Any] = {
        "prompt": question,
        "data_source": DATA_SOURCE,
        "reward_model": {"ground_truth": truth},
        "extra_info": {"split": split, "index": index, "annotations": len(annotations(solution)),
                       "expert": status, "question": question, "solution": solution},
    }
    if actions is not None:
        row["expert_actions"] = actions
    return row


def _record(obj: Any) -> tuple[str, str]:
    """``(question, solution)`` of a release line or of a row written by ``gsm8k prepare``."""
    if not isinstance(obj, dict):
        raise ValueError("each line must be a JSON object")
    if "question" in obj or "answer" in obj:
        question, solution = obj.get("question"), obj.get("answer")
    else:
        info = obj.get("extra_info") if isinstance(obj.get("extra_info"), dict) else {}
        question, solution = info.get("question"), info.get("solution")
        if question is None and solution is None:
            raise ValueError("not a GSM8K line: needs 'question' and 'answer' (or a row of gsm8k prepare)")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("'question' must be a non-empty string")
    if not isinstance(solution, str):
        raise ValueError("'answer' must be a string")
    return question, solution


def parse_lines(lines: Iterable[str], where: str, split: str, calls_per_turn: int = 1,
                limit: int = 0) -> list[dict[str, Any]]:
    """Rows from the lines of one JSONL file; malformed lines raise one ``GSM8KFormatError`` naming each as
    ``where:line`` (``agentr1_core.jsonl``)."""

    def row(record: dict[str, Any], lineno: int) -> dict[str, Any]:
        question, solution = _record(record)
        return gsm8k_row(question, solution, split, lineno, calls_per_turn)

    try:
        return list(parse_jsonl(lines, where, limit=limit, transform=row))
    except JsonlError as exc:
        raise GSM8KFormatError(str(exc)) from exc


def read_file(path: str | Path, split: str, calls_per_turn: int = 1, limit: int = 0) -> list[dict[str, Any]]:
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"config error at data: GSM8K file not found: {file}")
    with file.open(encoding="utf-8") as handle:
        return parse_lines(handle, str(file), split, calls_per_turn, limit)


def gsm8k_rows(path: str = "", split: str = "train", limit: int = 0, calls_per_turn: int = 1,
               expert_only: bool = False) -> list[dict[str, Any]]:
    """GSM8K rows for ``tool_env`` + ``calculator`` (see the module docstring).

    ``path``: a JSONL file (GSM8K release lines or rows of ``gsm8k prepare``); empty: the shipped sample of
    ``split`` (``train``: lines 1-300 of the release's train.jsonl, ``test``: lines 1-100 of test.jsonl).
    ``limit``: keep the first N rows (after ``expert_only``). ``calls_per_turn``: calculator calls per expert turn
    (1: one call, then its result, per turn; 0: all calls in one turn). ``expert_only``: drop rows without an expert
    replay (for the rows SFT draws from)."""
    if split not in SPLITS:
        raise ConfigError(f"config error at data: gsm8k split must be 'train' or 'test', got {split!r}")
    if calls_per_turn < 0:
        raise ConfigError(f"config error at data: calls_per_turn must be >= 0, got {calls_per_turn}")
    rows = read_file(path or sample_path(split), split, calls_per_turn)
    if expert_only:
        rows = [r for r in rows if "expert_actions" in r]
    return rows[:limit] if limit else rows


def replay_stats(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    """How many rows have each ``extra_info.expert`` status, and ``rows`` in all."""
    counts = Counter(str((r.get("extra_info") or {}).get("expert", "unknown")) for r in rows)
    return {"rows": sum(counts.values()), **{s: counts.get(s, 0) for s in EXPERT_STATUSES}}


# -- agentr1-core gsm8k prepare ---------------------------------------------------------------------------------------

def _is_url(source: str) -> bool:
    return urllib.parse.urlparse(source).scheme in ("http", "https", "file")


def _source_lines(src: str, split: str, tmp: Path, quiet: bool) -> tuple[list[str], str]:
    """The lines of ``<src>/<split>.jsonl`` (a folder or a URL base) and the name to report errors with."""
    if _is_url(src):
        from agentr1_core.fetch import fetch

        url = f"{src.rstrip('/')}/{split}.jsonl"
        local = fetch(url, tmp / f"{split}.jsonl", quiet=quiet)
        return local.read_text(encoding="utf-8").splitlines(), url
    file = Path(src).expanduser() / f"{split}.jsonl"
    if not file.is_file():
        raise ConfigError(f"gsm8k prepare: {file} not found (--src is a folder with train.jsonl and test.jsonl, "
                          f"or a URL base)")
    return file.read_text(encoding="utf-8").splitlines(), str(file)


def prepare(src: str, out: str | Path, quiet: bool = False) -> dict[str, dict[str, int]]:
    """Read ``train.jsonl`` and ``test.jsonl`` of a GSM8K release at ``src`` and write the recipe's rows to
    ``out/train.jsonl`` and ``out/test.jsonl`` (one calculator call per expert turn; the loader rebuilds the replay
    from each row's question and solution with its own ``calls_per_turn``); returns the expert-replay counts per
    split. Every line of both files is checked before anything is written."""
    out = Path(out).expanduser()
    rows: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="gsm8k-") as tmp:
        for split in SPLITS:
            lines, where = _source_lines(src, split, Path(tmp), quiet)
            rows[split] = parse_lines(lines, where, split)
            if not rows[split]:
                raise ConfigError(f"gsm8k prepare: {where} has no rows")
    out.mkdir(parents=True, exist_ok=True)
    stats = {}
    for split, items in rows.items():
        target = out / f"{split}.jsonl"
        part = target.with_name(f".{target.name}.part")
        with part.open("w", encoding="utf-8") as handle:
            for row in items:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        part.replace(target)
        stats[split] = replay_stats(items)
    return stats


def cmd_prepare(args: argparse.Namespace) -> int:
    stats = prepare(args.src, args.out, args.quiet)
    out = Path(args.out).expanduser().resolve()
    for split, s in stats.items():
        print(f"wrote {out / f'{split}.jsonl'}: {s['rows']} rows, {s['ok']} with an expert replay "
              f"({s['no_annotations']} without annotations, {s['wrong_final']} whose last annotation is not the "
              f"answer, {s['calculator_error']} the calculator cannot evaluate)")
    print(f"export GSM8K_TRAIN={out / 'train.jsonl'} GSM8K_TEST={out / 'test.jsonl'}")
    return 0


def register(parser: argparse.ArgumentParser) -> None:
    """``agentr1-core gsm8k prepare``."""
    sub = parser.add_subparsers(dest="gsm8k_command", metavar="ACTION", required=True)
    prep = sub.add_parser("prepare", help="read GSM8K's train/test JSONL and write the recipe's rows")
    prep.add_argument("--src", default=RELEASE_URL,
                      help="a folder or URL base holding train.jsonl and test.jsonl (default: the GSM8K release "
                           "on GitHub)")
    prep.add_argument("--out", required=True, help="folder for the rows (train.jsonl, test.jsonl)")
    prep.add_argument("--quiet", action="store_true", help="no download messages")
    prep.set_defaults(func=cmd_prepare)
