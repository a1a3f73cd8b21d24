#!/usr/bin/env python3
"""Runs clang-tidy (.clang-tidy: identifier naming) over every product translation unit.

    tools/lint/run_clang_tidy.py BUILD_DIR [-j N] [FILE...]
        exit 0: clean; 1: findings (printed); 2: usage or a missing tool/build

Product TUs: the C++ entries of BUILD_DIR/compile_commands.json outside tests/ (CUDA .cu
files are compiled by nvcc and are not checked). Headers are checked through the TUs that
include them (.clang-tidy's HeaderFilterRegex).

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

SUFFIXES = (".cc", ".cpp")
NOT_PRODUCT = ("tests/",)


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
    deps = dependency_map(build_dir, root)
    cache_dir = os.environ.get("VLLM_TIDY_CACHE_DIR",
                               os.path.expanduser("~/.cache/vllm-launch/clang-tidy"))
    os.makedirs(cache_dir, exist_ok=True)

    def run_one(item):
        path, entry = item
        key = cache_key(root, tool_version, config_text, entry, [path] + deps.get(path, []))
        marker = os.path.join(cache_dir, key)
        # A TU the build never compiled has no dependency list: check it, never cache it.
        if path in deps and os.path.exists(marker):
            return path, True, "", True
        r = subprocess.run([tool, "-p", build_dir, "--quiet", path], cwd=root,
                           capture_output=True, text=True)
        findings = [l for l in r.stdout.splitlines()
                    if re.search(r"(warning|error):", l) and "readability-" in l]
        ok = r.returncode == 0 and not findings
        if ok and path in deps:
            open(marker, "w").close()
        return path, ok, r.stdout + (r.stderr if not ok else ""), False

    failed, cached = [], 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for path, ok, text, hit in pool.map(run_one, entries):
            cached += hit
            if not ok:
                failed.append(path)
                print(text)
    print(f"run_clang_tidy: {len(entries)} translation units ({cached} unchanged since a clean "
          f"run), {len(failed)} with findings")
    for p in failed:
        print(f"  {os.path.relpath(p, root)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
