"""The offline index (BM25 over titles and abstracts, year cut-off, citation lists, its cache) and the two paper
tools over it and over the HTTP service."""

from __future__ import annotations

import asyncio
import json
import os
import shutil

import pytest

from agentr1_core.tools import call_tool
from agentr1_tools_papers.index import OfflineIndex, build_index, default_index_dir, forget_open_indexes
from agentr1_tools_papers.papers import CorpusError, read_corpus
from agentr1_tools_papers.server import make_server, server_url
from agentr1_tools_papers.tools import PaperExpandTool, PaperSearchTool, shipped_corpus


def test_search_ranks_by_title_and_abstract_and_respects_the_year_cut_off(small_corpus):
    index = OfflineIndex(small_corpus)
    assert [p.id for p in index.search("graph attention anomaly detection", 2)] == ["p10", "p9"]
    assert index.search("group relative policy optimization", 1)[0].id == "p7"
    # an abstract-only word finds its paper
    assert index.search("positional encodings", 1)[0].id == "p2"
    assert all(p.year <= 2017 for p in index.search("policy optimization language models", 10, year_max=2017))
    assert "p7" not in [p.id for p in index.search("group relative policy optimization", 10, year_max=2023)]
    assert index.search("the of and", 5) == []  # stop words only


def test_neighbours_follow_the_corpus_citation_lists(small_corpus):
    index = OfflineIndex(small_corpus)
    assert [p.id for p in index.neighbours("p7", "references", 5)] == ["p5", "p6"]
    assert [p.id for p in index.neighbours("p5", "citations", 5)] == ["p6", "p7"]
    assert index.neighbours("p5", "citations", 1)[0].id == "p6"
    assert index.neighbours("nope", "references", 5) == [] and index.paper("nope") is None
    with pytest.raises(ValueError, match="direction"):
        index.neighbours("p7", "cousins", 5)


def test_the_index_is_cached_and_rebuilt_when_the_corpus_changes(tmp_path, small_corpus):
    corpus = tmp_path / "c.jsonl"
    shutil.copy(small_corpus, corpus)
    OfflineIndex(corpus)
    folder = default_index_dir(corpus)
    assert (folder / "meta.json").is_file()
    with open(corpus, "a") as fh:
        fh.write(json.dumps({"id": "p13", "title": "Zebra stripes as camouflage", "year": 2001}) + "\n")
    os.utime(corpus, ns=(1, 1))
    assert OfflineIndex(corpus).search("zebra", 1)[0].id == "p13"  # a new fingerprint: a fresh index


def test_a_named_index_must_match_its_corpus(tmp_path, small_corpus):
    corpus = tmp_path / "c.jsonl"
    shutil.copy(small_corpus, corpus)
    with pytest.raises(CorpusError, match="no paper index at"):
        OfflineIndex(corpus, tmp_path / "missing")
    build_index(corpus, tmp_path / "idx")
    assert OfflineIndex(corpus, tmp_path / "idx").search("residual", 1)[0].id == "p8"
    corpus.write_text(corpus.read_text() + json.dumps({"id": "x", "title": "Another paper"}) + "\n")
    with pytest.raises(CorpusError, match="out of date.*agentr1-core papers index"):
        OfflineIndex(corpus, tmp_path / "idx")


@pytest.mark.parametrize("line, message", [
    ("not json", "c.jsonl:2: not valid JSON"),
    ('{"title": "No id"}', "c.jsonl:2: a paper needs an id"),
    ('{"id": "a", "title": "T", "year": "soon"}', "c.jsonl:2: year must be a number"),
    ('{"id": "a", "title": "T", "references": "p1"}', "c.jsonl:2: references must be a list"),
])
def test_a_malformed_corpus_line_names_file_and_line(tmp_path, line, message):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "ok", "title": "Fine"}) + "\n" + line + "\n")
    with pytest.raises(CorpusError, match=message):
        list(read_corpus(corpus))


