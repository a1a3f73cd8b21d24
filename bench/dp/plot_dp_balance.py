#!/usr/bin/env python3
"""Plots dp_balance_bench's per-engine load over time: one panel per policy, a line per engine.

Usage: python3 bench/dp/plot_dp_balance.py TRACE.csv [OUT.png]

TRACE.csv comes from `build/release/bin/dp_balance_bench --trace-csv TRACE.csv` (columns
time_s, policy, engine, waiting, running); each line is an engine's waiting + running requests.
OUT.png defaults to docs/img/dp_balance.png. Needs matplotlib (`pip install matplotlib`).
"""

import csv
import sys
from collections import defaultdict


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    src = argv[1]
    out = argv[2] if len(argv) > 2 else "docs/img/dp_balance.png"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "plot_dp_balance.py needs matplotlib: pip install matplotlib\n"
            "(or in a throw-away venv: python3 -m venv /tmp/plotvenv && "
            "/tmp/plotvenv/bin/pip install matplotlib, then run this script with "
            "/tmp/plotvenv/bin/python)",
            file=sys.stderr,
        )
        return 1

    # policy -> engine -> ([time], [waiting + running]); policies in the file's order.
    series = {}
    with open(src, newline="") as f:
        for row in csv.DictReader(f):
            by_engine = series.setdefault(row["policy"], defaultdict(lambda: ([], [])))
            t, load = by_engine[int(row["engine"])]
            t.append(float(row["time_s"]))
            load.append(int(row["waiting"]) + int(row["running"]))
    if not series:
        print(f"plot_dp_balance.py: no rows in {src}", file=sys.stderr)
        return 1

    fig, axes = plt.subplots(
        len(series), 1, figsize=(10, 2.2 * len(series)), sharex=True, sharey=True, squeeze=False
    )
    for ax, (policy, by_engine) in zip(axes[:, 0], series.items()):
        for engine in sorted(by_engine):
            t, load = by_engine[engine]
            ax.plot(t, load, linewidth=0.8, label=f"engine {engine}")
        ax.set_title(policy, fontsize=10, loc="left")
        ax.set_ylabel("waiting + running")
        ax.grid(True, linewidth=0.3)
    axes[0, 0].legend(loc="upper left", fontsize=8, ncol=len(next(iter(series.values()))))
    axes[-1, 0].set_xlabel("simulated time (s)")
    fig.suptitle("dp_balance_bench: per-engine load (requests) over time", fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
