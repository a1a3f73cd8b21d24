// CPU reference backend: the model's compute, one function per op (vLLM's csrc/cpu/ and the
// PyTorch ops its CPU path calls). Framework-free: raw pointers, row-major float32 buffers,
// sizes as arguments; the caller owns every buffer. The CUDA backend implements the
// same ops and is checked against these.
//
// Conventions:
//   - Activations are [num_tokens, ...] row-major; a "flattened batch" concatenates the new
//     tokens of every scheduled sequence (vLLM's varlen layout, query_start_loc offsets).
//   - Weights keep Hugging Face's layout: a linear layer's weight is [out_features,
//     in_features] row-major.
//   - The paged KV cache of one layer is two buffers, K and V, each num_blocks blocks of
//     num_kv_heads · block_size · head_dim floats; token slot s lives in block s / block_size
//     at offset s % block_size. Within a block K is [head][dim][slot] and V
//     [head][slot][dim] (KCacheIndex / VCacheIndex below).
//
// Threads and ISA: Linear's small-m path, RmsNorm, FusedAddRmsNorm, SiluAndMul and
// PagedAttention run on the process's kernel pool (thread_pool.h; large enough calls only),
// Linear's BLAS path on OpenBLAS's pool; SetBlasNumThreads sizes both. The hand-written
// loops pick AVX-512 at run time when the CPU has it (target attributes, no -march);
// VLLM_CPU_VEC_ISA=portable turns that off for attention and SiluAndMul (A/B runs: results
// then differ in the last bits, as the AVX-512 exp is a polynomial within 2 ulp of expf).
// The GEMMs' ISA: gemm_small.h.
//
// PagedAttention (attention.cc) splits the batch into tiles of (sequence, KV head, up to 8
// query rows × the head group) handed out one at a time on the pool; a tile walks its
// sequence's cache one block at a time with an online softmax. A decode sequence takes one
// tile for all its KV heads (each block read as one span) unless its keys exceed
// 1 / (4 · threads) of the batch's decode keys. For head_dim 16, 32, 48, 64, 80, 96, 128 or
// 256 an AVX-512 block kernel scores 16 keys per register from the transposed K (one
// broadcast FMA per dim, shared by up to 4 query vectors) and prefetches the tile's next
// block into L2 while it works.
//
// Thread-safety: every function is reentrant; concurrent calls on disjoint output buffers
// are safe (concurrent calls share the pool: a second one runs on its own thread).
// Errors: sizes are the caller's contract (VLLM_CHECK on impossible shapes); these are
// called on the hot path with shapes the model runner computed, never with user input.
#ifndef VLLM_KERNELS_CPU_OPS_H_
#define VLLM_KERNELS_CPU_OPS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace vllm::kernels::cpu {

// Caps the threads Linear uses in this process, OpenBLAS's and our kernels' pool alike
// (kernels/cpu/thread_pool.h); process-wide. Tensor-parallel CPU ranks share the machine's
// cores, and OpenBLAS's pool spins while it waits, so ranks that each take every core slow
// each other down by 10-100x (measured on 2 cores).
void SetBlasNumThreads(int num_threads);

// y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n] when bias is non-null). Small m (decode) through
// our kernel, which reads w once for all rows (gemm_small.h); larger m through BLAS (sgemm).
void Linear(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t n,
            int64_t k);

// out[t, :] = table[ids[t], :] for t < num_tokens. An id outside [0, vocab_size) yields a
// zero row (the caller validates ids; under tensor-parallel vocab sharding a rank sees ids of
// other ranks' shards as out of range, and the all-reduce fills them in). `vocab_start` is
// the first id this table holds.
void Embedding(const int32_t* ids, int64_t num_tokens, const float* table, int64_t vocab_start,
               int64_t vocab_size, int64_t hidden, float* out);

// out[t] = x[t] / sqrt(mean(x[t]²) + eps) * weight. `out` may equal `x`.
void RmsNorm(const float* x, const float* weight, float* out, int64_t num_tokens, int64_t hidden,
             float eps);

// vLLM's fused_add_rms_norm: residual += x; x = RmsNorm(residual) * weight (both in place).
void FusedAddRmsNorm(float* x, float* residual, const float* weight, int64_t num_tokens,
                     int64_t hidden, float eps);

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, d + i] for i < d: gate_up is [num_tokens, 2d]
// (gate projection first, up projection second, as vLLM's merged gate_up_proj).
void SiluAndMul(const float* gate_up, float* out, int64_t num_tokens, int64_t d);

// out[t, i] = gelu_tanh(gate_up[t, i]) * gate_up[t, d + i] for i < d, with gelu_tanh(x) =
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³))) in float, PyTorch's
// gelu(approximate="tanh") (HF's gelu_pytorch_tanh): Gemma's GeGLU over the merged gate_up
// (vLLM's gelu_tanh_and_mul).
void GeluTanhAndMul(const float* gate_up, float* out, int64_t num_tokens, int64_t d);

// x[i] = cap * tanh(x[i] / cap) for i < n, in place (Gemma's final_logit_softcapping, HF's
// order of operations). cap > 0.
void SoftCap(float* x, int64_t n, float cap);

