#!/usr/bin/env python3
"""Runs clang-tidy (.clang-tidy: identifier naming) over every product translation unit.

    tools/lint/run_clang_tidy.py BUILD_DIR [-j N] [FILE...]
        exit 0: clean; 1: findings (printed once each); 2: usage or a missing tool/build

Product TUs: the C++ entries of BUILD_DIR/compile_commands.json outside tests/. CUDA .cu
files are compiled by nvcc and are not checked: clang-tidy 14's CUDA mode cannot read the
CUDA 12+ headers (its wrapper includes texture_fetch_functions.h, which CUDA 12 removed).
Headers of ours are checked through the TUs that include them: .clang-tidy's
HeaderFilterRegex names them relative to the repository root, and this script anchors it at
the checkout (clang-tidy matches it against the absolute path, so `^base/` alone matches no
header). The last line names the product headers no checked TU includes, which are not checked.

Cost: one parse per TU (the naming check's matchers add ~30 %). Compiler warnings are turned
off (-w): only readability-* findings count, compile errors still fail, and clang then skips
the analysis-based warnings' per-function CFGs (~15 % of a TU's time).

A TU that passed is remembered in ~/.cache/vllm-launch/clang-tidy/ (VLLM_TIDY_CACHE_DIR),
keyed by clang-tidy's version, .clang-tidy, the compile command and the contents of the TU and
of every header of ours it includes (the list comes from the build's dependency log, so
BUILD_DIR must have been built). Only a TU whose inputs changed is checked again: a second run
on the same tree takes seconds, and a fresh clone on a machine that has run it reuses the
results. Findings are never cached.
"""
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SUFFIXES = (".cc", ".cpp")
HEADER_SUFFIXES = (".h", ".cuh", ".inc")
NOT_PRODUCT = ("tests/",)
# ERE's special characters, for the checkout's path in --header-filter.
ERE_SPECIAL = set(".[]()*+?{}|^$\\")


def repo_root():
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def dependency_map(build_dir, root):
    """{absolute source path: [headers of ours it includes]} from ninja's deps log."""
    out = subprocess.run(["ninja", "-C", build_dir, "-t", "deps"], capture_output=True,
                         text=True, check=True).stdout
    deps, current = {}, None
    for line in out.splitlines():
        if line and not line.startswith(" "):
            current = []
            deps[line.split(":", 1)[0]] = current  # the object file
        elif current is not None and line.strip():
            path = os.path.normpath(os.path.join(build_dir, line.strip()))
            current.append(path)
    by_source = {}
    for obj, paths in deps.items():
        sources = [p for p in paths if p.endswith(SUFFIXES)]
        ours = [p for p in paths if p.startswith(root + os.sep)
                and not p.startswith(os.path.join(root, "build") + os.sep)]
        for s in sources:
            by_source[s] = ours
    return by_source


def cache_key(root, tool_version, config_text, entry, inputs):
    """The paths of the checkout are written relative to it, so that a clone in another folder
    (CI's) finds the results of this one."""
    h = hashlib.sha256()
    h.update(tool_version.encode())
    h.update(config_text.encode())
    command = entry.get("command", " ".join(entry.get("arguments", [])))
    h.update(command.replace(root, "<root>").encode())
    for path in sorted(set(inputs)):
        h.update(os.path.relpath(path, root).encode())
        try:
            with open(path, "rb") as f:
                h.update(f.read())
        except OSError:
            h.update(b"<missing>")
    return h.hexdigest()


def header_filter(root, config_text):
    """.clang-tidy's HeaderFilterRegex ('^(base|ipc|...)/', relative to the repository root)
    anchored at this checkout: '^/abs/root/(base|ipc|...)/'."""
    m = re.search(r"^HeaderFilterRegex:\s*'\^([^']*)'", config_text, re.M)
    if m is None:
        return None
    escaped = "".join("\\" + c if c in ERE_SPECIAL else c for c in root)
    return "^" + escaped + "/" + m.group(1)


def product_headers(root):
    out = subprocess.run(["git", "-C", root, "ls-files"], check=True, capture_output=True,
                         text=True).stdout.split("\n")
    return sorted(p for p in out if p.endswith(HEADER_SUFFIXES) and not p.startswith(NOT_PRODUCT)
                  and os.path.isfile(os.path.join(root, p)))


