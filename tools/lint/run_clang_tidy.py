#!/usr/bin/env python3
"""Runs clang-tidy (.clang-tidy: identifier naming) over every product translation unit.

    tools/lint/run_clang_tidy.py BUILD_DIR [-j N] [FILE...]
        exit 0: clean; 1: findings (printed once each); 2: usage or a missing tool/build
    tools/lint/run_clang_tidy.py --self-test    checks the checker on a synthetic tree

Product TUs: the C++ entries of BUILD_DIR/compile_commands.json outside tests/ and build/. CUDA .cu
files are compiled by nvcc and are not checked: clang-tidy 14's CUDA mode cannot read the
CUDA 12+ headers (its wrapper includes texture_fetch_functions.h, which CUDA 12 removed).
Headers of ours are checked through the TUs that include them: .clang-tidy's
HeaderFilterRegex names them relative to the repository root, and this script anchors it at
the checkout (clang-tidy matches it against the absolute path, so `^base/` alone matches no
header). The last line names the product headers no checked TU includes, which are not checked.

Cost. A TU's parse is mostly third-party headers (Boost.Beast and Asio, nlohmann, Abseil,
spdlog, ZeroMQ), the same for most files. So the files with the same compile flags are checked
in unity TUs of up to MAX_GROUP files, each an #include of its files (a folder's files
together), and the common headers are parsed once per group instead of once per file:
measured on 2 cores, 432 s of CPU for the tree instead of 995 s (docs/DECISIONS.md). Findings
still name the file and line they are in. Two files that define the same name at namespace
scope (seen in the text: a line in column 0) go to different groups; a file's main() is
renamed while it is read and the macros it defines are undefined after it. A group that
still does not compile as one TU is split in halves until it does, and a file alone is
checked as its own TU with its own compile command, so every file is checked either way.
VLLM_TIDY_VERBOSE=1 prints each clang-tidy run with its files and CPU time.

A TU that passed is remembered in ~/.cache/vllm-launch/clang-tidy/ (VLLM_TIDY_CACHE_DIR),
keyed by clang-tidy's version, .clang-tidy, this script, the compile command and the contents
of the TU and of every header of ours it includes (the list comes from the build's dependency
log, so BUILD_DIR must have been built). Only a TU whose inputs changed is checked again
(grouped as above): a second run on the same tree takes seconds, and a fresh clone on a
machine that has run it reuses the results. Findings are never cached.
"""
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

SUFFIXES = (".cc", ".cpp")
HEADER_SUFFIXES = (".h", ".cuh", ".inc")
# tests/, and third-party sources built in a build tree (build/third_party/: XGrammar, Abseil).
NOT_PRODUCT = ("tests/", "build/")
# ERE's special characters, for the checkout's path in --header-filter.
ERE_SPECIAL = set(".[]()*+?{}|^$\\")
# The most files one unity TU holds (bounds the work a failed group repeats).
MAX_GROUP = 16
# Compiler arguments that name outputs, with the value that follows them.
OUTPUT_FLAGS = ("-o", "-MF", "-MT", "-MQ")
MAIN_RE = re.compile(r"^(?:int main\(|BENCHMARK_MAIN\()", re.M)


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


