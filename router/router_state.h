// Internal to router/: the state the router's parts share. Router::Impl (router.cc: the server,
// its sessions and the drain) owns one RouterState; the proxy (proxy.h), the health checks and
// /workers (admin.h) and /metrics (metrics.h) read and change it. Everything here is touched by
// the router's one I/O thread only.
#ifndef VLLM_ROUTER_ROUTER_STATE_H_
#define VLLM_ROUTER_ROUTER_STATE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "router/circuit_breaker.h"
#include "router/http.h"
#include "router/policy.h"
#include "router/router.h"

namespace vllm::router {

// A worker's side: a plain worker, or (P/D disaggregation) a prefill or a decode instance.
enum class WorkerRole { kRegular, kPrefill, kDecode };

// "regular", "prefill", "decode" (/workers, logs).
absl::string_view RoleName(WorkerRole role);

// One worker as the router sees it. Shared with the requests in flight on it, so a worker
// removed at run time stays valid until they finish.
struct Worker {
  explicit Worker(const CircuitBreakerOptions& cb) : breaker(cb) {}
  WorkerAddress address;
  WorkerRole role = WorkerRole::kRegular;
  std::optional<int> bootstrap_port;  // a prefill's --prefill URL PORT (recorded, unused)
  CircuitBreaker breaker;             // requests' outcomes (health checks are separate)
  bool healthy = false;               // admitted by a health check
  bool removed = false;               // DELETE /workers
  bool checking = false;              // a health check is in flight
  int consecutive_failures = 0;
  int64_t outstanding = 0;
  int64_t requests_total = 0;  // attempts sent to it
  // Attempts that failed before a response head (a prefill: also an answer without
  // kv_transfer_params).
  int64_t failures_total = 0;
  int64_t connections_total = 0;  // connections opened to it (the rest reused pooled ones)
  // Keep-alive connections whose last response was read to its end, for the next request
  // (the router's one thread owns them), and the resolved address (resolved once).
  std::vector<std::unique_ptr<beast::tcp_stream>> idle;
  std::optional<tcp::resolver::results_type> endpoints;
};

// Idle keep-alive connections kept per worker.
inline constexpr size_t kMaxIdlePerWorker = 64;

// Counts a request in flight on a worker for as long as it lives.
class OutstandingGuard {
 public:
  explicit OutstandingGuard(std::shared_ptr<Worker> w) : w_(std::move(w)) {
    ++w_->outstanding;
    ++w_->requests_total;
  }
  ~OutstandingGuard() { --w_->outstanding; }
  OutstandingGuard(const OutstandingGuard&) = delete;
  OutstandingGuard& operator=(const OutstandingGuard&) = delete;

 private:
  std::shared_ptr<Worker> w_;
};

// A failed health check or connection on `w`: `failure_threshold` in a row eject it (logged,
// with `why`). Only a health check's success re-admits it (admin.h).
void NoteFailure(Worker& w, int failure_threshold, absl::string_view why);

// A proxied request's outcome on `w`, for its circuit breaker (opening and closing logged).
void NoteOutcome(Worker& w, bool ok);

// kv_aware: what a worker's KV-event subscription delivered (/metrics).
struct KvStats {
  int64_t batches = 0;
  int64_t missed = 0;
  int64_t errors = 0;
};

// The router's shared state. Router::Impl owns it, declared after its io_context: the workers'
// pooled connections live on that context and must go first.
struct RouterState {
  // `prefill_policy`: P/D's prefill side (nullptr without P/D); `policy`: the other workers'.
  RouterState(const RouterOptions& options, std::unique_ptr<Policy> policy,
              std::unique_ptr<Policy> prefill_policy, net::io_context& ioc)
      : options(options),
        policy(std::move(policy)),
        prefill_policy(std::move(prefill_policy)),
        ioc(ioc) {}

  // The worker with normalised `url` (WorkerAddress::url), or nullptr.
  std::shared_ptr<Worker> FindWorker(absl::string_view url) const;
  // Workers admitted by their health checks: all, or those of one side.
  int HealthyCount() const;
  int HealthyCount(WorkerRole role) const;
  // Whether requests can be served: a healthy worker (P/D: one on each side).
  bool Serving() const;
  // The policy that picks among the workers of `role`.
  Policy& PolicyFor(WorkerRole role) const;
  // The role of the workers that answer clients: kDecode with P/D, else kRegular.
  WorkerRole ServingRole() const;
  // Writes a whole response to `req` (keep-alive as the request asks, unless draining);
  // kDoneClose when the client is gone.
  net::awaitable<Outcome> Reply(beast::tcp_stream& stream, const Request& req, int status,
                                std::string body,
                                absl::string_view content_type = "application/json") const;
  // Reply's 405 (OpenAI error shape).
  net::awaitable<Outcome> MethodNotAllowed(beast::tcp_stream& stream, const Request& req) const;

  const RouterOptions options;
  const std::unique_ptr<Policy> policy;          // regular workers', or P/D's decode side
  const std::unique_ptr<Policy> prefill_policy;  // P/D's prefill side; else nullptr
  net::io_context& ioc;                          // the I/O thread's; Router::Impl owns it
  // A SIGINT/SIGTERM began the drain (router.cc): no new requests, no keep-alive, /health 503.
  bool draining = false;
  // In --worker-urls (P/D: --prefill, then --decode) and POST /workers order.
  std::vector<std::shared_ptr<Worker>> workers;
  // Counters for /metrics.
  int64_t retries_total = 0;             // both sides' with P/D
  int64_t pd_requests_total = 0;         // P/D: completions begun (prefill, then decode)
  int64_t pd_prefill_retries_total = 0;  // P/D: prefills retried on another prefill instance
  int64_t pd_decode_retries_total = 0;   // P/D: decodes retried on another decode instance
  int64_t client_disconnects_total = 0;
  int64_t untokenized_total = 0;                       // kv_aware
  absl::flat_hash_map<std::string, KvStats> kv_stats;  // kv_aware, per worker URL
};

}  // namespace vllm::router

#endif  // VLLM_ROUTER_ROUTER_STATE_H_