def main(argv):
    args = argv[1:]
    if not args or args[0].startswith("-"):
        print(__doc__)
        return 2
    build_dir = os.path.abspath(args.pop(0))
    jobs = os.cpu_count() or 2
    if args[:1] == ["-j"] and len(args) >= 2:
        jobs = int(args[1])
        args = args[2:]
    root = repo_root()
    tool = shutil.which("clang-tidy")
    if tool is None:
        print("run_clang_tidy: clang-tidy is not installed (scripts/setup.sh installs it)")
        return 2
    db_path = os.path.join(build_dir, "compile_commands.json")
    if not os.path.isfile(db_path):
        print(f"run_clang_tidy: {db_path} is missing: configure and build {build_dir} first")
        return 2
    with open(db_path) as f:
        db = json.load(f)
    wanted = {os.path.join(root, a) for a in args}
    entries = []
    for e in db:
        path = os.path.normpath(os.path.join(e["directory"], e["file"]))
        rel = os.path.relpath(path, root)
        if not path.endswith(SUFFIXES) or rel.startswith(NOT_PRODUCT) or rel.startswith(".."):
            continue
        if wanted and path not in wanted:
            continue
        entries.append((path, e))
    tool_version = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout
    with open(os.path.join(root, ".clang-tidy")) as f:
        config_text = f.read()
    headers = header_filter(root, config_text)
    if headers is None:
        print("run_clang_tidy: .clang-tidy has no HeaderFilterRegex of the form '^(...)/'")
        return 2
    # Every product header must be one the filter lets through (a new top-level folder is
    # added to .clang-tidy's list too).
    unfiltered = [h for h in product_headers(root)
                  if not re.match(headers, os.path.join(root, h))]
    if unfiltered:
        print("run_clang_tidy: .clang-tidy's HeaderFilterRegex misses " + ", ".join(unfiltered))
        return 2
    # This script's own text is part of every key: how it runs clang-tidy decides what passes.
    with open(os.path.abspath(__file__)) as f:
        config_text += f.read()
    deps = dependency_map(build_dir, root)
    cache_dir = os.environ.get("VLLM_TIDY_CACHE_DIR",
                               os.path.expanduser("~/.cache/vllm-launch/clang-tidy"))
    os.makedirs(cache_dir, exist_ok=True)

    cpu_by_path = {}

    def run_one(item):
        path, entry = item
        key = cache_key(root, tool_version, config_text, entry, [path] + deps.get(path, []))
        marker = os.path.join(cache_dir, key)
        # A TU the build never compiled has no dependency list: check it, never cache it.
        if path in deps and os.path.exists(marker):
            return path, True, "", True
        rc, out, err, cpu = run_tool([tool, "-p", build_dir, "--quiet",
                                      "--header-filter=" + headers, "--extra-arg=-w", path], root)
        cpu_by_path[path] = cpu
        findings = [l for l in out.splitlines()
                    if re.search(r"(warning|error):", l) and "readability-" in l]
        ok = rc == 0 and not findings
        if ok and path in deps:
            open(marker, "w").close()
        return path, ok, out + (err if not ok else ""), False

    failed, cached, seen = [], 0, set()
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for path, ok, text, hit in pool.map(run_one, entries):
            cached += hit
            if not ok:
                failed.append(path)
                print_new_findings(text, seen)
    wall = time.monotonic() - start
    slowest = sorted(cpu_by_path.items(), key=lambda kv: -kv[1])[:5]
    print(f"run_clang_tidy: {len(entries)} translation units ({cached} unchanged since a clean "
          f"run), {len(failed)} with findings; {wall:.0f} s, {sum(cpu_by_path.values()):.0f} s "
          f"of CPU, {jobs} jobs; CPU s of the slowest: "
          + ", ".join(f"{os.path.relpath(p, root)} {t:.1f}" for p, t in slowest))
    for p in failed:
        print(f"  {os.path.relpath(p, root)}")
    included = {h for path, _ in entries for h in deps.get(path, [])}
    unchecked = [h for h in product_headers(root) if os.path.join(root, h) not in included]
    if not wanted:
        print(f"run_clang_tidy: {len(unchecked)} product headers included by no checked "
              f"translation unit (not checked): {' '.join(unchecked)}")
    return 1 if failed else 0


def run_tool(command, cwd):
    """Runs command; returns (exit code, stdout, stderr, its CPU seconds)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (p.returncode, out.read().decode(errors="replace"),
                err.read().decode(errors="replace"), usage.ru_utime + usage.ru_stime)


def print_new_findings(text, seen):
    """Prints clang-tidy's output for one TU, less the findings (with their source lines)
    another TU printed already: a header's findings come with every TU that includes it."""
    skip = False
    for line in text.splitlines():
        if re.match(r"^\S.*:\d+:\d+: (warning|error|note): ", line):
            skip = line in seen
            seen.add(line)
        elif re.match(r"^\d+ warnings? (and \d+ errors? )?generated", line):
            continue
        if not skip:
            print(line)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
