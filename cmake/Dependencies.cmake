# Third-party dependencies, all from Debian packages (scripts/setup.sh installs them; its tsan
# preset builds Abseil from Debian's source package instead: cmake/AbseilFromSource.cmake).
# Package -> target names are recorded in ../shared/TOOLCHAIN.md.
find_package(Threads REQUIRED)
# Abseil: Debian's libabsl-dev, or (the TSan build) its source built with our sanitizer flags,
# which cmake/AbseilFromSource.cmake adds once those flags are set.
set(VLLM_ABSL_SOURCE_DIR "" CACHE PATH
    "Build Abseil from this source tree (scripts/setup.sh tsan) instead of Debian's libabsl")
if(NOT VLLM_ABSL_SOURCE_DIR)
  find_package(absl REQUIRED)
endif()
find_package(Boost 1.74 REQUIRED)
find_package(cppzmq CONFIG REQUIRED)
find_package(msgpack CONFIG REQUIRED)   # target msgpackc-cxx (header-only msgpack-c 4.x)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 CONFIG REQUIRED)   # target CLI11::CLI11 (header-only, launcher flags)
find_package(PkgConfig REQUIRED)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)   # target PkgConfig::XXHASH
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)    # target PkgConfig::PCRE2 (tokenizer regex)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc) # target PkgConfig::UTF8PROC (NFC/NFKC)
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)     # target PkgConfig::SODIUM (report MACs)
# CPU GEMMs: OpenBLAS (libopenblas-dev) through the BLAS alternatives; cblas.h from OpenBLAS.
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_path(VLLM_CBLAS_INCLUDE_DIR cblas.h
          PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas
          /usr/include/x86_64-linux-gnu /usr/include REQUIRED)
find_package(GTest REQUIRED)
if(VLLM_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

# CUDA: compiled and linked whenever nvcc is present, so CI proves it without a GPU.
set(VLLM_HAVE_CUDA OFF)
if(NOT VLLM_CUDA STREQUAL "OFF")
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # nvcc 13 dropped the architectures CMake would pick by default; H100/H200 are sm_90.
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 does not know nvcc 13 supports CUDA20
    find_package(CUDAToolkit REQUIRED)
    find_library(NCCL_LIBRARY nccl PATHS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
    set(VLLM_HAVE_CUDA ON)
  elseif(VLLM_CUDA STREQUAL "ON")
    message(FATAL_ERROR "VLLM_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "vllm-launch: CUDA backend ${VLLM_HAVE_CUDA}, sanitizers '${VLLM_SANITIZE}'")
