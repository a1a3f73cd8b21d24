// Helpers shared by the GPU tests: a CUDA-error assertion, host conversions between float
// and the element types, the CUDA-to-CPU KV cache layout, and an owning device buffer. Header-only,
// tests only.
#ifndef VLLM_TESTS_GPU_GPU_TEST_UTIL_H_
#define VLLM_TESTS_GPU_GPU_TEST_UTIL_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/ops.h"

namespace vllm::kernels::cuda::gpu_test {

#define ASSERT_CUDA_OK(expr)                                                       \
  do {                                                                             \
    const cudaError_t vllm_e = (expr);                                             \
    ASSERT_EQ(vllm_e, cudaSuccess) << #expr << ": " << cudaGetErrorString(vllm_e); \
  } while (0)

// The element types of the CUDA kernels' typed tests, named f32, f16 and bf16.
using ElementTypes = ::testing::Types<float, __half, __nv_bfloat16>;
class TypeNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<T, float>) return "f32";
    if constexpr (std::is_same_v<T, __half>) return "f16";
    return "bf16";
  }
};

template <typename T>
T FromF(float x);
template <>
inline float FromF<float>(float x) {
  return x;
}
template <>
inline __half FromF<__half>(float x) {
  return __float2half_rn(x);
}
template <>
inline __nv_bfloat16 FromF<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
inline float ToF(float x) { return x; }
inline float ToF(__half x) { return __half2float(x); }
inline float ToF(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
std::vector<float> ToFloats(const std::vector<T>& x) {
  std::vector<float> f(x.size());
  for (size_t i = 0; i < x.size(); ++i) f[i] = ToF(x[i]);
  return f;
}

// A paged K (`key`) or V cache in the CUDA layout, [block][slot][head][dim], rearranged into
// the CPU's (kernels/cpu/ops.h: K [block][head][dim][slot], V [block][head][slot][dim]), so
// the CPU kernels can serve as the reference on the same cache.
inline std::vector<float> CudaToCpuKvLayout(const std::vector<float>& cuda, bool key,
                                            int32_t kv_heads, int32_t head_dim,
                                            int32_t block_size) {
  const int64_t row = int64_t{kv_heads} * head_dim;
  std::vector<float> out(cuda.size());
  for (int64_t slot = 0; slot < static_cast<int64_t>(cuda.size()) / row; ++slot) {
    for (int32_t h = 0; h < kv_heads; ++h) {
      for (int32_t i = 0; i < head_dim; ++i) {
        const int64_t at = key ? cpu::KCacheIndex(slot, h, i, kv_heads, head_dim, block_size)
                               : cpu::VCacheIndex(slot, h, i, kv_heads, head_dim, block_size);
        out[at] = cuda[slot * row + int64_t{h} * head_dim + i];
      }
    }
  }
  return out;
}

// A device buffer of n elements of T; frees itself.
template <typename T>
class DeviceBuffer {
 public:
  // A failed allocation leaves get() == nullptr (and clears the error, so a later launch's
  // cudaGetLastError does not report it); every use below then fails its ASSERT.
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (cudaMalloc(&ptr_, std::max<size_t>(n, 1) * sizeof(T)) != cudaSuccess) {
      ptr_ = nullptr;
      (void)cudaGetLastError();
    }
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    // A failed copy is left for the next cudaGetLastError: PagedAttention's result.
    (void)Upload(host);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return ptr_; }
  // Copies `host` to elements [offset, offset + host.size()).
  [[nodiscard]] cudaError_t Upload(const std::vector<T>& host, size_t offset = 0) {
    if (ptr_ == nullptr || offset + host.size() > n_) return cudaErrorInvalidValue;
    return cudaMemcpy(ptr_ + offset, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    if constexpr (!std::is_integral_v<T>) host.assign(n_, FromF<T>(NAN));  // NaN if the copy fails
    if (ptr_ != nullptr) cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }
  // Every element NaN (all bits set, for float, half and bfloat16 alike).
  [[nodiscard]] cudaError_t Poison() {
    if (ptr_ == nullptr) return cudaErrorInvalidValue;
    return cudaMemset(ptr_, 0xFF, std::max<size_t>(n_, 1) * sizeof(T));
  }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

}  // namespace vllm::kernels::cuda::gpu_test

#endif  // VLLM_TESTS_GPU_GPU_TEST_UTIL_H_
