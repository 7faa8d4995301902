"""Distributed backends: Ray rollout workers, the ``ray`` / ``verl`` trainers and the ``vllm`` engine.

The package itself imports nothing: ``ray``, ``vllm`` and ``verl`` are imported by the modules that need them, and
only when a run selects one of these components.
"""
