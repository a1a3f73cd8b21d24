#include "router/pd_request.h"

#include <utility>

#include "base/json_util.h"

namespace vllm::router {

using nlohmann::json;

absl::StatusOr<json> ParsePdRequestBody(absl::string_view body) {
  absl::StatusOr<json> parsed =
      base::ParseJson(std::string_view(body.data(), body.size()), "Invalid JSON in request body");
  if (!parsed.ok()) return parsed.status();
  if (!parsed->is_object()) {
    return absl::InvalidArgumentError("the request body is not a JSON object");
  }
  return std::move(*parsed);
}

json PrefillRequest(const json& client) {
  json prefill = client;
  prefill["max_tokens"] = 1;
  if (prefill.contains("max_completion_tokens")) prefill["max_completion_tokens"] = 1;
  prefill["stream"] = false;
  prefill.erase("stream_options");
  prefill.erase("min_tokens");
  prefill["kv_transfer_params"] = {{"do_remote_decode", true},    {"do_remote_prefill", false},
                                   {"remote_engine_id", nullptr}, {"remote_block_ids", nullptr},
                                   {"remote_host", nullptr},      {"remote_port", nullptr}};
  return prefill;
}

absl::StatusOr<json> KvTransferParamsOf(absl::string_view prefill_response) {
  absl::StatusOr<json> parsed =
      base::ParseJson(std::string_view(prefill_response.data(), prefill_response.size()),
                      "the prefill instance's answer");
  if (!parsed.ok()) return parsed.status();
  if (!parsed->is_object()) {
    return absl::InvalidArgumentError("the prefill instance's answer is not a JSON object");
  }
  auto it = parsed->find("kv_transfer_params");
  if (it == parsed->end() || !it->is_object()) {
    return absl::InvalidArgumentError(
        "the prefill instance's answer has no kv_transfer_params object (is it a kv_producer?)");
  }
  return std::move(*it);
}

json DecodeRequest(json client, const json& kv_transfer_params) {
  client["kv_transfer_params"] = kv_transfer_params;
  return client;
}

std::string DumpJson(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace vllm::router
