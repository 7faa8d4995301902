"""The models around the policy in the local trainer: the KL reference, the critic, and the next-state values.

* Reference (``reference_mode``, ``frozen_copy``, ``load_reference``): the KL term pulls towards the policy as it was
  when RL started (after any SFT stage), unless ``trainer.ref_model`` names another model. A LoRA policy whose
  adapters have not been trained yet uses its base weights (adapters disabled) and needs no copy.
* Critic (``build_separate_critic``): ``critic.model`` names a separate value model (a causal LM trunk plus a linear
  head, its own AdamW). Without it, the critic is a linear head on the policy trunk (built by the trainer).
* Bootstrapping (``bootstrap_values``): an episode that was cut (``max_turns``, context limit, an env fault) rather
  than finished is not a terminal state; its last step's next value is the critic's value of the next observation
  (after the row's privileged prefix, when ``critic.prefix`` gives one: the critic reads every state through it).
  ``bootstrap_states`` picks those states for any backend; the verl trainer reads them with verl's critic.

Nothing here runs an optimizer step.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

import torch

from agentr1_core.config import ConfigError
from agentr1_core.trainers.batching import StepRow
from agentr1_core.trainers.optimizer_steps import make_optimizer
from agentr1_core.trainers.update import Critic, Policy, state_values

RECOMPUTE_MODES = ("auto", "true", "false")


def reference_mode(ref_model: Any, needs_reference: bool) -> str | None:
    """``None`` (no reference), ``"policy"`` (the policy at the start of RL) or a model path, from
    ``trainer.ref_model`` (false/true/a path) and whether the algorithm has a KL term."""
    if isinstance(ref_model, str) and ref_model.strip().lower() not in ("", "false", "true", "none", "null"):
        return ref_model
    if isinstance(ref_model, str):
        ref_model = ref_model.strip().lower() == "true"
    return "policy" if bool(ref_model) or needs_reference else None


def shared_frozen_copy(model: Any) -> Any:
    """A copy of ``model`` that shares its frozen parameters (``requires_grad=False``: the very same tensors) and
    copies the trained ones: with ``trainer.train_layers`` only the top blocks take new memory."""
    memo = {id(p): p for p in model.parameters() if not p.requires_grad}
    return copy.deepcopy(model, memo)


def frozen_copy(model: Any) -> Any:
    """A copy of ``model`` in eval mode with no parameter requiring gradients; the parameters the policy does not
    train are shared with it, not copied (they never change)."""
    ref = shared_frozen_copy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def own_parameters(copy_: Any, original: Any) -> list[Any]:
    """The parameters of ``copy_`` that are not ``original``'s own tensors (what the copy adds in memory)."""
    shared = {id(p) for p in original.parameters()}
    return [p for p in copy_.parameters() if id(p) not in shared]


def same_vocabulary(tokenizer: Any, other: Any) -> bool:
    return len(tokenizer) == len(other) and tokenizer.get_vocab() == other.get_vocab()


def load_reference(path: str, tokenizer: Any, dtype: str, device: str) -> Any:
    """A frozen model from ``path`` (``trainer.ref_model``) that must share the policy's tokenizer."""
    from agentr1_core.models import load_model_and_tokenizer

    model, ref_tok = load_model_and_tokenizer(path, dtype=dtype, device=device)
    if not same_vocabulary(tokenizer, ref_tok):
        raise ConfigError(f"trainer.ref_model {path!r} has a different tokenizer than the policy; the reference "
                         "must score the policy's token ids")
    return frozen_copy(model)


def build_separate_critic(path: str, tokenizer: Any, dtype: str, device: str, lr: float,
                          betas: Sequence[float], max_grad_norm: float, kernel: str = "auto") -> Critic:
    """A separate critic: the causal LM at ``path`` (same tokenizer as the policy) plus a zero-initialised value
    head, trained by its own AdamW (with the ``kernel`` of ``trainer.optimizer_kernel``)."""
    from agentr1_core.models import load_model_and_tokenizer

    model, critic_tok = load_model_and_tokenizer(path, dtype=dtype, device=device)
    if not same_vocabulary(tokenizer, critic_tok):
        raise ConfigError(f"critic.model {path!r} has a different tokenizer than the policy; the critic must read "
                         "the policy's token ids")
    head = zero_value_head(model.config.hidden_size, device)
    params = [p for p in model.parameters() if p.requires_grad] + list(head.parameters())
    optimizer = make_optimizer([{"params": params, "lr": lr}], lr=lr, betas=betas, device=device, kernel=kernel)
    return Critic(model=model.eval(), head=head, optimizer=optimizer, params=params, max_grad_norm=max_grad_norm)


