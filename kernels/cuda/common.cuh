// Device helpers shared by the kernels of kernels/cuda/: element-type conversion, 16-byte
// vectors, block-wide reductions, launch-shape choices. Included by .cu files only.
#ifndef VLLM_KERNELS_CUDA_COMMON_CUH_
#define VLLM_KERNELS_CUDA_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

namespace vllm::kernels::cuda::detail {

template <typename T>
__device__ __forceinline__ float ToFloat(T x);
template <>
__device__ __forceinline__ float ToFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ float ToFloat<__half>(__half x) {
  return __half2float(x);
}
template <>
__device__ __forceinline__ float ToFloat<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// N elements of T loaded or stored as one access (16 bytes when N = 16 / sizeof(T)).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// Elements per 16-byte access.
template <typename T>
constexpr int kVec16 = static_cast<int>(16 / sizeof(T));

// True when every pointer is 16-byte aligned and rows of `row_elems` keep that alignment.
template <typename T>
inline bool CanVectorize(int64_t row_elems, std::initializer_list<const void*> ptrs) {
  if (row_elems % kVec16<T> != 0) return false;
  for (const void* p : ptrs) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// Threads per block for a row of `work` items: a multiple of 32 in [32, max_threads].
inline int ThreadsFor(int64_t work, int max_threads) {
  int64_t t = (work + 31) / 32 * 32;
  if (t < 32) t = 32;
  if (t > max_threads) t = max_threads;
  return static_cast<int>(t);
}

template <typename A>
__device__ __forceinline__ A WarpReduceSum(A v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum of `v` over the block, returned to every thread. Deterministic (fixed tree). Every
// thread of the block must call it; it may be called repeatedly.
template <typename A>
__device__ A BlockReduceSum(A v) {
  __shared__ A partial[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int num_warps = (blockDim.x + 31) >> 5;
  v = WarpReduceSum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    A w = lane < num_warps ? partial[lane] : A(0);
    w = WarpReduceSum(w);
    if (lane == 0) partial[0] = w;
  }
  __syncthreads();
  const A result = partial[0];
  __syncthreads();  // partial may be reused by the next call
  return result;
}

// (value, index) pair for argmax; ranks higher value first, then lower index.
struct ArgmaxPair {
  float value;
  int64_t index;
};

__device__ __forceinline__ bool Better(const ArgmaxPair& a, const ArgmaxPair& b) {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

// Block-wide argmax, returned to every thread. Every thread must call it.
__device__ inline ArgmaxPair BlockArgmax(ArgmaxPair p) {
  __shared__ float values[32];
  __shared__ int64_t indices[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int num_warps = (blockDim.x + 31) >> 5;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    ArgmaxPair o{__shfl_xor_sync(0xffffffffu, p.value, offset),
                 __shfl_xor_sync(0xffffffffu, p.index, offset)};
    if (Better(o, p)) p = o;
  }
  if (lane == 0) {
    values[warp] = p.value;
    indices[warp] = p.index;
  }
  __syncthreads();
  if (warp == 0) {
    ArgmaxPair w = lane < num_warps ? ArgmaxPair{values[lane], indices[lane]}
                                    : ArgmaxPair{-__int_as_float(0x7f800000), INT64_MAX};
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      ArgmaxPair o{__shfl_xor_sync(0xffffffffu, w.value, offset),
                   __shfl_xor_sync(0xffffffffu, w.index, offset)};
      if (Better(o, w)) w = o;
    }
    if (lane == 0) {
      values[0] = w.value;
      indices[0] = w.index;
    }
  }
  __syncthreads();
  const ArgmaxPair result{values[0], indices[0]};
  __syncthreads();
  return result;
}

}  // namespace vllm::kernels::cuda::detail

// Explicit instantiation of a launcher template for the three element types.
#define VLLM_CUDA_INSTANTIATE_FOR_TYPES(MACRO) \
  MACRO(float)                                 \
  MACRO(__half)                                \
  MACRO(__nv_bfloat16)

#endif  // VLLM_KERNELS_CUDA_COMMON_CUH_
