# CPU tensor-parallel all-reduce (kernels/comm/): ShmCommunicator vs GlooCommunicator across
# forked ranks, with single-thread memcpy as the limit.
add_executable(comm_bench comm_bench.cc)
target_link_libraries(comm_bench PRIVATE kernels_comm bench_support)
vllm_target_defaults(comm_bench)
