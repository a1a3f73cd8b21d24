# Data-parallel load balancing: routing policies compared by a discrete-event simulation
# (round-robin, vLLM 0.33's rule and ours = frontend::DpLoadBalancer, candidates). A driver,
# not a test: run it by hand (docs/BENCHMARKS.md, "Data-parallel load balancing").
# dp_load_balancer.cc needs only the standard library, so it is compiled in rather than
# linking all of frontend.
add_executable(dp_balance_bench dp_balance_bench.cc
               ${PROJECT_SOURCE_DIR}/frontend/engine/dp_load_balancer.cc)
target_link_libraries(dp_balance_bench PRIVATE bench_support)
vllm_target_defaults(dp_balance_bench)
