"""pass@k and mean@K of an evaluation that tries every dataset row K times (``agentr1-core eval --attempts K``).

``pass_at_k(n, c, k)`` is the unbiased estimator of Chen et al. (2021, "Evaluating Large Language Models Trained on
Code"): the chance that at least one of ``k`` attempts drawn without replacement from a row's ``n`` attempts, ``c`` of
them successful, succeeds, ``1 - C(n-c, k) / C(n, k)``, computed as the product ``prod_{i=n-c+1}^{n} (1 - k/i)`` so
that no binomial coefficient is formed (they overflow floats from n of about 1,030). ``mean@K`` is the mean success
over all attempts. Success is what the rest of agentr1 calls success: ``Trajectory.success()``, a final reward of at
least 1.0 (``validation_metrics``'s ``success_rate``).

``attempt_metrics(trajs)`` groups episodes by their dataset row (``Trajectory.group_id``, which the rollout driver
sets per row), averages each estimate over the rows, overall and per ``data_source``; ``table(report)`` writes those
numbers as the text table ``eval`` prints. Nothing here runs a model.
"""

from __future__ import annotations

from typing import Any, Sequence

from agentr1_core.mdp import Trajectory


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one row tried ``n`` times with ``c`` successes (``0 <= c <= n``, ``1 <= k <= n``)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:  # every draw of k attempts holds a success
        return 1.0
    failing = 1.0
    for i in range(n - c + 1, n + 1):
        failing *= 1.0 - k / i
    return 1.0 - failing


def k_values(attempts: int) -> list[int]:
    """1, 2, 4, ... up to ``attempts``, and ``attempts`` itself."""
    ks, k = [], 1
    while k < attempts:
        ks.append(k)
        k *= 2
    return [*ks, attempts]


def _row_counts(trajs: Sequence[Trajectory]) -> dict[str, tuple[str, int, int]]:
    """``{row: (data_source, attempts, successes)}`` in the order rows first appear."""
    rows: dict[str, tuple[str, int, int]] = {}
    for t in trajs:
        key = t.group_id or t.uid
        source, n, c = rows.get(key, (t.data_source, 0, 0))
        rows[key] = (source, n + 1, c + int(t.success()))
    return rows


def _summary(counts: list[tuple[int, int]], ks: list[int], attempts: int) -> dict[str, Any]:
    out: dict[str, Any] = {"rows": len(counts)}
    for k in ks:
        usable = [(n, c) for n, c in counts if n >= k]
        out[f"pass@{k}"] = sum(pass_at_k(n, c, k) for n, c in usable) / len(usable) if usable else 0.0
    tried = sum(n for n, _ in counts)
    out[f"mean@{attempts}"] = sum(c for _, c in counts) / tried if tried else 0.0
    return out


def attempt_metrics(trajs: Sequence[Trajectory], attempts: int) -> dict[str, Any]:
    """``rows``, ``pass@k`` for every k of ``k_values(attempts)`` (the mean over the rows) and ``mean@<attempts>``
    (successes over attempts), overall and per ``data_source`` (``by_source``). A row tried fewer than k times is
    left out of pass@k."""
    ks = k_values(attempts)
    rows = _row_counts(trajs)
    by_source: dict[str, list[tuple[int, int]]] = {}
    for source, n, c in rows.values():
        by_source.setdefault(source, []).append((n, c))
    out = _summary([(n, c) for _, n, c in rows.values()], ks, attempts)
    out["by_source"] = {src: _summary(counts, ks, attempts) for src, counts in sorted(by_source.items())}
    return out


def table(report: dict[str, Any], attempts: int) -> str:
    """The text table of ``report`` (``attempt_metrics`` merged into an eval report): one line per data source,
    then ``all``; columns rows, pass@k for each k, mean@K."""
    columns = [f"pass@{k}" for k in k_values(attempts)] + [f"mean@{attempts}"]
    lines = [("data source", "rows", *columns)]
    for source, values in sorted((report.get("by_source") or {}).items()):
        lines.append((source, str(values["rows"]), *(f"{values[c]:.3f}" for c in columns)))
    lines.append(("all", str(report["rows"]), *(f"{report[c]:.3f}" for c in columns)))
    width = max(len(line[0]) for line in lines)
    return "\n".join(f"{line[0]:<{width}}  {line[1]:>5}" + "".join(f"  {v:>7}" for v in line[2:])
                     for line in lines)
