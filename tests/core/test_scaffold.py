"""``agentr1-core new-plugin NAME --kind tool|env|reward|flow|sandbox`` writes a package that speaks of its component
by the given name, with the working example it trains in one marked block per file; whose wheel carries every file under
``data/``; that, installed from that wheel, shows in ``plugins`` (its component and its named config), whose named
config uses the new component and reads the rows shipped in the package; and whose own tests, which read the row
counts and caps they check from the run config, pass as written. ``--tool NAME`` (repeated) makes a tool package of
several tools, each with its class, module, registration and tests, which installs and passes its tests the same
way; bad tool names are refused in one line. A sandbox package ships no rows: its config runs agentr1-env-terminal's
terminal recipe in the sandbox, and its tests pass with that plugin blocked."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from agentr1_core.scaffold import KIND_MODULES, load_kind, write_plugin
from agentr1_core.scaffold.common import render_package
from agentr1_core.scaffold.tool import MAX_TOOLS, UNITS, dimensions

# kind -> (the registry's kind, how the named config uses the component, passing tests of the generated package)
KINDS = {
    "tool": ("tool", lambda cfg: "weather_now" in [t if isinstance(t, str) else t["name"] for t in cfg["env"]["tools"]],
             12),
    "env": ("env", lambda cfg: cfg["env"]["name"] == "weather_now" and cfg["reward"] is None, 15),
    "reward": ("reward", lambda cfg: cfg["reward"]["name"] == "weather_now", 18),
    "flow": ("agent_flow", lambda cfg: cfg["agent_flow"]["name"] == "weather_now", 10),
    "sandbox": ("sandbox", lambda cfg: cfg["env"]["name"] == "terminal" and cfg["env"]["sandbox"]["name"] ==
                "weather_now", 17),
}
TOOL_PACKAGE_TESTS, TESTS_A_TOOL = 5, 7  # tests/test_package.py; tests/test_<tool>.py
PACKAGE_TESTS = {"sandbox": 3}  # tests/test_package.py of the kinds that ship no rows
DATA_FILES = {"agentr1_weather_now/data/train.jsonl", "agentr1_weather_now/data/val.jsonl"}
FILES = {"pyproject.toml", "README.md", "tests/conftest.py", "tests/test_package.py", "agentr1_weather_now/__init__.py",
         "agentr1_weather_now/plugin.py", "agentr1_weather_now/configs/weather-now.yaml"} | DATA_FILES
# What the examples speak of (unit conversion, the guessing game, the calculator task, the graded answer, the flow's
# rule on tool use, the sandbox's folder and limits): allowed only inside a file's marked example block.
EXAMPLE_WORDS = re.compile(r"\bunits?\b|\bconver(?:t|sion)|furlong|\bmeters?\b|\bguess|\bhigher\b|\blower\b|binary|"
                           r"calculator|arithmetic|graded|partial credit|tolerance|require_tool|\banswered\b|"
                           r"temporary folder|wall_seconds|output_bytes", re.IGNORECASE)
EXAMPLE_MARKS = (("# EXAMPLE:", "# END EXAMPLE"), ("<!-- EXAMPLE:", "<!-- END EXAMPLE -->"))


def cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "agentr1_core.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


def outside_examples(text: str) -> tuple[str, int]:
    """``text`` without its marked example blocks (the marks included), and how many blocks it had."""
    kept, blocks, end = [], 0, None
    for line in text.splitlines():
        mark = line.strip()
        start = next((start for start, _ in EXAMPLE_MARKS if mark.startswith(start)), None)
        if start is not None:
            assert end is None, "an example block inside another"
            end, blocks = dict(EXAMPLE_MARKS)[start], blocks + 1
        elif end is not None:
            end = None if mark == end else end
        else:
            kept.append(line)
    assert end is None, "an example block is not closed"
    return "\n".join(kept), blocks


def test_outside_examples_drops_each_marked_block_with_its_marks():
    text = ("keep 1\n  # EXAMPLE: the part\n  drop\n  # END EXAMPLE\nkeep 2\n"
            "<!-- EXAMPLE: x -->\ndrop\n<!-- END EXAMPLE -->\n")
    assert outside_examples(text) == ("keep 1\nkeep 2", 2)
    with pytest.raises(AssertionError, match="not closed"):
        outside_examples("# EXAMPLE: open\nno end\n")
    with pytest.raises(AssertionError, match="inside another"):
        outside_examples("# EXAMPLE: one\n# EXAMPLE: two\n# END EXAMPLE\n")


def test_the_cli_offers_every_kind():
    assert set(KINDS) == set(KIND_MODULES)
    bad = cli("new-plugin", "x", "--kind", "widget", "--dir", "/nonexistent")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr and "flow" in bad.stderr and "sandbox" in bad.stderr
    assert "a sandbox" in cli("new-plugin", "--help").stdout


@pytest.mark.parametrize("kind", KIND_MODULES)
def test_the_package_speaks_in_the_users_words_with_the_example_in_one_marked_block_per_file(tmp_path, kind):
    root = write_plugin("inventory", kind, tmp_path)
    package = root / "agentr1_inventory"
    blocks = marked_blocks(root)
    component = f"agentr1_inventory/{kind}.py"
    assert blocks == {"pyproject.toml": 0, "README.md": 1, "agentr1_inventory/__init__.py": 0,
                      "agentr1_inventory/plugin.py": 0, component: 1, "agentr1_inventory/configs/inventory.yaml": 1,
                      "tests/conftest.py": 0, "tests/test_package.py": 0, f"tests/test_{kind}.py": 1}
    # the words above are the example's: the marked blocks hold it, so the check outside them can fail
    assert EXAMPLE_WORDS.search((root / component).read_text(encoding="utf-8"))
    assert EXAMPLE_WORDS.search((root / f"tests/test_{kind}.py").read_text(encoding="utf-8"))
    # ... and the rest speaks of the inventory <kind>
    title = f"The inventory {kind}"
    assert (root / "README.md").read_text().splitlines()[2].startswith(f"{title} for agentr1")
    assert (root / component).read_text().startswith(f'"""{title} for agentr1: ')
    assert (package / "configs" / "inventory.yaml").read_text().startswith(f"# {title}: SFT on expert episodes")
    plugin = (package / "plugin.py").read_text()
    assert f'"{title}"' in plugin  # the description `agentr1-core plugins` shows
    # what the component reads from every row, checked before a run: the example reward reads the gold answer
    assert ('row_fields=("reward_model.ground_truth",)' in plugin) == (kind == "reward")


