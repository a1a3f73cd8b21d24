// Parts (c) and (d) of bench/kernels/cuda_decode_bench.cc: decode step time and prefill throughput
// of a dummy-weight Llama-3-8B-shaped model on the CUDA backend, against the rooflines measured in
// parts (a) and (b).
#ifndef VLLM_BENCH_KERNELS_CUDA_DECODE_BENCH_MODEL_H_
#define VLLM_BENCH_KERNELS_CUDA_DECODE_BENCH_MODEL_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace vllm::bench {

// The Llama-3-8B shape (bf16, untied embeddings).
struct Llama8BShape {
  int64_t hidden = 4096;
  int64_t layers = 32;
  int64_t heads = 32;
  int64_t kv_heads = 8;
  int64_t head_dim = 128;
  int64_t intermediate = 14336;
  int64_t vocab = 128256;
  int64_t dtype_bytes = 2;

  // Parameters of one layer's linear weights (q, k, v, o, gate, up, down).
  int64_t LayerLinearParams() const {
    const int64_t q = heads * head_dim, kv = kv_heads * head_dim;
    return hidden * (q + 2 * kv) + q * hidden + 3 * hidden * intermediate;
  }
  // Bytes a decode step must read at least: every layer's linear weights, the norms and the
  // lm_head (the embedding table is only gathered from).
  int64_t DecodeWeightBytes() const {
    return (layers * (LayerLinearParams() + 2 * hidden) + hidden + vocab * hidden) * dtype_bytes;
  }
  // KV-cache bytes per token (all layers, K and V).
  int64_t KvBytesPerToken() const { return layers * 2 * kv_heads * head_dim * dtype_bytes; }
  // FLOPs of a forward over `seqs` sequences of `len` new tokens each (no cached prefix),
  // logits for the last token of each: 2 per multiply-add in the linears and lm_head, plus
  // causal attention (QKᵀ and PV over the lower triangle).
  double PrefillFlops(int64_t seqs, int64_t len) const {
    const double tokens = static_cast<double>(seqs * len);
    const double linear = 2.0 * tokens * layers * LayerLinearParams();
    const double lm_head = 2.0 * seqs * vocab * hidden;
    const double attention = layers * seqs * 2.0 * 2.0 * heads * head_dim * (len * (len + 1) / 2.0);
    return linear + lm_head + attention;
  }
};

// Runs (c) and (d) on the current device and prints their tables. `bandwidth_gbs` and
// `gemm_peak_tflops` are (a)'s and (b)'s results. Returns the process exit code (0 also when
// the CUDA model is not available in this build, after saying so).
int RunModelBench(double bandwidth_gbs, double gemm_peak_tflops, cudaStream_t stream);

}  // namespace vllm::bench

#endif  // VLLM_BENCH_KERNELS_CUDA_DECODE_BENCH_MODEL_H_
