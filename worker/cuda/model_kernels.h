// Small CUDA kernels the CUDA worker needs beyond kernels/cuda/ops.h: on-device dummy weight
// initialisation and the row gather before the final norm. Conventions as kernels/cuda/ops.h
// (raw device pointers, enqueue on `stream`, return the launch's error, never allocate or
// synchronise). T ∈ {float, __half, __nv_bfloat16}.
#ifndef VLLM_WORKER_CUDA_MODEL_KERNELS_H_
#define VLLM_WORKER_CUDA_MODEL_KERNELS_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace vllm::worker {

// Dummy weights (vLLM's --load-format dummy): fills the [rows, cols] shard `out` (row-major)
// with values uniform in [-scale, scale) that depend only on (seed, index in the full tensor):
// element (r, c) of the shard is element (row_offset + r, col_offset + c) of a full tensor
// with `full_cols` columns, so tensor-parallel shards are slices of one tensor.
template <typename T>
cudaError_t FillUniformDummy(T* out, int64_t rows, int64_t cols, int64_t full_cols,
                             int64_t row_offset, int64_t col_offset, uint64_t seed, float scale,
                             cudaStream_t stream);

// out[i] = value for i < n.
template <typename T>
cudaError_t FillConstant(T* out, int64_t n, float value, cudaStream_t stream);

// dst[r, :] = src[indices[r], :] for r < num_rows (rows of `cols` elements). indices is a
// device array; every index must be a valid row of src.
template <typename T>
cudaError_t GatherRows(const T* src, const int32_t* indices, int64_t num_rows, int64_t cols, T* dst,
                       cudaStream_t stream);

}  // namespace vllm::worker

#endif  // VLLM_WORKER_CUDA_MODEL_KERNELS_H_
