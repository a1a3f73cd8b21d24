#!/usr/bin/env bash
# Installs every dependency from Debian packages (idempotent), then configures and builds
# (the tsan preset also downloads Debian's Abseil source once; see fetch_abseil_source), and
# XGrammar's C++ sources from its PyPI sdist once (every preset; see fetch_xgrammar_source).
#
#   scripts/setup.sh                   release build in build/release (CUDA compiled when nvcc
#                                      exists)
#   scripts/setup.sh asan              ASan+UBSan build (clang, no CUDA) in build/asan: the unit
#                                      tests and the libFuzzer targets share its objects (every
#                                      library is compiled once, with libFuzzer's coverage
#                                      instrumentation, at -O1; docs/FUZZING.md)
#   scripts/setup.sh fuzz              the libFuzzer targets only, in the same build/asan
#   scripts/setup.sh tsan              TSan build (clang) in build/tsan, no CUDA, with Abseil
#                                      built from Debian's source of the installed libabsl-dev
#                                      (downloaded once into build/third_party/, sha256-checked)
#                                      so that TSan sees absl::Mutex's synchronisation
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
  libiceoryx-posh-dev libiceoryx-hoofs-dev iceoryx  # ipc_bench's iceoryx peer (iox-roudi)
  libcli11-dev nlohmann-json3-dev libxxhash-dev libgtest-dev libbenchmark-dev
  libopenblas-dev libgloo-dev libpcre2-dev libutf8proc-dev libsodium-dev
  procps iproute2 iptables python3 ccache clang-format clang-tidy  # iptables: multinode_partition_test
  libyaml-cpp-dev  # vllm-launch serve --config FILE.yaml (launcher/serve_config_file.cc)
  curl patch xz-utils  # Abseil's and XGrammar's sources (fetch_abseil_source, fetch_xgrammar_source)
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

