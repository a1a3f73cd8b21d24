# VLLM_FUZZ: the libFuzzer build (tests/fuzz/, docs/FUZZING.md; scripts/setup.sh fuzz).
# Every library is compiled with -fsanitize=fuzzer-no-link,address,undefined so that libFuzzer
# sees its coverage and ASan/UBSan check it; the fuzz targets link -fsanitize=fuzzer (which
# brings libFuzzer's main). Any UBSan report aborts (-fno-sanitize-recover), so libFuzzer
# records it as a crash. Needs clang and libclang-rt-<version>-dev; no CUDA, no benchmarks.
# The unit tests build in the same tree (scripts/setup.sh asan): they run under ASan+UBSan on
# the same objects (the coverage hooks are the sanitizer runtime's no-ops outside a fuzzer).
if(NOT VLLM_FUZZ)
  return()
endif()
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "VLLM_FUZZ=ON needs clang: configure with -DCMAKE_CXX_COMPILER=clang++ "
                      "(or run scripts/setup.sh fuzz)")
endif()
if(VLLM_SANITIZE)
  message(FATAL_ERROR "VLLM_FUZZ=ON sets its own sanitizers: leave VLLM_SANITIZE empty")
endif()
if(VLLM_HAVE_CUDA)
  message(FATAL_ERROR "VLLM_FUZZ=ON builds no CUDA code: configure with -DVLLM_CUDA=OFF")
endif()
add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link,address,undefined>
                    $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>
                    $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
add_link_options(-fsanitize=address,undefined)
message(STATUS "vllm-launch: libFuzzer + ASan/UBSan build (tests/fuzz and the unit tests)")
