#include "frontend/engine/engine_client.h"

#include "absl/strings/cord.h"

namespace vllm::frontend {

absl::Status InvalidParam(absl::string_view param, absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kParamPayloadUrl, absl::Cord(param));
  return status;
}

std::optional<std::string> ErrorParam(const absl::Status& status) {
  auto param = status.GetPayload(kParamPayloadUrl);
  if (!param.has_value()) return std::nullopt;
  return std::string(*param);
}

}  // namespace vllm::frontend
