"""Did the SFT warm start take? One check after the ``after_sft`` validation, said out loud when it did not.

A warm start that took leaves a model that reproduces its demonstrations: the SFT pass's mean negative
log-likelihood of the expert's response tokens (``sft_nll``, nats per token) is low. ``TOOK_NLL`` = 0.5 nats is a
geometric-mean probability of e^-0.5 = 0.61 for the expert's next token: above it, greedy decoding is likely to
leave a demonstrated action of a few dozen tokens early on. The figure is the mean over the whole pass, first
batches included, so it overstates where training ended: the tutorial's unit-conversion run shows 0.24 with 28 of
32 held-out questions solved after SFT, its number-guessing run 1.11 with 15 of 32. A high NLL alone is therefore no
verdict; with not one held-out task solved it is.

``advice`` speaks only when no held-out task was solved after SFT *and* the NLL is at or above ``TOOK_NLL``: then
more demonstrations, more passes or a higher learning rate are what help, and it names their config keys with the
values the run used. A low NLL with no success is another problem (demonstrations that do not generalise, a reward
that does not match them) that these knobs do not fix, so it says nothing then. It never stops the run.
"""

from __future__ import annotations

import math
from typing import Any

TOOK_NLL = 0.5  # nats per response token; see the module docstring


def advice(sft: dict[str, Any] | None, after_sft: dict[str, Any] | None, cfg: Any, train_rows: int) -> str | None:
    """The ``[sft]`` line that says the warm start did not take and what to try, or None when it took (or when
    there is nothing to judge: no SFT record, no validation, no NLL)."""
    if not sft or not after_sft:
        return None
    nll = sft.get("sft_nll")
    if not isinstance(nll, (int, float)) or not math.isfinite(nll) or nll < TOOK_NLL:
        return None
    if float(after_sft.get("success_rate", 0.0)) > 0.0:
        return None
    rows, epochs, lr = int(cfg.sft.rows), int(cfg.sft.epochs), float(cfg.sft.lr)
    used = min(rows, train_rows)
    more_rows = (f"more demonstrations (sft.rows: {rows}, of {train_rows} rows in data.train)" if rows < train_rows
                 else f"more demonstrations (all {used} rows of data.train are used: add rows, then raise sft.rows)")
    return (f"[sft] the warm start did not take: no held-out task solved after SFT "
            f"(0 of {after_sft.get('cases', '?')}) and the demonstrations' NLL is still {nll:.2f} nats per token "
            f"(one that took is below {TOOK_NLL}). Try {more_rows}, more passes over them (sft.epochs: {epochs}) or "
            f"a higher learning rate (sft.lr: {lr:g}).")
