// CUDA backend: the elementwise and memory ops of the model and the sampler. Each op mirrors
// one of kernels/cpu/ops.h or kernels/cpu/sampling.h (same layouts, same semantics) and is
// checked against it by tests/gpu/cuda_ops_test.cc, to T's rounding. float32 RoPE rounds
// each product separately (no FMA contraction) to give the CPU's bits (tested to 1e-6).
// Paged attention, the GEMM and the MoE ops live in attention.h, gemm.h and moe.h.
//
// Conventions (flashinfer style):
//   - Framework-free launchers: raw device pointers, sizes, a cudaStream_t; they enqueue the
//     work and return cudaGetLastError() of the launch (cudaSuccess when nothing was
//     launched because a size is 0). They never synchronise and never allocate.
//   - T is the activation / weight element type: float, __half or __nv_bfloat16 (explicitly
//     instantiated in the .cu files; other types fail to link). Arithmetic is float.
//   - Layouts are those of kernels/cpu/ops.h: row-major [num_tokens, ...] activations, Hugging
//     Face [out, in] weights, a paged KV cache [num_blocks, block_size, num_kv_heads,
//     head_dim] per layer and per K/V.
//   - Vectorised 16-byte accesses are used when the row length and the pointers allow it;
//     any size and any element-aligned pointer is accepted (scalar fallback).
//   - Sizes are the caller's contract, as on the CPU: no bounds checks beyond those stated.
//
// Thread-safety: launchers are reentrant; ops on one stream run in order, concurrent ops
// must not write overlapping buffers. Host code may call them from any thread.
#ifndef VLLM_KERNELS_CUDA_OPS_H_
#define VLLM_KERNELS_CUDA_OPS_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace vllm::kernels::cuda {

// How an RMSNorm applies its weight w to the normalised row y = x / sqrt(mean(x²) + eps).
enum class NormWeight {
  kLlama,  // w · T(y): HF's LlamaRMSNorm, the row rounded to T before w multiplies it
  kGemma,  // T(y · (1 + w)), all in float: HF's Gemma2RMSNorm / Gemma3RMSNorm (w stored
           // around 0); the CPU twin is kernels::cpu::RmsNorm with weights 1 + w
};

// out[t] = weight · (x[t] / sqrt(mean(x[t]²) + eps)), Hugging Face's LlamaRMSNorm order:
// the normalised row is rounded to T before the weight multiplies it (or Gemma's, `kind`).
// `out` may equal `x`.
template <typename T>
cudaError_t RmsNorm(const T* x, const T* weight, T* out, int64_t num_tokens, int64_t hidden,
                    float eps, cudaStream_t stream, NormWeight kind = NormWeight::kLlama);

// RmsNorm in place over each head of a [num_tokens, num_heads, head_dim] block whose token
// rows are `row_stride` elements apart (Qwen3's q_norm / k_norm on q or k inside the fused
// qkv buffer): x[t, h] = weight · RmsNorm(x[t, h]), weight [head_dim], as RmsNorm rounds.
template <typename T>
cudaError_t HeadRmsNorm(T* x, int64_t num_tokens, int64_t row_stride, int32_t num_heads,
                        int32_t head_dim, const T* weight, float eps, cudaStream_t stream,
                        NormWeight kind = NormWeight::kLlama);

// vLLM's fused_add_rms_norm, in place: residual = T(x + residual); x = RmsNorm(residual).
template <typename T>
cudaError_t FusedAddRmsNorm(T* x, T* residual, const T* weight, int64_t num_tokens, int64_t hidden,
                            float eps, cudaStream_t stream, NormWeight kind = NormWeight::kLlama);

// out[t, i] = silu(gate_up[t, i]) · gate_up[t, d + i] for i < d (vLLM's silu_and_mul over the
// merged gate_up projection [num_tokens, 2d]).
template <typename T>
cudaError_t SiluAndMul(const T* gate_up, T* out, int64_t num_tokens, int64_t d,
                       cudaStream_t stream);

// out[t, i] = T(gelu_tanh(gate_up[t, i]) · gate_up[t, d + i]) for i < d, in float (vLLM's
// gelu_tanh_and_mul; kernels::cpu::GeluTanhAndMul's formula): Gemma's GeGLU.
template <typename T>
cudaError_t GeluTanhAndMul(const T* gate_up, T* out, int64_t num_tokens, int64_t d,
                           cudaStream_t stream);

// x[i] = T(cap · tanh(x[i] / cap)) for i < n, in place, in float (Gemma's
// final_logit_softcapping on the logits; kernels::cpu::SoftCap). cap > 0.
template <typename T>
cudaError_t SoftCap(T* x, int64_t n, float cap, cudaStream_t stream);

