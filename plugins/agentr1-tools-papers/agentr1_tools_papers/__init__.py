"""agentr1-tools-papers: academic paper search for agentr1 (paper tools, the ``paper_search`` env, the
AutoScholarQuery / RealScholarQuery / LitSearch queries, paper rewards and the ``papersearch`` recipes)."""

__version__ = "0.1.0"
