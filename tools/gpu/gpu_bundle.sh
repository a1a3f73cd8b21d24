#!/usr/bin/env bash
# Packs release binaries and the shared libraries they need (except the C runtime and CUDA's,
# which the GPU machine has) into .gpu/bundle.tar.xz, for running GPU tests and benchmarks on
# a lent GPU machine that lacks the Debian packages (the `device` tool carries .gpu/ there;
# compressed because its transfer limit is 64 MiB and OpenBLAS alone is 35 MB).
#
#   tools/gpu/gpu_bundle.sh BIN...        # names under build/release/bin
# On the GPU machine: tools/gpu/gpu_run.sh CMD... (unpacks, sets LD_LIBRARY_PATH, runs CMD).
set -euo pipefail
cd "$(dirname "$0")/../.."
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libgcc_s|libstdc\+\+|libcudart|libcublas|libnccl|libcuda\.so)'
for b in "$@"; do
  cp -L "build/release/bin/$b" "$stage/bin/" && strip --strip-debug "$stage/bin/$b"
  ldd "build/release/bin/$b" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
    [[ $name =~ $skip || -e "$stage/lib/$name" ]] && continue
    cp -L "$path" "$stage/lib/$name" && strip --strip-debug "$stage/lib/$name"
  done
done
rm -rf .gpu && mkdir -p .gpu
tar -C "$stage" -cJf .gpu/bundle.tar.xz bin lib
du -sh .gpu/bundle.tar.xz
