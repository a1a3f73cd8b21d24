#!/usr/bin/env python3
"""Soak: a bounded run of `vllm-launch` at DP 2 under mixed load (issue 36, item 4).

Starts `vllm-launch <model> -dp 2 -dpa 127.0.0.1 --restart-dead-engines --port P` (TCP between
the engines and the API server, which is what lets a killed engine core re-join), drives it with mixed requests
(completions and chat, streamed and not, short and long outputs, a share of streams the client
drops half-way) from a few client threads, kills one engine core with SIGKILL every
--kill-every seconds, and every --sample-every seconds records for each process of the server
(the launcher's process tree) its RSS, open file descriptors and threads, plus the number of
/dev/shm entries. At the end it compares the client's tally with the server's /metrics
(vllm:request_success_total, errors) and writes:

  <out>/samples.csv   time, pid, role, rss_kib, fds, threads; shm entries per sample
  <out>/summary.md    per role: after warm-up, at the end, the largest; growth; the tally
  <out>/soak.png      RSS, fds, threads and /dev/shm over time (when matplotlib is importable)

Not a test (it runs for --duration seconds, 30 minutes by default): a bench driver, see
bench/soak/README.md. Only the Python standard library is needed to run; matplotlib to plot.
"""

import argparse
import csv
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time


def children(pid):
    """Direct children of `pid` (from /proc/<pid>/task/*/children)."""
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def tree(root):
    """`root` and every process under it."""
    seen, todo = [], [root]
    while todo:
        pid = todo.pop()
        seen.append(pid)
        todo += children(pid)
    return seen


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def role(pid, root):
    if pid == root:
        return "api-server"
    line = cmdline(pid)
    if " engine-core" in line:
        return "engine-core"
    if "dp-coordinator" in line:
        return "dp-coordinator"
    if " worker" in line:
        return "worker"
    return "other"


def status_fields(pid):
    rss = threads = None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("Threads:"):
                    threads = int(line.split()[1])
    except OSError:
        return None
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    return rss, fds, threads


def shm_entries(pids):
    """/dev/shm entries made by the server: ours name their creator ("vllm-<kind>-<pid>-...");
    other programs' (a test run beside the soak) are not counted."""
    count = 0
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return -1
    for name in names:
        parts = name.split("-")
        if len(parts) >= 3 and parts[0] == "vllm" and parts[2].isdigit() and int(parts[2]) in pids:
            count += 1
    return count


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {"ok": 0, "error": 0, "cancelled": 0, "refused": 0}
        self.failures = []  # (time, what) of every failed or refused request
        self.start = time.time()

    def add(self, key, what=""):
        with self.lock:
            self.counts[key] += 1
            if key in ("error", "refused"):
                self.failures.append((time.time() - self.start, what[:300]))


def one_request(port, rng, tally):
    chat = rng.random() < 0.5
    stream = rng.random() < 0.5
    cancel = stream and rng.random() < 0.2
    max_tokens = rng.choice([4, 16, 64, 128])
    words = " ".join(rng.choice(["In", "the", "beginning", "God", "created", "heaven", "earth",
                                 "and", "light", "was"]) for _ in range(rng.randint(3, 60)))
    if chat:
        path = "/v1/chat/completions"
        body = {"messages": [{"role": "user", "content": words}]}
    else:
        path = "/v1/completions"
        body = {"prompt": words}
    body.update({"max_tokens": max_tokens, "temperature": rng.choice([0, 0.8]), "stream": stream})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            text = resp.read().decode(errors="replace")
            tally.add("refused" if resp.status < 500 else "error", f"{resp.status} {text}")
            return
        if not stream:
            json.loads(resp.read())
            tally.add("ok")
            return
        chunks = 0
        finished = False
        while True:
            line = resp.readline()
            if not line:
                break
            if line.startswith(b"data: [DONE]"):
                finished = True
                break
            if line.startswith(b"data: "):
                chunks += 1
                if b'"error"' in line:
                    tally.add("error", "stream: " + line.decode(errors="replace"))
                    return
                if cancel and chunks >= 2:
                    tally.add("cancelled")
                    return  # closing the connection cancels the request
        if finished:
            tally.add("ok")
        else:
            tally.add("error", "stream ended without [DONE]")
    except (OSError, http.client.HTTPException, ValueError) as e:
        tally.add("error", f"{type(e).__name__}: {e}")
    finally:
        conn.close()


