#include "router/metrics.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "router/kv_index.h"

namespace vllm::router {
namespace {

// P/D's series: per side, each worker's requests and failures, and the retries.
void RenderPdMetrics(const RouterState& state, std::string* out) {
  auto side = [&](absl::string_view name, absl::string_view help, WorkerRole role, auto value_of) {
    absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n");
    for (const auto& w : state.workers) {
      if (w->role != role) continue;
      absl::StrAppend(out, name, "{worker=\"", w->address.url, "\"} ", value_of(*w), "\n");
    }
  };
  auto requests = [](const Worker& w) { return w.requests_total; };
  auto failures = [](const Worker& w) { return w.failures_total; };
  side("vllm_router_pd_prefill_requests_total", "Prefill requests sent to the prefill worker.",
       WorkerRole::kPrefill, requests);
  side("vllm_router_pd_prefill_errors_total",
       "Prefills that failed on the worker (no answer, 5xx, no kv_transfer_params).",
       WorkerRole::kPrefill, failures);
  side("vllm_router_pd_decode_requests_total", "Requests sent to the decode worker.",
       WorkerRole::kDecode, requests);
  side("vllm_router_pd_decode_errors_total",
       "Requests that failed on the decode worker before a response head.", WorkerRole::kDecode,
       failures);
  auto counter = [out](absl::string_view name, absl::string_view help, int64_t value) {
    absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n", name, " ",
                    value, "\n");
  };
  counter("vllm_router_pd_requests_total", "Completions routed prefill, then decode.",
          state.pd_requests_total);
  counter("vllm_router_pd_prefill_retries_total", "Prefills retried on another prefill worker.",
          state.pd_prefill_retries_total);
  counter("vllm_router_pd_decode_retries_total",
          "Decodes retried on another decode worker (same kv_transfer_params).",
          state.pd_decode_retries_total);
}

}  // namespace

std::string RenderMetrics(const RouterState& state) {
  std::string out;
  auto series = [&](absl::string_view name, absl::string_view type, absl::string_view help,
                    auto value_of) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
    for (const auto& w : state.workers) {
      absl::StrAppend(&out, name, "{worker=\"", w->address.url, "\"} ", value_of(*w), "\n");
    }
  };
  series("vllm_router_requests_total", "counter", "Requests sent to the worker (retries too).",
         [](const Worker& w) { return w.requests_total; });
  series("vllm_router_outstanding_requests", "gauge", "Requests in flight on the worker.",
         [](const Worker& w) { return w.outstanding; });
  series("vllm_router_worker_healthy", "gauge", "1 when the worker is admitted.",
         [](const Worker& w) { return w.healthy ? 1 : 0; });
  series("vllm_router_upstream_connections_total", "counter",
         "Connections opened to the worker (requests reuse idle keep-alive ones).",
         [](const Worker& w) { return w.connections_total; });
  series("vllm_router_worker_circuit_open", "gauge",
         "1 while the worker's circuit breaker keeps requests away from it.", [](const Worker& w) {
           return w.breaker.Allows(std::chrono::steady_clock::now()) ? 0 : 1;
         });
  series("vllm_router_worker_circuit_opens_total", "counter",
         "Times the worker's circuit breaker opened.",
         [](const Worker& w) { return w.breaker.opens(); });
  series("vllm_router_worker_failures_total", "counter",
         "Requests that failed on the worker before a response head.",
         [](const Worker& w) { return w.failures_total; });
  const bool kv_aware = state.policy->kv_index() != nullptr ||
                        (state.prefill_policy != nullptr && state.prefill_policy->kv_index());
  if (kv_aware) {
    series("vllm_router_kv_blocks", "gauge",
           "KV-cache blocks the worker's engines hold, from their events (kv_aware).",
           [&state](const Worker& w) -> int64_t {
             const KvIndex* index = state.PolicyFor(w.role).kv_index();
             return index == nullptr ? 0 : static_cast<int64_t>(index->StoredBlocks(w.address.url));
           });
    auto stat = [&state](const Worker& w) {
      auto it = state.kv_stats.find(w.address.url);
      return it == state.kv_stats.end() ? KvStats{} : it->second;
    };
    series("vllm_router_kv_event_batches_total", "counter",
           "KV-event batches received from the worker's engines.",
           [&stat](const Worker& w) { return stat(w).batches; });
    series("vllm_router_kv_event_batches_missed_total", "counter",
           "KV-event batches lost (sequence gaps).",
           [&stat](const Worker& w) { return stat(w).missed; });
    series("vllm_router_kv_event_errors_total", "counter",
           "KV-event messages that could not be decoded.",
           [&stat](const Worker& w) { return stat(w).errors; });
    absl::StrAppend(&out,
                    "# HELP vllm_router_untokenized_requests_total Requests kv_aware routed "
                    "without tokens (the body could not be tokenized).\n# TYPE "
                    "vllm_router_untokenized_requests_total counter\n"
                    "vllm_router_untokenized_requests_total ",
                    state.untokenized_total, "\n");
  }
  if (state.options.pd_disaggregation) RenderPdMetrics(state, &out);
  absl::StrAppend(&out,
                  "# HELP vllm_router_retries_total Requests retried on another worker.\n"
                  "# TYPE vllm_router_retries_total counter\nvllm_router_retries_total ",
                  state.retries_total, "\n");
  absl::StrAppend(&out,
                  "# HELP vllm_router_client_disconnects_total Clients that left before the "
                  "end of their response.\n# TYPE vllm_router_client_disconnects_total "
                  "counter\nvllm_router_client_disconnects_total ",
                  state.client_disconnects_total, "\n");
  return out;
}

}  // namespace vllm::router
