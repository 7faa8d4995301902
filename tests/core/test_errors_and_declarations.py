"""User errors live in ``agentr1_core.errors`` (and stay importable where they are raised); the extras and component
declarations of installed distributions are read from their metadata; what components declare they read from a
dataset row is checked on every row before a run; every unknown name and key is reported at once; a component whose
constructor raises is named."""

from __future__ import annotations

import json
from importlib import metadata

import pytest

from agentr1_core import errors
from agentr1_core.declared import canonical, declared_by, extra_with

OLD_HOMES = {
    "agentr1_core.plugins": ["PluginError", "UnknownComponentError", "DuplicateComponentError"],
    "agentr1_core.config": ["ConfigError"],
    "agentr1_core.distributed.pool": ["RolloutEngineError"],
    "agentr1_core.models": ["ModelPathError"],
    "agentr1_core.fetch": ["FetchError"],
    "agentr1_core.lifecycle.run_dir": ["RunDirInUseError", "ResumeMismatch"],
    "agentr1_core.lifecycle.episode_errors": ["AllEpisodesFailed", "NoExpertSteps"],
}


@pytest.mark.parametrize("module", sorted(OLD_HOMES))
def test_error_classes_are_the_same_objects_where_they_are_raised(module):
    import importlib

    mod = importlib.import_module(module)
    for name in OLD_HOMES[module]:
        assert getattr(mod, name) is getattr(errors, name)
        assert issubclass(getattr(errors, name), errors.UserError)


def test_a_config_error_is_a_user_error_not_a_plugin_error():
    assert not issubclass(errors.ConfigError, errors.PluginError)
    assert issubclass(errors.CheckpointMismatch, errors.UserError)


def test_the_cli_prints_any_user_error_as_one_line(monkeypatch, capsys):
    from agentr1_core import cli

    def fail(args):
        raise errors.CheckpointMismatch("checkpoint 3 does not fit the model")

    monkeypatch.setattr(cli, "cmd_plugins", fail)
    assert cli.main(["plugins"]) == 2
    assert capsys.readouterr().err == "agentr1-core: error: checkpoint 3 does not fit the model\n"


def test_the_core_extras_come_from_its_own_metadata():
    assert extra_with("agentr1-core", "vllm") == "vllm"
    assert extra_with("agentr1-core", "ray") == "ray"
    assert extra_with("agentr1-core", "ray.util", prefer="verl") == "verl"  # the verl trainer needs ray too
    assert extra_with("agentr1-core", "verl") == "verl"
    assert extra_with("agentr1-core", "numpy") is None  # a dependency, not an extra
    assert extra_with("agentr1-no-such-distribution", "vllm") is None


def test_installed_plugins_declare_their_components():
    try:
        metadata.distribution("agentr1-env-webshop")
    except metadata.PackageNotFoundError:
        pytest.skip("agentr1-env-webshop is not installed")
    [decl] = declared_by("env", "webshop")
    assert canonical(decl.distribution) == "agentr1-env-webshop" and decl.module == "agentr1_env_webshop.plugin"
    assert declared_by("env", "no_such_env") == []


# -- what components need from a row, checked before a run -----------------------------------------------------------

def test_answer_match_refuses_a_row_without_ground_truth():
    from agentr1_core.builtin.rewards import AnswerMatch
    from agentr1_core.mdp import Step, Trajectory

    def answered(text):
        traj = Trajectory(termination="done")
        traj.steps.append(Step(prompt_ids=[1], response_ids=[2], response_logprobs=[0.0], action_text=text))
        return traj

    reward = AnswerMatch()
    assert reward(answered("<answer>4</answer>"), {"reward_model": {"ground_truth": "4.0"}}) == 1.0
    assert reward(answered("<answer>4</answer>"), {"answer": 4}) == 1.0
    for row in ({"prompt": "2 + 2?"}, {"reward_model": {"ground_truth": None}}, {"reward_model": None}):
        with pytest.raises(ValueError, match="no reward_model.ground_truth"):
            reward(answered("<answer>None</answer>"), row)  # never 1.0 for naming the missing value
        with pytest.raises(ValueError, match="no reward_model.ground_truth"):
            reward(Trajectory(termination="max_turns"), row)  # whatever the episode did


