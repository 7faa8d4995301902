"""Algorithms: advantage estimators and policy/value losses over step-level data (one agent turn = one step).

``base`` defines the data (``StepBatch``) and the ``Algorithm`` interface; ``components`` holds the registered
algorithms; ``registry_entries.ALGORITHMS`` lists them for the plugin layer. Importing this package imports only
``base``.
"""

from agentr1_core.algorithms.base import AdvantageOutput, Algorithm, LossOutput, StepBatch

__all__ = ["AdvantageOutput", "Algorithm", "LossOutput", "StepBatch"]
