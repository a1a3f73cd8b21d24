#include "frontend/engine/engine_client.h"

#include "absl/strings/str_format.h"

namespace vllm::frontend {

absl::Status CheckMaxLogprobs(const core::SamplingParams& params, int32_t max_logprobs) {
  if (params.logprobs.has_value() && *params.logprobs > max_logprobs) {
    return InvalidParam("logprobs",
                        absl::StrFormat("Requested sample logprobs of %d, which is greater than "
                                        "max allowed: %d",
                                        *params.logprobs, max_logprobs));
  }
  if (params.prompt_logprobs.has_value() && *params.prompt_logprobs > max_logprobs) {
    return InvalidParam("prompt_logprobs",
                        absl::StrFormat("Requested prompt logprobs of %d, which is greater than "
                                        "max allowed: %d",
                                        *params.prompt_logprobs, max_logprobs));
  }
  return absl::OkStatus();
}

}  // namespace vllm::frontend