def marked_blocks(root: Path) -> dict[str, int]:
    """How many marked example blocks each file of the package at ``root`` has (its rows aside), having checked
    that none speaks of the example outside them."""
    blocks = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.parent.name != "data"):
        relative = str(path.relative_to(root))
        rest, blocks[relative] = outside_examples(path.read_text(encoding="utf-8"))
        spoken = sorted({word.lower() for word in EXAMPLE_WORDS.findall(rest)})
        assert not spoken, f"{relative} speaks of the example outside its marked block: {spoken}"
    return blocks


def test_a_package_of_several_tools_gives_each_its_class_module_registration_and_tests(tmp_path):
    root = write_plugin("weather", "tool", tmp_path, ["forecast", "alerts"])
    package = root / "agentr1_weather"
    assert marked_blocks(root) == {
        "pyproject.toml": 0, "README.md": 1, "agentr1_weather/__init__.py": 0, "agentr1_weather/plugin.py": 0,
        "agentr1_weather/forecast.py": 1, "agentr1_weather/alerts.py": 1, "agentr1_weather/configs/weather.yaml": 1,
        "tests/conftest.py": 0, "tests/test_package.py": 0, "tests/test_forecast.py": 1, "tests/test_alerts.py": 1}
    for tool, cls in (("forecast", "ForecastTool"), ("alerts", "AlertsTool")):
        module = (package / f"{tool}.py").read_text()
        assert module.startswith(f'"""The {tool} tool for agentr1: ') and f'class {cls}(BaseTool):\n    name = "{tool}"' \
            in module
        tests = (root / "tests" / f"test_{tool}.py").read_text()
        assert f"from agentr1_weather.{tool} import {cls}\n" in tests and f'call["name"] == "{tool}"' in tests
    plugin = (package / "plugin.py").read_text()
    assert ('ToolSpec("forecast", "agentr1_weather.forecast:ForecastTool", "The forecast tool"),\n'
            '            ToolSpec("alerts", "agentr1_weather.alerts:AlertsTool", "The alerts tool")]') in plugin
    pyproject = (root / "pyproject.toml").read_text()
    assert '"tool.forecast" = "agentr1_weather.plugin"\n"tool.alerts" = "agentr1_weather.plugin"\n' in pyproject
    assert 'weather = "agentr1_weather.plugin"' in pyproject  # the plugin's own entry point keeps its name
    config = yaml.safe_load((package / "configs" / "weather.yaml").read_text())
    assert config["env"]["tools"] == ["forecast", "alerts"]
    assert "forecast for lengths and volumes; alerts for masses" in config["env"]["system_prompt"]
    readme = (root / "README.md").read_text()
    for line in ("| `agentr1_weather/forecast.py` | the tool (`ForecastTool`), registered as `forecast` |",
                 "| `agentr1_weather/alerts.py` | the tool (`AlertsTool`), registered as `alerts` |",
                 "| `tests/test_alerts.py` | the alerts tool's tests |", "registers the tools as `forecast` and `alerts`"):
        assert line in readme, line
    assert readme.splitlines()[2].startswith("The weather tools (forecast, alerts) for agentr1")
    # one --tool: the package's one tool, in tool.py, registered under the name given
    one = write_plugin("weather", "tool", tmp_path / "one", ["forecast"])
    assert 'class ForecastTool(BaseTool):\n    name = "forecast"' in (one / "agentr1_weather" / "tool.py").read_text()
    assert "tools: [forecast]" in (one / "agentr1_weather" / "configs" / "weather.yaml").read_text()
    assert not (one / "agentr1_weather" / "forecast.py").exists()