def test_duplicate_ids_are_refused(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "a", "title": "One"}\n{"id": "a", "title": "Two"}\n')
    with pytest.raises(CorpusError, match="1 paper ids appear twice"):
        OfflineIndex(corpus)


def test_the_shipped_corpus_holds_every_gold_paper_of_the_shipped_queries():
    from agentr1_tools_papers.data import load_scholar_queries

    ids = {p.id for p in read_corpus(shipped_corpus())}
    assert len(ids) == 4498
    for split, count in (("train", 400), ("test", 100)):
        rows = load_scholar_queries(split=split)
        assert len(rows) == count
        assert all(set(r["reward_model"]["ground_truth"]) <= ids for r in rows)


def call(tool, **arguments):
    """One call through the core's tool runner, as the env makes it (argument checks, thread, timeout)."""
    return asyncio.run(call_tool(tool, arguments))


def test_paper_search_tool_shows_ids_titles_years_and_reports_papers(small_corpus):
    forget_open_indexes()
    tool = PaperSearchTool(corpus=str(small_corpus), top_k=2, snippet_chars=30)
    res = call(tool, query="graph attention anomaly")
    assert res.error is None
    assert res.text.splitlines()[0] == "[p10] Multivariate time-series anomaly detection with graph attention (2020)"
    assert res.text.splitlines()[1].startswith("    Feature and temporal graph") and res.text.splitlines()[1].endswith("...")
    assert [p["id"] for p in res.info["papers"]] == ["p10", "p9"]
    assert call(tool, query="graph attention", year_max=2018).info["papers"][0]["id"] == "p9"
    assert call(tool, query="   ").error == "bad_arguments"
    assert call(tool, query="x" * 400).error == "bad_arguments"
    assert call(tool, query="graph", year_max="soon").error == "bad_arguments"
    none = call(tool, query="zebra")
    assert none.error is None and none.info["papers"] == [] and "No papers found" in none.text


def test_paper_expand_tool_lists_neighbours_and_answers_unknown_ids_as_an_observation(small_corpus):
    tool = PaperExpandTool(corpus=str(small_corpus), top_k=5)
    res = call(tool, paper="p6", direction="citations")
    assert [p["id"] for p in res.info["papers"]] == ["p7"] and res.text.startswith("[p7] Group relative")
    assert [p["id"] for p in call(tool, paper="[p4]").info["papers"]] == ["p2", "p3"]  # references default
    unknown = call(tool, paper="2401.00001", direction="references")
    assert unknown.error is None and unknown.info["papers"] == [] and "No paper with id '2401.00001'" in unknown.text
    assert call(tool, paper="p1", direction="sideways").error == "bad_arguments"
    assert "No references known" in call(tool, paper="p1").text


def test_tools_over_the_http_service_and_a_service_that_dies_mid_run(small_corpus):
    import threading

    server = make_server(OfflineIndex.open(small_corpus))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    url = server_url(server)
    try:
        search = PaperSearchTool(url=url, top_k=2, timeout=2.0, retries=0)
        expand = PaperExpandTool(url=url, top_k=5, timeout=2.0, retries=0)
        assert [p["id"] for p in call(search, query="graph attention anomaly").info["papers"]] == ["p10", "p9"]
        assert [p["id"] for p in call(expand, paper="p12").info["papers"]] == ["p11", "p3"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    dead = call(search, query="graph attention")
    assert dead.error == "service_error" and url in dead.text


def test_an_unreachable_service_fails_when_the_tool_is_built():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from agentr1_tools_papers.papers import ServiceError

    with pytest.raises(ServiceError, match=f"http://127.0.0.1:{port}.*unreachable"):
        PaperSearchTool(url=f"http://127.0.0.1:{port}", timeout=1.0, retries=0)


def test_tool_parameters_are_checked(small_corpus):
    with pytest.raises(ValueError, match="top_k must be at least 1"):
        PaperSearchTool(corpus=str(small_corpus), top_k=0)
    with pytest.raises(CorpusError, match="paper corpus not found"):
        PaperSearchTool(corpus="/nonexistent/papers.jsonl")
