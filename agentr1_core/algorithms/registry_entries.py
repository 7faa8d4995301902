"""Built-in algorithms as plain data for the plugin layer: ``(name, "module:Class", description, needs_critic)``.

This module imports nothing heavy; the plugin layer turns each tuple into a spec and imports the class lazily.
"""

from __future__ import annotations

_MOD = "agentr1_core.algorithms.components"

ALGORITHMS: list[tuple[str, str, str, bool]] = [
    ("grpo", f"{_MOD}:GRPO", "Group-normalised trajectory return (GRPO), PPO-clip loss.", False),
    ("drgrpo", f"{_MOD}:DrGRPO", "GRPO without std normalisation and with seq-mean-token-sum loss (Dr.GRPO).",
     False),
    ("rloo", f"{_MOD}:RLOO", "Leave-one-out group baseline on the trajectory return (RLOO), PPO-clip loss.", False),
    ("reinforce", f"{_MOD}:Reinforce", "Discounted step return-to-go with optional baseline, -A*logp loss.", False),
    ("reinforce_pp", f"{_MOD}:ReinforcePP", "REINFORCE++: return-to-go whitened over the batch, PPO-clip loss.",
     False),
    ("ppo", f"{_MOD}:PPO", "Step-level GAE with a per-step critic, token-level PPO-clip loss.", True),
    ("steppo", f"{_MOD}:StepPO", "Step-level GAE with a per-step critic, per-step GSPO (sequence-ratio) loss.", True),
    ("gigpo", f"{_MOD}:GiGPO", "GRPO trajectory advantage plus anchor-state step-group advantage (GiGPO).", False),
    ("remax", f"{_MOD}:ReMax",
     "Return minus the return of one greedy episode on the same prompt (ReMax), PPO-clip loss.", False),
]
