// Device helpers of bench/kernels/cuda_decode_bench.cc (compiled by nvcc in cuda_decode_kernels.cu
// so the driver itself stays C++20 host code).
#ifndef VLLM_BENCH_KERNELS_CUDA_DECODE_KERNELS_H_
#define VLLM_BENCH_KERNELS_CUDA_DECODE_KERNELS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace vllm::bench {

// Copies `bytes` (a multiple of 16; both pointers 16-byte aligned) from `in` to `out` with a
// grid-stride loop of 16-byte loads and stores on `blocks` blocks of 512 threads: the
// bandwidth yardstick (each byte is read once and written once).
cudaError_t LaunchCopy16(const void* in, void* out, size_t bytes, int blocks, cudaStream_t stream);

// Fills n bf16 values with a hash of (index, seed) mapped to [-scale, scale).
cudaError_t LaunchFillBf16(void* data, int64_t n, uint32_t seed, float scale, cudaStream_t stream);

}  // namespace vllm::bench

#endif  // VLLM_BENCH_KERNELS_CUDA_DECODE_KERNELS_H_
