// SwiGLU and GeGLU activations over vLLM's merged gate_up projection; Gemma's soft cap and
// scaling.
#include <cmath>
#include <cstdint>
#include <numbers>

#include "base/status_macros.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vec_avx512.h"

namespace vllm::kernels::cpu {
namespace {

// x / (1 + e^-x) rather than x · sigmoid(x): for very negative x, e^-x overflows to inf and
// the quotient is a clean -0 instead of 0 · inf.
inline float Silu(float x) { return x / (1.0f + std::exp(-x)); }

void SiluAndMulRowPortable(const float* gate, const float* up, float* row, int64_t d) {
  for (int64_t i = 0; i < d; ++i) row[i] = Silu(gate[i]) * up[i];
}

#if VLLM_HAVE_AVX512_HELPERS
VLLM_AVX512_BEGIN
// 16 lanes at a time with the polynomial exp (internal::avx512::Exp, within 2 ulp of expf);
// the tail as the portable row.
VLLM_AVX512_TARGET void SiluAndMulRowAvx512(const float* gate, const float* up, float* row,
                                            int64_t d) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) {
    const __m512 x = _mm512_loadu_ps(gate + i);
    const __m512 e = internal::avx512::Exp(_mm512_sub_ps(_mm512_setzero_ps(), x));
    const __m512 silu = _mm512_div_ps(x, _mm512_add_ps(one, e));
    _mm512_storeu_ps(row + i, _mm512_mul_ps(silu, _mm512_loadu_ps(up + i)));
  }
  SiluAndMulRowPortable(gate + i, up + i, row + i, d - i);
}
VLLM_AVX512_END
#endif

}  // namespace

void SiluAndMul(const float* gate_up, float* out, int64_t num_tokens, int64_t d) {
  VLLM_CHECK(num_tokens >= 0 && d >= 0) << "SiluAndMul: negative shape";
  auto row_fn = &SiluAndMulRowPortable;
#if VLLM_HAVE_AVX512_HELPERS
  if (internal::UseAvx512Loops()) row_fn = &SiluAndMulRowAvx512;
#endif
  auto run_row = [&](int64_t t) {
    const float* gate = gate_up + t * 2 * d;
    row_fn(gate, gate + d, out + t * d, d);
  };
  ForEachRow(num_tokens, d, run_row);
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
