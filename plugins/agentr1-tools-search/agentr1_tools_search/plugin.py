"""Registers the search tool, the ``search_qa`` env, the QA datasets and rewards, and the ``search`` CLI command.

Every factory is a lazy ``"module:attr"`` string: listing plugins does not import bm25s, numpy or faiss. ``row_fields``
says what each component reads from every dataset row (checked on every row before a run).
"""

from __future__ import annotations

from agentr1_core.hookspecs import hookimpl
from agentr1_core.named_configs import package_configs
from agentr1_core.specs import CommandSpec, DatasetSpec, EnvSpec, RewardSpec, ToolSpec

PKG = "agentr1_tools_search"
QA_ROW = ("prompt", "reward_model.ground_truth")  # what every QA loader's rows carry
GOLD = "reward_model.ground_truth|answer|answers"  # the gold answers the QA rewards read (rewards.gold_answers)


@hookimpl
def agentr1_tools():
    return [ToolSpec("search", f"{PKG}.tool:SearchTool", "Top-k passages from a local corpus (BM25 or dense)")]


@hookimpl
def agentr1_envs():
    return [EnvSpec("search_qa", f"{PKG}.env:SearchQAEnv",
                    "Question answering with search; context rebuilt per step (summary | window | append)",
                    row_fields=("extra_info.question|prompt",))]


@hookimpl
def agentr1_datasets():
    return [
        DatasetSpec("hotpotqa", f"{PKG}.datasets:load_hotpotqa", "HotpotQA (official format; shipped sample)",
                    row_fields=QA_ROW),
        DatasetSpec("musique", f"{PKG}.datasets:load_musique", "MuSiQue-Ans (official format)", row_fields=QA_ROW),
        DatasetSpec("2wiki", f"{PKG}.datasets:load_2wiki", "2WikiMultihopQA (official or question/answer format)",
                    row_fields=QA_ROW),
        DatasetSpec("nq", f"{PKG}.datasets:load_nq", "NQ-open question/answers", row_fields=QA_ROW),
        DatasetSpec("bamboogle", f"{PKG}.datasets:load_bamboogle", "Bamboogle (JSONL or CSV)", row_fields=QA_ROW),
        DatasetSpec("qa_jsonl", f"{PKG}.datasets:load_qa_jsonl", "Plain {question, answer(s)} JSONL",
                    row_fields=QA_ROW),
    ]


@hookimpl
def agentr1_rewards():
    return [
        RewardSpec("qa_em", f"{PKG}.rewards:QAExactMatch", "Exact match of <answer> (HotpotQA normalisation)",
                   row_fields=(GOLD,)),
        RewardSpec("qa_f1", f"{PKG}.rewards:QAF1", "Token F1 of <answer> (HotpotQA rules)", row_fields=(GOLD,)),
    ]


@hookimpl
def agentr1_cli_commands():
    return [CommandSpec("search", f"{PKG}.cli:register", "Build, serve and query search indexes",
                        help="search indexes: index | serve | query; prepare: the full HotpotQA data")]


@hookimpl
def agentr1_configs():
    return package_configs(PKG)  # every agentr1_tools_search/configs/*.yaml, e.g. agentr1-core run hotpotqa
