#include "config/kv_events_config.h"

#include <limits>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/json_util.h"
#include "base/status_macros.h"

namespace vllm::config {
namespace {

absl::Status ConfigError(absl::string_view key, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("--kv-events-config: \"", key, "\": ", problem));
}

absl::Status ReadJsonInt(const nlohmann::json& v, absl::string_view key, int64_t lo, int64_t hi,
                         int64_t* out) {
  if (!v.is_number_integer()) return ConfigError(key, "expected an integer");
  const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(hi)
                                               : (v.get<int64_t>() >= lo && v.get<int64_t>() <= hi);
  if (!in_range || v.get<int64_t>() < lo) {
    return ConfigError(key, absl::StrCat("expected an integer in [", lo, ", ", hi, "]"));
  }
  *out = v.get<int64_t>();
  return absl::OkStatus();
}

absl::Status ReadJsonString(const nlohmann::json& v, absl::string_view key, size_t max_bytes,
                            std::string* out) {
  if (!v.is_string()) return ConfigError(key, "expected a string");
  const auto& s = v.get_ref<const std::string&>();
  if (s.size() > max_bytes)
    return ConfigError(key, absl::StrCat("longer than ", max_bytes, " bytes"));
  *out = s;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<KvEventsConfig> ParseKvEventsConfig(std::string_view json) {
  absl::StatusOr<nlohmann::json> parsed = base::ParseJson(json, "--kv-events-config", 8);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->is_object()) {
    return absl::InvalidArgumentError("--kv-events-config: expected a JSON object");
  }
  KvEventsConfig c;
  bool have_publisher = false;
  for (const auto& [key, v] : parsed->items()) {
    if (key == "enable_kv_cache_events") {
      if (!v.is_boolean()) return ConfigError(key, "expected true or false");
      c.enable = v.get<bool>();
    } else if (key == "publisher") {
      if (v.is_null()) continue;  // vLLM's default: chosen below
      VLLM_RETURN_IF_ERROR(ReadJsonString(v, key, 64, &c.publisher));
      if (c.publisher != "null" && c.publisher != "zmq") {
        return ConfigError(key, absl::StrCat("expected \"null\" or \"zmq\", got \"",
                                             absl::CEscape(c.publisher), "\""));
      }
      have_publisher = true;
    } else if (key == "endpoint") {
      VLLM_RETURN_IF_ERROR(ReadJsonString(v, key, kMaxKvEventsEndpointBytes, &c.endpoint));
      if (c.endpoint.empty()) return ConfigError(key, "empty endpoint");
    } else if (key == "replay_endpoint") {
      if (v.is_null()) {
        c.replay_endpoint.reset();
        continue;
      }
      std::string replay;
      VLLM_RETURN_IF_ERROR(ReadJsonString(v, key, kMaxKvEventsEndpointBytes, &replay));
      if (replay.empty()) return ConfigError(key, "empty endpoint");
      c.replay_endpoint = std::move(replay);
    } else if (key == "buffer_steps") {
      VLLM_RETURN_IF_ERROR(ReadJsonInt(v, key, 0, kMaxKvEventsBufferSteps, &c.buffer_steps));
    } else if (key == "hwm") {
      VLLM_RETURN_IF_ERROR(ReadJsonInt(v, key, 0, std::numeric_limits<int32_t>::max(), &c.hwm));
    } else if (key == "max_queue_size") {
      VLLM_RETURN_IF_ERROR(ReadJsonInt(v, key, 1, kMaxKvEventsQueueSize, &c.max_queue_size));
    } else if (key == "topic") {
      VLLM_RETURN_IF_ERROR(ReadJsonString(v, key, kMaxKvEventsTopicBytes, &c.topic));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--kv-events-config: unknown key \"", absl::CEscape(key.substr(0, 64)),
          "\" (known: enable_kv_cache_events, publisher, endpoint, replay_endpoint, buffer_steps, "
          "hwm, max_queue_size, topic)"));
    }
  }
  if (!have_publisher) c.publisher = c.enable ? "zmq" : "null";
  return c;
}

}  // namespace vllm::config
