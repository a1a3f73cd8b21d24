// A skinny GEMM for decode: y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias) with m <= 8, as CublasLtGemm
// computes it, for half-precision types. It is bandwidth-bound (every weight read once from
// HBM); one warp per output feature, 16-byte weight loads, four in flight per lane. Used by
// CublasLtGemm when its timing finds it faster than cuBLASLt's algorithms for a shape.
#ifndef VLLM_KERNELS_CUDA_GEMV_H_
#define VLLM_KERNELS_CUDA_GEMV_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/gemm.h"

namespace vllm::kernels::cuda {

constexpr int64_t kSkinnyGemvMaxM = 8;

// True when LaunchSkinnyGemv handles the shape: float16 / bfloat16, 1 <= m <= 8, k a multiple
// of 8 (rows stay 16-byte aligned), n >= 1.
bool SkinnyGemvSupports(GemmDType dtype, int64_t m, int64_t n, int64_t k);

// Enqueues the product on `stream` (pointers 16-byte aligned; bias may be null). Float
// accumulation, one rounding to the output type. cudaErrorInvalidValue for an unsupported
// shape.
cudaError_t LaunchSkinnyGemv(GemmDType dtype, const void* x, const void* w, const void* bias,
                             void* y, int64_t m, int64_t n, int64_t k, cudaStream_t stream);

}  // namespace vllm::kernels::cuda

#endif  // VLLM_KERNELS_CUDA_GEMV_H_
