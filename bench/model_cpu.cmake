# CPU model throughput through the in-process engine: prefill and decode tokens/s.
if(TARGET frontend_engine)
  add_executable(model_cpu_bench model_cpu_bench.cc)
  target_link_libraries(model_cpu_bench PRIVATE frontend_engine)
  target_compile_definitions(model_cpu_bench PRIVATE VLLM_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  vllm_target_defaults(model_cpu_bench)
endif()

# Token-id generation driver for the in-process engine (samples for notes and docs).
if(TARGET frontend_engine)
  add_executable(llm_generate llm_generate.cc)
  target_link_libraries(llm_generate PRIVATE frontend_engine)
  target_compile_definitions(llm_generate PRIVATE VLLM_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  vllm_target_defaults(llm_generate)
endif()
