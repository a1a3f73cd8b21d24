#!/usr/bin/env python3
"""Helpers of bench/pd/pd_bench.sh (standard library only).

    pd_tool.py probe --mode pd --prefill URL --decode URL --out F.json   # KV transfer vs recompute
    pd_tool.py probe --mode plain --plain URL --out F.json
    pd_tool.py cpu PID...          # CPU seconds (user + system, all threads) of these processes
    pd_tool.py table DIR           # the markdown tables from DIR's results
"""
import argparse
import glob
import http.client
import json
import os
import random
import statistics
import sys
import time
import urllib.parse

MODEL = "kjv-llama-tiny"


class Conn:
    """One keep-alive connection to an OpenAI-API server."""

    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)

    def complete(self, body):
        data = json.dumps(body).encode()
        t = time.perf_counter()
        self.c.request("POST", "/v1/completions", data, {"Content-Type": "application/json"})
        r = self.c.getresponse()
        out = json.loads(r.read())
        dt = time.perf_counter() - t
        if r.status != 200:
            sys.exit(f"HTTP {r.status}: {out}")
        return out, dt


def probe(a):
    # One request at a time, max_tokens 1: the request's time is its TTFT (+ one HTTP hop).
    rows = []
    conns = {k: Conn(v) for k, v in (("prefill", a.prefill), ("decode", a.decode),
                                     ("plain", a.plain)) if v}
    for i in range(a.warmup + a.n):
        rng = random.Random(a.seed + i)
        prompt = [rng.randrange(10, 4000) for _ in range(a.len)]
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 1, "temperature": 0}
        row = {}
        if a.mode == "pd":
            kvp = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                   "remote_block_ids": None, "remote_host": None, "remote_port": None}
            out, row["prefill_s"] = conns["prefill"].complete(dict(body, kv_transfer_params=kvp))
            params = out.get("kv_transfer_params")
            if not params or not params.get("do_remote_prefill"):
                sys.exit(f"prefill answered no kv_transfer_params: {out}")
            # decode: loads the prompt's KV from the prefill instance, computes the last token
            _, row["load_s"] = conns["decode"].complete(dict(body, kv_transfer_params=params))
            # the same prompt again: now in the decode's own prefix cache
            _, row["dcached_s"] = conns["decode"].complete(body)
        else:
            _, row["recompute_s"] = conns["plain"].complete(body)
            _, row["cached_s"] = conns["plain"].complete(body)
        if i >= a.warmup:
            rows.append(row)
    with open(a.out, "w") as f:
        json.dump({"mode": a.mode, "len": a.len, "rows": rows}, f, indent=1)


def cpu(a):
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in a.pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    print(f"{total / tick:.2f}")


def client_cpu(m):
    try:
        return sum(float(x) for x in m.get("client", "").split())
    except ValueError:
        return 0.0


def core_frac(m, core, what):
    """Share of the run's time core `core` spent idle (idle + iowait) or in nice (others')."""
    def fields(stat):
        for line in stat.split(";"):
            parts = line.split()
            if parts and parts[0] == f"cpu{core}":
                return [int(x) for x in parts[1:9]]
        return [0] * 8
    a, b = fields(m["stat0"]), fields(m["stat1"])
    d = [y - x for x, y in zip(a, b)]
    total = sum(d) or 1
    return (d[3] + d[4]) / total if what == "idle" else d[1] / total


def fmt(xs, f="{:.0f}"):
    return " / ".join(f.format(x) for x in xs)