def zero_value_head(hidden_size: int, device: Any) -> torch.nn.Linear:
    head = torch.nn.Linear(hidden_size, 1).to(device)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    return head


def recompute_old_logprobs(mode: Any, several_steps: bool, engine: Any, engine_model: Any,
                           needs_proximal: bool = False) -> bool:
    """Whether to replace the engine's sampling log-probs by the trainer's before the update.

    ``auto``: yes when one rollout feeds several optimizer steps, when the off-policy correction needs the proximal
    policy (``needs_proximal``), or when the engine does not run the trainer's own module in the trainer's dtype
    (vLLM, a server, a copy, another precision): then the engine's log-probs are not the trainer's and the PPO/GSPO
    ratio would measure the engine mismatch instead of the update."""
    mode = check_recompute_mode(mode)
    if mode != "auto":
        return mode == "true"
    return several_steps or needs_proximal or not engine_runs_module(engine, engine_model)


def check_recompute_mode(mode: Any) -> str:
    """``trainer.recompute_old_logprobs`` normalised to auto/true/false, or a one-line ``ConfigError``."""
    text = str(mode).strip().lower()
    if text not in RECOMPUTE_MODES:
        raise ConfigError(f"trainer.recompute_old_logprobs must be one of auto, true, false; got {mode!r}")
    return text


def engine_runs_module(engine: Any, module: Any) -> bool:
    """True when ``engine`` generates with ``module`` itself (same object, so same weights and dtype)."""
    own = getattr(engine, "model", None)
    if own is not module:
        return False
    dtype = getattr(engine, "dtype", None)
    first = next(module.parameters(), None)
    return dtype is None or first is None or dtype == first.dtype


def bootstrap_states(trajectories: Sequence[Any], rows: Sequence[StepRow], values: torch.Tensor, tokenizer: Any,
                     max_tokens: int = 0) -> tuple[torch.Tensor, list[list[int]], list[int]]:
    """What bootstrapping needs, for any backend's critic. For the last row of every trajectory that did not end
    ``done``: the critic's input for the step's ``next_observation`` (rendered as the flow renders prompts; the
    row's ``critic_prefix_ids`` first, as for every value the critic reads). Returns ``[S]`` values holding the
    fallback (0 after a terminal step; the step's own value where no next state can be read, an env fault or an
    observation of ``max_tokens`` or more, so that the cut neither rewards nor blames the action), the next-state
    token ids to evaluate, and the row index each belongs to."""
    from agentr1_core.flows import render_prompt

    out = torch.zeros(len(rows))
    last: dict[int, int] = {}
    for i, r in enumerate(rows):
        if r.traj not in last or rows[last[r.traj]].step_index < r.step_index:
            last[r.traj] = i
    prompts, targets = [], []
    for t, i in last.items():
        if rows[i].done:
            continue
        out[i] = float(values[i])
        steps = trajectories[t].steps if t < len(trajectories) else []
        step = steps[rows[i].step_index] if rows[i].step_index < len(steps) else None
        obs = getattr(step, "next_observation", None)
        if obs is None:
            continue
        try:
            ids = render_prompt(tokenizer, obs)
        except Exception:  # an observation the tokenizer cannot render: keep the fallback
            continue
        if ids and rows[i].critic_prefix_ids:
            ids = list(rows[i].critic_prefix_ids) + list(ids)
        if ids and (max_tokens <= 0 or len(ids) < max_tokens):
            prompts.append(ids)
            targets.append(i)
    return out, prompts, targets


def bootstrap_values(policy: Policy, trajectories: Sequence[Any], rows: Sequence[StepRow],
                     values: torch.Tensor, tokenizer: Any, micro_batch_size: int) -> tuple[torch.Tensor, int]:
    """``[S]`` next-state values for the last row of every trajectory that did not end ``done`` (``bootstrap_states``),
    read by the local critic. Returns the values and how many came from a next observation."""
    limit = int(getattr(getattr(policy.model, "config", None), "max_position_embeddings", 0) or 0)
    out, prompts, targets = bootstrap_states(trajectories, rows, values, tokenizer, limit)
    if prompts:
        out[torch.tensor(targets, dtype=torch.long)] = state_values(policy, prompts, micro_batch_size)
    return out, len(prompts)
