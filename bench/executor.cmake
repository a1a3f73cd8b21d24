# Executor round trip: empty step and 256-request decode step, uni vs mp.
if(TARGET frontend_engine)
  add_executable(executor_bench executor_bench.cc)
  target_link_libraries(executor_bench PRIVATE frontend_engine)
  target_compile_definitions(executor_bench PRIVATE VLLM_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  vllm_target_defaults(executor_bench)
  add_dependencies(executor_bench vllm-launch)
endif()
