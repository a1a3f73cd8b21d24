# Warning flags for our own targets (not third-party code) and sanitizer flags for everything.
set(VLLM_CXX_WARNINGS -Wall -Wextra -Wno-unused-parameter)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  list(APPEND VLLM_CXX_WARNINGS -Wthread-safety)
endif()
if(VLLM_WERROR)
  list(APPEND VLLM_CXX_WARNINGS -Werror)
endif()

# vllm_target_defaults(<target>): applies our warning set to a target we own.
function(vllm_target_defaults target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${VLLM_CXX_WARNINGS}>)
endfunction()

if(VLLM_SANITIZE)
  string(REPLACE ";" "," _san "${VLLM_SANITIZE}")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${_san}>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${_san})
endif()
