#!/usr/bin/env python3
"""Checks that every #include between the project's folders follows the dependency directions.

    tools/lint/check_layering.py [REPO_ROOT]     exit 0: clean; 1: violations (listed); 2: usage
    tools/lint/check_layering.py --self-test     checks the checker on a synthetic tree

The rules are docs/ARCHITECTURE.md's "Folders and dependencies" (from ../shared/DESIGN.md):
each source file belongs to the module of the longest prefix in MODULES below, and may include
headers of its own module and of the modules ALLOWED lists for it, nothing else of ours, and
never a header of INTERNAL_HEADERS from outside its module.
Third-party headers (absl/, boost/, nlohmann/, ...) are not checked. bench/ (except
bench/serve/, the library the launcher links, and bench/common/, which every benchmark links),
tests/ and tools/ may include anything.

KNOWN_EXCEPTIONS lists the edges that exist today and are being removed; an edge missing from
the tree is reported too, so the list only shrinks.
"""
import os
import re
import sys
import tempfile

# Longest prefix wins. A module's files are the files below its folder.
MODULES = [
    "base/", "config/", "ipc/", "kv_events/", "kv_transfer/", "structured_output/", "spec_decode/", "core/", "kernels/", "kernels/comm/", "worker/",
    "executor/", "frontend/", "frontend/openai/", "frontend/engine/", "frontend/tokenizer/",
    "frontend/jinja/", "frontend/parsers/", "router/", "launcher/", "bench/serve/",
    "bench/common/", "bench/sweep/",
]

_BELOW_FRONTEND = ["base", "config", "ipc", "kv_transfer", "structured_output", "spec_decode", "core"]
ALLOWED = {
    "base": [],
    "config": ["base"],
    "ipc": ["base"],
    # vLLM's KV-cache events: types, codec, ZMQ publisher. No configuration (core/ converts).
    "kv_events": ["base", "ipc"],
    # vLLM's vllm/distributed/kv_transfer/: the KV connectors' values, codecs and transports.
    "kv_transfer": ["base", "config", "ipc"],
    "kernels": ["base"],
    "kernels/comm": ["base", "ipc", "kernels"],
    # vLLM's vllm/v1/structured_output/: XGrammar over the model's tokenizer (the engine core
    # reads tokenizer.json for the vocabulary, as vLLM's StructuredOutputManager does).
    "structured_output": ["base", "config", "frontend/tokenizer"],
    # vLLM's vllm/v1/spec_decode/ proposers that run in the engine core (n-gram, suffix), and
    # the counters the scheduler keeps.
    "spec_decode": ["base", "config"],
    "core": ["base", "config", "ipc", "kv_events", "kv_transfer", "structured_output", "spec_decode"],
    "worker": ["base", "config", "ipc", "kv_transfer", "core", "kernels", "kernels/comm"],
    # UniProcExecutor runs a Worker in its own process (docs/DECISIONS.md).
    "executor": ["base", "config", "ipc", "kv_transfer", "structured_output", "spec_decode", "core",
                 "kernels", "kernels/comm", "worker"],
    "frontend/tokenizer": ["base"],
    "frontend/jinja": ["base"],
    # vLLM's tool-call and reasoning parsers: text in, calls and reasoning out.
    "frontend/parsers": ["base"],
    # The router speaks HTTP to other servers: no engine types (core/, worker/, executor/).
    "router": ["base", "ipc", "kv_events", "frontend/tokenizer", "frontend/jinja"],
    "frontend": _BELOW_FRONTEND + ["executor", "frontend/tokenizer", "frontend/jinja",
                                   "frontend/parsers"],
    # The engine client (vllm/v1/engine/): no HTTP, so never frontend/openai/.
    "frontend/engine": _BELOW_FRONTEND + ["executor", "frontend/tokenizer", "frontend/jinja"],
    # The OpenAI server (vllm/entrypoints/openai/) over the engine client.
    "frontend/openai": _BELOW_FRONTEND + ["executor", "frontend/engine", "frontend/tokenizer",
                                          "frontend/jinja", "frontend/parsers"],
    "bench/serve": ["base", "frontend/tokenizer", "frontend/jinja"],
    "bench/common": ["base"],
    # `bench sweep` runs `bench serve` as a command line, never links it.
    "bench/sweep": ["base"],
    "launcher": None,  # anything of ours except tests/
}

# (including file, included header): edges that exist today and are on their way out.
KNOWN_EXCEPTIONS = set()

# Headers internal to their module: included only by files of that module (and by tests).
INTERNAL_HEADERS = {
    "frontend/jinja/ast.h", "frontend/jinja/builtins.h", "frontend/jinja/parser.h",
    "frontend/jinja/value.h", "frontend/tokenizer/bpe.h", "frontend/tokenizer/normalizer.h",
    "frontend/tokenizer/pretokenizer.h", "frontend/jinja/lexer.h", "frontend/openai/http_session.h",
    "frontend/parsers/json_rewriter.h", "frontend/parsers/python_literal.h",
    "frontend/parsers/text_util.h", "frontend/parsers/tool_call_object.h",
    "frontend/parsers/tool_stream_base.h", "router/admin.h", "router/http.h", "router/metrics.h",
    "router/proxy.h", "router/router_state.h",
}

