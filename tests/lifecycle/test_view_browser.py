"""``agentr1-core view``'s page in headless Chromium (rendering, filters, model output as text, 10,000 episodes paged,
every uid, NaN shown, the episode pane in view beside the tables, a branched episode drawn as a tree) and a real run
on the tiny model end to end, as data and in the browser. Chromium is required in CI and skipped elsewhere without
it. The page's data: test_view.py."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from agentr1_core.cli import main
from agentr1_core.lifecycle.view import build_view
from agentr1_core.lifecycle.view_page import render_page, write_view
from agentr1_core.testing import view_runs as runs
from agentr1_core.testing.ci import missing


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
    run = runs.make_run(tmp_path)
    evil = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
    path = run / "episodes" / "after_rl.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[2]["steps"][1]["action"] = "answer " + evil  # task a, after RL
    records[2]["steps"][0]["calls"][0]["output"] = evil
    records[2]["steps"][1]["prompt"][-1]["content"] = evil  # the tool message the next prompt carries
    records[2]["uid"] = evil
    runs.write_jsonl(path, records)
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
    records = [runs.episode(f"t{i}", f"task {i}", i % 2 == 0, uid=f"v-{i}/0") for i in range(2500)]
    for label in ("before_sft", "after_sft", "iter2", "after_rl"):
        runs.write_jsonl(run / "episodes" / f"{label}.jsonl", records)
    out, _ = write_view(run)
    _load(browser, out)
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
    out, view = write_view(runs.make_odd_uid_run(tmp_path))
    _load(browser, out)
    d = browser
    uids = [td.get_attribute("textContent") for td in d.find_elements("css selector", "#episodes tr.ep-row td.uid")]
    assert uids[:7] == runs.UID_TEXTS[:4] + ["0", "", "x/0"]
    for i, text in enumerate(runs.UID_TEXTS[:4] + ["0", "-"]):  # each episode's link opens it, its uid in its head
        d.find_element("css selector", f'#episodes tr.ep-row[data-episode="{i}"] a').click()
        head = _episode_head(d, i)
        assert f" · uid {text} · " in head, (i, head)
        assert _count(d, "#episode .step") >= 1
        _no_script_error(d)


def test_nan_and_unreadable_lines_show_in_a_browser(browser, tmp_path):
    out, view = write_view(runs.write_foreign_run(tmp_path))
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
    run = runs.make_run(tmp_path)
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
    out, view = write_view(runs.write_branched_run(tmp_path))
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
