"""Index helpers shared by the advantage estimators: trajectory layout, per-segment statistics, whitening.

A ``StepBatch`` stores steps as rows in any order. ``TrajLayout`` maps every row to (trajectory, position in the
trajectory) so estimators can work on a dense ``[num_traj, max_len]`` grid and map results back to rows.
Segment statistics (mean / std / count per group) use ``index_add_`` so they are exact and loop-free.

Nothing here knows about any particular algorithm, and nothing here touches per-token tensors except
``broadcast_to_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

STAT_DTYPE = torch.float64  # all estimator arithmetic happens in float64; results are cast back at the end


def check_choice(name: str, value: str, valid: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``valid``; otherwise raise a ValueError listing the valid values."""
    if value not in valid:
        raise ValueError(f"{name}={value!r} is not valid; choose one of: {', '.join(valid)}")
    return value


def finite_or_zero(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``x`` in float64 with NaN/inf replaced by 0, and how many entries were replaced."""
    x = x.to(STAT_DTYPE)
    ok = torch.isfinite(x)
    return torch.where(ok, x, torch.zeros_like(x)), int((~ok).sum().item())


@dataclass
class TrajLayout:
    """Row → (trajectory, position) map of a StepBatch.

    ``traj`` [S]: trajectory index in ``0..num_traj-1``; ``pos`` [S]: rank of the row inside its trajectory by
    ``step_index`` (0-based, gap-free even if ``step_index`` has gaps); ``group`` [S]: group index in
    ``0..num_groups-1``; ``traj_group`` [num_traj]: the group of each trajectory (taken from its first step).
    """

    traj: torch.Tensor
    pos: torch.Tensor
    group: torch.Tensor
    traj_group: torch.Tensor
    num_traj: int
    num_groups: int
    max_len: int

    def to_grid(self, x: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
        """Per-row values ``[S]`` → dense ``[num_traj, max_len]`` grid (``fill`` where a trajectory has no step)."""
        grid = torch.full((self.num_traj, self.max_len), fill, dtype=x.dtype, device=x.device)
        grid[self.traj, self.pos] = x
        return grid

    def from_grid(self, grid: torch.Tensor) -> torch.Tensor:
        """Dense grid → per-row values ``[S]``."""
        return grid[self.traj, self.pos]


def traj_layout(traj_ids: torch.Tensor, group_ids: torch.Tensor, step_index: torch.Tensor) -> TrajLayout:
    device = traj_ids.device
    n = int(traj_ids.shape[0])
    if n == 0:
        empty = torch.zeros(0, dtype=torch.long, device=device)
        return TrajLayout(empty, empty, empty, empty, 0, 0, 0)
    _, traj = torch.unique(traj_ids, return_inverse=True)
    _, group = torch.unique(group_ids, return_inverse=True)
    num_traj = int(traj.max().item()) + 1
    # Order rows by (trajectory, step_index) with two stable sorts, then rank inside each trajectory.
    order = torch.argsort(step_index, stable=True)
    order = order[torch.argsort(traj[order], stable=True)]
    counts = torch.bincount(traj, minlength=num_traj)
    starts = torch.cumsum(counts, 0) - counts
    pos = torch.empty_like(traj)
    pos[order] = torch.arange(n, device=device) - starts[traj[order]]
    traj_group = torch.zeros(num_traj, dtype=torch.long, device=device)
    first = pos == 0
    traj_group[traj[first]] = group[first]
    return TrajLayout(traj, pos, group, traj_group, num_traj, int(group.max().item()) + 1, int(counts.max().item()))


def segment_stats(x: torch.Tensor, seg: torch.Tensor, num_segs: int,
                  weight: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean, unbiased std and (weighted) count of ``x`` per segment.

    ``weight`` (default 1) lets an entry count several times (e.g. once per action token). Segments whose count
    is <= 1 get std 0; empty segments get mean 0.
    """
    x = x.to(STAT_DTYPE)
    w = torch.ones_like(x) if weight is None else weight.to(STAT_DTYPE)
    count = torch.zeros(num_segs, dtype=STAT_DTYPE, device=x.device).index_add_(0, seg, w)
    total = torch.zeros_like(count).index_add_(0, seg, w * x)
    mean = total / count.clamp(min=1.0)
    sq = torch.zeros_like(count).index_add_(0, seg, w * (x - mean[seg]) ** 2)
    var = torch.where(count > 1, sq / (count - 1).clamp(min=1.0), torch.zeros_like(sq))
    return mean, var.sqrt(), count


def group_normalize(x: torch.Tensor, seg: torch.Tensor, num_segs: int, norm_by_std: bool,
                    eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x - mean_seg) / (std_seg + eps)`` (or just ``x - mean_seg``); entries alone in their segment get 0.

    Returns the normalised values and a bool mask of the entries that were alone (degenerate)."""
    mean, std, count = segment_stats(x, seg, num_segs)
    centered = x.to(STAT_DTYPE) - mean[seg]
    out = centered / (std[seg] + eps) if norm_by_std else centered
    alone = count[seg] <= 1
    return torch.where(alone, torch.zeros_like(out), out), alone


def whiten(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Whiten ``x`` [S] with per-entry ``weight`` (e.g. tokens per step): ``(x - mean) / sqrt(var + eps)``.

    Mean and unbiased variance are over the weighted entries; with total weight <= 1 the variance is 0 and the
    result is ``(x - mean) / sqrt(eps)`` (0 for a single entry). Entries with weight 0 (e.g. steps without action
    tokens) get 0."""
    seg = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
    mean, std, _ = segment_stats(x, seg, 1, weight)
    out = (x.to(STAT_DTYPE) - mean[0]) * torch.rsqrt(std[0] ** 2 + eps)
    return torch.where(weight > 0, out, torch.zeros_like(out))


def discounted_return_to_go(rewards: torch.Tensor, dones: torch.Tensor, layout: TrajLayout,
                            gamma: float) -> torch.Tensor:
    """``G_t = r_t + gamma * G_{t+1}`` along each trajectory; a ``dones`` step does not look past itself."""
    r = layout.to_grid(rewards.to(STAT_DTYPE))
    cont = layout.to_grid((~dones.bool()).to(STAT_DTYPE))
    out = torch.zeros_like(r)
    nxt = torch.zeros(layout.num_traj, dtype=STAT_DTYPE, device=r.device)
    for t in range(layout.max_len - 1, -1, -1):
        nxt = r[:, t] + gamma * cont[:, t] * nxt
        out[:, t] = nxt
    return layout.from_grid(out)


def tokens_per_step(action_mask: torch.Tensor) -> torch.Tensor:
    """Number of real action tokens of each step, ``[S]`` float64."""
    return (action_mask > 0).sum(-1).to(STAT_DTYPE)


def broadcast_to_tokens(per_step: torch.Tensor, action_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Per-step values ``[S]`` → ``[S, T]``: the step's value on its action tokens, 0 elsewhere."""
    valid = action_mask > 0
    return torch.where(valid, per_step.to(dtype).unsqueeze(-1), torch.zeros((), dtype=dtype, device=valid.device))


def output_dtype(old_logprobs: torch.Tensor) -> torch.dtype:
    """Advantages are float32, or float64 when the log-probs already are."""
    if old_logprobs.dtype == torch.float64:
        return torch.float64
    return torch.float32