def table(a):
    runs = {}
    for path in glob.glob(os.path.join(a.dir, "bench_*.json")):
        cfg, c, r = os.path.basename(path)[6:-5].split("_")
        with open(path) as f:
            d = json.load(f)
        meta_path = path.replace("bench_", "meta_")
        meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
        runs[(cfg, int(c[1:]), int(r[1:]))] = (d, meta)
    concs = sorted({k[1] for k in runs})
    rounds = sorted({k[2] for k in runs})
    summary = {"rounds": rounds, "rows": []}
    print("| config | conc | out tok/s | tok/s per core | TTFT p50 ms | TTFT p99 ms | ITL p50 ms "
          "| ITL p99 ms | ITLs > 50 ms | core 0 (A): ours others, core 1 (B): ours others "
          "| failed |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    nices = []
    for c in concs:
        for cfg in ("pd", "colocated"):
            ds = [runs[(cfg, c, r)] for r in rounds if (cfg, c, r) in runs]
            if not ds:
                continue
            g = lambda k: [d[k] for d, _ in ds]
            # per core: ours (the namespace's servers, + the client on core 0), others' (the
            # rest of the busy time: other processes on this shared machine)
            def cores(m):
                a = (m["cpu_a"] + client_cpu(m)) / m["wall"]
                b = m["cpu_b"] / m["wall"]
                oa = max(0.0, 1 - core_frac(m, 0, "idle") - a)
                ob = max(0.0, 1 - core_frac(m, 1, "idle") - b)
                return f"{a:.0%} {oa:.0%}, {b:.0%} {ob:.0%}"
            busy = " / ".join(cores(m) for _, m in ds if m.get("stat0"))
            nices.extend(core_frac(m, k, "nice") for _, m in ds if m.get("stat0") for k in (0, 1))
            # the stalls behind p99: inter-token gaps over 50 ms (a prefill step on the instance)
            stalls = " / ".join(
                f"{sum(1 for r in d['itls'] for x in r if x > 0.05) / max(1, sum(len(r) for r in d['itls'])):.1%}"
                for d, _ in ds)
            print(f"| {'P/D' if cfg == 'pd' else 'colocated'} | {c} | {fmt(g('output_throughput'))} "
                  f"| {fmt([x / 2 for x in g('output_throughput')])} | {fmt(g('p50_ttft_ms'))} "
                  f"| {fmt(g('p99_ttft_ms'))} | {fmt(g('p50_itl_ms'), '{:.2f}')} "
                  f"| {fmt(g('p99_itl_ms'), '{:.1f}')} | {stalls} | {busy} | {sum(g('failed'))} |")
            summary["rows"].append({"config": cfg, "conc": c, "runs": [d for d, _ in ds],
                                    "meta": [m for _, m in ds]})
    print()
    if nices:
        print(f"Other processes' nice time (builds) during the runs: at most {max(nices):.0%} of a core.")
        print()
    print("| conc | round | ITL p99 P/D ÷ colocated | tok/s per core P/D ÷ colocated | goal (≤ 0.5× at ≥ 1.0×) |")
    print("|---:|---:|---:|---:|---|")
    for c in concs:
        for r in rounds:
            if ("pd", c, r) in runs and ("colocated", c, r) in runs:
                p, q = runs[("pd", c, r)][0], runs[("colocated", c, r)][0]
                itl = p["p99_itl_ms"] / q["p99_itl_ms"]
                tp = p["output_throughput"] / q["output_throughput"]
                ok = "met" if itl <= 0.5 and tp >= 1.0 else "not met"
                print(f"| {c} | {r} | {itl:.2f}× | {tp:.2f}× | {ok} |")
        med = lambda cfg, k: statistics.median(runs[(cfg, c, r)][0][k] for r in rounds
                                               if (cfg, c, r) in runs)
        if len(rounds) > 1 and any(("pd", c, r) in runs for r in rounds):
            itl = med("pd", "p99_itl_ms") / med("colocated", "p99_itl_ms")
            tp = med("pd", "output_throughput") / med("colocated", "output_throughput")
            ok = "met" if itl <= 0.5 and tp >= 1.0 else "not met"
            print(f"| {c} | median | {itl:.2f}× | {tp:.2f}× | {ok} |")
    print()
    probes = {}
    for path in sorted(glob.glob(os.path.join(a.dir, "probe_*.json"))):
        with open(path) as f:
            d = json.load(f)
        for row in d["rows"]:
            for k, v in row.items():
                probes.setdefault(k, []).append(v * 1000)
        probes["len"] = d["len"]
    if probes:
        n = probes.pop("len")
        print(f"| one request at a time, {n}-token prompt, max_tokens 1 | n | mean ms | p50 ms | min–max ms |")
        print("|---|---:|---:|---:|---:|")
        names = {"prefill_s": "P/D: prefill instance (node A) computes the prompt, keeps its KV",
                 "load_s": "P/D: decode instance (node B), given the prefill's kv_transfer_params: "
                           "loads the prompt's KV over the veth, computes 1 token",
                 "dcached_s": "P/D: the same prompt again to the decode instance (in its prefix "
                              "cache now: computes the last block)",
                 "recompute_s": "colocated: plain instance (node B) computes the prompt",
                 "cached_s": "colocated: the same prompt again (prefix-cached: computes the last block)"}
        for k in names:
            if k in probes:
                v = probes[k]
                print(f"| {names[k]} | {len(v)} | {statistics.mean(v):.1f} | {statistics.median(v):.1f} "
                      f"| {min(v):.1f}–{max(v):.1f} |")
        summary["probes"] = probes
    with open(os.path.join(a.dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("probe")
    p.add_argument("--mode", choices=("pd", "plain"), required=True)
    p.add_argument("--prefill")
    p.add_argument("--decode")
    p.add_argument("--plain")
    p.add_argument("--len", type=int, default=896)
    p.add_argument("--n", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--out", required=True)
    c = sub.add_parser("cpu")
    c.add_argument("pids", nargs="*")
    t = sub.add_parser("table")
    t.add_argument("dir")
    a = ap.parse_args()
    {"probe": probe, "cpu": cpu, "table": table}[a.cmd](a)


if __name__ == "__main__":
    main()
