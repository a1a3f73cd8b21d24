# CPU model throughput through the in-process engine (issue 4): prefill and decode tokens/s.
if(TARGET frontend)
  add_executable(model_cpu_bench model_cpu_bench.cc)
  target_link_libraries(model_cpu_bench PRIVATE frontend)
  target_compile_definitions(model_cpu_bench PRIVATE VLLM_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  vllm_target_defaults(model_cpu_bench)
endif()
