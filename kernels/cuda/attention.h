// Paged attention on the GPU: the CUDA twin of kernels::cpu::PagedAttention, for
// prefill (a flattened varlen batch, causal) and decode (split-K over long contexts) alike.
// The path and the split are planned from host values only (attention.cu, PlanAttention).
//
// Decode path (max_query_len <= 8), attention_decode.cu: one block of 4 warps per (query
// row, up to 8 query heads sharing a KV head, split-K partition). The host picks the number
// of partitions (more for small batches, 1 for large ones, none shorter than 64 keys at the
// host max_seq_len); each row splits its own keys evenly over them at run time, so a graph
// captured with max_seq_len = max_model_len still spreads a short row over every partition;
// partitions past a row's length exit at once, and a reduction kernel merges the rest. A
// K/V row is read as 16-byte vectors by a group of lanes (4 keys per lane in flight), with an
// online softmax per group merged across groups and warps. Specialised for head_dim
// 16/32/64/128; other head_dims use one generic instantiation (a warp per key row).
//
// Prefill path, attention_prefill.cu: for f16/bf16 and head_dim 16/32/64/128, a
// flash-attention-2 style tensor-core kernel (mma.sync m16n8k16, f32 accumulation): a block
// takes 64 query vectors of one sequence and KV head, numbered row · group + head so the
// group's heads share every K/V tile (64 keys in shared memory); tiles launch heaviest first.
// P is rounded to T before the P·V product, as flash-attention does. float32 and other
// head_dims run the decode kernel unsplit (correct, slower).
//
// The soft cap (both kernels) and the sliding window (tensor-core kernel) are template
// flags, so the plain kernels keep their instruction mix. Tests:
// tests/gpu/cuda_attention_test.cc (against the CPU: batch kinds, block sizes, NaN-poisoned
// unread slots and freed blocks, loose host bounds, cache offsets past 2^31 elements, graph
// replays).
#ifndef VLLM_KERNELS_CUDA_ATTENTION_H_
#define VLLM_KERNELS_CUDA_ATTENTION_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace vllm::kernels::cuda {

// The batch layout, as kernels::cpu::AttentionMetadata, with device arrays and the host-side
// bounds that size the launch grid. The grid depends only on num_seqs, num_tokens,
// max_query_len and max_seq_len, never on device values, so a call is capturable into a CUDA
// graph when those four are fixed (decode graphs pass max_seq_len = max_model_len).
struct DeviceAttentionMetadata {
  int32_t num_seqs = 0;
  int64_t num_tokens = 0;                    // == query_start_loc[num_seqs]
  const int32_t* query_start_loc = nullptr;  // device [num_seqs + 1], [0] == 0
  const int32_t* seq_lens = nullptr;         // device [num_seqs]; 0 marks a padding sequence
  const int32_t* block_tables = nullptr;     // device [num_seqs, max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
  int32_t block_size = 16;
  int32_t max_query_len = 0;  // host bound: every query length is <= this
  int32_t max_seq_len = 0;    // host bound: every seq_len is <= this
};

// Bytes of device workspace PagedAttention needs for this shape (split-K partial results);
// 0 when the call needs none. Pass at least this many bytes. A pure function of the host
// fields of `meta` and the window, never above 65536 · (head_dim + 2) · 4 bytes (34 MiB at
// head_dim 128), so one buffer of that size serves every call. A window never needs more
// than no window (the split covers min(max_seq_len, sliding_window) keys), so the size for
// sliding_window = 0 serves the windowed call too.
size_t PagedAttentionWorkspaceBytes(const DeviceAttentionMetadata& meta, int32_t num_q_heads,
                                    int32_t head_dim, int32_t sliding_window = 0);

// The bound above: PagedAttentionWorkspaceBytes(meta, h, head_dim) <= this for every meta and
// h, so a model allocates one workspace of this size at load time.
size_t PagedAttentionMaxWorkspaceBytes(int32_t head_dim);

// Causal paged attention over the flattened batch: query row j of sequence s (q_len rows) is
// at position p = seq_lens[s] - q_len + j and attends to cache positions [0, p]. Grouped
// query: head h reads KV head h / (num_q_heads / num_kv_heads). q is [num_tokens,
// num_q_heads, head_dim] with rows `q_stride` elements apart (to read q inside a fused qkv
// buffer); out is packed [num_tokens, num_q_heads, head_dim]. Caches are [num_blocks,
// block_size, num_kv_heads, head_dim]. Softmax in float32 with a running max. Rows of a
// padding sequence (seq_len 0) are written as zeros. Never reads a cache slot at or beyond
// seq_lens[s] nor a block-table entry past ceil(seq_lens[s] / block_size).
// T ∈ {float, __half, __nv_bfloat16}; head_dim a multiple of 8, at most 256; any block_size;
// q_stride any value (q is read element by element); k_cache and v_cache 16-byte aligned;
// workspace 16-byte aligned (cudaMalloc's are). Rows past query_start_loc[num_seqs] are
// written as zeros on the decode path (max_query_len <= 8, as a padded decode graph has) and
// left untouched on the prefill path. The host bounds: max_query_len must bound every query
// length when above 8 (the prefill grid covers only that many rows); max_seq_len only sets
// the split-K count, so any value gives correct results.
// Enqueues on `stream`, never allocates or synchronises; returns cudaGetLastError() after the
// launches, so an error left pending by an earlier runtime call on this thread is reported
// (and cleared) here. cudaErrorInvalidValue for an unsupported head_dim, num_q_heads not a
// multiple of num_kv_heads or above 65535, block_size <= 0, num_tokens >= 2^31, max_seq_len
// outside [0, 2^30], misaligned caches, or a missing / too small workspace.
// sliding_window > 0 and logits_soft_cap > 0 as kernels::cpu::PagedAttention: row p sees
// [p - window + 1, p] only; no block wholly before a sequence's first visible position (its
// first query row's window start) is read, nor its block-table entry (vLLM's sliding-window
// manager frees such blocks). Decode splits only the window's keys. Each scaled score s
// becomes cap · tanh(s / cap). The split count depends on the window, a host value, and
// never on device values, so a call stays capturable. cudaErrorInvalidValue when either is
// negative (or the cap is not finite).
template <typename T>
cudaError_t PagedAttention(const T* q, int64_t q_stride, const T* k_cache, const T* v_cache, T* out,
                           const DeviceAttentionMetadata& meta, int32_t num_q_heads,
                           int32_t num_kv_heads, int32_t head_dim, float scale, void* workspace,
                           size_t workspace_bytes, cudaStream_t stream, int32_t sliding_window = 0,
                           float logits_soft_cap = 0.0f);

}  // namespace vllm::kernels::cuda

#endif  // VLLM_KERNELS_CUDA_ATTENTION_H_
