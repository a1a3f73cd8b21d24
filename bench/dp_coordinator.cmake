# The data-parallel coordinator at scale: 64-1024 simulated engines pushing load reports to one
# core::DpCoordinator process and 8 API-server subscribers, against a plain PULL -> XPUB relay.
# A driver, not a test: run it by hand (docs/BENCHMARKS.md, "Data-parallel coordinator at
# scale").
if(TARGET core)
  add_executable(dp_coordinator_bench dp_coordinator_bench.cc)
  target_link_libraries(dp_coordinator_bench PRIVATE core ipc bench_support cppzmq)
  vllm_target_defaults(dp_coordinator_bench)
endif()
