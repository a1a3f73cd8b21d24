// The --kv-events-config setting (config::KvEventsConfig) as the publisher's options
// (kv_events::KvEventPublisherOptions): kv_events/ knows no configuration, so core/, which
// publishes, converts.
#ifndef VLLM_CORE_KV_EVENT_OPTIONS_H_
#define VLLM_CORE_KV_EVENT_OPTIONS_H_

#include "config/kv_events_config.h"
#include "kv_events/kv_events.h"

namespace vllm::core {

static_assert(config::kMaxKvEventsEndpointBytes == kv_events::kMaxEndpointBytes,
              "the --kv-events-config endpoint limit and the publisher's differ");

// Every field as it is (the two structs list the same settings).
inline kv_events::KvEventPublisherOptions KvEventPublisherOptionsFrom(
    const config::KvEventsConfig& config) {
  kv_events::KvEventPublisherOptions o;
  o.enable = config.enable;
  o.publisher = config.publisher;
  o.endpoint = config.endpoint;
  o.replay_endpoint = config.replay_endpoint;
  o.buffer_steps = config.buffer_steps;
  o.hwm = config.hwm;
  o.max_queue_size = config.max_queue_size;
  o.topic = config.topic;
  return o;
}

}  // namespace vllm::core

#endif  // VLLM_CORE_KV_EVENT_OPTIONS_H_
