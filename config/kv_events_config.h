// --kv-events-config (vLLM's KVEventsConfig, vllm/config/kv_events.py): the setting and its
// strict JSON parser. The events, their codec and the publisher are kv_events/kv_events.h.
#ifndef VLLM_CONFIG_KV_EVENTS_CONFIG_H_
#define VLLM_CONFIG_KV_EVENTS_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "config/field_bounds.h"

namespace vllm::config {

// Limits ParseKvEventsConfig enforces (vLLM has none; these keep memory bounded).
inline constexpr int64_t kMaxKvEventsBufferSteps = 1000000;
inline constexpr int64_t kMaxKvEventsQueueSize = 10000000;
inline constexpr size_t kMaxKvEventsEndpointBytes = 1024;
inline constexpr size_t kMaxKvEventsTopicBytes = 1024;
inline constexpr std::string_view kKvEventsPublishers[] = {"null", "zmq"};

// vLLM's KVEventsConfig. `enable` is the JSON key "enable_kv_cache_events".
struct KvEventsConfig {
  bool enable = false;
  std::string publisher = "null";  // "null" or "zmq"
  std::string endpoint = "tcp://*:5557";
  std::optional<std::string> replay_endpoint;
  int64_t buffer_steps = 10000;
  int64_t hwm = 100000;
  int64_t max_queue_size = 100000;
  std::string topic;

  // The fields, by their JSON keys, with their bounds (field_bounds.h).
  template <class Self, class V>
  static void Fields(Self& k, V& v) {
    v("enable_kv_cache_events", k.enable);
    v("publisher", k.publisher, OneOf(kKvEventsPublishers));
    v("endpoint", k.endpoint, MaxBytes(kMaxKvEventsEndpointBytes));
    v("replay_endpoint", k.replay_endpoint, MaxBytes(kMaxKvEventsEndpointBytes));
    v("buffer_steps", k.buffer_steps, Range(0, kMaxKvEventsBufferSteps));
    v("hwm", k.hwm, Range(0, std::numeric_limits<int32_t>::max()));
    v("max_queue_size", k.max_queue_size, Range(1, kMaxKvEventsQueueSize));
    v("topic", k.topic, MaxBytes(kMaxKvEventsTopicBytes));
  }
  friend bool operator==(const KvEventsConfig&, const KvEventsConfig&) = default;
};

// Parses the JSON object of `--kv-events-config`. Strict: an unknown key, a value of the
// wrong type or out of range, or a publisher other than "null"/"zmq" is InvalidArgument naming
// the key and "--kv-events-config". As vLLM, a missing "publisher" means "zmq" when events are
// enabled and "null" otherwise.
[[nodiscard]] absl::StatusOr<KvEventsConfig> ParseKvEventsConfig(std::string_view json);

}  // namespace vllm::config

#endif  // VLLM_CONFIG_KV_EVENTS_CONFIG_H_
