// InvalidParam / ErrorParam: an InvalidArgument status that names the request field at fault,
// so that an OpenAI error body's "param" can (the field rides as a status payload). Header-only.
#ifndef VLLM_BASE_STATUS_PARAM_H_
#define VLLM_BASE_STATUS_PARAM_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace vllm::base {

// The payload URL the field rides under.
inline constexpr char kParamPayloadUrl[] = "type.vllm-launch/openai.param";

// InvalidArgument carrying `param` (the request field at fault).
[[nodiscard]] inline absl::Status InvalidParam(absl::string_view param, absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kParamPayloadUrl, absl::Cord(param));
  return status;
}

// The field attached by InvalidParam, if any.
inline std::optional<std::string> ErrorParam(const absl::Status& status) {
  auto param = status.GetPayload(kParamPayloadUrl);
  if (!param.has_value()) return std::nullopt;
  return std::string(*param);
}

}  // namespace vllm::base

#endif  // VLLM_BASE_STATUS_PARAM_H_
