#include <cuda_bf16.h>

#include "bench/kernels/cuda_decode_kernels.h"

namespace vllm::bench {
namespace {

__global__ void Copy16Kernel(const uint4* __restrict__ in, uint4* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = in[i];
  }
}

__global__ void FillBf16Kernel(__nv_bfloat16* p, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    p[i] = __float2bfloat16((static_cast<float>(h & 0xFFFF) / 32768.0f - 1.0f) * scale);
  }
}

}  // namespace

cudaError_t LaunchCopy16(const void* in, void* out, size_t bytes, int blocks, cudaStream_t stream) {
  Copy16Kernel<<<blocks, 512, 0, stream>>>(static_cast<const uint4*>(in), static_cast<uint4*>(out),
                                           static_cast<int64_t>(bytes / 16));
  return cudaGetLastError();
}

cudaError_t LaunchFillBf16(void* data, int64_t n, uint32_t seed, float scale, cudaStream_t stream) {
  FillBf16Kernel<<<1024, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(data), n, seed, scale);
  return cudaGetLastError();
}

}  // namespace vllm::bench
