"""The one JSONL reader (``agentr1_core.jsonl``): every unreadable line named as FILE:LINE, the good records kept."""

from __future__ import annotations

import pytest

from agentr1_core.errors import ConfigError
from agentr1_core.jsonl import JsonlError, parse_jsonl, read_jsonl


def _file(tmp_path, *lines: str):
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_records_keep_their_lines_and_blank_lines_are_ignored(tmp_path):
    rows = read_jsonl(_file(tmp_path, '{"a": 1}', "", "  ", '{"a": NaN}'))
    assert [r["a"] for r in rows[:1]] == [1] and rows[1]["a"] != rows[1]["a"]  # NaN read as a float
    assert rows.lines == [1, 4] and rows.where(1).endswith("rows.jsonl:4")


def test_every_bad_line_is_reported_after_the_whole_file_with_the_good_records(tmp_path):
    path = _file(tmp_path, '{"a": 1}', "nope", "[1]", '"text"', '{"a": 2}', "[" * 100_000 + "]" * 100_000)
    with pytest.raises(JsonlError) as err:
        read_jsonl(path)
    problems = err.value.problems
    assert [p.split(": ", 1)[0] for p in problems] == [f"{path}:{n}" for n in (2, 3, 4, 6)]
    assert "not valid JSON" in problems[0] and "got list" in problems[1] and "got str" in problems[2]
    assert "nested too deeply" in problems[3]
    assert [r["a"] for r in err.value.rows] == [1, 2] and isinstance(err.value, ConfigError)


def test_problems_are_capped_with_a_count(tmp_path):
    with pytest.raises(JsonlError) as err:
        read_jsonl(_file(tmp_path, *(["x"] * 14)), max_problems=10)
    assert len(err.value.problems) == 11 and err.value.problems[-1].endswith(": 4 more lines that could not be read")


def test_skip_mode_warns_once_and_keeps_going(tmp_path):
    warnings: list[str] = []
    rows = read_jsonl(_file(tmp_path, "x", '{"a": 1}', "y"), on_bad="skip", warn=warnings.append)
    assert len(rows) == 1 and len(warnings) == 1
    assert "rows.jsonl:1: not valid JSON" in warnings[0] and "1 more unreadable lines" in warnings[0]


def test_a_transform_that_refuses_a_record_makes_its_line_a_problem():
    def positive(record, line):
        if record["n"] <= 0:
            raise ValueError("n must be positive")
        return {**record, "line": line}

    with pytest.raises(JsonlError) as err:
        parse_jsonl(['{"n": 1}', '{"n": -1}', '{"n": 2}'], "mem.jsonl", transform=positive)
    assert err.value.problems == ["mem.jsonl:2: n must be positive"]
    assert [r["line"] for r in err.value.rows] == [1, 3]


def test_limit_objects_and_a_missing_file(tmp_path):
    assert len(read_jsonl(_file(tmp_path, *(['{"a": 1}'] * 5)), limit=2)) == 2
    assert read_jsonl(_file(tmp_path, "[1]", "2"), objects=False) == [[1], 2]
    with pytest.raises(ConfigError, match="file not found"):
        read_jsonl(tmp_path / "absent.jsonl")


def test_streaming_yields_the_good_records_then_raises_every_bad_line(tmp_path):
    from agentr1_core.jsonl import iter_jsonl

    seen = []
    with pytest.raises(JsonlError) as err:
        for where, record in iter_jsonl(_file(tmp_path, '{"a": 1}', "x", '{"a": 2}', "[3]")):
            seen.append((where.rsplit(":", 1)[1], record["a"]))
    assert seen == [("1", 1), ("3", 2)]
    assert [p.split(": ", 1)[0].rsplit(":", 1)[1] for p in err.value.problems] == ["2", "4"]