def test_row_problems_name_the_file_line_field_and_how_many_rows():
    from agentr1_core.rows import FileRows, RowNeed, row_problems

    rows = FileRows("/data/train.jsonl", [
        {"prompt": "a", "reward_model": {"ground_truth": "1"}},
        {"prompt": "b", "env_kwargs": {"targt": 3}},
        {"prompt": "c", "reward_model": {"ground_truth": None}, "answer": "3"},  # the alternative counts
        {"prompt": "d", "reward_model": {}, "env_kwargs": ["low", 1]},
    ], [1, 2, 4, 7])
    needs = [RowNeed("prompt", "env 'guess'"), RowNeed("reward_model.ground_truth|answer", "reward 'answer_match'")]
    problems = row_problems(rows, needs, "data.train", "env 'guess'", frozenset({"low", "high", "target"}))
    assert problems == [
        "/data/train.jsonl:2: missing reward_model.ground_truth (or answer), which reward 'answer_match' reads "
        "(2 of 4 rows of data.train)",
        "/data/train.jsonl:2: env_kwargs.targt is not a parameter of env 'guess' (did you mean 'target'?); "
        "valid: high, low, target (1 of 4 rows of data.train)",
        "/data/train.jsonl:7: env_kwargs must be a mapping of parameters for env 'guess', got list "
        "(1 of 4 rows of data.train)",
    ]
    plain = [{"prompt": "x"}, {"question": "y"}]
    assert row_problems(plain, [RowNeed("prompt", "dataset 'jsonl'"), *needs[:1]], "data.val") == [
        "data.val row 2: missing prompt, which dataset 'jsonl' and env 'guess' read (1 of 2 rows of data.val)"]
    assert row_problems(plain, [], "data.val", "env 'any'", None) == []  # an env that takes any keyword


def test_every_declared_row_field_is_a_tuple_of_dotted_paths():
    import re

    from agentr1_core.plugins import get_registry

    path = r"[A-Za-z_]\w*(\.\w+)*"
    field_pattern = re.compile(rf"{path}(\|{path})*")
    registry = get_registry()
    declared = {}
    for kind in ("reward", "env", "dataset"):
        for name in registry.names(kind):
            fields = registry.get(kind, name).row_fields
            assert isinstance(fields, tuple), f"{kind} {name}: row_fields must be a tuple, got {fields!r}"
            assert all(field_pattern.fullmatch(f) for f in fields), f"{kind} {name}: {fields!r}"
            declared[kind, name] = fields
    assert declared["reward", "answer_match"] == ("reward_model.ground_truth|answer",)
    assert declared["env", "tool_env"] == ("prompt",) and declared["dataset", "jsonl"] == ("prompt",)


def _jsonl(tmp_path, rows):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_preflight_checks_every_train_and_val_row_before_building_anything(tmp_path):
    from agentr1_core.config import load_config
    from agentr1_core.plugins import get_registry
    from agentr1_core.preflight import load_rows, row_check_problems

    good = {"prompt": "What is 2 + 2?", "reward_model": {"ground_truth": "4"}}
    train = _jsonl(tmp_path, [good, {"prompt": "What is 3 + 3?"}])
    cfg = load_config("tiny", [f"data.train={{name: jsonl, path: {train}}}"])
    registry = get_registry()
    rows = {key: load_rows(cfg, registry, key) for key in ("data.train", "data.val")}
    assert row_check_problems(cfg, registry, rows) == [
        f"{train}:2: missing reward_model.ground_truth (or answer), which reward 'answer_match' reads (1 of 2 rows "
        f"of data.train)"]
    no_reward = load_config("tiny", [f"data.train={{name: jsonl, path: {train}}}", "reward=null"])
    assert row_check_problems(no_reward, registry, rows) == []


