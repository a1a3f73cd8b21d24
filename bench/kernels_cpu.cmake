# CPU kernel micro-benchmarks (kernels/cpu/): GEMM GFLOP/s against the square-sgemm peak,
# paged-attention time and KV bandwidth, sampling on a 128K vocabulary.
add_executable(kernels_cpu_bench kernels_cpu_bench.cc)
target_link_libraries(kernels_cpu_bench PRIVATE kernels_cpu benchmark::benchmark)
vllm_target_defaults(kernels_cpu_bench)