// x[i] *= factor for i < n (Gemma's embedding normaliser sqrt(hidden_size)).
void Scale(float* x, int64_t n, float factor);

// Hugging Face's rope_scaling, resolved. kNone ignores the other fields.
struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  double factor = 1.0;
  // llama3 only.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// Rotary position embedding, GPT-NeoX style (HF's rotate_half: element i pairs with
// i + rotary_dim / 2), rotary_dim == head_dim. The cos/sin table is computed once for
// positions [0, max_position).
class RotaryEmbedding {
 public:
  // InvalidArgument on an odd or non-positive head_dim, non-positive theta or
  // max_position, or scaling factors out of range (factor < 1 for llama3/linear,
  // low_freq_factor >= high_freq_factor).
  [[nodiscard]] static absl::StatusOr<RotaryEmbedding> Create(int32_t head_dim, double theta,
                                                              int64_t max_position,
                                                              const RopeScaling& scaling);

  // Rotates q [num_tokens, num_q_heads, head_dim] and k [num_tokens, num_kv_heads, head_dim]
  // in place; token t is at positions[t] (0 <= positions[t] < max_position).
  void Apply(const int32_t* positions, int64_t num_tokens, float* q, int32_t num_q_heads, float* k,
             int32_t num_kv_heads) const;

  int32_t head_dim() const { return head_dim_; }
  int64_t max_position() const { return max_position_; }

 private:
  RotaryEmbedding(int32_t head_dim, int64_t max_position, std::vector<float> cos_sin);
  int32_t head_dim_;
  int64_t max_position_;
  // Per position: head_dim / 2 cosines then head_dim / 2 sines.
  std::vector<float> cos_sin_;
};

// The CPU paged KV cache. Each of K and V is num_blocks blocks of num_kv_heads · block_size
// · head_dim floats, one KV head's part of a block contiguous: K [block][head][dim][slot]
// (transposed, so q·k runs over 16 slots in one vector), V [block][head][slot][dim]. Slot s
// is block s / block_size, offset s % block_size (vLLM's slot mapping). Note the CUDA cache
// (kernels/cuda) is [block][slot][head][dim] for both.
inline int64_t KCacheIndex(int64_t slot, int32_t head, int32_t dim, int32_t num_kv_heads,
                           int32_t head_dim, int32_t block_size) {
  const int64_t block = slot / block_size;
  return ((block * num_kv_heads + head) * head_dim + dim) * block_size + slot % block_size;
}
inline int64_t VCacheIndex(int64_t slot, int32_t head, int32_t dim, int32_t num_kv_heads,
                           int32_t head_dim, int32_t block_size) {
  const int64_t block = slot / block_size;
  return ((block * num_kv_heads + head) * block_size + slot % block_size) * head_dim + dim;
}

// Writes the new tokens' K and V ([num_tokens, num_kv_heads, head_dim]) into the paged cache
// (the layout above) at slot_mapping[t]; a negative slot (padding) is skipped. vLLM's
// reshape_and_cache.
void ReshapeAndCache(const float* k, const float* v, float* k_cache, float* v_cache,
                     const int64_t* slot_mapping, int64_t num_tokens, int32_t num_kv_heads,
                     int32_t head_dim, int32_t block_size);

// Describes a flattened batch for attention. Sequence s owns query rows
// [query_start_loc[s], query_start_loc[s + 1]) and has seq_lens[s] tokens in the cache after
// this step's ReshapeAndCache (computed before + new). Its blocks are
// block_tables[s * max_blocks_per_seq + i] for i < ceil(seq_lens[s] / block_size).
struct AttentionMetadata {
  int32_t num_seqs = 0;
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1], query_start_loc[0] == 0
  const int32_t* seq_lens = nullptr;         // [num_seqs]
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
  int32_t block_size = 16;
};

// Causal paged attention over the flattened batch, prefill and decode alike: query row j of
// sequence s (q_len = its row count) is at position p = seq_lens[s] - q_len + j and attends to
// cache positions [0, p]. Grouped-query: query head h reads KV head h / (num_q_heads /
// num_kv_heads). q and out are [num_tokens, num_q_heads, head_dim]; softmax(q·kᵀ · scale) · v
// computed in float32 with a running max (no overflow for long contexts).
// sliding_window > 0 limits row p to the last sliding_window positions, [p - window + 1, p]
// (HF's and vLLM's convention: the window counts the row's own token); cache blocks wholly
// before a sequence's first visible position are never read, so their block-table entries
// may name any block (vLLM's sliding-window manager frees them). logits_soft_cap > 0 maps
// each scaled score s to cap · tanh(s / cap) before the softmax (Gemma-2's
// attn_logit_softcapping). 0 switches either off.
void PagedAttention(const float* q, const float* k_cache, const float* v_cache, float* out,
                    const AttentionMetadata& meta, int32_t num_q_heads, int32_t num_kv_heads,
                    int32_t head_dim, float scale, int32_t sliding_window = 0,
                    float logits_soft_cap = 0.0f);

}  // namespace vllm::kernels::cpu

#endif  // VLLM_KERNELS_CPU_OPS_H_
