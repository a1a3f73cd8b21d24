// Private to kernels/cuda/attention*.cu: the host-side launch plan shared by PagedAttention and
// PagedAttentionWorkspaceBytes, the device helper that places a query row in the batch, and
// the per-path launchers (attention_decode.cu, attention_prefill.cu).
#ifndef VLLM_KERNELS_CUDA_ATTENTION_INTERNAL_CUH_
#define VLLM_KERNELS_CUDA_ATTENTION_INTERNAL_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention.h"

namespace vllm::kernels::cuda::detail {

// Largest head_dim the kernels take (a multiple of 8).
constexpr int kMaxHeadDim = 256;

// How one PagedAttention call is run; a pure function of host values (see PlanAttention).
struct AttentionPlan {
  // true: the split-K decode kernel (one block per query row, head group and partition);
  // false: the tiled prefill kernel (one block per query tile and head group, no split).
  bool decode = true;
  // > 1: each row's visible keys (its whole context, or its last sliding_window positions)
  // are split into this many partitions of PartitionKeys() keys (sized at run time from the
  // row's own count, so a graph captured for max_model_len still spreads a short row over
  // every partition); partial results go to the workspace, then a reduction merges them.
  int32_t num_partitions = 1;
  // Workspace layout when num_partitions > 1: rows = num_tokens · num_q_heads;
  // [rows, num_partitions] float2 (max, sum) at offset 0, then
  // [rows, num_partitions, head_dim] float (normalised partial outputs) at `out_offset`.
  size_t out_offset = 0;
  size_t workspace_bytes = 0;
};

// Chooses the path and the split for a call; PagedAttentionWorkspaceBytes reports the plan's
// workspace_bytes, so both always agree. With sliding_window > 0 a row sees at most that many
// keys, so the split is sized by min(max_seq_len, sliding_window): never more partitions (nor
// workspace) than without the window.
AttentionPlan PlanAttention(const DeviceAttentionMetadata& meta, int32_t num_q_heads,
                            int32_t head_dim, int32_t sliding_window);

// The per-call score variants (host constants, the same for every row): 0 switches either
// off. A row at position p sees keys [p - sliding_window + 1, p]; a scaled score s becomes
// soft_cap · tanh(s / soft_cap).
struct ScoreOptions {
  int32_t sliding_window = 0;
  float soft_cap = 0.0f;
};

// Gemma-2's logit soft cap, as kernels::cpu: s · (1 / cap) in float, then tanhf (accurate to
// a couple of ulps; tanh.approx's 2^-11 would cost the float path its tolerance).
__device__ __forceinline__ float SoftCap(float s, float cap, float inv_cap) {
  return cap * tanhf(s * inv_cap);
}

// Smallest split-K partition, in keys.
constexpr int32_t kMinPartition = 64;

// Keys per partition for a row that sees `num_keys` keys (with a window: the keys inside it),
// split `num_partitions` ways: the whole row when unsplit, else an even share rounded up to
// kMinPartition. The partitions that hold keys are the first
// ceil(num_keys / PartitionKeys) <= num_partitions.
__host__ __device__ __forceinline__ int32_t PartitionKeys(int32_t num_keys,
                                                          int32_t num_partitions) {
  if (num_partitions <= 1) return num_keys;
  const int32_t share = (num_keys + num_partitions - 1) / num_partitions;
  return (share + kMinPartition - 1) / kMinPartition * kMinPartition;
}

// Where query row `token` sits: its sequence and the cache positions it sees,
// [first_key, num_keys) (num_keys = its position + 1; first_key = 0 without a window, else
// max(0, num_keys - sliding_window)). num_keys <= 0 (a padding sequence, or a token past
// query_start_loc's last entry) means the row is written as zeros.
struct RowPlace {
  int32_t seq;
  int32_t first_key;
  int32_t num_keys;
};

__device__ __forceinline__ RowPlace LocateRow(const DeviceAttentionMetadata& meta, int64_t token,
                                              int32_t sliding_window) {
  const int32_t* qsl = meta.query_start_loc;
  if (meta.num_seqs <= 0 || token >= qsl[meta.num_seqs]) return {0, 0, 0};
  // Invariant: qsl[lo] <= token < qsl[hi]. Empty sequences (equal starts) are skipped
  // because lo ends on the last start <= token.
  int32_t lo = 0, hi = meta.num_seqs;
  while (hi - lo > 1) {
    const int32_t mid = (lo + hi) >> 1;
    if (qsl[mid] <= token) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const int32_t q_begin = qsl[lo];
  const int32_t q_len = qsl[lo + 1] - q_begin;
  const int32_t seq_len = meta.seq_lens[lo];
  if (seq_len <= 0) return {lo, 0, 0};
  const int32_t num_keys = seq_len - q_len + static_cast<int32_t>(token - q_begin) + 1;
  return {lo, sliding_window > 0 ? max(num_keys - sliding_window, 0) : 0, num_keys};
}

// The decode path: plan.decode, grid (num_tokens, num_q_heads / heads per block,
// num_partitions), then the reduction when num_partitions > 1. `workspace` holds
// plan.workspace_bytes.
template <typename T>
cudaError_t LaunchDecodeAttention(const T* q, int64_t q_stride, const T* k_cache, const T* v_cache,
                                  T* out, const DeviceAttentionMetadata& meta, int32_t num_q_heads,
                                  int32_t num_kv_heads, int32_t head_dim, float scale,
                                  ScoreOptions opts, const AttentionPlan& plan, void* workspace,
                                  cudaStream_t stream);

// The prefill path (!plan.decode): needs no workspace.
template <typename T>
cudaError_t LaunchPrefillAttention(const T* q, int64_t q_stride, const T* k_cache, const T* v_cache,
                                   T* out, const DeviceAttentionMetadata& meta, int32_t num_q_heads,
                                   int32_t num_kv_heads, int32_t head_dim, float scale,
                                   ScoreOptions opts, cudaStream_t stream);

}  // namespace vllm::kernels::cuda::detail

#endif  // VLLM_KERNELS_CUDA_ATTENTION_INTERNAL_CUH_
