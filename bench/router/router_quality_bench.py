#!/usr/bin/env python3
"""Routing quality: prefix-cache hit rate, TTFT and throughput of a multi-turn chat workload over
three real `vllm-launch` workers, per routing setup.

    python3 bench/router/router_quality_bench.py [--runs 1] [--kv-cache-memory 24MiB] \\
        [--json out.json] [--peer-venv /tmp/rvenv]

Workload (seeded, `--seed` 0): `--conversations` 32 conversations x `--turns` 8 turns over
`--system-prompts` 4 long system prompts (~`--system-words` 300 words each, conversation i uses
prompt i mod 4); every turn's request is the system prompt + all earlier user messages and the
model's own answers + a new user message (~`--user-words` 24 words), so prompts grow each turn.
`--concurrency` 8 turns are in flight at once: a free slot takes the next turn of a random
conversation (seeded) that has no turn in flight. Each request is a streaming
`/v1/chat/completions` with `max_tokens` 16, temperature 0; TTFT is send -> the first SSE chunk
with non-empty content, at the client.

For each setup the 3 workers (bundled model, CPU, `--port 0`, `--kv-cache-memory`, one BLAS
thread each) are started fresh, so caches start empty; then the router; the workload runs;
then each worker's /metrics gives `vllm:prefix_cache_hits_total` /
`vllm:prefix_cache_queries_total` (tokens; summed over the workers),
`vllm:generation_tokens_total` and `vllm:request_success_total` (per-worker request counts).
Setups: `vllm-launch router --policy` round_robin, power_of_two, cache_aware, kv_aware (only
when `vllm-launch router --help` lists it: workers then publish KV events over ZMQ
(`--kv-events-config`), the router gets `--kv-event-source URL=ENDPOINT` per worker and
`--model-path`), and sglang-router 0.3.2 `--policy cache_aware` from `--peer-venv` (never
installed by CI). Before the setups, one throwaway worker reports its KV capacity and the
token count of each system prompt, so the script can print the KV capacity of the 3 workers
beside the workload's distinct tokens. Prints a markdown table; `--json` keeps every figure
(for bench/router/plot_router_quality.py).
"""
import argparse
import http.client
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from router_bench import free_port, wait_http  # noqa: E402  (the same helpers)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "build", "release", "bin", "vllm-launch")
MODEL_DIR = os.path.join(ROOT, "models", "kjv-llama-tiny")
MODEL = "kjv-llama-tiny"

WORDS = ("and the of that he shall unto lord his in they him them not is for be with all thou "
         "thy was which my said god me their have israel king land people house son day man "
         "children hand came out up before earth also will upon when even against come should "
         "went great against heaven servant word father brethren city fire water bread mountain "
         "priest altar covenant judgment mercy spirit glory law prophet egypt jerusalem david "
         "moses david temple sheep field river wilderness gold silver offering wisdom "
         "truth").split()


def sentence(rng, n):
    w = [rng.choice(WORDS) for _ in range(n)]
    return " ".join(w).capitalize() + "."


