#include "core/sampling_params.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace vllm::core {
namespace {

absl::Status Invalid(const absl::FormatSpec<const char*, double>& format, const char* range,
                     double value) {
  return absl::InvalidArgumentError(absl::StrFormat(format, range, value));
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  if (p.n != 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("n must be 1 (the frontend fans out n > 1), got %d", p.n));
  }
  if (!std::isfinite(p.temperature) || p.temperature < 0.0) {
    return Invalid("temperature must be %s, got %g", ">= 0", p.temperature);
  }
  if (!(p.top_p > 0.0 && p.top_p <= 1.0)) {
    return Invalid("top_p must be in %s, got %g", "(0, 1]", p.top_p);
  }
  if (p.top_k < -1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("top_k must be -1 or 0 (disabled) or at least 1, got %d", p.top_k));
  }
  if (!(p.min_p >= 0.0 && p.min_p <= 1.0)) {
    return Invalid("min_p must be in %s, got %g", "[0, 1]", p.min_p);
  }
  if (!(p.presence_penalty >= -2.0 && p.presence_penalty <= 2.0)) {
    return Invalid("presence_penalty must be in %s, got %g", "[-2, 2]", p.presence_penalty);
  }
  if (!(p.frequency_penalty >= -2.0 && p.frequency_penalty <= 2.0)) {
    return Invalid("frequency_penalty must be in %s, got %g", "[-2, 2]", p.frequency_penalty);
  }
  if (!(p.repetition_penalty > 0.0 && std::isfinite(p.repetition_penalty))) {
    return Invalid("repetition_penalty must be %s, got %g", "> 0 and finite", p.repetition_penalty);
  }
  if (p.max_tokens.has_value() && *p.max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_tokens must be at least 1, got %d", *p.max_tokens));
  }
  if (p.min_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("min_tokens must be >= 0, got %d", p.min_tokens));
  }
  if (p.max_tokens.has_value() && p.min_tokens > *p.max_tokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("min_tokens (%d) must be less than or equal to max_tokens (%d)",
                        p.min_tokens, *p.max_tokens));
  }
  if (p.stop_token_ids.size() > static_cast<size_t>(kMaxStopTokenIds)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("stop_token_ids has %d entries; at most %d are allowed",
                        p.stop_token_ids.size(), kMaxStopTokenIds));
  }
  for (int32_t id : p.stop_token_ids) {
    if (id < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("stop_token_ids must be non-negative token ids, got %d", id));
    }
  }
  if (p.logprobs.has_value() && (*p.logprobs < 0 || *p.logprobs > kMaxLogprobs)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("logprobs must be in [0, %d], got %d", kMaxLogprobs, *p.logprobs));
  }
  if (p.prompt_logprobs.has_value() &&
      (*p.prompt_logprobs < 0 || *p.prompt_logprobs > kMaxLogprobs)) {
    return absl::InvalidArgumentError(absl::StrFormat("prompt_logprobs must be in [0, %d], got %d",
                                                      kMaxLogprobs, *p.prompt_logprobs));
  }
  if (p.structured_outputs.has_value()) {
    return structured_output::ValidateStructuredOutputsParams(*p.structured_outputs);
  }
  return absl::OkStatus();
}

}  // namespace vllm::core
