// Element-type dispatch for the CUDA worker: the model dtype is a runtime value
// (kernels::cuda::GemmDType), the kernels are templates over float / __half / __nv_bfloat16.
#ifndef VLLM_WORKER_CUDA_DTYPE_DISPATCH_H_
#define VLLM_WORKER_CUDA_DTYPE_DISPATCH_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "kernels/cuda/gemm.h"

namespace vllm::worker {

// Calls f(T{}) with T the element type of `dtype` and returns its result.
template <typename F>
auto WithDType(kernels::cuda::GemmDType dtype, F&& f) {
  switch (dtype) {
    case kernels::cuda::GemmDType::kFloat16:
      return f(__half{});
    case kernels::cuda::GemmDType::kBFloat16:
      return f(__nv_bfloat16{});
    case kernels::cuda::GemmDType::kFloat32:
      break;
  }
  return f(float{});
}

// Host conversions between float and the element types (round to nearest even).
template <typename T>
T HostFromFloat(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(x);
  } else {
    return __float2bfloat16_rn(x);
  }
}
inline float HostToFloat(float x) { return x; }
inline float HostToFloat(__half x) { return __half2float(x); }
inline float HostToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

}  // namespace vllm::worker

#endif  // VLLM_WORKER_CUDA_DTYPE_DISPATCH_H_