def compile_flags(path, entry):
    """The entry's compiler arguments less the compiler, the source and the outputs."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out, skip = [], False
    for a in args[1:]:
        if skip:
            skip = False
        elif a in OUTPUT_FLAGS:
            skip = True
        elif a in ("-c", "-MD", "-MMD") or os.path.normpath(
                os.path.join(entry["directory"], a)) == path:
            continue
        else:
            out.append(a)
    return tuple(out)


# A file's namespace-scope definitions, roughly: the name before the first "(", "=", "{", "[" or
# ";" of a line that starts in column 0 (clang-format indents nothing inside a namespace) unless
# it follows "::" (a member's definition); struct/class/enum names; no ALL_CAPS macro calls.
TYPE_RE = re.compile(r"^(?:struct|class|enum class|enum|union) ([A-Za-z_]\w*)")
SKIP_LINE_RE = re.compile(r"^(?:[\s#/{}()]|namespace\b|using\b|template\b|$)")
NOT_NAMES = {"main", "operator", "const", "return", "if", "for", "while", "switch", "sizeof",
             "decltype", "static_assert", "alignas", "noexcept", "requires"}
DEFINE_RE = re.compile(r"^#\s*define\s+([A-Za-z_]\w*)", re.M)


def top_level_names(text):
    """The names a .cc file defines at namespace scope (a heuristic: two files that define the
    same name do not share a unity TU; one they share that fails to compile is split)."""
    names = set()
    for line in text.splitlines():
        if SKIP_LINE_RE.match(line):
            continue
        m = TYPE_RE.match(line)
        if m is None:
            line = re.sub(r"<[^<>]*>", "", re.sub(r"<[^<>]*>", "", line))  # template arguments
            delimiter = re.search(r"[(={\[;]", line)
            head = line[:delimiter.start()].rstrip() if delimiter else ""
            m = re.search(r"(?<![\w:~])([A-Za-z_]\w*)$", head)
        if m and m.group(1) not in NOT_NAMES and not re.fullmatch(r"[A-Z][A-Z0-9_]*", m.group(1)):
            names.add(m.group(1))
    return names


def unity_groups(items):
    """[(path, entry)] -> [[(path, entry)]]: the files with the same compile flags in path
    order, in groups of at most MAX_GROUP, no two of a group defining the same name."""
    by_key = {}
    for path, entry in items:
        key = (entry["directory"], compile_flags(path, entry))
        by_key.setdefault(key, []).append((path, entry))
    groups = []
    for members in by_key.values():
        members.sort()  # a folder's files together: they share the most headers
        open_groups = []  # [(names defined, [(path, entry)])]
        for item in members:
            with open(item[0], encoding="utf-8", errors="replace") as f:
                names = top_level_names(f.read())
            target = next((g for g in open_groups
                           if len(g[1]) < MAX_GROUP and not names & g[0]), None)
            if target is None:
                target = (set(), [])
                open_groups.append(target)
            target[0].update(names)
            target[1].append(item)
        groups += [g[1] for g in open_groups]
    return sorted(groups, key=len, reverse=True)  # the big ones first: even finish on N jobs


def unity_source(group):
    """#includes each file of the group. A file's main() is renamed while it is read, and the
    macros it defines are undefined after it, so that neither reaches the next file."""
    lines = []
    for i, (path, _) in enumerate(group):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        has_main = MAIN_RE.search(text) is not None
        if has_main:
            lines.append(f"#define main vllm_tidy_unity_main_{i}  // NOLINT")
        lines.append(f'#include "{path}"')
        if has_main:
            lines.append("#undef main")
        lines += [f"#undef {m}" for m in sorted(set(DEFINE_RE.findall(text)))]
    return "\n".join(lines) + "\n"


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


class Checker:
    """Checks groups of TUs; thread-safe (each call writes only its own temporary file)."""

    def __init__(self, tool, root, headers, unity_dir):
        self.tool, self.root, self.unity_dir = tool, root, unity_dir
        # The configuration by name: clang-tidy looks for .clang-tidy above the main file, and
        # a unity TU lives in a temporary folder. -w: only readability-* findings count; the
        # compiler's warnings (errors under the build's -Werror, clang's differing from gcc's)
        # are the builds' to report.
        self.options = ["--quiet", "--config-file=" + os.path.join(root, ".clang-tidy"),
                        "--header-filter=" + headers, "--extra-arg=-w"]

    def check(self, group):
        """Returns [(group, ok, output, CPU seconds)], one per clang-tidy run. Each run gets
        the group's compile command after "--" (a file compiled twice, with two commands, is
        checked once per command)."""
        path0, entry0 = group[0]
        source = path0
        if len(group) > 1:
            fd, source = tempfile.mkstemp(suffix=".cc", dir=self.unity_dir)
            with os.fdopen(fd, "w") as f:
                f.write(unity_source(group))
        rc, out, err, cpu = run_tool([self.tool] + self.options + [source, "--"] +
                                     list(compile_flags(path0, entry0)), entry0["directory"])
        if len(group) > 1:
            os.unlink(source)
        if len(group) > 1 and ("[clang-diagnostic-error]" in out or
                               (rc != 0 and not findings(out))):
            # The files do not compile as one TU: check each half on its own.
            half = len(group) // 2
            return ([([], True, "", cpu)] + self.check(group[:half]) +
                    self.check(group[half:]))
        ok = rc == 0 and not findings(out)
        return [(group, ok, out + (err if not ok else ""), cpu)]


def findings(out):
    return [l for l in out.splitlines()
            if re.search(r"(warning|error):", l) and "readability-" in l]


def print_new_findings(text, seen):
    """Prints clang-tidy's output for one run, less the findings (with their source lines)
    another run printed already: a header's findings come with every TU that includes it."""
    skip = False
    for line in text.splitlines():
        if re.match(r"^\S.*:\d+:\d+: (warning|error|note): ", line):
            skip = line in seen
            seen.add(line)
        elif re.match(r"^\d+ warnings? (and \d+ errors? )?generated", line):
            continue
        if not skip:
            print(line)


