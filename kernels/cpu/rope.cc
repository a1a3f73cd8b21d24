// Rotary position embedding (GPT-NeoX / Hugging Face rotate_half layout) with HF's linear and
// llama3 frequency scaling.
#include <cmath>
#include <cstdint>
#include <numbers>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cpu/ops.h"

namespace vllm::kernels::cpu {
namespace {

absl::Status ValidateScaling(const RopeScaling& scaling) {
  switch (scaling.type) {
    case RopeScaling::Type::kNone:
      return absl::OkStatus();
    case RopeScaling::Type::kLinear:
      if (!(scaling.factor >= 1.0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("linear rope scaling factor must be >= 1, got ", scaling.factor));
      }
      return absl::OkStatus();
    case RopeScaling::Type::kLlama3:
      if (!(scaling.factor >= 1.0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("llama3 rope scaling factor must be >= 1, got ", scaling.factor));
      }
      if (!(scaling.low_freq_factor > 0.0) ||
          !(scaling.low_freq_factor < scaling.high_freq_factor)) {
        return absl::InvalidArgumentError(
            absl::StrCat("llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor, got ",
                         scaling.low_freq_factor, " and ", scaling.high_freq_factor));
      }
      if (scaling.original_max_position_embeddings <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("llama3 rope scaling needs original_max_position_embeddings > 0, got ",
                         scaling.original_max_position_embeddings));
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError("unknown rope scaling type");
}

// HF's _compute_llama3_parameters for one frequency: long wavelengths are slowed down by
// `factor`, short ones kept, and the band in between interpolated.
double Llama3InvFreq(double inv_freq, const RopeScaling& s) {
  const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_ctx / s.low_freq_factor;
  const double high_freq_wavelen = old_ctx / s.high_freq_factor;
  const double wavelen = 2.0 * std::numbers::pi / inv_freq;
  if (wavelen < high_freq_wavelen) return inv_freq;
  if (wavelen > low_freq_wavelen) return inv_freq / s.factor;
  const double smooth =
      (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * inv_freq / s.factor + smooth * inv_freq;
}

// Rotates one head in place: (x1, x2) -> (x1·cos - x2·sin, x2·cos + x1·sin), x1 the first
// half, x2 the second.
void RotateHead(float* x, const float* cos, const float* sin, int32_t half) {
  for (int32_t i = 0; i < half; ++i) {
    const float x1 = x[i];
    const float x2 = x[i + half];
    x[i] = x1 * cos[i] - x2 * sin[i];
    x[i + half] = x2 * cos[i] + x1 * sin[i];
  }
}

}  // namespace

absl::StatusOr<RotaryEmbedding> RotaryEmbedding::Create(int32_t head_dim, double theta,
                                                        int64_t max_position,
                                                        const RopeScaling& scaling) {
  if (head_dim <= 0 || head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope head_dim must be positive and even, got ", head_dim));
  }
  if (!(theta > 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat("rope theta must be positive, got ", theta));
  }
  if (max_position <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope max_position must be positive, got ", max_position));
  }
  VLLM_RETURN_IF_ERROR(ValidateScaling(scaling));

  const int32_t half = head_dim / 2;
  // Hugging Face (and vLLM) keep inv_freq as a float32 buffer and form position · inv_freq
  // as a float32 product; we round at the same two places (everything else in double) so
  // our angles stay within an ulp of HF's. Exact double angles would drift from HF's by
  // ~position · 2^-24 rad, about 2e-4 rad at position 4K.
  std::vector<float> inv_freq(half);
  for (int32_t i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(theta, static_cast<double>(2 * i) / head_dim);
    if (scaling.type == RopeScaling::Type::kLinear) f /= scaling.factor;
    if (scaling.type == RopeScaling::Type::kLlama3) f = Llama3InvFreq(f, scaling);
    inv_freq[i] = static_cast<float>(f);
  }
  std::vector<float> cos_sin(static_cast<size_t>(max_position) * head_dim);
  for (int64_t pos = 0; pos < max_position; ++pos) {
    float* row = cos_sin.data() + pos * head_dim;
    for (int32_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos) * inv_freq[i];
      row[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      row[half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  return RotaryEmbedding(head_dim, max_position, std::move(cos_sin));
}

RotaryEmbedding::RotaryEmbedding(int32_t head_dim, int64_t max_position, std::vector<float> cos_sin)
    : head_dim_(head_dim), max_position_(max_position), cos_sin_(std::move(cos_sin)) {}

void RotaryEmbedding::Apply(const int32_t* positions, int64_t num_tokens, float* q,
                            int32_t num_q_heads, float* k, int32_t num_kv_heads) const {
  const int32_t half = head_dim_ / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t pos = positions[t];
    VLLM_CHECK(pos >= 0 && pos < max_position_)
        << "RotaryEmbedding: position " << pos << " outside [0, " << max_position_ << ")";
    const float* cos = cos_sin_.data() + pos * head_dim_;
    const float* sin = cos + half;
    float* q_row = q + t * num_q_heads * head_dim_;
    for (int32_t h = 0; h < num_q_heads; ++h) RotateHead(q_row + h * head_dim_, cos, sin, half);
    float* k_row = k + t * num_kv_heads * head_dim_;
    for (int32_t h = 0; h < num_kv_heads; ++h) RotateHead(k_row + h * head_dim_, cos, sin, half);
  }
}

}  // namespace vllm::kernels::cpu
