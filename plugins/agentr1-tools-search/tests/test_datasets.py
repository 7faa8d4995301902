"""Dataset loaders on real slices: row shape, answers/aliases, supporting titles, and bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentr1_tools_search.datasets import (
    DatasetError, load_2wiki, load_bamboogle, load_hotpotqa, load_musique, load_nq, load_qa_jsonl,
)

DATA = Path(__file__).parent / "data"

ROW_KEYS = {"prompt", "agent_name", "data_source", "reward_model", "env_kwargs", "extra_info"}


def test_hotpotqa_shipped_dev_sample():
    rows = load_hotpotqa(split="dev")
    assert len(rows) == 50 and set(rows[0]) == ROW_KEYS
    first = rows[0]
    assert first["prompt"].startswith("VIVA Media AG changed it's name in 2004")
    assert first["reward_model"]["ground_truth"] == ["Gesellschaft mit beschränkter Haftung"]
    assert first["extra_info"]["supporting_titles"] == ["VIVA Media", "Gesellschaft mit beschränkter Haftung"]
    assert first["data_source"] == "hotpotqa" and first["extra_info"]["type"] == "bridge"


def test_hotpotqa_train_sample_and_limit():
    rows = load_hotpotqa(split="train", limit=7)
    assert len(rows) == 7
    assert rows[0]["extra_info"]["supporting_titles"] == ["Alû", "Lilu (mythology)"]
    with pytest.raises(DatasetError, match="no shipped sample for split 'test'"):
        load_hotpotqa(split="test")


def test_musique_aliases_and_titles_in_decomposition_order():
    rows = load_musique(str(DATA / "musique_train5.jsonl"))
    assert len(rows) == 5
    first = rows[0]
    assert first["reward_model"]["ground_truth"] == ["G. Stanley Hall", "Stanley Hall"]
    titles = first["extra_info"]["supporting_titles"]
    assert len(titles) == first["extra_info"]["hops"] == 2
    assert titles[0] == "Journal of Psychotherapy Integration"


def test_nq_bamboogle_2wiki_flashrag_formats():
    nq = load_nq(str(DATA / "nq_open_dev20.jsonl"))
    assert len(nq) == 20 and nq[0]["reward_model"]["ground_truth"] == ["14 December 1972 UTC", "December 1972"]
    bam = load_bamboogle(str(DATA / "bamboogle20.jsonl"), limit=3)
    assert len(bam) == 3 and bam[0]["reward_model"]["ground_truth"] == ["james madison"]
    wiki = load_2wiki(str(DATA / "2wiki_dev20.jsonl"))
    assert wiki[0]["reward_model"]["ground_truth"] == ["Tetisheri"] and wiki[0]["data_source"] == "2wikimultihopqa"
    flash = load_qa_jsonl(str(DATA / "flashrag_nq_format5.jsonl"), data_source="nq")
    assert flash[0]["reward_model"]["ground_truth"] == ["Wilhelm Conrad Röntgen"]
    assert flash[0]["extra_info"]["id"] == "test_0"


def test_bamboogle_csv(tmp_path):
    csv_file = tmp_path / "bamboogle.csv"
    csv_file.write_text('Question,Answer\n"Who was president when Citibank was founded?",James Madison\n')
    rows = load_bamboogle(str(csv_file))
    assert rows[0]["prompt"].startswith("Who was president") and rows[0]["reward_model"]["ground_truth"] == [
        "James Madison"]


def test_bad_records_name_file_and_line(tmp_path):
    bad = tmp_path / "qa.jsonl"
    bad.write_text('{"question": "q1", "answer": "a"}\n{"question": "q2"}\n')
    with pytest.raises(DatasetError, match=rf"{bad}:2: missing field 'answer'"):
        load_qa_jsonl(str(bad))
    bad.write_text('{"question": "q1", "answer": "a"}\n\n{"answer": "x"}\n')
    with pytest.raises(DatasetError, match=rf"{bad}:3: missing field 'question'"):
        load_nq(str(bad))
    bad.write_text('{"question": ')
    with pytest.raises(DatasetError, match="not valid JSON"):
        load_qa_jsonl(str(bad))
    with pytest.raises(DatasetError, match="dataset file not found"):
        load_musique(str(tmp_path / "none.json"))
    with pytest.raises(DatasetError, match="set data"):
        load_nq()
