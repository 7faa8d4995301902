"""Query files as rows (ScholarGym and PaSa formats, the shipped sample) and ``papers prepare`` from local files:
the train/held-out split, the corpus with and without a paper file, and bad input."""

from __future__ import annotations

import json

import pytest

from agentr1_core.cli import main

from agentr1_tools_papers.data import QueryFileError, load_scholar_queries
from agentr1_tools_papers.papers import read_corpus

SCHOLARGYM = [
    {"query": "Papers on proximal policy optimization?", "qid": "AutoScholarQuery_dev_0", "date": "2019-02",
     "source": "PASA_AutoScholar", "gt_label": [1], "valid": True,
     "cited_paper": [{"arxiv_id": "1707.06347", "title": "Proximal Policy Optimization Algorithms", "year": 2017}]},
    {"query": "Works with no gold?", "qid": "AutoScholarQuery_dev_1", "date": "2019-02", "source": "PASA_AutoScholar",
     "cited_paper": []},
    {"query": "Residual networks for images?", "qid": "AutoScholarQuery_test_0", "date": "2017-01",
     "source": "PASA_AutoScholar",
     "cited_paper": [{"arxiv_id": "1512.03385", "title": "Deep Residual Learning for Image Recognition",
                      "year": 2015}]},
    {"query": "Real researcher query about attention?", "qid": "RealScholarQuery_0", "date": "2023-05",
     "source": "PASA_RealScholar",
     "cited_paper": [{"arxiv_id": "1706.03762", "title": "Attention Is All You Need", "year": 2017},
                     {"arxiv_id": "1512.03385", "title": "Deep Residual Learning for Image Recognition",
                      "year": 2015}]},
]


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_scholargym_rows_carry_query_gold_ids_titles_and_date(tmp_path):
    rows = load_scholar_queries(str(write_jsonl(tmp_path / "q.jsonl", SCHOLARGYM)))
    assert len(rows) == 3  # the query without gold papers is skipped
    first = rows[0]
    assert first["reward_model"]["ground_truth"] == ["1707.06347"] and first["data_source"] == "autoscholar"
    assert first["extra_info"]["query"] == "Papers on proximal policy optimization?"
    assert first["extra_info"]["date"] == "2019-02" and first["extra_info"]["gold_papers"][0]["year"] == 2017
    real = load_scholar_queries(str(tmp_path / "q.jsonl"), sources=["PASA_RealScholar"])
    assert [r["extra_info"]["qid"] for r in real] == ["RealScholarQuery_0"] and real[0]["data_source"] == "realscholar"
    assert len(load_scholar_queries(str(tmp_path / "q.jsonl"), limit=2)) == 2


def test_pasa_format_rows(tmp_path):
    rec = {"question": "Which papers propose GRPO?", "answer": ["DeepSeekMath"], "answer_arxiv_id": ["2402.03300"],
           "qid": "x1", "source_meta": {"published_time": "20240205"}}
    row = load_scholar_queries(str(write_jsonl(tmp_path / "p.jsonl", [rec])))[0]
    assert row["reward_model"]["ground_truth"] == ["2402.03300"] and row["extra_info"]["date"] == "2024-02"
    assert row["extra_info"]["gold_papers"] == [{"id": "2402.03300", "title": "DeepSeekMath", "year": None}]


@pytest.mark.parametrize("line, message", [
    ("{not json", "q.jsonl:2: not valid JSON"),
    ('{"query": "", "cited_paper": []}', "q.jsonl:2: a query needs a non-empty query"),
    ('{"query": "x"}', "q.jsonl:2: a query needs cited_paper"),
    ('{"query": "x", "cited_paper": [{"title": "t"}]}', "q.jsonl:2: each cited_paper needs an arxiv_id"),
])
def test_a_malformed_query_line_names_file_and_line(tmp_path, line, message):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps(SCHOLARGYM[0]) + "\n" + line + "\n")
    with pytest.raises(QueryFileError, match=message):
        load_scholar_queries(str(path))


