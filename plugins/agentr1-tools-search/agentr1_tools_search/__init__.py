"""agentr1-tools-search: a ``search`` tool over a local corpus (BM25 by default, dense optional), the multi-hop QA
datasets (HotpotQA, MuSiQue, 2Wiki, NQ-open, Bamboogle, plain JSONL), EM/F1 rewards and the ``search_qa`` env.

Importing this package imports nothing heavy; components are registered in ``agentr1_tools_search.plugin``.
"""

__version__ = "0.1.0"
