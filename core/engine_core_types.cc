#include "core/engine_core_types.h"

#include "absl/strings/str_format.h"

namespace vllm::core {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

absl::Status ValidateEngineCoreRequest(const EngineCoreRequest& request, int32_t max_model_len) {
  if (request.request_id.empty()) {
    return absl::InvalidArgumentError("request_id must not be empty");
  }
  if (request.request_id.size() > kMaxRequestIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("request_id is %d bytes; at most %d are allowed", request.request_id.size(),
                        kMaxRequestIdBytes));
  }
  if (request.prompt_token_ids.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("request %s: prompt_token_ids must not be empty", request.request_id));
  }
  // One position must stay free for the first generated token.
  const int64_t prompt_len = static_cast<int64_t>(request.prompt_token_ids.size());
  if (prompt_len >= max_model_len) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "request %s: the prompt (prompt_token_ids) has %d tokens; it must be shorter than "
        "max_model_len (%d)",
        request.request_id, prompt_len, max_model_len));
  }
  for (int32_t id : request.prompt_token_ids) {
    if (id < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "request %s: prompt_token_ids must be non-negative, got %d", request.request_id, id));
    }
  }
  if (absl::Status s = ValidateSamplingParams(request.sampling_params); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("request %s: %s", request.request_id, s.message()));
  }
  const SamplingParams& p = request.sampling_params;
  if (p.max_tokens.has_value() && prompt_len + *p.max_tokens > max_model_len) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "request %s: max_tokens (%d) plus the prompt (%d tokens) exceeds max_model_len (%d); "
        "lower max_tokens to at most %d",
        request.request_id, *p.max_tokens, prompt_len, max_model_len, max_model_len - prompt_len));
  }
  if (!p.max_tokens.has_value() && prompt_len + p.min_tokens > max_model_len) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "request %s: min_tokens (%d) plus the prompt (%d tokens) exceeds max_model_len (%d)",
        request.request_id, p.min_tokens, prompt_len, max_model_len));
  }
  if (request.eos_token_id.has_value() && *request.eos_token_id < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("request %s: eos_token_id must be non-negative, got %d", request.request_id,
                        *request.eos_token_id));
  }
  if (request.cache_salt.has_value() && request.cache_salt->size() > kMaxCacheSaltBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("request %s: cache_salt is %d bytes; at most %d are allowed",
                        request.request_id, request.cache_salt->size(), kMaxCacheSaltBytes));
  }
  if (request.data_parallel_rank.has_value() && *request.data_parallel_rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("request %s: data_parallel_rank must be >= 0, got %d", request.request_id,
                        *request.data_parallel_rank));
  }
  return absl::OkStatus();
}

}  // namespace vllm::core