def check(root, build_dir, jobs, files, deps=None, cache_dir=None):
    """Checks the product TUs of build_dir (those named in files, when any); prints the
    findings and a summary; returns the exit code. deps and cache_dir: the self-test's."""
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
    wanted = {os.path.join(root, a) for a in files}
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
    if deps is None:
        deps = dependency_map(build_dir, root)
    if cache_dir is None:
        cache_dir = os.environ.get("VLLM_TIDY_CACHE_DIR",
                                   os.path.expanduser("~/.cache/vllm-launch/clang-tidy"))
    os.makedirs(cache_dir, exist_ok=True)

    markers, pending = {}, []  # markers: {id(entry): its cache file}
    for path, entry in entries:
        key = cache_key(root, tool_version, config_text, entry, [path] + deps.get(path, []))
        # A TU the build never compiled has no dependency list: check it, never cache it.
        if path in deps:
            markers[id(entry)] = os.path.join(cache_dir, key)
            if os.path.exists(markers[id(entry)]):
                continue
        pending.append((path, entry))
    groups = unity_groups(pending)

    failed, seen, cpu, runs = [], set(), 0.0, 0
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tidy-unity-") as unity_dir, \
            concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        checker = Checker(tool, root, headers, unity_dir)
        for results in pool.map(checker.check, groups):
            for group, ok, text, seconds in results:
                paths = [p for p, _ in group]
                cpu += seconds
                runs += 1
                if os.environ.get("VLLM_TIDY_VERBOSE"):
                    print(f"run_clang_tidy: {seconds:5.1f} s CPU, {len(paths)} files"
                          f"{'' if paths else ' (did not compile as one: split)'}"
                          f"{'' if ok else ', findings'}: "
                          + " ".join(os.path.relpath(p, root) for p in paths[:3]), flush=True)
                if ok:
                    for _, entry in group:
                        if id(entry) in markers:
                            open(markers[id(entry)], "w").close()
                else:
                    failed += paths
                    print_new_findings(text, seen)
    wall = time.monotonic() - start
    print(f"run_clang_tidy: {len(entries)} translation units ({len(entries) - len(pending)} "
          f"unchanged since a clean run; the rest in {len(groups)} groups, {runs} clang-tidy "
          f"runs), {len(failed)} in groups with findings; {wall:.0f} s, {cpu:.0f} s of CPU, "
          f"{jobs} jobs")
    for p in failed:
        print(f"  {os.path.relpath(p, root)}")
    included = {h for path, _ in entries for h in deps.get(path, [])}
    unchecked = [h for h in product_headers(root) if os.path.join(root, h) not in included]
    if not wanted:
        print(f"run_clang_tidy: {len(unchecked)} product headers included by no checked "
              f"translation unit (not checked): {' '.join(unchecked)}")
    return 1 if failed else 0


