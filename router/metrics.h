// Internal to router/: GET /metrics, the router's Prometheus text (router/README.md lists the
// series).
#ifndef VLLM_ROUTER_METRICS_H_
#define VLLM_ROUTER_METRICS_H_

#include <string>

#include "router/router_state.h"

namespace vllm::router {

// The Prometheus text exposition (version 0.0.4) of `state`'s counters: per worker (requests,
// outstanding, health, connections, circuit, failures; with kv_aware the KV blocks and events;
// with P/D each side's requests and errors per worker, and the P/D counters), then the
// router's own (retries, client disconnects). Call on the I/O thread.
std::string RenderMetrics(const RouterState& state);

}  // namespace vllm::router

#endif  // VLLM_ROUTER_METRICS_H_
