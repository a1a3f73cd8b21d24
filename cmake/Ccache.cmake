# ccache (Debian's `ccache`, installed by scripts/setup.sh) in front of every compiler of every
# preset, so a second build of the same sources -- another preset's CI run, a fresh clone in
# another folder, a helper's worktree -- compiles only what changed.
#  - CCACHE_BASEDIR makes the paths in each command relative to the source tree and
#    CCACHE_NOHASHDIR leaves the build directory out of the hash, so clones in different
#    folders share entries (the debug info then names the first clone's paths).
#  - The cache is ccache's default (~/.cache/ccache), capped at VLLM_CCACHE_MAXSIZE.
#  - -DVLLM_CCACHE=OFF builds without it.
option(VLLM_CCACHE "Compile through ccache when it is installed" ON)
set(VLLM_CCACHE_MAXSIZE "12G" CACHE STRING "ccache's size cap (ccache's max_size)")
if(VLLM_CCACHE)
  find_program(VLLM_CCACHE_PROGRAM ccache)
  if(VLLM_CCACHE_PROGRAM)
    set(_vllm_launcher ${CMAKE_COMMAND} -E env
        CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} CCACHE_NOHASHDIR=1
        CCACHE_MAXSIZE=${VLLM_CCACHE_MAXSIZE} ${VLLM_CCACHE_PROGRAM})
    set(CMAKE_C_COMPILER_LAUNCHER ${_vllm_launcher})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${_vllm_launcher})
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${_vllm_launcher})
    message(STATUS "vllm-launch: compiling through ${VLLM_CCACHE_PROGRAM}")
  endif()
endif()
