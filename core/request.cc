#include "core/request.h"

#include <algorithm>

namespace vllm::core {

FinishReason GetFinishReason(RequestStatus status) {
  switch (status) {
    case RequestStatus::kFinishedStopped:
      return FinishReason::kStop;
    case RequestStatus::kFinishedLengthCapped:
      return FinishReason::kLength;
    case RequestStatus::kFinishedAborted:
      return FinishReason::kAbort;
    default:
      return FinishReason::kError;
  }
}

Request::Request(EngineCoreRequest&& request, int32_t max_model_len)
    : num_prompt_tokens(static_cast<int32_t>(request.prompt_token_ids.size())),
      all_token_ids(std::move(request.prompt_token_ids)),
      request_id(std::move(request.request_id)),
      sampling_params(std::move(request.sampling_params)),
      eos_token_id(request.eos_token_id),
      arrival_time(request.arrival_time),
      priority(request.priority),
      cache_salt(request.cache_salt.value_or("")),
      kv_transfer_params(std::move(request.kv_transfer_params)) {
  min_tokens = sampling_params.min_tokens;
  eos_token_id_or_none =
      eos_token_id.has_value() && !sampling_params.ignore_eos ? *eos_token_id : -1;
  has_stop_token_ids = !sampling_params.stop_token_ids.empty();
  max_tokens = sampling_params.max_tokens.value_or(max_model_len - num_prompt_tokens);
  max_tokens = std::max(max_tokens, 1);
  // Room for the expected output, so appending rarely reallocates.
  all_token_ids.reserve(static_cast<size_t>(num_prompt_tokens) +
                        std::min<size_t>(static_cast<size_t>(max_tokens), 256));
}

}  // namespace vllm::core
