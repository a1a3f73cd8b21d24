#!/usr/bin/env python3
"""Plots bench/pd/pd_bench.sh's summary.json: output tok/s per core, ITL p50/p99 and TTFT
p50/p99 per configuration (P/D, colocated) and concurrency; bars are the rounds' median,
dots each round.

    python3 bench/pd/plot_pd.py /tmp/pd_bench/summary.json docs/img/pd_bench.png

Needs matplotlib (`pip install --target /tmp/pyd matplotlib`, then PYTHONPATH=/tmp/pyd;
never installed by CI).
"""
import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"pd": "tab:blue", "colocated": "tab:orange"}
LABELS = {"pd": "P/D (1 prefill + 1 decode)", "colocated": "colocated (2 × plain, round_robin)"}


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        rows = json.load(f)["rows"]
    concs = sorted({r["conc"] for r in rows})
    by = {(r["config"], r["conc"]): r["runs"] for r in rows}
    panels = [("output tok/s per core (2 cores)", [("output_throughput", 0.5, "")], False),
              ("ITL ms (log): p99 solid, p50 hatched", [("p99_itl_ms", 1, ""), ("p50_itl_ms", 1, "//")], True),
              ("TTFT ms: p99 solid, p50 hatched", [("p99_ttft_ms", 1, ""), ("p50_ttft_ms", 1, "//")], False)]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    for ax, (title, metrics, log) in zip(axes, panels):
        width = 0.8 / (2 * len(metrics))
        j = 0
        for cfg in ("pd", "colocated"):
            for key, scale, hatch in metrics:
                xs, ys = [], []
                for i, c in enumerate(concs):
                    runs = by.get((cfg, c), [])
                    if not runs:
                        continue
                    x = i + (j - (2 * len(metrics) - 1) / 2) * width
                    vals = [r[key] * scale for r in runs]
                    xs.append(x)
                    ys.append(statistics.median(vals))
                    ax.scatter([x] * len(vals), vals, color="black", s=8, zorder=3)
                bars = ax.bar(xs, ys, width, color=COLORS[cfg], hatch=hatch, alpha=0.85 if not hatch else 0.5,
                              label=LABELS[cfg] if key == metrics[0][0] else None, edgecolor="black", linewidth=0.4)
                ax.bar_label(bars, labels=[f"{y:.0f}" if y >= 20 else f"{y:.1f}" for y in ys], fontsize=7)
                j += 1
        ax.set_xticks(range(len(concs)), [f"c={c}" for c in concs])
        ax.set_title(title, fontsize=10)
        if log:
            ax.set_yscale("log")
    axes[0].set_ylim(0, axes[0].get_ylim()[1] * 1.3)  # room for the legend
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle("Bundled model, 896-token prompts, 128 output tokens; two network namespaces, one core each",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main()
