# Scheduler micro-benchmark (core/): Schedule() + UpdateFromOutput() per step.
add_executable(scheduler_bench scheduler_bench.cc)
target_link_libraries(scheduler_bench PRIVATE core benchmark::benchmark)
vllm_target_defaults(scheduler_bench)
