# The decode / prefill roofline driver (bench/cuda_decode_bench.cc), built whenever the CUDA
# backend is; parts (c) and (d) drive the CUDA model of worker/cuda/.
if(VLLM_HAVE_CUDA)
  add_executable(cuda_decode_bench ${CMAKE_CURRENT_SOURCE_DIR}/cuda_decode_bench.cc
                 ${CMAKE_CURRENT_SOURCE_DIR}/cuda_decode_bench_model.cc
                 ${CMAKE_CURRENT_SOURCE_DIR}/cuda_decode_kernels.cu)
  target_link_libraries(cuda_decode_bench PRIVATE worker kernels_cuda)
  vllm_target_defaults(cuda_decode_bench)
endif()
