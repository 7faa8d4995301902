"""``agentr1-core new-plugin NAME --kind tool|env|reward|flow`` writes a package that speaks of its component by the
given name, with the working example it trains in one marked block per file; whose wheel carries every file under
``data/``; that, installed from that wheel, shows in ``plugins`` (its component and its named config), whose named
config uses the new component and reads the rows shipped in the package; and whose own tests, which read the row
counts and caps they check from the run config, pass as written."""

from __future__ import annotations

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

from agentr1_core.scaffold import KIND_MODULES, write_plugin

# kind -> (the registry's kind, how the named config uses the component, passing tests of the generated package)
KINDS = {
    "tool": ("tool", lambda cfg: "weather_now" in [t if isinstance(t, str) else t["name"] for t in cfg["env"]["tools"]],
             12),
    "env": ("env", lambda cfg: cfg["env"]["name"] == "weather_now" and cfg["reward"] is None, 15),
    "reward": ("reward", lambda cfg: cfg["reward"]["name"] == "weather_now", 18),
    "flow": ("agent_flow", lambda cfg: cfg["agent_flow"]["name"] == "weather_now", 10),
}
FILES = {"pyproject.toml", "README.md", "tests/conftest.py", "tests/test_package.py", "agentr1_weather_now/__init__.py",
         "agentr1_weather_now/plugin.py", "agentr1_weather_now/configs/weather-now.yaml",
         "agentr1_weather_now/data/train.jsonl", "agentr1_weather_now/data/val.jsonl"}
# What the examples speak of (unit conversion, the guessing game, the calculator task, the graded answer, the flow's
# rule on tool use): allowed only inside a file's marked example block.
EXAMPLE_WORDS = re.compile(r"\bunits?\b|\bconver(?:t|sion)|furlong|\bmeters?\b|\bguess|\bhigher\b|\blower\b|binary|"
                           r"calculator|arithmetic|graded|partial credit|tolerance|require_tool|\banswered\b",
                           re.IGNORECASE)
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
    assert bad.returncode == 2 and "invalid choice" in bad.stderr and "flow" in bad.stderr


@pytest.mark.parametrize("kind", KIND_MODULES)
def test_the_package_speaks_in_the_users_words_with_the_example_in_one_marked_block_per_file(tmp_path, kind):
    root = write_plugin("inventory", kind, tmp_path)
    package = root / "agentr1_inventory"
    blocks = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.parent != package / "data"):
        relative = str(path.relative_to(root))
        rest, blocks[relative] = outside_examples(path.read_text(encoding="utf-8"))
        spoken = sorted({word.lower() for word in EXAMPLE_WORDS.findall(rest)})
        assert not spoken, f"{relative} speaks of the example outside its marked block: {spoken}"
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


@pytest.mark.parametrize("kind", ["tool", "env", pytest.param("reward", marks=SLOW), pytest.param("flow", marks=SLOW)])
def test_generated_plugin_installs_from_its_wheel_with_all_its_data_lists_and_passes_its_tests(tmp_path, kind):
    """About 15 s a kind; reward and flow (both on the calculator task) are marked slow."""
    component, uses, passing = KINDS[kind]
    made = cli("new-plugin", "weather-now", "--kind", kind, "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    root = tmp_path / "agentr1-weather-now"
    written = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert written == FILES | {f"agentr1_weather_now/{kind}.py", f"tests/test_{kind}.py"}
    rows = {split: [json.loads(line) for line in (root / "agentr1_weather_now" / "data" / f"{split}.jsonl").open()]
            for split in ("train", "val")}
    assert (len(rows["train"]), len(rows["val"])) == (200, 32)
    assert all(r["expert_actions"] and "ground_truth" in r["reward_model"] for r in rows["train"] + rows["val"])

    # a file the component would read, beside the rows and in a subfolder: package data as much as the rows
    data = root / "agentr1_weather_now" / "data"
    (data / "extra.csv").write_text("city,celsius\nOslo,-3\n", encoding="utf-8")
    (data / "tables").mkdir()
    (data / "tables" / "coast.csv").write_text("city,wind\nBergen,12\n", encoding="utf-8")
    wheel, site = build_and_install(root, tmp_path)
    shipped = set(zipfile.ZipFile(wheel).namelist())
    for relative in ("data/train.jsonl", "data/val.jsonl", "data/extra.csv", "data/tables/coast.csv",
                     "configs/weather-now.yaml"):
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
    plugin = {p["plugin"]: p for p in json.loads(listed.stdout)["plugins"]}["weather_now"]
    assert plugin["distribution"] == "agentr1-weather-now" and plugin["status"] == "ok"
    assert plugin["components"] == {component: ["weather_now"], "config": ["weather-now"]}
    configs = cli("config", "list", "--json", env=env, cwd=tmp_path)
    shipped_config = {r["name"]: r for r in json.loads(configs.stdout)}["weather-now"]
    assert shipped_config["distribution"] == "agentr1-weather-now" and str(site) in shipped_config["path"]
    shown = cli("config", "show", "weather-now", env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    cfg = yaml.safe_load(shown.stdout)
    assert cfg["run_dir"] == "runs/weather-now" and cfg["stages"] == ["sft", "rl"] and uses(cfg)
    for split in ("train", "val"):
        assert cfg["data"][split] == {"name": "jsonl",
                                      "path": str(site / "agentr1_weather_now" / "data" / f"{split}.jsonl")}

    tests = pytest_in(root / "tests", env, tmp_path)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert f"{passing} passed" in tests.stdout, tests.stdout


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


def test_new_plugin_refuses_bad_names_and_existing_folders(tmp_path):
    def run(*args):
        return cli("new-plugin", *args, "--dir", str(tmp_path))

    bad = run("Bad Name")
    assert bad.returncode == 2 and "must be lower-case" in bad.stderr
    assert run("dup").returncode == 0
    again = run("dup", "--kind", "env")
    assert again.returncode == 2 and "already exists" in again.stderr
