# The serving stack's own overhead per request: in-process LLMEngine vs vllm-launch over HTTP.
# A driver, not a test: run it by hand (docs/BENCHMARKS.md, "Serving").
if(TARGET frontend_engine)
  add_executable(serve_overhead serve_overhead.cc)
  target_link_libraries(serve_overhead PRIVATE frontend_engine bench_support
                        nlohmann_json::nlohmann_json)
  target_compile_definitions(serve_overhead PRIVATE VLLM_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  vllm_target_defaults(serve_overhead)
  add_dependencies(serve_overhead vllm-launch)
endif()