# Abseil for the TSan build. Debian's libabsl is not built with TSan, so TSan cannot see
# absl::Mutex, absl::CondVar or absl::Notification synchronise and reports every access they
# guard. The tsan preset builds Abseil itself, from Debian's source package of the installed
# libabsl-dev with Debian's patches applied (the same options.h: absl::string_view its own type,
# inline namespace debian3, hardened), as part of our CMake build (VLLM_ABSL_SOURCE_DIR,
# cmake/AbseilFromSource.cmake). Downloaded once into build/third_party/ (never committed) from
# Debian's pool ($DEBIAN_MIRROR, default deb.debian.org) and checked against the sha256 sums of
# Debian's abseil_20220623.1-1+deb12u2.dsc.
ABSL_DEB_VERSION=20220623.1-1+deb12u2
ABSL_ORIG=abseil_20220623.1.orig.tar.gz
ABSL_ORIG_SHA256=abfe2897f3a30edaa74bc34365afe3c2a3cd012091a97dc7e008f7016adcd5fe
ABSL_DEBIAN=abseil_${ABSL_DEB_VERSION}.debian.tar.xz
ABSL_DEBIAN_SHA256=e08490fc7b6f3beca1925953b0c4fb92df2de5e2a01295e4641e2a3d4e528eeb
ABSL_POOL=${DEBIAN_MIRROR:-http://deb.debian.org/debian}/pool/main/a/abseil
ABSL_SOURCE_DIR=$PWD/build/third_party/abseil-${ABSL_DEB_VERSION}

# download_checked <file> <sha256> [<url>]: into build/third_party/downloads/, unless already
# there (default url: Debian's abseil pool).
download_checked() {
  local file=$1 sha=$2 url=${3:-$ABSL_POOL/$1} dir=build/third_party/downloads
  mkdir -p "$dir"
  if ! echo "$sha  $dir/$file" | sha256sum --check --status 2>/dev/null; then
    echo "setup: downloading $url"
    curl -fsSL --retry 3 -o "$dir/$file.part" "$url"
    if ! echo "$sha  $dir/$file.part" | sha256sum --check --status; then
      echo "setup: $file does not have the pinned sha256 $sha" >&2; exit 1
    fi
    mv "$dir/$file.part" "$dir/$file"
  fi
}

fetch_abseil_source() {
  [[ -f "$ABSL_SOURCE_DIR/.vllm-patched" ]] && return
  local installed
  installed=$(dpkg-query -W -f='${Version}' libabsl-dev 2>/dev/null || true)
  if [[ $installed != "$ABSL_DEB_VERSION" ]]; then
    echo "setup: warning: libabsl-dev is '$installed'; the TSan build's Abseil is" \
         "$ABSL_DEB_VERSION (update ABSL_* above to match)" >&2
  fi
  download_checked "$ABSL_ORIG" "$ABSL_ORIG_SHA256"
  download_checked "$ABSL_DEBIAN" "$ABSL_DEBIAN_SHA256"
  local tmp=$ABSL_SOURCE_DIR.tmp
  rm -rf "$tmp" && mkdir -p "$tmp"
  tar -xzf "build/third_party/downloads/$ABSL_ORIG" -C "$tmp" --strip-components=1
  tar -xJf "build/third_party/downloads/$ABSL_DEBIAN" -C "$tmp"
  local p
  while read -r p; do
    [[ -z $p || $p == \#* ]] && continue
    patch -d "$tmp" -p1 --quiet --forward < "$tmp/debian/patches/$p"
  done < "$tmp/debian/patches/series"
  touch "$tmp/.vllm-patched"
  rm -rf "$ABSL_SOURCE_DIR" && mv "$tmp" "$ABSL_SOURCE_DIR"
}

# XGrammar, the grammar engine of structured outputs (vLLM's default backend; structured_output/).
# Its PyPI sdist carries the C++ core (include/, cpp/, 3rdparty/picojson, 3rdparty/dlpack); the
# wheel holds only the Python extension. Downloaded once from PyPI's file host ($PYPI_FILES,
# default files.pythonhosted.org; the path is PyPI's for this exact file) and checked against
# the sha256 PyPI lists for it. cmake/XGrammarFromSource.cmake compiles its C++ core into a
# static library with our own target definition (XGrammar's CMakeLists adds -flto and -Werror
# globally, and builds Python bindings).
XGRAMMAR_VERSION=0.2.8
XGRAMMAR_SDIST=xgrammar-${XGRAMMAR_VERSION}.tar.gz
XGRAMMAR_SDIST_SHA256=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
XGRAMMAR_URL=${PYPI_FILES:-https://files.pythonhosted.org}/packages/03/0f/29f521535729be740779c2c98b630ef6607cf28be9b669895dd2b821ff63/${XGRAMMAR_SDIST}
XGRAMMAR_SOURCE_DIR=$PWD/build/third_party/xgrammar-${XGRAMMAR_VERSION}

fetch_xgrammar_source() {
  [[ -f "$XGRAMMAR_SOURCE_DIR/.vllm-extracted" ]] && return
  download_checked "$XGRAMMAR_SDIST" "$XGRAMMAR_SDIST_SHA256" "$XGRAMMAR_URL"
  local tmp=$XGRAMMAR_SOURCE_DIR.tmp top=xgrammar-${XGRAMMAR_VERSION}
  rm -rf "$tmp" && mkdir -p "$tmp"
  tar -xzf "build/third_party/downloads/$XGRAMMAR_SDIST" -C "$tmp" --strip-components=1 \
    "$top/LICENSE" "$top/NOTICE" "$top/include" "$top/cpp" "$top/3rdparty/picojson" \
    "$top/3rdparty/dlpack/include" "$top/3rdparty/dlpack/LICENSE"
  touch "$tmp/.vllm-extracted"
  rm -rf "$XGRAMMAR_SOURCE_DIR" && mv "$tmp" "$XGRAMMAR_SOURCE_DIR"
}

configure_and_build() {
  local preset=$1; shift
  local targets=("$@") dir args=(-G Ninja -DVLLM_WERROR=${VLLM_WERROR:-ON}
                                   "-DVLLM_XGRAMMAR_SOURCE_DIR=$XGRAMMAR_SOURCE_DIR")
  fetch_xgrammar_source
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
    tsan)
      fetch_abseil_source
      args+=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang
             -DVLLM_SANITIZE=thread -DVLLM_CUDA=OFF -DVLLM_BUILD_BENCH=OFF
             "-DVLLM_ABSL_SOURCE_DIR=$ABSL_SOURCE_DIR") ;;
    *) echo "setup: unknown preset '$preset' (release, asan, fuzz, tsan)" >&2; exit 2 ;;
  esac
  # A tree configured without these sources (before they were built from source, or from another
  # version) is configured again.
  local absl_line="VLLM_ABSL_SOURCE_DIR:PATH=$ABSL_SOURCE_DIR"
  local xgrammar_line="VLLM_XGRAMMAR_SOURCE_DIR:PATH=$XGRAMMAR_SOURCE_DIR"
  if [[ ! -f "$dir/build.ninja" ]] || ! grep -qxF "$xgrammar_line" "$dir/CMakeCache.txt" ||
     { [[ $preset == tsan ]] && ! grep -qxF "$absl_line" "$dir/CMakeCache.txt"; }; then
    cmake -S . -B "$dir" "${args[@]}"
  fi
  cmake --build "$dir" -j "${VLLM_JOBS:-$(nproc)}" ${targets[@]+--target "${targets[@]}"}
}

install_packages
configure_and_build "${@:-release}"
