#!/usr/bin/env python3
"""Plots bench/router/router_quality_bench.py's `--json` output: prefix-cache hit rate and TTFT
(p99, with p50 marked) per routing setup, one bar per run.

    python3 bench/router/plot_router_quality.py quality.json [--out docs/router_quality.png]

Needs matplotlib (a venv of your own: `python3 -m venv /tmp/rqvenv &&
/tmp/rqvenv/bin/pip install matplotlib`; never installed by CI).
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--out", default="docs/router_quality.png")
    args = ap.parse_args()
    with open(args.json) as f:
        data = json.load(f)
    rows = data["rows"]
    setups = list(dict.fromkeys(r["setup"] for r in rows))
    runs = sorted(set(r["run"] for r in rows))
    by = {(r["setup"], r["run"]): r for r in rows}
    width = 0.8 / len(runs)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for j, run in enumerate(runs):
        xs = [i + (j - (len(runs) - 1) / 2) * width for i in range(len(setups))]
        hit = [100 * by[(s, run)]["hit_rate"] if (s, run) in by else 0 for s in setups]
        p99 = [by[(s, run)]["ttft_p99_ms"] if (s, run) in by else 0 for s in setups]
        p50 = [by[(s, run)]["ttft_p50_ms"] if (s, run) in by else 0 for s in setups]
        bars = ax1.bar(xs, hit, width, label=f"run {run}")
        ax1.bar_label(bars, fmt="%.0f", fontsize=7)
        bars = ax2.bar(xs, p99, width, label=f"run {run} p99")
        ax2.bar_label(bars, fmt="%.0f", fontsize=7)
        ax2.scatter(xs, p50, marker="_", s=200, color="black",
                    label="p50" if j == 0 else None, zorder=3)
    for ax in (ax1, ax2):
        ax.set_xticks(range(len(setups)))
        ax.set_xticklabels([s.replace(" ", "\n", 1) for s in setups], fontsize=8)
        ax.legend(fontsize=8)
    ax1.set_ylabel("prefix-cache hit rate, % of prompt tokens")
    ax1.set_ylim(0, 100)
    ax2.set_ylabel("TTFT ms (bar: p99, dash: p50)")
    a = data["args"]
    fig.suptitle(f"Routing quality: {a['conversations']} conversations x {a['turns']} turns, "
                 f"{a['system_prompts']} system prompts, {a['concurrency']} in flight, 3 "
                 f"vllm-launch workers (CPU, --kv-cache-memory {a['kv_cache_memory']})",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
