# XGrammar's C++ core (structured outputs' grammar engine, vLLM's default backend), compiled
# from the sources of its PyPI sdist that scripts/setup.sh downloads (sha256-pinned) into
# build/third_party/ and names in VLLM_XGRAMMAR_SOURCE_DIR. Target `xgrammar`, a static library.
#  - Our own target definition, not XGrammar's CMakeLists.txt: that one adds -flto=auto and
#    -Werror to the global flags and builds the Python bindings (cpp/tvm_ffi/, left out here).
#  - C++17, XGrammar's standard (its sources predate C++20's char8_t u8 literals).
#  - Its headers and picojson/dlpack are system headers for our code (our -Werror stays off
#    them); its sources compile without our warning flags (vllm_target_defaults is ours only)
#    and with the sanitizer and libFuzzer coverage flags of cmake/Warnings.cmake and
#    cmake/Fuzz.cmake, which add_compile_options gives every target defined after them (so the
#    fuzz target of the request -> grammar path sees XGrammar's coverage and ASan checks it).
set(VLLM_XGRAMMAR_SOURCE_DIR "" CACHE PATH
    "XGrammar's sdist sources (include/, cpp/, 3rdparty/): scripts/setup.sh downloads them")
if(NOT EXISTS ${VLLM_XGRAMMAR_SOURCE_DIR}/include/xgrammar/xgrammar.h)
  message(FATAL_ERROR
          "VLLM_XGRAMMAR_SOURCE_DIR='${VLLM_XGRAMMAR_SOURCE_DIR}' holds no XGrammar sources: "
          "configure through scripts/setup.sh, which downloads them into build/third_party/")
endif()
file(GLOB_RECURSE VLLM_XGRAMMAR_SOURCES CONFIGURE_DEPENDS ${VLLM_XGRAMMAR_SOURCE_DIR}/cpp/*.cc)
list(FILTER VLLM_XGRAMMAR_SOURCES EXCLUDE REGEX "/cpp/tvm_ffi/")
add_library(xgrammar STATIC ${VLLM_XGRAMMAR_SOURCES})
set_target_properties(xgrammar PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
                                          POSITION_INDEPENDENT_CODE ON)
target_include_directories(xgrammar SYSTEM PUBLIC ${VLLM_XGRAMMAR_SOURCE_DIR}/include
                           ${VLLM_XGRAMMAR_SOURCE_DIR}/3rdparty/picojson
                           ${VLLM_XGRAMMAR_SOURCE_DIR}/3rdparty/dlpack/include)
target_compile_definitions(xgrammar PUBLIC XGRAMMAR_ENABLE_CPPTRACE=0
                                           XGRAMMAR_ENABLE_INTERNAL_CHECK=0)
target_compile_options(xgrammar PRIVATE -w)
find_package(Threads REQUIRED)
target_link_libraries(xgrammar PUBLIC Threads::Threads)
message(STATUS "vllm-launch: XGrammar from ${VLLM_XGRAMMAR_SOURCE_DIR}")
