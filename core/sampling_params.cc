#include "core/sampling_params.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace vllm::core {
namespace {

absl::Status Invalid(const absl::FormatSpec<const char*, double>& format, const char* range,
                     double value) {
  return absl::InvalidArgumentError(absl::StrFormat(format, range, value));
}

absl::Status ValidateTokenConstraints(const SamplingParams& p) {
  if (p.allowed_token_ids.size() > static_cast<size_t>(kMaxTokenIdList) ||
      p.logit_bias.size() > static_cast<size_t>(kMaxTokenIdList)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "allowed_token_ids and logit_bias may have at most %d entries", kMaxTokenIdList));
  }
  for (int32_t id : p.allowed_token_ids) {
    if (id < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("allowed_token_ids must be non-negative token ids, got %d", id));
    }
  }
  for (size_t i = 0; i < p.logit_bias.size(); ++i) {
    const auto& [id, bias] = p.logit_bias[i];
    if (id < 0 || (i > 0 && id <= p.logit_bias[i - 1].first)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("logit_bias ids must be non-negative and ascending, got %d", id));
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("logit_bias values must be in [-100, 100], got %g", bias));
    }
  }
  if (p.bad_words_token_ids.size() > static_cast<size_t>(kMaxBadWords)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Too many bad words after tokenization: %d. The max number is %d.",
                        p.bad_words_token_ids.size(), kMaxBadWords));
  }
  for (const std::vector<int32_t>& word : p.bad_words_token_ids) {
    if (word.empty() || word.size() > static_cast<size_t>(kMaxBadWordTokens)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("bad_words entries must tokenize to 1 to %d tokens, got %d",
                          kMaxBadWordTokens, word.size()));
    }
    for (int32_t id : word) {
      if (id < 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("bad_words token ids must be non-negative, got %d", id));
      }
    }
  }
  return absl::OkStatus();
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
  VLLM_RETURN_IF_ERROR(ValidateTokenConstraints(p));
  if (p.structured_outputs.has_value()) {
    return structured_output::ValidateStructuredOutputsParams(*p.structured_outputs);
  }
  return absl::OkStatus();
}

}  // namespace vllm::core
