// Paged attention entry points: argument checks, the launch plan (decode with split-K, or
// prefill) and the dispatch to attention_decode.cu / attention_prefill.cu.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_internal.cuh"
#include "kernels/cuda/common.cuh"

namespace vllm::kernels::cuda {
namespace detail {
namespace {

// Calls whose longest query is at most this many rows (decode, speculative verification) take
// the decode path: each row's keys are read by its own blocks, split into partitions.
constexpr int32_t kDecodeMaxQueryLen = 8;
// (row, head, partition) work items wanted: enough blocks for a few waves on an H100 (132
// SMs) at up to 8 heads per block. Small batches split more, large ones less or not at all.
constexpr int64_t kTargetItems = 16384;
// Cap on (row, head, partition) items, which bounds the workspace at
// kMaxItems · (head_dim + 2) · 4 bytes (34 MiB at head_dim 128).
constexpr int64_t kMaxItems = int64_t{1} << 16;
constexpr int64_t kMaxGridYZ = 65535;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

AttentionPlan PlanAttention(const DeviceAttentionMetadata& meta, int32_t num_q_heads,
                            int32_t head_dim, int32_t sliding_window) {
  AttentionPlan plan;
  // A row sees at most sliding_window keys: split those, not the whole context.
  int64_t max_seq = std::max<int64_t>(meta.max_seq_len, 1);
  if (sliding_window > 0) max_seq = std::min<int64_t>(max_seq, sliding_window);
  plan.decode = meta.max_query_len <= kDecodeMaxQueryLen;
  plan.num_partitions = 1;
  const int64_t rows = meta.num_tokens * std::max<int32_t>(num_q_heads, 1);
  if (!plan.decode || rows <= 0) return plan;
  // As many partitions as the target asks for, but none shorter than kMinPartition keys at
  // the host bound, and within the workspace cap and the grid's z limit.
  int64_t parts = std::min(CeilDiv(max_seq, kMinPartition), CeilDiv(kTargetItems, rows));
  parts = std::min({parts, kMaxItems / rows, kMaxGridYZ});
  if (parts <= 1) return plan;
  plan.num_partitions = static_cast<int32_t>(parts);
  const auto items = static_cast<size_t>(rows * parts);
  plan.out_offset = (items * sizeof(float2) + 255) / 256 * 256;
  plan.workspace_bytes =
      plan.out_offset + items * static_cast<size_t>(std::max(head_dim, 0)) * sizeof(float);
  return plan;
}

}  // namespace detail

size_t PagedAttentionWorkspaceBytes(const DeviceAttentionMetadata& meta, int32_t num_q_heads,
                                    int32_t head_dim, int32_t sliding_window) {
  return detail::PlanAttention(meta, num_q_heads, head_dim, sliding_window).workspace_bytes;
}

size_t PagedAttentionMaxWorkspaceBytes(int32_t head_dim) {
  return static_cast<size_t>(detail::kMaxItems) * (static_cast<size_t>(std::max(head_dim, 0)) + 2) *
         sizeof(float);
}

template <typename T>
cudaError_t PagedAttention(const T* q, int64_t q_stride, const T* k_cache, const T* v_cache, T* out,
                           const DeviceAttentionMetadata& meta, int32_t num_q_heads,
                           int32_t num_kv_heads, int32_t head_dim, float scale, void* workspace,
                           size_t workspace_bytes, cudaStream_t stream, int32_t sliding_window,
                           float logits_soft_cap) {
  // !(cap >= 0) also rejects NaN; an infinite cap would turn every score into NaN.
  if (sliding_window < 0 || !(logits_soft_cap >= 0.0f) || std::isinf(logits_soft_cap)) {
    return cudaErrorInvalidValue;
  }
  if (num_q_heads <= 0 || num_kv_heads <= 0 || num_q_heads % num_kv_heads != 0 ||
      num_q_heads > detail::kMaxGridYZ || head_dim <= 0 || head_dim % 8 != 0 ||
      head_dim > detail::kMaxHeadDim || meta.block_size <= 0 || meta.num_seqs < 0 ||
      meta.num_tokens < 0 || meta.num_tokens > std::numeric_limits<int32_t>::max() ||
      meta.max_seq_len < 0 || meta.max_seq_len > (1 << 30)) {
    return cudaErrorInvalidValue;
  }
  if (meta.num_tokens == 0) return cudaSuccess;
  // The kernels read K/V rows as 16-byte vectors (rows are head_dim · sizeof(T) apart, a
  // multiple of 16 bytes); q is read element by element and out written so.
  if (reinterpret_cast<uintptr_t>(k_cache) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(v_cache) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const detail::AttentionPlan plan =
      detail::PlanAttention(meta, num_q_heads, head_dim, sliding_window);
  detail::ScoreOptions opts;
  opts.sliding_window = sliding_window;
  opts.soft_cap = logits_soft_cap;
  if (plan.workspace_bytes > 0 && (workspace == nullptr || workspace_bytes < plan.workspace_bytes ||
                                   reinterpret_cast<uintptr_t>(workspace) % 16 != 0)) {
    return cudaErrorInvalidValue;
  }
  if (plan.decode) {
    return detail::LaunchDecodeAttention(q, q_stride, k_cache, v_cache, out, meta, num_q_heads,
                                         num_kv_heads, head_dim, scale, opts, plan, workspace,
                                         stream);
  }
  return detail::LaunchPrefillAttention(q, q_stride, k_cache, v_cache, out, meta, num_q_heads,
                                        num_kv_heads, head_dim, scale, opts, stream);
}

#define VLLM_INSTANTIATE_ATTENTION(T)                                                              \
  template cudaError_t PagedAttention<T>(                                                          \
      const T*, int64_t, const T*, const T*, T*, const DeviceAttentionMetadata&, int32_t, int32_t, \
      int32_t, float, void*, size_t, cudaStream_t, int32_t, float);
VLLM_CUDA_INSTANTIATE_FOR_TYPES(VLLM_INSTANTIATE_ATTENTION)

}  // namespace vllm::kernels::cuda
