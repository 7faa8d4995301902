"""The ``ray`` backend: Ray rollout workers (``worker``, ``pool``), cluster settings, weight snapshots and the backend
itself (``ray_trainer``). verl is in ``agentr1_core.verl``, the vLLM engine in ``agentr1_core.rollout``.

The package itself imports nothing: ``ray`` is imported by the modules that need it, and only when a run selects it.
"""