def test_every_named_config_passes_the_row_checks_with_its_shipped_data(tmp_path, monkeypatch):
    """Every declaration holds for the rows that ship: a plugin's loader gives what its reward and env read."""
    from omegaconf import OmegaConf

    from agentr1_core.config import load_config
    from agentr1_core.plugins import get_registry
    from agentr1_core.preflight import load_rows, row_check_problems

    needs_prepared_data = {"alfworld", "alfworld-gpu"}  # the full games (`agentr1-core alfworld prepare`)
    monkeypatch.chdir(tmp_path)
    registry = get_registry()
    checked = []
    for name in registry.names("config"):
        cfg = load_config(name, ["model.device=auto"])
        keys = [k for k in ("data.train", "data.val") if OmegaConf.select(cfg, k) is not None]
        try:
            rows = {key: load_rows(cfg, registry, key) for key in keys}
        except errors.ConfigError:
            if name in needs_prepared_data:
                continue
            raise
        assert row_check_problems(cfg, registry, rows) == [], name
        checked.append(name)
    assert {"default", "tiny"} <= set(checked) and not set(checked) & needs_prepared_data


def test_a_tool_whose_constructor_raises_is_named(agentr1_registry, tmp_path, monkeypatch):
    from agentr1_core import ToolSpec, hookimpl
    from agentr1_core.envs import ToolEnv

    (tmp_path / "inventory_tool.py").write_text(
        "from agentr1_core.tools import BaseTool\n"
        "class InventoryTool(BaseTool):\n"
        "    name = 'inventory'\n"
        "    def __init__(self, table: str = 'stock.csv'):\n"
        "        raise ValueError(f'cannot read {table}')\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    class Plugin:
        @hookimpl
        def agentr1_tools(self):
            return [ToolSpec("inventory", "inventory_tool:InventoryTool", "stock lookup")]

    agentr1_registry.register_module(Plugin(), name="inventory")
    with pytest.raises(errors.ConfigError) as raised:
        ToolEnv(tools=["calculator", {"name": "inventory", "table": "items.csv"}])
    assert str(raised.value) == "config error at env.tools[1]: tool 'inventory' failed to start: cannot read items.csv"
    with pytest.raises(errors.ConfigError, match=r"^config error at env.tools\[0\].tabel: unknown parameter"):
        ToolEnv(tools=[{"name": "inventory", "tabel": "x"}])  # a bad parameter keeps its own message
    with pytest.raises(errors.UnknownComponentError, match="unknown tool 'inventori'"):
        ToolEnv(tools=["inventori"])


def test_every_unknown_name_and_key_is_reported_at_once(tmp_path):
    from agentr1_core.components import check_components
    from agentr1_core.config import load_config
    from agentr1_core.plugins import get_registry

    cfg = load_config("tiny", ["env.name=tool_envv", "algorithm.name=grpoo", "env.tools=[calculator, calc]"])
    with pytest.raises(errors.ConfigError) as raised:
        check_components(cfg, get_registry())
    lines = str(raised.value).splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "config error at env", "config error at algorithm", "config error at env.tools[1]"]
    assert "did you mean 'tool_env'" in lines[0] and "did you mean 'grpo'" in lines[1]

    yaml = tmp_path / "typos.yaml"
    yaml.write_text("base: tiny\nrollout: {nn: 2}\ntrainer: {total_stepz: 3, lr: 1.0e-5}\n"
                    "reward: {name: answer_mach}\n")
    with pytest.raises(errors.ConfigError) as raised:
        load_config(str(yaml), ["validation.everyy=2", "rollout.n=2"])
    assert str(raised.value).splitlines() == [
        "config error at rollout.nn: Key 'nn' not in 'RolloutConfig' (did you mean 'n'?)",
        "config error at trainer.total_stepz: Key 'total_stepz' not in 'TrainerConfig' (did you mean 'total_steps'?)",
        "config error at validation.everyy: Key 'everyy' not in 'ValidationConfig' (did you mean 'every'?)",
        "config error at reward: unknown reward 'answer_mach' (did you mean 'answer_match'?); valid: "
        + ", ".join(get_registry().names("reward"))
        + "; no installed distribution declares it (`agentr1-core plugins` lists what is installed)",
    ]
