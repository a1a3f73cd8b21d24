#!/usr/bin/env bash
# Packs release binaries and the shared libraries they need (except the C runtime and CUDA's,
# which the GPU machine has) into .gpu/, for running GPU tests and benchmarks on a lent GPU
# machine that lacks the Debian packages (the `device` tool carries .gpu/ there).
#
#   tools/gpu_bundle.sh BIN...        # names under build/release/bin
# On the GPU machine: tools/gpu_run.sh CMD... (sets LD_LIBRARY_PATH, then runs CMD).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libgcc_s|libstdc\+\+|libcudart|libcublas|libnccl|libcuda\.so)'
for b in "$@"; do
  cp -L "build/release/bin/$b" .gpu/bin/
  ldd "build/release/bin/$b" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
    [[ $name =~ $skip ]] || cp -Lu "$path" ".gpu/lib/$name"
  done
done
du -sh .gpu
