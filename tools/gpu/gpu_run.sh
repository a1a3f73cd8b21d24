#!/usr/bin/env bash
# Runs CMD on the GPU machine with the binaries and libraries packed by tools/gpu/gpu_bundle.sh
# (unpacked into .gpu/ on first use; binaries land in .gpu/bin), after making the checkout
# reachable at the path the binaries were built with (tests find fixtures there).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
[[ -d "$root/.gpu/bin" ]] || tar -C "$root/.gpu" -xJf "$root/.gpu/bundle.tar.xz"
src=${VLLM_BUILT_SOURCE_DIR:-/work/main}
if [[ "$root" != "$src" && ! -e "$src" ]]; then mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"; fi
# The directories of cuBLASLt and NCCL, found once (a search of the disk) and kept in .gpu/.
if [[ ! -s "$root/.gpu/ld_path" ]]; then
  find_lib() { dirname "$(find /usr/local /usr/lib /opt / -xdev -name "$1" 2>/dev/null | head -1)"; }
  echo "$(find_lib libcublasLt.so.13):$(find_lib libnccl.so.2)" >"$root/.gpu/ld_path"
fi
export LD_LIBRARY_PATH="$root/.gpu/lib:$(cat "$root/.gpu/ld_path"):${LD_LIBRARY_PATH:-}"
exec "$@"
