"""The core's built-in components, registered through the public hooks exactly like a third-party plugin.

Every factory is a lazy string: importing this module imports nothing heavy. ``row_fields`` says what a component
reads from every dataset row (checked on every row before a run, ``agentr1_core.rows``).
"""

from __future__ import annotations

from agentr1_core.hookspecs import hookimpl
from agentr1_core.named_configs import package_configs
from agentr1_core.specs import (
    AgentFlowSpec, AlgorithmSpec, CommandSpec, DatasetSpec, EngineSpec, EnvSpec, RewardSpec, ToolFormatSpec,
    ToolSpec, TrainerSpec,
)


@hookimpl
def agentr1_tools():
    return [ToolSpec("calculator", "agentr1_core.builtin.calculator:CalculatorTool", "Safe arithmetic evaluator")]


@hookimpl
def agentr1_tool_formats():
    return [ToolFormatSpec("hermes", "agentr1_core.tool_formats:HermesFormat",
                           "<tool_call>{json}</tool_call> (Qwen/Hermes/SmolLM2 style)")]


@hookimpl
def agentr1_envs():
    return [EnvSpec("tool_env", "agentr1_core.envs:ToolEnv", "Multi-turn tool calling with any registered tools",
                    row_fields=("prompt",))]


@hookimpl
def agentr1_agent_flows():
    return [AgentFlowSpec("agent_env_loop", "agentr1_core.flows:AgentEnvLoop",
                          "Generic loop over an env's reset()/step()")]


@hookimpl
def agentr1_rewards():
    return [
        RewardSpec("answer_match", "agentr1_core.builtin.rewards:AnswerMatch",
                   "1 if the final answer equals the row's ground truth (numbers compared numerically)",
                   row_fields=("reward_model.ground_truth|answer",)),
    ]


@hookimpl
def agentr1_algorithms():
    from agentr1_core.algorithms.registry_entries import ALGORITHMS

    return [AlgorithmSpec(name, factory, description, needs_critic=critic)
            for name, factory, description, critic in ALGORITHMS]


@hookimpl
def agentr1_rollout_engines():
    return [EngineSpec("transformers", "agentr1_core.rollout.transformers_engine:TransformersEngine",
                       "In-process Hugging Face transformers engine with continuous batching"),
            EngineSpec("vllm", "agentr1_core.rollout.vllm_engine:VLLMEngine",
                       "vLLM async engine: token ids in, ids + log-probs out (extra: agentr1-core[vllm])")]


@hookimpl
def agentr1_trainers():
    return [TrainerSpec("local", "agentr1_core.trainers.local:LocalTrainer",
                        "One process, CPU or one GPU"),
            TrainerSpec("ray", "agentr1_core.distributed.ray_trainer:RayTrainer",
                        "Local trainer logic with rollouts on Ray rollout-worker actors (extra: agentr1-core[ray])"),
            TrainerSpec("verl", "agentr1_core.verl.trainer:VerlTrainer",
                        "verl FSDP actor update + Ray rollout workers (extra: agentr1-core[verl], GPU)")]


@hookimpl
def agentr1_datasets():
    return [
        DatasetSpec("jsonl", "agentr1_core.builtin.datasets:load_jsonl", "Rows from a JSONL file",
                    row_fields=("prompt",)),
        DatasetSpec("arithmetic", "agentr1_core.builtin.datasets:arithmetic_rows",
                    "Generated arithmetic word problems for the calculator task",
                    row_fields=("prompt", "reward_model.ground_truth")),
        DatasetSpec("gsm8k", "agentr1_core.builtin.gsm8k:gsm8k_rows",
                    "GSM8K word problems with calculator-call expert replays (shipped sample or a JSONL file)",
                    row_fields=("prompt", "reward_model.ground_truth")),
        DatasetSpec("hf", "agentr1_core.builtin.hf_rows:load_hf_rows",
                    "Rows from a Hugging Face datasets dataset (saved folder, data files or Hub name) through a field "
                    "mapping (extra: agentr1-core[datasets])", row_fields=("prompt",)),
    ]


@hookimpl
def agentr1_cli_commands():
    return [
        CommandSpec("new-plugin", "agentr1_core.scaffold:register", "Write a new plugin package",
                    help="write a complete third-party plugin package"),
        CommandSpec("plot", "agentr1_core.lifecycle.plot:register", "PNG curves of a run's metrics",
                    help="plot reward, success, loss and throughput of a run"),
        CommandSpec("export", "agentr1_core.lifecycle.export:register", "Export a plain Hugging Face model folder",
                    help="write the latest checkpoint as a plain HF model folder (LoRA merged)"),
        CommandSpec("eval", "agentr1_core.evaluate:register", "Validation only, per data source",
                    help="evaluate a checkpoint on the validation data per data source, to JSON"),
        CommandSpec("view", "agentr1_core.lifecycle.view_page:register", "A run or eval report as one HTML page",
                    help="write a self-contained HTML page of a run: config, curves, stages, tasks, episodes"),
        CommandSpec("gsm8k", "agentr1_core.builtin.gsm8k:register", "GSM8K data for the gsm8k recipe",
                    help="prepare: read GSM8K's train/test JSONL and write the recipe's rows"),
    ]


@hookimpl
def agentr1_configs():
    return package_configs("agentr1_core")  # agentr1_core/configs/*.yaml: default, tiny, gsm8k, gsm8k-cpu