def make_workload(args):
    rng = random.Random(args.seed)
    systems = [f"You are scribe number {i}. " +
               " ".join(sentence(rng, 12) for _ in range(args.system_words // 12))
               for i in range(args.system_prompts)]
    convs = []
    for c in range(args.conversations):
        convs.append({"system": systems[c % len(systems)],
                      "users": [f"Question {t} of conversation {c}: " +
                                sentence(rng, args.user_words) for t in range(args.turns)],
                      "answers": []})
    return convs, rng


# ---- processes ----------------------------------------------------------------------------

def start_worker(kv_mem, kv_events_port=None):
    cmd = [BIN, "--port", "0", "--kv-cache-memory", kv_mem]
    if kv_events_port:
        cmd += ["--kv-events-config", json.dumps({
            "enable_kv_cache_events": True, "publisher": "zmq",
            "endpoint": f"tcp://*:{kv_events_port}"})]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    line = p.stdout.readline()  # "vllm-launch: ready at http://127.0.0.1:PORT/v1"
    m = re.search(r":(\d+)/v1", line)
    if not m:
        p.kill()
        raise RuntimeError(f"worker did not start: {line!r}")
    return p, int(m.group(1))


def sizing(convs, args):
    """One throwaway worker: its KV capacity (blocks from its log line) and the prompt tokens of
    each system prompt alone (the prefix the conversations that use it share)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    p = subprocess.Popen([BIN, "--port", "0", "--kv-cache-memory", args.kv_cache_memory],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        blocks = port = None
        for line in p.stderr:
            m = re.search(r"serving .* at http://127.0.0.1:(\d+) \((\d+) KV-cache blocks", line)
            if m:
                port, blocks = int(m.group(1)), int(m.group(2))
                break
        if port is None or not wait_http(port, "/health"):
            raise RuntimeError("sizing worker did not start")
        system_tokens = {}
        for c in convs:
            if c["system"] in system_tokens:
                continue
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("POST", "/v1/chat/completions", json.dumps({
                "model": MODEL, "messages": [{"role": "system", "content": c["system"]}],
                "max_tokens": 1}), {"Content-Type": "application/json"})
            system_tokens[c["system"]] = json.loads(conn.getresponse().read())["usage"][
                "prompt_tokens"]
    finally:
        stop([p])
    return blocks, system_tokens


def router_help():
    return subprocess.run([BIN, "router", "--help"], capture_output=True, text=True).stdout


def setups(args):
    out = [("ours round_robin", "ours", "round_robin"),
           ("ours power_of_two", "ours", "power_of_two"),
           ("ours cache_aware", "ours", "cache_aware")]
    if "kv_aware" in router_help():
        out.append(("ours kv_aware", "ours", "kv_aware"))
    else:
        print("vllm-launch router --help lists no kv_aware: skipped", file=sys.stderr)
    py = os.path.join(args.peer_venv, "bin", "python")
    if os.path.exists(py):
        out.append(("sglang-router cache_aware", "sglang", "cache_aware"))
    else:
        print(f"no {py}: sglang-router skipped", file=sys.stderr)
    if args.only:
        out = [s for s in out if any(k in s[0] for k in args.only.split(","))]
    return out


def start_router(kind, policy, urls, kv_endpoints, args):
    port = free_port()
    if kind == "ours":
        cmd = [BIN, "router", "--worker-urls", *urls, "--host", "127.0.0.1", "--port", str(port),
               "--policy", policy]
        if policy == "kv_aware":
            for url, ep in zip(urls, kv_endpoints):
                cmd += ["--kv-event-source", f"{url}={ep}"]
            cmd += ["--model-path", MODEL_DIR]
    else:
        cmd = [os.path.join(args.peer_venv, "bin", "python"), "-m", "sglang_router.launch_router",
               "--worker-urls", *urls, "--host", "127.0.0.1", "--port", str(port), "--policy",
               policy, "--health-check-interval-secs", "5", "--health-check-timeout-secs", "5",
               "--health-failure-threshold", "3", "--retry-max-retries", "3",
               "--prometheus-port", str(free_port()), "--log-level", "warn"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not wait_http(port, "/health"):
        p.kill()
        raise RuntimeError(f"router {kind} {policy} not ready")
    return p, port


def stop(procs):
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def scrape(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


# ---- the workload -------------------------------------------------------------------------

def chat_request(conn, body):
    """Streams one chat completion; returns (ttft_s, total_s, text, chunks, usage)."""
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:200]!r}")
    ttft = None
    text = []
    chunks = 0
    usage = {}
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        if "error" in ev:
            raise RuntimeError(f"stream error {ev['error']}")
        usage = ev.get("usage") or usage
        for ch in ev.get("choices", []):
            piece = ch.get("delta", {}).get("content") or ""
            if piece:
                if ttft is None:
                    ttft = time.perf_counter() - t0
                chunks += 1
                text.append(piece)
    r.read()
    return ttft, time.perf_counter() - t0, "".join(text), chunks, usage


def run_workload(port, convs, rng, args):
    for c in convs:
        c["answers"] = []
    lock = threading.Condition()
    in_flight = set()
    results = []
    errors = []

    def messages(c):
        t = len(c["answers"])
        m = [{"role": "system", "content": c["system"]}]
        for i in range(t):
            m += [{"role": "user", "content": c["users"][i]},
                  {"role": "assistant", "content": c["answers"][i]}]
        m.append({"role": "user", "content": c["users"][t]})
        return m

    def slot():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        while True:
            with lock:
                while True:
                    if errors:
                        return
                    ready = [i for i, c in enumerate(convs)
                             if i not in in_flight and len(c["answers"]) < args.turns]
                    if ready:
                        break
                    if not in_flight:
                        return
                    lock.wait()
                i = rng.choice(ready)
                in_flight.add(i)
                c = convs[i]
                turn = len(c["answers"])
                body = json.dumps({"model": MODEL, "messages": messages(c),
                                   "max_tokens": args.max_tokens, "temperature": 0,
                                   "stream": True,
                                   "stream_options": {"include_usage": True}})
            try:
                ttft, total, text, chunks, usage = chat_request(conn, body)
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(f"conversation {i} turn {turn}: {e}")
                    in_flight.discard(i)
                    lock.notify_all()
                return
            with lock:
                c["answers"].append(text)
                in_flight.discard(i)
                results.append({"conv": i, "turn": turn, "ttft": ttft, "total": total,
                                "chunks": chunks,
                                "prompt_tokens": usage.get("prompt_tokens"),
                                "completion_tokens": usage.get("completion_tokens")})
                lock.notify_all()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=slot) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError("; ".join(errors[:3]))
    return results, wall


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def run_setup(name, kind, policy, convs, args):
    kv_ports = [free_port() for _ in range(3)] if policy == "kv_aware" else [None] * 3
    workers = []
    router = None
    try:
        for kp in kv_ports:
            workers.append(start_worker(args.kv_cache_memory, kp))
        urls = [f"http://127.0.0.1:{port}" for _, port in workers]
        endpoints = [f"tcp://127.0.0.1:{kp}" for kp in kv_ports] if kv_ports[0] else []
        router, rport = start_router(kind, policy, urls, endpoints, args)
        before = [scrape(port) for _, port in workers]
        rng = random.Random(args.seed + 1)
        results, wall = run_workload(rport, convs, rng, args)
        after = [scrape(port) for _, port in workers]
        router_metrics = scrape(rport) if kind == "ours" else {}
    finally:
        stop([router] if router else [])
        stop([p for p, _ in workers])

    def delta(k):
        return [a.get(k, 0.0) - b.get(k, 0.0) for a, b in zip(after, before)]

    hits, queries = delta("vllm:prefix_cache_hits_total"), delta("vllm:prefix_cache_queries_total")
    gen = sum(delta("vllm:generation_tokens_total"))
    ttfts = [r["ttft"] * 1e3 for r in results if r["ttft"] is not None]
    return {
        "setup": name,
        "hit_rate": sum(hits) / max(1.0, sum(queries)),
        "hit_rate_per_worker": [h / max(1.0, q) for h, q in zip(hits, queries)],
        "queried_tokens": sum(queries),
        "ttft_p50_ms": pct(ttfts, 0.5), "ttft_p99_ms": pct(ttfts, 0.99),
        "ttft_mean_ms": statistics.fmean(ttfts),
        "wall_s": wall, "req_per_s": len(results) / wall, "out_tok_per_s": gen / wall,
        "requests": len(results), "generated_tokens": gen,
        "per_worker_requests": [int(x) for x in delta("vllm:request_success_total")],
        "preemptions": sum(delta("vllm:num_preemptions_total")),
        "prompt_tokens": sum(delta("vllm:prompt_tokens_total")),
        "router_kv_event_batches": router_metrics.get("vllm_router_kv_event_batches_total"),
        "results": results,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conversations", type=int, default=32)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--system-prompts", type=int, default=4)
    ap.add_argument("--system-words", type=int, default=300)
    ap.add_argument("--user-words", type=int, default=24)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--kv-cache-memory", default="24MiB", help="per worker")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=1, help="runs of every setup")
    ap.add_argument("--only", default="", help="comma list: setups whose name has one of these")
    ap.add_argument("--json", default="")
    ap.add_argument("--peer-venv", default="/tmp/rvenv")
    args = ap.parse_args()
    convs, _ = make_workload(args)
    blocks, system_tokens = sizing(convs, args)
    capacity = 3 * blocks * 16
    rows = []
    for run in range(args.runs):
        for name, kind, policy in setups(args):
            r = run_setup(name, kind, policy, convs, args)
            r["run"] = run + 1
            rows.append(r)
            if len(rows) == 1:  # the working set: every conversation's last prompt + answer,
                last = {}      # its system prompt counted once
                for x in r["results"]:
                    if x["turn"] == args.turns - 1:
                        last[x["conv"]] = x["prompt_tokens"] + x["completion_tokens"]
                shared = sum(system_tokens[c["system"]] for c in convs)
                working_set = sum(last.values()) - shared + sum(system_tokens.values())
                max_prompt = max(x["prompt_tokens"] for x in r["results"])
            print(f"run {run + 1} {name}: hit rate {r['hit_rate']:.3f}, TTFT p50/p99 "
                  f"{r['ttft_p50_ms']:.1f}/{r['ttft_p99_ms']:.1f} ms, {r['wall_s']:.1f} s, "
                  f"workers {r['per_worker_requests']}", file=sys.stderr, flush=True)
    print(f"{args.conversations} conversations x {args.turns} turns, {args.system_prompts} system "
          f"prompts, {args.concurrency} in flight, max_tokens {args.max_tokens}, 3 workers with "
          f"--kv-cache-memory {args.kv_cache_memory} ({blocks} blocks of 16 tokens each: "
          f"{capacity} tokens in all; the workload's distinct tokens: {working_set}, its longest "
          f"prompt {max_prompt} tokens)")
    print("| setup | run | prefix-cache hit rate | TTFT p50 ms | TTFT p99 ms | requests/s | "
          "output tok/s | requests per worker |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['setup']} | {r['run']} | {100 * r['hit_rate']:.1f} % | "
              f"{r['ttft_p50_ms']:.1f} | {r['ttft_p99_ms']:.1f} | {r['req_per_s']:.2f} | "
              f"{r['out_tok_per_s']:.1f} | {' / '.join(map(str, r['per_worker_requests']))} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "blocks_per_worker": blocks,
                       "capacity_tokens": capacity, "working_set_tokens": working_set,
                       "system_prompt_tokens": list(system_tokens.values()),
                       "max_prompt_tokens": max_prompt, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