def test_the_shipped_training_and_held_out_queries_never_share_an_id_or_a_text():
    train, test = load_scholar_queries(split="train"), load_scholar_queries(split="test")
    assert not {r["extra_info"]["qid"] for r in train} & {r["extra_info"]["qid"] for r in test}
    assert not {r["extra_info"]["query"].lower() for r in train} & {r["extra_info"]["query"].lower() for r in test}
    assert all(r["extra_info"]["qid"].startswith("AutoScholarQuery_dev_") for r in train)
    assert all(r["extra_info"]["qid"].startswith("AutoScholarQuery_test_") for r in test)
    with pytest.raises(QueryFileError, match="no shipped sample for split 'dev'"):
        load_scholar_queries(split="dev")


def test_prepare_splits_queries_and_builds_a_title_only_corpus(tmp_path, capsys):
    src = write_jsonl(tmp_path / "bench.jsonl", SCHOLARGYM)
    out = tmp_path / "out"
    assert main(["papers", "prepare", "--out", str(out), "--source", f"queries={src}", "--quiet"]) == 0
    train = [json.loads(x) for x in (out / "train.jsonl").read_text().splitlines()]
    test = [json.loads(x) for x in (out / "test.jsonl").read_text().splitlines()]
    assert [r["qid"] for r in train] == ["AutoScholarQuery_dev_0", "AutoScholarQuery_dev_1"]
    assert [r["qid"] for r in test] == ["AutoScholarQuery_test_0", "RealScholarQuery_0"]
    corpus = {p.id: p for p in read_corpus(out / "corpus.jsonl")}
    assert set(corpus) == {"1707.06347", "1512.03385", "1706.03762"} and corpus["1512.03385"].year == 2015
    printed = capsys.readouterr().out
    assert f"PAPERS_TRAIN={out / 'train.jsonl'}" in printed and "3 of them title-only" in printed
    assert load_scholar_queries(str(out / "test.jsonl"))[1]["reward_model"]["ground_truth"] == [
        "1706.03762", "1512.03385"]


def test_prepare_adds_a_paper_file_with_abstracts_and_keeps_its_citations(tmp_path):
    src = write_jsonl(tmp_path / "bench.jsonl", SCHOLARGYM)
    papers = tmp_path / "db.json"  # an id -> record object, as some paper databases ship
    papers.write_text(json.dumps({
        "1512.03385": {"title": "Deep Residual Learning for Image Recognition", "abstract": "Shortcuts.",
                       "year": 2015, "references": ["x"]},
        "2000.00001": {"title": "A distractor paper", "abstract": "Unrelated."}}))
    out = tmp_path / "out"
    assert main(["papers", "prepare", "--out", str(out), "--source", f"queries={src}", "--papers", str(papers),
                 "--quiet"]) == 0
    corpus = {p.id: p for p in read_corpus(out / "corpus.jsonl")}
    assert corpus["1512.03385"].abstract == "Shortcuts." and corpus["1512.03385"].references == ["x"]
    assert "2000.00001" in corpus and corpus["1706.03762"].abstract == ""  # gold, title-only fallback


def test_prepare_refuses_a_query_on_both_sides(tmp_path, capsys):
    dup = dict(SCHOLARGYM[0], qid="AutoScholarQuery_test_9")  # the same text as a training query
    src = write_jsonl(tmp_path / "bench.jsonl", SCHOLARGYM + [dup])
    assert main(["papers", "prepare", "--out", str(tmp_path / "o"), "--source", f"queries={src}", "--quiet"]) == 2
    assert "on both the training and the held-out side" in capsys.readouterr().err


def test_prepare_names_a_malformed_query_line(tmp_path, capsys):
    src = tmp_path / "bench.jsonl"
    src.write_text(json.dumps(SCHOLARGYM[0]) + "\n{oops\n")
    assert main(["papers", "prepare", "--out", str(tmp_path / "o"), "--source", f"queries={src}", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "queries.jsonl:2: not valid JSON" in err