def _expert_calls(row: dict) -> list[dict]:
    return [json.loads(found) for action in row["expert_actions"]
            for found in re.findall(r"<tool_call>(.*?)</tool_call>", action)]


@pytest.mark.parametrize("count", range(1, MAX_TOOLS + 1))
def test_each_tool_has_its_own_questions_and_every_expert_turn_fits_the_prompt_cap(count, smol_tokenizer):
    """The tools share the kinds of units; each row calls the one tool that converts its kind, every tool has
    held-out rows, and the prompts of the expert's turns (every tool's schema in the system prompt, counted with
    SmolLM2's tokenizer) fit the config's rollout.max_prompt_tokens."""
    from agentr1_core.envs import ToolEnv
    from agentr1_core.flows import render_prompt
    from agentr1_core.mdp import Action

    tools = [f"tool_{i}" for i in range(count)] if count > 1 else None
    files = render_package("weather", load_kind("tool"), tools)
    modules = [f"tool_{i}" for i in range(count)] if count > 1 else ["tool"]
    instances, kinds_of = [], {}
    for module, dims in zip(modules, dimensions(count)):
        namespace: dict = {}
        exec(files[f"agentr1_weather/{module}.py"], namespace)
        tool = next(v for k, v in namespace.items() if k.endswith("Tool") and k != "BaseTool")()
        instances.append(tool)
        kinds_of[tool.name] = set(dims)
    assert set.union(*kinds_of.values()) == set(list(UNITS)[:max(3, count)])  # every kind to one tool
    config = yaml.safe_load(files["agentr1_weather/configs/weather.yaml"])
    rows = {split: [json.loads(line) for line in files[f"agentr1_weather/data/{split}.jsonl"].splitlines()]
            for split in ("train", "val")}
    for split, split_rows in rows.items():
        called = {_expert_calls(r)[0]["name"] for r in split_rows}
        assert called == set(kinds_of), (split, called)
    env = ToolEnv(tools=instances, system_prompt=config["env"]["system_prompt"])
    cap, longest = config["rollout"]["max_prompt_tokens"], 0
    for row in rows["val"]:
        (call,) = _expert_calls(row)
        assert row["data_source"].removeprefix("weather_") in kinds_of[call["name"]]
        obs = asyncio.run(env.reset(row))
        longest = max(longest, len(render_prompt(smol_tokenizer, obs)))
        result = asyncio.run(env.step(Action(row["expert_actions"][0], [0], [0.0])))
        assert result.info["tool_errors"] == {} and result.feedback == row["reward_model"]["ground_truth"]
        longest = max(longest, len(render_prompt(smol_tokenizer, result.observation)))
    assert longest <= cap, (count, longest, cap)


