#include "bench/cuda_decode_bench_model.h"

#include <cstdio>

namespace vllm::bench {

int RunModelBench(double bandwidth_gbs, double gemm_peak_tflops, cudaStream_t stream) {
  (void)stream;
  const Llama8BShape shape;
  std::printf(
      "(c) decode roofline of the 8B shape: %.2f GB of weights per step / %.0f GB/s = %.2f ms\n",
      shape.DecodeWeightBytes() / 1e9, bandwidth_gbs,
      shape.DecodeWeightBytes() / bandwidth_gbs / 1e6);
  std::printf("(d) prefill 1x2048 at the GEMM peak (%.1f TFLOP/s): %.2f ms\n", gemm_peak_tflops,
              shape.PrefillFlops(1, 2048) / gemm_peak_tflops / 1e9);
  std::printf("(c), (d): the CUDA model (worker/cuda/) is not in this build yet: not measured\n");
  return 0;
}

}  // namespace vllm::bench
