# CUDA op microbenchmark (bench/cuda_ops_bench.cu), built whenever the CUDA backend is.
if(VLLM_HAVE_CUDA)
  add_executable(cuda_ops_bench ${CMAKE_CURRENT_SOURCE_DIR}/cuda_ops_bench.cu)
  target_link_libraries(cuda_ops_bench PRIVATE kernels_cuda)
endif()