SOURCE_SUFFIXES = (".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')


def module_of(path):
    """The module of a repository-relative path, or None (not one of MODULES: unchecked)."""
    best = None
    for prefix in MODULES:
        if path.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return None if best is None else best.rstrip("/")


def target_module(header):
    """The module of an included path when it names one of ours; None for third-party."""
    module = module_of(header)
    if module is None and header.startswith(("tests/", "tools/", "bench/")):
        return header.split("/")[0]
    return module


def source_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "build")
        for name in sorted(filenames):
            if name.endswith(SOURCE_SUFFIXES):
                full = os.path.join(dirpath, name)
                yield os.path.relpath(full, root).replace(os.sep, "/")


def check(root):
    """Returns (violations, stale_exceptions, files_checked)."""
    violations = []
    seen_exceptions = set()
    checked = 0
    for rel in source_files(root):
        src = module_of(rel)
        if src is None:
            continue
        checked += 1
        allowed = ALLOWED.get(src)
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                header = m.group(1)
                dst = target_module(header)
                if dst is None:
                    continue
                if header in INTERNAL_HEADERS and dst != src:
                    violations.append(f"{rel}:{lineno}: {src}/ includes {header}, which is "
                                      f"internal to {dst}/")
                    continue
                if dst == src:
                    continue
                if allowed is None:  # launcher: anything but tests and tools
                    ok = dst not in ("tests", "tools")
                else:
                    ok = dst in allowed
                if ok:
                    continue
                if (rel, header) in KNOWN_EXCEPTIONS:
                    seen_exceptions.add((rel, header))
                    continue
                violations.append(f"{rel}:{lineno}: {src}/ includes {header} ({dst}/), "
                                  f"which {src}/ may not depend on")
    stale = sorted(KNOWN_EXCEPTIONS - seen_exceptions)
    return violations, stale, checked


def self_test():
    """The checker must flag a forbidden edge, pass an allowed one, and flag a stale exception."""
    files = {
        "ipc/a.cc": '#include "base/status_macros.h"\n#include "absl/status/status.h"\n',
        "core/b.cc": '#include "ipc/a.h"\n#include <vector>\n',
        "kernels/cpu/c.cc": '#include "ipc/shm_segment.h"\n',  # forbidden: kernels -> ipc
        "kernels/comm/d.cc": '#include "ipc/shm_segment.h"\n',  # allowed
        "frontend/tokenizer/e.cc": '#include "core/request.h"\n',  # forbidden
        "frontend/f.cc": '#include "frontend/tokenizer/e.h"\n#include "worker/w.h"\n',
        "launcher/g.cc": '#include "worker/w.h"\n#include "tests/support/x.h"\n',
        "frontend/jinja/i.cc": '#include "frontend/jinja/ast.h"\n',  # internal, same module
        "frontend/j.cc": '#include "frontend/jinja/parser.h"\n',  # internal: forbidden
        "frontend/engine/k.cc": '#include "frontend/openai/api_server.h"\n',  # forbidden
        "frontend/openai/l.cc": '#include "frontend/engine/async_llm.h"\n',  # allowed
        "tests/unit/h.cc": '#include "launcher/g.h"\n',  # unchecked
        "bench/serve/k.cc": '#include "bench/common/bench_util.h"\n',  # forbidden
        "bench/common/l.cc": '#include "base/status_macros.h"\n',  # allowed
        "bench/ipc/m.cc": '#include "bench/common/bench_util.h"\n#include "ipc/a.h"\n',
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        violations, stale, checked = check(root)
    flagged = sorted(v.split(":")[0] for v in violations)
    expected = ["bench/serve/k.cc", "frontend/engine/k.cc", "frontend/f.cc", "frontend/j.cc",
                "frontend/tokenizer/e.cc",
                "kernels/cpu/c.cc", "launcher/g.cc"]
    problems = []
    if flagged != expected:
        problems.append(f"flagged {flagged}, expected {expected}: {violations}")
    if checked != 13:
        problems.append(f"checked {checked} files, expected 13")
    if stale != sorted(KNOWN_EXCEPTIONS):
        problems.append(f"stale exceptions {stale}, expected every known exception")
    for p in problems:
        print("self-test: " + p)
    print("self-test: " + ("FAILED" if problems else "passed"))
    return 1 if problems else 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    root = argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(__file__), "..", "..")
    violations, stale, checked = check(root)
    for v in violations:
        print(v)
    for rel, header in stale:
        print(f"{rel}: known exception '{header}' no longer exists: remove it from "
              "KNOWN_EXCEPTIONS in tools/lint/check_layering.py")
    print(f"layering: {checked} files checked, {len(violations)} violations, "
          f"{len(KNOWN_EXCEPTIONS) - len(stale)} known exceptions, {len(stale)} stale")
    return 1 if violations or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
