#!/usr/bin/env bash
# Installs every dependency from Debian packages (idempotent), then configures and builds.
#
#   scripts/setup.sh                   release build in build/release (CUDA compiled when nvcc
#                                      exists)
#   scripts/setup.sh asan              ASan+UBSan build (clang, no CUDA) in build/asan: the unit
#                                      tests and the libFuzzer targets share its objects (every
#                                      library is compiled once, with libFuzzer's coverage
#                                      instrumentation, at -O1; docs/FUZZING.md)
#   scripts/setup.sh fuzz              the libFuzzer targets only, in the same build/asan
#   scripts/setup.sh tsan              TSan build (clang) in build/tsan, no CUDA
#   scripts/setup.sh PRESET TARGET...  build only these targets
#
# Every compile goes through ccache (cmake/Ccache.cmake), so a second build of unchanged
# sources, in this tree or a clone elsewhere, takes seconds.
# Set VLLM_JOBS to change build parallelism (default: number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev
  libzmq3-dev cppzmq-dev libboost-dev libmsgpack-cxx-dev libabsl-dev libspdlog-dev
  libcli11-dev nlohmann-json3-dev libxxhash-dev libgtest-dev libbenchmark-dev
  libopenblas-dev libgloo-dev libpcre2-dev libutf8proc-dev libsodium-dev
  procps iproute2 python3 ccache clang-format clang-tidy
)

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    local sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
}

configure_and_build() {
  local preset=$1; shift
  local targets=("$@") dir args=(-G Ninja -DVLLM_WERROR=${VLLM_WERROR:-ON})
  dir="build/${preset}"
  case "$preset" in
    release) args+=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
    # OSS-Fuzz's optimisation level; NDEBUG stays unset so assert()s (nlohmann's too) fire.
    asan|fuzz)
      dir=build/asan
      args+=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only"
             -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DVLLM_FUZZ=ON
             -DVLLM_CUDA=OFF -DVLLM_BUILD_BENCH=OFF)
      [[ $preset == fuzz && ${#targets[@]} -eq 0 ]] && targets=(fuzzers) ;;
    tsan) args+=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang
                 -DVLLM_SANITIZE=thread -DVLLM_CUDA=OFF -DVLLM_BUILD_BENCH=OFF) ;;
    *) echo "setup: unknown preset '$preset' (release, asan, fuzz, tsan)" >&2; exit 2 ;;
  esac
  [[ -f "$dir/build.ninja" ]] || cmake -S . -B "$dir" "${args[@]}"
  cmake --build "$dir" -j "${VLLM_JOBS:-$(nproc)}" ${targets[@]+--target "${targets[@]}"}
}

install_packages
configure_and_build "${@:-release}"
