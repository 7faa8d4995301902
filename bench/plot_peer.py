"""Draws ``docs/benchmarks.png`` from the peer benchmark results in ``bench/results/peer_*.json``.

One command: ``python bench/plot_peer.py``. Panels whose result file is missing are left out. Small on purpose
(one PNG, 100 dpi). ``--smoke`` draws the same figure into the smoke run's results folder.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common import RESULTS, ROOT, parse_args, results_dir


def load(folder: Path, name: str) -> dict | None:
    path = folder / f"peer_{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(RESULTS), help="folder of the peer_*.json files")
    parser.add_argument("--out", default=None, help="the PNG (default: docs/benchmarks.png)")
    args = parse_args(parser, smoke={})
    default = results_dir() / "benchmarks.png" if args.smoke else ROOT / "docs" / "benchmarks.png"
    out = Path(args.out) if args.out else default
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = {k: load(Path(args.results), k) for k in ("rollout", "scaling", "iteration", "update", "context")}
    panels = [k for k, v in data.items() if v]
    if not panels:
        sys.exit("no bench/results/peer_*.json yet")
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.0))
    axes = [axes] if len(panels) == 1 else list(axes)
    for ax, key in zip(axes, panels):
        d = data[key]
        if key == "rollout":
            rows = {k: v for k, v in d["results"].items() if "tokens_per_s" in v}
            ax.bar([k.replace("_", "\n") for k in rows], [v["tokens_per_s"] for v in rows.values()], color="tab:blue")
            ax.set_title("multi-turn rollout", fontsize=9)
            ax.set_ylabel("generated tok/s")
        elif key == "scaling":
            for label in sorted({k.split("@")[0] for k in d["results"]}):
                pts = sorted((v["concurrent_episodes"], v["tokens_per_s"]) for k, v in d["results"].items()
                             if k.startswith(label + "@"))
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("concurrent episodes")
            ax.set_ylabel("generated tok/s")
            ax.set_title("rollout scaling", fontsize=9)
            ax.legend(fontsize=7)
        elif key == "iteration":
            sides = d["sides"]
            xs = range(len(sides))
            ax.bar([x - 0.2 for x in xs], [v["median_iteration_s"] for v in sides.values()], width=0.4,
                   color="tab:orange", label="median")
            ax.bar([x + 0.2 for x in xs], [min(v["iteration_seconds"]) for v in sides.values()], width=0.4,
                   color="tab:olive", label="fastest")
            ax.set_xticks(list(xs), list(sides))
            ax.legend(fontsize=7)
            ax.set_ylabel("s per RL iteration")
            ax.set_title(f"GRPO iteration ({d['completions_per_iteration']}x{d['max_new_tokens']} tok)", fontsize=9)
        elif key == "update":
            ax.bar(["matmul peak", "update (6N)"], [d["matmul_peak_gflops"], d["achieved_gflops_6N"]],
                   color=["grey", "tab:green"])
            ax.set_ylabel("GFLOP/s (fp32)")
            ax.set_title(f"update: {100 * d['fraction_of_peak_6N']:.0f}% of peak", fontsize=9)
        elif key == "context":
            for w in sorted({r.get("window_size", 2) for r in d["rows"]}, reverse=True):
                rows = [r for r in d["rows"] if r.get("window_size", 2) == w]
                ax.plot([r["turns"] for r in rows], [r["window"]["prompt_tokens_per_episode"] for r in rows],
                        marker="o", label=f"window={w}")
            rows = [r for r in d["rows"] if r.get("window_size", 2) == d["rows"][0].get("window_size", 2)]
            ax.plot([r["turns"] for r in rows], [r["append"]["prompt_tokens_per_episode"] for r in rows],
                    marker="s", label="append (flattened)")
            ax.set_xlabel("turns")
            ax.set_ylabel("prompt tokens / episode")
            ax.set_title("context per episode", fontsize=9)
            ax.legend(fontsize=7)
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"wrote {out} ({out.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
