#!/usr/bin/env bash
# Runs CMD on the GPU machine with the binaries and libraries packed by tools/gpu_bundle.sh
# (unpacked into .gpu/ on first use; binaries land in .gpu/bin), after making the checkout
# reachable at the path the binaries were built with (tests find fixtures there).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[[ -d "$root/.gpu/bin" ]] || tar -C "$root/.gpu" -xJf "$root/.gpu/bundle.tar.xz"
src=${VLLM_BUILT_SOURCE_DIR:-/work/main}
if [[ "$root" != "$src" && ! -e "$src" ]]; then mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"; fi
cuda_libs=$(dirname "$(find / -xdev -name 'libcublasLt.so.13' 2>/dev/null | head -1)")
nccl_libs=$(dirname "$(find / -xdev -name 'libnccl.so.2' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$root/.gpu/lib:$cuda_libs:$nccl_libs:${LD_LIBRARY_PATH:-}"
exec "$@"