def self_test():
    """A synthetic tree: a bad name in a header, in a .cc, in each of two files that do not
    compile as one TU though the grouping cannot tell, and in each of two mains, must all be
    found, once each; the clean files must pass."""
    with tempfile.TemporaryDirectory() as root:
        def write(rel, text):
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        with open(os.path.join(repo_root(), ".clang-tidy")) as f:
            config = re.sub(r"^HeaderFilterRegex:.*$", "HeaderFilterRegex: '^(lib)/'", f.read(),
                            flags=re.M)
        write(".clang-tidy", config)
        write("lib/api.h", "#ifndef VLLM_LIB_API_H_\n#define VLLM_LIB_API_H_\nnamespace lib {\n"
              "constexpr int kFine = 1;\nint headerFunction();\n}  // namespace lib\n#endif\n")
        write("lib/a.cc", '#include "lib/api.h"\nnamespace lib {\n'
              "int A() {\n  int BadLocal = kFine;\n  return BadLocal;\n}\n}  // namespace lib\n")
        write("lib/clean.cc", '#include "lib/api.h"\nnamespace lib {\nnamespace {\n'
              "constexpr int kShared = 2;\n}  // namespace\nint Clean() { return kShared; }\n"
              "}  // namespace lib\n")
        # Indented, so the grouping does not see that both define Helper.
        for name in ("c", "d"):
            write(f"lib/{name}.cc", "namespace lib {\n  static int Helper() { return 1; }\n"
                  f"int {name.upper()}() {{\n  const int Bad_{name} = Helper();\n"
                  f"  return Bad_{name};\n}}\n}}  // namespace lib\n")
        for name in ("m1", "m2"):
            write(f"lib/{name}.cc", f"int main() {{\n  int Bad{name.upper()} = 0;\n"
                  f"  return Bad{name.upper()};\n}}\n")
        sources = ["a", "clean", "c", "d", "m1", "m2"]
        build = os.path.join(root, "build")
        write("build/compile_commands.json", json.dumps([
            {"directory": build, "file": os.path.join(root, f"lib/{s}.cc"),
             "command": f"c++ -std=c++20 -I{root} -Werror -Wall -c {root}/lib/{s}.cc -o {s}.o"}
            for s in sources]))
        subprocess.run(["git", "init", "-q", root], check=True)
        subprocess.run(["git", "-C", root, "add", "."], check=True)
        import contextlib
        import io
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code = check(root, build, 2, [], deps={}, cache_dir=os.path.join(root, "cache"))
        text = buf.getvalue()
        expect = ["lib/api.h:5:5: error: invalid case style for function 'headerFunction'",
                  "lib/a.cc:4:7: error: invalid case style for variable 'BadLocal'",
                  "lib/c.cc:4:13: error: invalid case style for variable 'Bad_c'",
                  "lib/d.cc:4:13: error: invalid case style for variable 'Bad_d'",
                  "lib/m1.cc:2:7: error: invalid case style for variable 'BadM1'",
                  "lib/m2.cc:2:7: error: invalid case style for variable 'BadM2'"]
        counts = {e: text.count(e) for e in expect}
        wrong = [e for e, n in counts.items() if n != 1]
        # One group of six that does not compile (two Helper()s), split into two that do (the
        # two mains in one of them).
        if "the rest in 1 groups, 3 clang-tidy runs" not in text:
            wrong.append("the rest in 1 groups, 3 clang-tidy runs")
        if code != 1 or wrong or "lib/clean.cc" in text.split("in groups with findings")[0]:
            print("self-test FAILED: expected once each", wrong, "in:\n" + text)
            return 1
    print("run_clang_tidy self-test: ok")
    return 0


def main(argv):
    args = argv[1:]
    if args == ["--self-test"]:
        return self_test()
    if not args or args[0].startswith("-"):
        print(__doc__)
        return 2
    build_dir = os.path.abspath(args.pop(0))
    jobs = os.cpu_count() or 2
    if args[:1] == ["-j"] and len(args) >= 2:
        jobs = int(args[1])
        args = args[2:]
    return check(repo_root(), build_dir, jobs, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