SLOW = pytest.mark.slow


def build_and_install(root: Path, work: Path) -> tuple[Path, Path]:
    """Build the wheel of the package at ``root`` (offline, with this environment's setuptools) and install it into
    ``work/site`` (not the checkout, not editable); returns (wheel, site)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(work / "dist"), str(root)], check=True, timeout=300)
    (wheel,) = (work / "dist").glob("*.whl")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                    str(work / "site"), str(wheel)], check=True, timeout=300)
    return wheel, work / "site"


def installed_env(site: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))


def pytest_in(tests: Path, env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests), *args],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


TWO_TOOLS = ["forecast", "alerts"]


@pytest.mark.parametrize("kind, tools", [("tool", []), ("tool", TWO_TOOLS), ("env", []), ("sandbox", []),
                                         pytest.param("reward", [], marks=SLOW), pytest.param("flow", [], marks=SLOW)])
def test_generated_plugin_installs_from_its_wheel_with_all_its_data_lists_and_passes_its_tests(tmp_path, kind,
                                                                                                tools):
    """About 15 s a kind; reward and flow (both on the calculator task) are marked slow. ``tools``: a tool package
    of several tools (``--tool forecast --tool alerts``), each with its module and tests. A sandbox package ships no
    rows and depends on agentr1-env-terminal (its config's base, terminal-cpu, is that plugin's): the wheel is
    installed without its dependencies, as every kind's here, and its tests run with that plugin blocked, since they
    need agentr1-core alone."""
    component, uses, passing = KINDS[kind]
    has_rows = load_kind(kind).rows is not None
    package_tests = PACKAGE_TESTS.get(kind, TOOL_PACKAGE_TESTS)
    modules = tools or [kind]
    names = tools or ["weather_now"]
    if tools:  # the package's tests and each tool's own
        uses = lambda cfg: [t if isinstance(t, str) else t["name"] for t in cfg["env"]["tools"]] == tools  # noqa: E731
        passing = TOOL_PACKAGE_TESTS + TESTS_A_TOOL * len(tools)
    made = cli("new-plugin", "weather-now", "--kind", kind, *[a for t in tools for a in ("--tool", t)],
               "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    root = tmp_path / "agentr1-weather-now"
    written = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert written == (FILES if has_rows else FILES - DATA_FILES) | {f"agentr1_weather_now/{m}.py" for m in modules} | {
        f"tests/test_{m}.py" for m in modules}
    if has_rows:
        rows = {split: [json.loads(line) for line in (root / "agentr1_weather_now" / "data" / f"{split}.jsonl").open()]
                for split in ("train", "val")}
        assert (len(rows["train"]), len(rows["val"])) == (200, 32)
        assert all(r["expert_actions"] and "ground_truth" in r["reward_model"] for r in rows["train"] + rows["val"])

    # a file the component would read, beside the rows and in a subfolder: package data as much as the rows (a
    # package without rows ships the files a user puts in data/ the same way)
    data = root / "agentr1_weather_now" / "data"
    data.mkdir(exist_ok=True)
    (data / "extra.csv").write_text("city,celsius\nOslo,-3\n", encoding="utf-8")
    (data / "tables").mkdir()
    (data / "tables" / "coast.csv").write_text("city,wind\nBergen,12\n", encoding="utf-8")
    wheel, site = build_and_install(root, tmp_path)
    shipped = set(zipfile.ZipFile(wheel).namelist())
    for relative in ("data/train.jsonl", "data/val.jsonl")[:2 if has_rows else 0] + (
            "data/extra.csv", "data/tables/coast.csv", "configs/weather-now.yaml"):
        assert f"agentr1_weather_now/{relative}" in shipped, (relative, sorted(shipped))
    shutil.rmtree(root / "agentr1_weather_now")  # from here on only the installed wheel can be imported
    env = installed_env(site)
    read = subprocess.run([sys.executable, "-c", "from importlib import resources; import agentr1_weather_now as p; "
                           "print(p.__file__); print(resources.files(p).joinpath('data/extra.csv').read_text(), "
                           "resources.files(p).joinpath('data/tables/coast.csv').read_text(), sep='', end='')"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert read.returncode == 0, read.stderr
    assert read.stdout.splitlines() == [str(site / "agentr1_weather_now" / "__init__.py"), "city,celsius", "Oslo,-3",
                                        "city,wind", "Bergen,12"]

    listed = cli("plugins", "--json", env=env)
    installed = {p["plugin"]: p for p in json.loads(listed.stdout)["plugins"]}
    plugin = installed["weather_now"]
    assert plugin["distribution"] == "agentr1-weather-now" and plugin["status"] == "ok"
    assert plugin["components"] == {component: sorted(names), "config": ["weather-now"]}
    configs = cli("config", "list", "--json", env=env, cwd=tmp_path)
    shipped_config = {r["name"]: r for r in json.loads(configs.stdout)}["weather-now"]
    assert shipped_config["distribution"] == "agentr1-weather-now" and str(site) in shipped_config["path"]
    if has_rows:
        shown = cli("config", "show", "weather-now", env=env, cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        cfg = yaml.safe_load(shown.stdout)
        assert cfg["run_dir"] == "runs/weather-now" and cfg["stages"] == ["sft", "rl"] and uses(cfg)
        for split in ("train", "val"):
            assert cfg["data"][split] == {"name": "jsonl",
                                          "path": str(site / "agentr1_weather_now" / "data" / f"{split}.jsonl")}
    else:  # the config's base is agentr1-env-terminal's: without that plugin the config says what is missing
        env = dict(env, AGENTR1_PLUGINS_BLOCK="terminal")
        shown = cli("config", "show", "weather-now", env=env, cwd=tmp_path)
        assert shown.returncode == 2 and "config file 'terminal-cpu' not found" in shown.stderr, shown.stderr
        assert len(shown.stderr.strip().splitlines()) == 1, shown.stderr
        if "terminal" in installed:  # with it, the config is its terminal recipe in this sandbox (merged as a run
            # merges it; `config show` would also check the terminal plugin's own code, not this package's)
            merged = subprocess.run([sys.executable, "-c", "import json; from omegaconf import OmegaConf; "
                                     "from agentr1_core.config import load_config; cfg = load_config('weather-now'); "
                                     "print(json.dumps(OmegaConf.to_container(cfg, resolve=False)))"],
                                    capture_output=True, text=True, env=installed_env(site), cwd=tmp_path,
                                    timeout=120)
            assert merged.returncode == 0, merged.stderr
            cfg = json.loads(merged.stdout)
            assert cfg["run_dir"] == "runs/weather-now" and cfg["stages"] == ["sft", "rl"] and uses(cfg)
            assert cfg["env"]["sandbox"] == {"name": "weather_now", "wall_seconds": 120, "output_bytes": 65536}

    tests = pytest_in(root / "tests", env, tmp_path, "-rA")
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert f"{passing} passed" in tests.stdout, tests.stdout
    for module in modules:  # each component's own tests ran and passed
        ran = [line for line in tests.stdout.splitlines() if line.startswith("PASSED ") and
               f"/tests/test_{module}.py::" in line]
        assert len(ran) == (TESTS_A_TOOL if kind == "tool" else passing - package_tests), tests.stdout


def test_the_generated_tests_check_the_rows_against_the_generated_config(tmp_path):
    """Fewer rows than the package came with pass as long as they cover what the config takes (no fixed count);
    a config that takes more than there are fails, naming the key."""
    root = write_plugin("stock", "tool", tmp_path)
    _, site = build_and_install(root, tmp_path)
    shutil.rmtree(root / "agentr1_stock")
    installed = site / "agentr1_stock"
    for split, keep in (("train", 32), ("val", 8)):  # sft.rows is 32, rollout.batch_size 4
        path = installed / "data" / f"{split}.jsonl"
        path.write_text("".join(path.read_text().splitlines(keepends=True)[:keep]))
    config = installed / "configs" / "stock.yaml"
    config.write_text(config.read_text().replace("max_rows: 32", "max_rows: 8"))
    env = installed_env(site)
    fits = pytest_in(root / "tests" / "test_package.py", env, tmp_path, "-k", "cover or well_formed")
    assert fits.returncode == 0 and "2 passed" in fits.stdout, fits.stdout + fits.stderr
    config.write_text(config.read_text().replace("sft: {rows: 32,", "sft: {rows: 33,"))
    short = pytest_in(root / "tests" / "test_package.py", env, tmp_path, "-k", "cover")
    assert short.returncode == 1 and "sft.rows is 33; there are 32 training rows" in short.stdout, short.stdout


def test_the_rows_are_seeded_and_the_package_names_follow_the_plugin_name(tmp_path):
    first = write_plugin("unit-conv", "tool", tmp_path / "a")
    second = write_plugin("unit-conv", "tool", tmp_path / "b")
    for split in ("train", "val"):
        relative = Path("agentr1_unit_conv") / "data" / f"{split}.jsonl"
        assert (first / relative).read_bytes() == (second / relative).read_bytes()
    pyproject = (first / "pyproject.toml").read_text()
    assert 'name = "agentr1-unit-conv"' in pyproject and 'unit_conv = "agentr1_unit_conv.plugin"' in pyproject
    assert 'agentr1_unit_conv = ["configs/*.yaml", "data/**/*"]' in pyproject
    tool = (first / "agentr1_unit_conv" / "tool.py").read_text()
    assert "class UnitConvTool(BaseTool)" in tool and 'name = "unit_conv"' in tool
    config = (first / "agentr1_unit_conv" / "configs" / "unit-conv.yaml").read_text()
    assert "${package_data:agentr1_unit_conv,data/train.jsonl}" in config and "tools: [unit_conv]" in config
    reward = (write_plugin("unit-conv", "reward", tmp_path / "c") / "agentr1_unit_conv" / "plugin.py").read_text()
    assert '"unit_conv", "agentr1_unit_conv.reward:unit_conv_reward"' in reward


def test_new_plugin_refuses_bad_tool_names_in_one_line_and_writes_nothing(tmp_path):
    def run(*args):
        return cli("new-plugin", "weather", *args, "--dir", str(tmp_path))

    for args, says in [
        (["--tool", "../x"], "tool name '../x' must be lower-case letters, digits or '_', starting with a letter"),
        (["--tool", "Forecast"], "tool name 'Forecast' must be lower-case"),
        (["--tool", "wind-speed"], "tool name 'wind-speed' must be lower-case"),
        (["--tool", "forecast", "--tool", "alerts", "--tool", "forecast"], "tool name 'forecast' is given twice"),
        (["--tool", "import"], "tool name 'import' is a Python keyword"),
        (["--tool", "forecast", "--tool", "plugin"], "tool name 'plugin' is taken by the package itself"),
        (["--tool", "package"], "tool name 'package' is taken by the package itself"),
        ([a for i in range(MAX_TOOLS + 1) for a in ("--tool", f"t{i}")], f"at most {MAX_TOOLS} tools"),
        (["--kind", "env", "--tool", "forecast"], "--tool is for --kind tool"),
    ]:
        refused = run(*args)
        assert refused.returncode == 2, (args, refused.stderr)
        assert says in refused.stderr and len(refused.stderr.strip().splitlines()) == 1, (args, refused.stderr)
        assert "Traceback" not in refused.stderr and not (tmp_path / "agentr1-weather").exists()
    made = run(*[a for i in range(MAX_TOOLS) for a in ("--tool", f"t{i}")])
    assert made.returncode == 0, made.stderr
    assert sorted(p.name for p in (tmp_path / "agentr1-weather" / "tests").glob("test_t*.py")) == [
        f"test_t{i}.py" for i in range(MAX_TOOLS)]


def test_new_plugin_refuses_bad_names_and_existing_folders(tmp_path):
    def run(*args):
        return cli("new-plugin", *args, "--dir", str(tmp_path))

    bad = run("Bad Name")
    assert bad.returncode == 2 and "must be lower-case" in bad.stderr
    assert run("dup").returncode == 0
    again = run("dup", "--kind", "env")
    assert again.returncode == 2 and "already exists" in again.stderr
