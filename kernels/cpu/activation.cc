// SwiGLU activation over vLLM's merged gate_up projection.
#include <cmath>
#include <cstdint>

#include "base/status_macros.h"
#include "kernels/cpu/ops.h"

namespace vllm::kernels::cpu {

void SiluAndMul(const float* gate_up, float* out, int64_t num_tokens, int64_t d) {
  VLLM_CHECK(num_tokens >= 0 && d >= 0) << "SiluAndMul: negative shape";
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* gate = gate_up + t * 2 * d;
    const float* up = gate + d;
    float* row = out + t * d;
    // x / (1 + e^-x) rather than x · sigmoid(x): for very negative x, e^-x overflows to inf
    // and the quotient is a clean -0 instead of 0 · inf.
    for (int64_t i = 0; i < d; ++i) row[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  }
}

}  // namespace vllm::kernels::cpu
