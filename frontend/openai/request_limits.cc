#include "frontend/openai/request_limits.h"

#include "absl/strings/str_cat.h"
#include "frontend/engine/engine_client.h"

namespace vllm::frontend {
namespace {

RequestLimits& MutableRequestLimits() {
  static RequestLimits limits;
  return limits;
}

}  // namespace

const RequestLimits& GetRequestLimits() { return MutableRequestLimits(); }

void SetRequestLimits(const RequestLimits& limits) { MutableRequestLimits() = limits; }

absl::Status CheckNumSequences(int64_t value, const char* name) {
  if (value < 1) {
    return InvalidParam(name, absl::StrCat(name, " must be at least 1, got ", value, "."));
  }
  if (const int32_t max = GetRequestLimits().max_n; value > max) {
    return InvalidParam(name, absl::StrCat(name, " must be at most ", max, ", got ", value,
                                           ". To increase this limit, set the "
                                           "VLLM_MAX_N_SEQUENCES environment variable."));
  }
  return absl::OkStatus();
}

absl::Status CheckPromptCount(size_t count) {
  if (const int32_t max = GetRequestLimits().max_prompts; count > static_cast<size_t>(max)) {
    return InvalidParam(
        "prompt",
        absl::StrCat("prompt list length ", count, " exceeds the maximum allowed count of ", max,
                     ". To increase this limit, set the "
                     "VLLM_MAX_COMPLETION_PROMPTS environment variable."));
  }
  return absl::OkStatus();
}

absl::Status CheckStopStringCount(size_t count) {
  if (const int32_t max = GetRequestLimits().max_stop_strings; count > static_cast<size_t>(max)) {
    return InvalidParam(
        "stop", absl::StrCat("stop: List should have at most ", max, max == 1 ? " item" : " items",
                             " after validation, not ", count, " (VLLM_MAX_STOP_STRINGS)"));
  }
  return absl::OkStatus();
}

}  // namespace vllm::frontend
