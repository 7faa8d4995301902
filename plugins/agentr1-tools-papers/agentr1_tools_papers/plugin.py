"""Registers the paper tools, the ``paper_search`` env, the ``scholar_queries`` dataset, the paper rewards, the
``papers`` CLI command and the recipe configs.

Every factory is a lazy ``"module:attr"`` string: listing plugins imports neither bm25s nor a model. ``row_fields``
says what each component reads from every dataset row (checked on every row before a run).
"""

from __future__ import annotations

from agentr1_core.hookspecs import hookimpl
from agentr1_core.named_configs import package_configs
from agentr1_core.specs import CommandSpec, DatasetSpec, EnvSpec, RewardSpec, ToolSpec

PKG = "agentr1_tools_papers"


@hookimpl
def agentr1_tools():
    return [
        ToolSpec("paper_search", f"{PKG}.tools:PaperSearchTool",
                 "Search papers by keywords (offline BM25 index or a Semantic-Scholar-style API)"),
        ToolSpec("paper_expand", f"{PKG}.tools:PaperExpandTool", "Papers citing a paper, or cited by it"),
    ]


@hookimpl
def agentr1_envs():
    return [EnvSpec("paper_search", f"{PKG}.env:PaperSearchEnv",
                    "Find the papers for a research query: search, expand citations, select",
                    row_fields=("extra_info.query|prompt",))]


@hookimpl
def agentr1_datasets():
    return [DatasetSpec("scholar_queries", f"{PKG}.data:load_scholar_queries",
                        "AutoScholarQuery / RealScholarQuery / LitSearch (ScholarGym or PaSa format; shipped sample)",
                        row_fields=("prompt", "reward_model.ground_truth", "extra_info.query"))]


@hookimpl
def agentr1_rewards():
    return [
        RewardSpec("paper_recall", f"{PKG}.rewards:PaperRecall",
                   "Found gold papers per step and the selection's F1 (verifiable)",
                   row_fields=("reward_model.ground_truth",)),
        RewardSpec("paper_selector", f"{PKG}.selector:PaperSelector",
                   "An LLM judge scores each newly found paper (top-3 sum, threshold, action cost)",
                   row_fields=("reward_model.ground_truth", "extra_info.query")),
    ]


@hookimpl
def agentr1_cli_commands():
    return [CommandSpec("papers", f"{PKG}.cli:register", "Paper indexes, a paper service, recipe data",
                        help="papers: index | serve | query | prepare")]


@hookimpl
def agentr1_configs():
    return package_configs(PKG)  # every agentr1_tools_papers/configs/*.yaml, e.g. agentr1-core run papersearch-cpu
