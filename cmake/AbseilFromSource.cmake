# Abseil built from source as part of this build, for the TSan preset (scripts/setup.sh tsan
# downloads Debian's source of the installed libabsl-dev, with Debian's patches, and sets
# VLLM_ABSL_SOURCE_DIR). Debian's libabsl_*.so are not built with TSan: TSan would see none of
# absl::Mutex's, absl::CondVar's or absl::Notification's synchronisation and report every access
# they guard. Built here, Abseil's sources get the sanitizer flags of cmake/Warnings.cmake
# (add_compile_options, inherited by this subdirectory) and the same absl:: target names as
# find_package(absl), as static libraries.
#  - EXCLUDE_FROM_ALL: only the absl:: targets our targets link are built.
#  - SYSTEM: Abseil's headers are system headers for our code, as /usr/include's are, so our
#    -Wall -Wextra -Werror (vllm_target_defaults, only on our targets) stay off them; Abseil's
#    own sources compile with Abseil's own warning flags, never -Werror.
#  - ABSL_PROPAGATE_CXX_STD: Abseil's targets require our C++ standard (20).
if(NOT VLLM_ABSL_SOURCE_DIR)
  return()
endif()
if(NOT EXISTS ${VLLM_ABSL_SOURCE_DIR}/absl/base/options.h)
  message(FATAL_ERROR "VLLM_ABSL_SOURCE_DIR=${VLLM_ABSL_SOURCE_DIR} is not an Abseil source tree")
endif()
set(ABSL_PROPAGATE_CXX_STD ON)
set(ABSL_ENABLE_INSTALL OFF)
set(ABSL_BUILD_TESTING OFF)
add_subdirectory(${VLLM_ABSL_SOURCE_DIR} ${CMAKE_BINARY_DIR}/third_party/abseil EXCLUDE_FROM_ALL
                 SYSTEM)
message(STATUS "vllm-launch: Abseil from ${VLLM_ABSL_SOURCE_DIR}")
