#!/usr/bin/env python3
"""Fails when a tracked C++/CUDA source is not formatted as .clang-format says.

    tools/lint/check_format.py [REPO_ROOT]    exit 0: clean; 1: files to reformat (listed)

Runs Debian 12's clang-format (14; scripts/setup.sh installs it) in --dry-run mode over every
.h .cc .cu .cuh file git tracks. Fix a file with `clang-format -i FILE`.
"""
import os
import shutil
import subprocess
import sys

SUFFIXES = (".h", ".cc", ".cu", ".cuh")


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    tool = shutil.which("clang-format")
    if tool is None:
        print("check_format: clang-format is not installed (scripts/setup.sh installs it)")
        return 1
    files = [p for p in subprocess.run(["git", "-C", root, "ls-files"], check=True,
                                       capture_output=True, text=True).stdout.split("\n")
             if p.endswith(SUFFIXES) and os.path.isfile(os.path.join(root, p))]
    bad = []
    for i in range(0, len(files), 64):
        chunk = files[i:i + 64]
        r = subprocess.run([tool, "--dry-run", "-Werror", "--style=file"] + chunk, cwd=root,
                           capture_output=True, text=True)
        if r.returncode != 0:
            bad += sorted({line.split(":", 1)[0] for line in r.stderr.splitlines()
                           if "error:" in line or "warning:" in line})
    for f in bad:
        print(f"{f}: not formatted (clang-format -i {f})")
    print(f"check_format: {len(files)} files, {len(bad)} to reformat")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
