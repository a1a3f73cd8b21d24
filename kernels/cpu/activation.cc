// SwiGLU and GeGLU activations over vLLM's merged gate_up projection; Gemma's soft cap and
// scaling.
#include <cmath>
#include <cstdint>
#include <numbers>

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

void GeluTanhAndMul(const float* gate_up, float* out, int64_t num_tokens, int64_t d) {
  VLLM_CHECK(num_tokens >= 0 && d >= 0) << "GeluTanhAndMul: negative shape";
  // PyTorch's constants and order of operations (aten GeluKernelImpl, tanh branch).
  // kBeta = M_SQRT2 * M_2_SQRTPI * 0.5 = sqrt(2 / pi).
  constexpr float kBeta = static_cast<float>(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);
  constexpr float kKappa = 0.044715f;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* gate = gate_up + t * 2 * d;
    const float* up = gate + d;
    float* row = out + t * d;
    for (int64_t i = 0; i < d; ++i) {
      const float x = gate[i];
      const float inner = kBeta * (x + kKappa * (x * x * x));
      row[i] = 0.5f * x * (1.0f + std::tanh(inner)) * up[i];
    }
  }
}

void SoftCap(float* x, int64_t n, float cap) {
  VLLM_CHECK(n >= 0 && cap > 0.0f) << "SoftCap: n " << n << ", cap " << cap;
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i] / cap) * cap;
}

void Scale(float* x, int64_t n, float factor) {
  VLLM_CHECK(n >= 0) << "Scale: negative size";
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

}  // namespace vllm::kernels::cpu
