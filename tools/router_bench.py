#!/usr/bin/env python3
"""Router overhead, side by side: the added latency of `vllm-launch router` and of the peers
(sglang-router, vllm-router, when installed) in front of the same two `vllm-launch` servers.

    python3 tools/router_bench.py [--requests 300] [--peer-venv /tmp/rvenv]

Starts two `vllm-launch` servers (bundled model, `--port 0`), then for "direct" (worker 1) and
each router (policy round_robin over both): one keep-alive HTTP/1.1 connection, 50 warm-up
requests, then N sequential `/v1/completions` requests with `max_tokens` 1, each timed from
send to the last byte. Prints a markdown table: p50 / p99 / mean ms, added p50 / p99 against
direct, requests/s. Peers are found as `<peer-venv>/bin/python -m sglang_router.launch_router`
and `<peer-venv>/bin/vllm-router` (installed with pip into a venv; never by CI):
    python3 -m venv /tmp/rvenv && /tmp/rvenv/bin/pip install sglang-router==0.3.2 \\
        vllm-router==0.1.17
"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "release", "bin", "vllm-launch")
BODY = json.dumps({"model": "kjv-llama-tiny", "prompt": "In the beginning", "max_tokens": 1,
                   "temperature": 0})


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(port, path, deadline_s=60.0):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", path)
            if c.getresponse().status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.1)  # polling a condition with a deadline
    return False


def start_server():
    p = subprocess.Popen([BIN, "--port", "0", "--kv-cache-memory", "64MiB"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()  # "vllm-launch: ready at http://127.0.0.1:PORT/v1"
    port = int(line.rsplit(":", 1)[1].split("/")[0])
    return p, port


def measure(port, n):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json"}
    times = []
    for i in range(50 + n):
        t0 = time.perf_counter()
        c.request("POST", "/v1/completions", BODY, headers)
        r = c.getresponse()
        r.read()
        t1 = time.perf_counter()
        if r.status != 200:
            raise RuntimeError(f"status {r.status}")
        if i >= 50:
            times.append((t1 - t0) * 1e3)
    c.close()
    times.sort()
    return {
        "p50": times[len(times) // 2],
        "p99": times[min(len(times) - 1, int(len(times) * 0.99))],
        "mean": statistics.fmean(times),
        "rps": 1e3 / statistics.fmean(times),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--peer-venv", default="/tmp/rvenv")
    args = ap.parse_args()
    servers = [start_server() for _ in range(2)]
    urls = [f"http://127.0.0.1:{port}" for _, port in servers]
    routers = [("vllm-launch router", [BIN, "router"])]
    py = os.path.join(args.peer_venv, "bin", "python")
    if os.path.exists(py):
        routers.append(("sglang-router 0.3.2", [py, "-m", "sglang_router.launch_router"]))
    vr = os.path.join(args.peer_venv, "bin", "vllm-router")
    if os.path.exists(vr):
        routers.append(("vllm-router 0.1.17", [vr]))
    rows = []
    try:
        rows.append(("direct (worker 1)", measure(servers[0][1], args.requests)))
        for name, cmd in routers:
            port = free_port()
            p = subprocess.Popen(cmd + ["--worker-urls", *urls, "--host", "127.0.0.1", "--port",
                                        str(port), "--policy", "round_robin"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                if not wait_http(port, "/health"):
                    print(f"{name}: not ready", file=sys.stderr)
                    continue
                rows.append((name, measure(port, args.requests)))
            finally:
                p.terminate()
                p.wait(timeout=10)
        again = measure(servers[0][1], args.requests)
        rows.append(("direct again", again))
    finally:
        for p, _ in servers:
            p.terminate()
            p.wait(timeout=10)
    direct = rows[0][1]
    print(f"{args.requests} sequential keep-alive /v1/completions (max_tokens 1), 2 workers, "
          "round_robin")
    print("| path | p50 ms | p99 ms | mean ms | added p50 ms | added p99 ms | requests/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, m in rows:
        print(f"| {name} | {m['p50']:.3f} | {m['p99']:.3f} | {m['mean']:.3f} | "
              f"{m['p50'] - direct['p50']:+.3f} | {m['p99'] - direct['p99']:+.3f} | "
              f"{m['rps']:.0f} |")


if __name__ == "__main__":
    main()
