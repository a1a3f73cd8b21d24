#!/usr/bin/env python3
"""Fails on a product source file over 800 lines or a non-kernel function over 120 lines.

    tools/lint/check_sizes.py [REPO_ROOT]   exit 0: clean; 1: violations (listed); 2: usage;
                                            77: lizard is not installed (ctest: skipped;
                                            1 with VLLM_LINT_STRICT=1, as scripts/test.sh sets)
    tools/lint/check_sizes.py --self-test   checks the checker on a synthetic tree
    tools/lint/check_sizes.py --report      prints every file and function over the limits,
                                            exceptions included, with counts

Product files: C++ and CUDA sources (.h .cc .cu .cuh .inc) that git tracks, outside tests/
(bench/ and tools/ count: they are run by users). A file's size is its line count; a
function's is lizard's "length": from its first line to its closing brace
(https://github.com/terryyin/lizard, pinned in scripts/test.sh, which installs it into
build/release/pydeps).

STYLE.md's rule 8: a file that passes ~800 lines or mixes two concerns is split; a function
that needs a comment to say where its parts begin is several functions. The exceptions below
are the ones that rule does not serve, each with its reason. An exception that no longer
exceeds its limit is reported too, so the lists only shrink.
"""
import os
import subprocess
import sys
import tempfile

MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 120
SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh", ".inc")
NOT_PRODUCT = ("tests/",)

# path -> reason.
FILE_EXCEPTIONS = {}

# (path, lizard's function name) -> reason.
FUNCTION_EXCEPTIONS = {
    ("kernels/cuda/attention_decode.cu", "vllm::kernels::cuda::detail::DecodeKernel"):
        "a CUDA kernel: one __global__ body whose registers and shared memory are planned as a "
        "whole (split-K decode attention); its phases are __device__ helpers already",
    ("kernels/cuda/attention_prefill.cu", "vllm::kernels::cuda::detail::PrefillKernel"):
        "a CUDA kernel: one __global__ body (tiled prefill attention with online softmax); "
        "splitting it would move register-resident state through memory",
}


def product_files(root):
    out = subprocess.run(["git", "-C", root, "ls-files"], check=True, capture_output=True,
                         text=True).stdout.split("\n")
    return sorted(p for p in out
                  if p.endswith(SOURCE_SUFFIXES) and not p.startswith(NOT_PRODUCT)
                  and os.path.isfile(os.path.join(root, p)))


def measure(root, paths, lizard):
    """Returns ([(path, lines)], [(path, function, start_line, length)]) over the limits."""
    long_files, long_functions = [], []
    for rel in paths:
        path = os.path.join(root, rel)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if lines > MAX_FILE_LINES:
            long_files.append((rel, lines))
        # .cu/.cuh/.inc are C++ to lizard; name the file .cc so it picks the C++ reader.
        info = lizard.analyze_file.analyze_source_code(rel + ".cc", text)
        for fn in info.function_list:
            if fn.length > MAX_FUNCTION_LINES:
                long_functions.append((rel, fn.name, fn.start_line, fn.length))
    return long_files, long_functions


def check(root, lizard, file_exceptions, function_exceptions, report=False):
    """Prints the violations; returns the process exit code."""
    long_files, long_functions = measure(root, product_files(root), lizard)
    errors = []
    for rel, lines in long_files:
        if rel not in file_exceptions:
            errors.append(f"{rel}: {lines} lines (limit {MAX_FILE_LINES}): split it")
    for rel, name, line, length in long_functions:
        if (rel, name) not in function_exceptions:
            errors.append(f"{rel}:{line}: {name} is {length} lines (limit "
                          f"{MAX_FUNCTION_LINES}): split it")
    found_files = {rel for rel, _ in long_files}
    found_functions = {(rel, name) for rel, name, _, _ in long_functions}
    for rel in sorted(set(file_exceptions) - found_files):
        errors.append(f"{rel}: listed in FILE_EXCEPTIONS but within the limit: remove it")
    for key in sorted(set(function_exceptions) - found_functions):
        errors.append(f"{key[0]}: {key[1]} listed in FUNCTION_EXCEPTIONS but within the limit "
                      "(or gone): remove it")
    if report:
        print(f"files over {MAX_FILE_LINES} lines: {len(long_files)}")
        for rel, lines in long_files:
            print(f"  {rel}: {lines}{' (exception)' if rel in file_exceptions else ''}")
        print(f"functions over {MAX_FUNCTION_LINES} lines: {len(long_functions)}")
        for rel, name, line, length in long_functions:
            tag = " (exception)" if (rel, name) in function_exceptions else ""
            print(f"  {rel}:{line}: {name}: {length}{tag}")
    for e in errors:
        print(e)
    if not errors:
        print(f"check_sizes: ok ({len(long_files)} file and {len(long_functions)} function "
              "exceptions, each with its reason in tools/lint/check_sizes.py)")
    return 1 if errors else 0


def self_test(lizard):
    """A tree with one long file, one long function and one stale exception must fail on all
    three; the same tree with matching exceptions must pass."""
    with tempfile.TemporaryDirectory() as root:
        def write(rel, text):
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        body = "".join(f"  x += {i};\n" for i in range(MAX_FUNCTION_LINES))
        write("core/long_fn.cc", "int Long(int x) {\n" + body + "  return x;\n}\n")
        write("core/short_fn.cc", "int Short(int x) {\n  return x;\n}\n")
        write("ipc/big.h", "// line\n" * (MAX_FILE_LINES + 1))
        write("tests/unit/huge_test.cc", "// line\n" * (MAX_FILE_LINES * 2))
        subprocess.run(["git", "init", "-q", root], check=True)
        subprocess.run(["git", "-C", root, "add", "."], check=True)
        stale = {("core/short_fn.cc", "Short"): "stale"}
        import contextlib
        import io
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            bad = check(root, lizard, {}, stale)
        text = buf.getvalue()
        expect = ["ipc/big.h: 801 lines", "core/long_fn.cc:1: Long is 123 lines",
                  "Short listed in FUNCTION_EXCEPTIONS but within the limit"]
        missing = [e for e in expect if e not in text]
        if bad != 1 or missing or "huge_test" in text:
            print("self-test FAILED: expected", missing, "in:\n" + text)
            return 1
        with contextlib.redirect_stdout(io.StringIO()):
            good = check(root, lizard, {"ipc/big.h": "test"},
                         {("core/long_fn.cc", "Long"): "test"})
        if good != 0:
            print("self-test FAILED: exceptions were not honoured")
            return 1
    print("check_sizes self-test: ok")
    return 0


def main(argv):
    try:
        import lizard  # noqa: F401  (pip: lizard, pinned in scripts/test.sh)
        import lizard as lizard_module
    except ImportError:
        # scripts/test.sh sets VLLM_LINT_STRICT=1: there a missing lizard is a failure.
        strict = os.environ.get("VLLM_LINT_STRICT") == "1"
        print("check_sizes: the Python package 'lizard' is not installed (scripts/test.sh "
              "installs it into build/release/pydeps): " + ("FAILED" if strict else "skipped"))
        return 1 if strict else 77
    args = [a for a in argv[1:] if not a.startswith("--")]
    flags = [a for a in argv[1:] if a.startswith("--")]
    if set(flags) - {"--self-test", "--report"} or len(args) > 1:
        print(__doc__)
        return 2
    if "--self-test" in flags:
        return self_test(lizard_module)
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    return check(root, lizard_module, FILE_EXCEPTIONS, FUNCTION_EXCEPTIONS,
                 report="--report" in flags)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