// x[i] = T(x[i] · factor) for i < n, in place (Gemma's embedding normaliser; the caller
// rounds sqrt(hidden) to T first, as HF does).
template <typename T>
cudaError_t Scale(T* x, int64_t n, float factor, cudaStream_t stream);

// GPT-NeoX rotary embedding in place (element i pairs with i + head_dim / 2, rotary_dim ==
// head_dim), as kernels::cpu::RotaryEmbedding::Apply. `cos_sin` is the device copy of the
// table of kernels/cuda/rope_table.h: [max_position, head_dim], per position head_dim / 2
// cosines then head_dim / 2 sines. q is [num_tokens, num_q_heads, head_dim] with rows
// `q_stride` elements apart (num_q_heads · head_dim when packed; larger to rotate q inside a
// fused qkv buffer), k likewise. A token whose position is outside [0, max_position) is left
// unrotated (the CPU aborts there; the device cannot).
template <typename T>
cudaError_t RotaryEmbedding(const int32_t* positions, int64_t num_tokens, T* q, int64_t q_stride,
                            int32_t num_q_heads, T* k, int64_t k_stride, int32_t num_kv_heads,
                            int32_t head_dim, const float* cos_sin, int64_t max_position,
                            cudaStream_t stream);

// vLLM's reshape_and_cache: copies k and v ([num_tokens, num_kv_heads, head_dim]) into the
// paged caches at slot_mapping[t]; a negative slot (padding) is skipped. Slots must be
// distinct and inside the cache.
template <typename T>
cudaError_t ReshapeAndCache(const T* k, const T* v, T* k_cache, T* v_cache,
                            const int64_t* slot_mapping, int64_t num_tokens, int32_t num_kv_heads,
                            int32_t head_dim, int32_t block_size, cudaStream_t stream);

// out[t, :] = table[ids[t] - vocab_start, :]; an id outside [vocab_start, vocab_start +
// vocab_size) yields a zero row (another tensor-parallel shard's id, or padding).
template <typename T>
cudaError_t Embedding(const int32_t* ids, int64_t num_tokens, const T* table, int64_t vocab_start,
                      int64_t vocab_size, int64_t hidden, T* out, cudaStream_t stream);

// Greedy decoding: out[r] = argmax of logits[r, :] (ties to the lowest id). NaN logits give
// an unspecified token.
template <typename T>
cudaError_t ArgmaxRows(const T* logits, int64_t num_rows, int64_t vocab_size, int32_t* out,
                       cudaStream_t stream);

// One row's sampling settings on the device (kernels::cpu::SamplingRow without penalties,
// which the caller applies to the logits first).
struct SamplingParams {
  float temperature = 1.0f;  // < 1e-5: greedy (u unused)
  int32_t top_k = 0;         // <= 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
};

// For each row r: the token kernels::cpu::SampleRow(logits[r], vocab_size, params[r], u[r])
// returns (temperature, min-p, top-k, top-p, then an inverse-CDF draw in (probability desc,
// id asc) order), up to float rounding: the device's expf and summation order differ from the
// host's by an ulp or so, which changes the token only when u or top_p falls that close to a
// cumulative boundary. Unlike the CPU, `logits` is not modified. params, u and out are device
// arrays of num_rows entries. A row with no finite logit gives an unspecified token.
// Cost: one block per row and ~60 passes over the row for each of top-k, top-p and the
// draw (a bisection on the 64-bit rank key; deterministic, no workspace).
template <typename T>
cudaError_t SampleRows(const T* logits, int64_t num_rows, int64_t vocab_size,
                       const SamplingParams* params, const double* u, int32_t* out,
                       cudaStream_t stream);

// Structured outputs (vLLM's apply_grammar_bitmask), in place, one launch for a step's rows:
// for each i < num_masks, kernels::cpu::ApplyTokenBitmask(logits row logits_rows[i], vocab_size,
// bitmask row i) — the tokens the row's bits disallow become -inf (XGrammar's packed layout:
// bit j of word w is token 32w + j, set when allowed; bits past vocab_size are ignored), and
// a mask row that allows no token of the vocabulary leaves its logits row unchanged.
// `logits` is [rows, vocab_size]; `bitmask` is [num_masks, ceil(vocab_size / 32)] int32 and
// `logits_rows` [num_masks], both on the device; each logits_rows[i] is a row of `logits`
// (not checked) and no two are equal. Token-wise identical to the CPU (only -inf is written).
// Cost: one block per (mask row, vocabulary chunk); each block reads its whole mask row.
template <typename T>
cudaError_t ApplyTokenBitmask(T* logits, int64_t vocab_size, const int32_t* bitmask,
                              const int32_t* logits_rows, int64_t num_masks, cudaStream_t stream);

}  // namespace vllm::kernels::cuda

#endif  // VLLM_KERNELS_CUDA_OPS_H_