def metrics(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    totals = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name = line.split("{")[0].split(" ")[0]
        try:
            value = float(line.rsplit(" ", 1)[1])
        except ValueError:
            continue
        key = name
        if name == "vllm:request_success_total" and 'finished_reason="' in line:
            key = name + ":" + line.split('finished_reason="')[1].split('"')[0]
        totals[key] = totals.get(key, 0.0) + value
    return totals


def wait_healthy(port, deadline):
    while time.time() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            status = conn.getresponse().status
            conn.close()
            if status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--launch", default="build/release/bin/vllm-launch")
    ap.add_argument("--model", default="", help="model directory (default: the bundled one)")
    ap.add_argument("--port", type=int, default=18931)
    ap.add_argument("--duration", type=float, default=1800)
    ap.add_argument("--warmup", type=float, default=120)
    ap.add_argument("--kill-every", type=float, default=300)
    ap.add_argument("--sample-every", type=float, default=10)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="build/soak")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    # SIGTERM ends the run through the finally below, which stops the server.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    cmd = [args.launch] + ([args.model] if args.model else []) + [
        "-dp", "2", "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port",
        str(args.port + 1), "--restart-dead-engines", "--port", str(args.port)]
    log = open(os.path.join(args.out, "server.log"), "w")
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        if not wait_healthy(args.port, time.time() + 120):
            print("soak: the server did not become healthy; see server.log", file=sys.stderr)
            return 1
        return drive(args, server)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def drive(args, server):
    tally = Tally()
    stop = threading.Event()
    start_time = time.time()
    tally.start = start_time

    def client(i):
        rng = random.Random(args.seed * 1000 + i)
        while not stop.is_set():
            one_request(args.port, rng, tally)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.clients)]
    for t in threads:
        t.start()
    start = time.time()
    next_sample = start
    next_kill = start + args.kill_every
    kills = []
    samples = []
    shm = []
    seen_pids = set()
    while time.time() - start < args.duration:
        now = time.time()
        if now >= next_sample:
            t = now - start
            for pid in tree(server.pid):
                seen_pids.add(pid)
                fields = status_fields(pid)
                if fields is not None:
                    samples.append((t, pid, role(pid, server.pid)) + fields)
            shm.append((t, shm_entries(seen_pids)))
            next_sample += args.sample_every
        if now >= next_kill:
            engines = [p for p in tree(server.pid) if role(p, server.pid) == "engine-core"]
            if engines:
                victim = sorted(engines)[len(kills) % len(engines)]
                os.kill(victim, signal.SIGKILL)
                kills.append((now - start, victim))
            next_kill += args.kill_every
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(timeout=150)
    # Every engine back (the last kill may be recent) before the server's figures are read.
    wait_healthy(args.port, time.time() + 60)
    totals = metrics(args.port)
    write_outputs(args, samples, shm, kills, tally, totals)
    return 0


def write_outputs(args, samples, shm, kills, tally, totals):
    with open(os.path.join(args.out, "samples.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", "pid", "role", "rss_kib", "fds", "threads"])
        w.writerows(samples)
    with open(os.path.join(args.out, "failures.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", "what"])
        w.writerows(tally.failures)
    with open(os.path.join(args.out, "shm.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", "shm_entries"])
        w.writerows(shm)
    lines = ["| role | RSS MiB after warm-up → end (max) | fds after warm-up → end (max) | "
             "threads after warm-up → end (max) |", "|---|---|---|---|"]
    for r in sorted({s[2] for s in samples}):
        rows = [s for s in samples if s[2] == r]
        # Sum over the role's processes at each sample time (a restarted engine has a new pid).
        by_t = {}
        for s in rows:
            acc = by_t.setdefault(s[0], [0, 0, 0, 0])
            acc[0] += s[3] or 0
            acc[1] += s[4] or 0
            acc[2] += s[5] or 0
            acc[3] += 1
        ts = sorted(by_t)
        warm = [t for t in ts if t >= args.warmup] or ts
        first, last = by_t[warm[0]], by_t[ts[-1]]
        mx = [max(by_t[t][k] for t in warm) for k in range(3)]
        lines.append(f"| {r} (×{last[3]}) | {first[0] / 1024:.1f} → {last[0] / 1024:.1f} "
                     f"({mx[0] / 1024:.1f}) | {first[1]} → {last[1]} ({mx[1]}) | "
                     f"{first[2]} → {last[2]} ({mx[2]}) |")
    shm_warm = [n for t, n in shm if t >= args.warmup] or [n for _, n in shm]
    lines.append("")
    lines.append(f"/dev/shm vllm-* entries: {shm_warm[0]} after warm-up, {shm[-1][1]} at the end, "
                 f"at most {max(shm_warm)}")
    lines.append(f"engine cores killed (SIGKILL): {len(kills)} at "
                 + ", ".join(f"{t:.0f} s" for t, _ in kills))
    c = tally.counts
    lines.append(f"client tally: {c['ok']} finished, {c['cancelled']} cancelled by the client, "
                 f"{c['error']} failed (500/stream error/connection), {c['refused']} refused (4xx)")
    ok = sum(v for k, v in totals.items() if k.startswith("vllm:request_success_total:"))
    lines.append(f"server /metrics: vllm:request_success_total {ok:.0f} "
                 + "(" + ", ".join(f"{k.split(':')[-1]} {v:.0f}" for k, v in sorted(totals.items())
                                   if k.startswith("vllm:request_success_total:")) + ")")
    summary = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(summary)
    print(summary)
    plot(args, samples, shm, kills)


def plot(args, samples, shm, kills):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("soak: matplotlib not importable, no soak.png", file=sys.stderr)
        return
    fig, axes = plt.subplots(4, 1, figsize=(9, 11), sharex=True)
    roles = sorted({s[2] for s in samples})
    for k, (ax, label) in enumerate(zip(axes[:3], ["RSS (MiB)", "open fds", "threads"])):
        for r in roles:
            by_t = {}
            for s in samples:
                if s[2] == r:
                    by_t[s[0]] = by_t.get(s[0], 0) + (s[3 + k] or 0)
            ts = sorted(by_t)
            ys = [by_t[t] / (1024 if k == 0 else 1) for t in ts]
            ax.plot([t / 60 for t in ts], ys, label=r)
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    axes[3].plot([t / 60 for t, _ in shm], [n for _, n in shm])
    axes[3].set_ylabel("/dev/shm vllm-*")
    axes[3].set_xlabel("minutes")
    for ax in axes:
        for t, _ in kills:
            ax.axvline(t / 60, color="red", alpha=0.3, linewidth=0.8)
        ax.axvline(args.warmup / 60, color="grey", linestyle=":", linewidth=0.8)
    fig.suptitle("vllm-launch -dp 2 soak (red: an engine core killed)")
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "soak.png"), dpi=90)


if __name__ == "__main__":
    sys.exit(main())
