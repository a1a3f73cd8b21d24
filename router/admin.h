// Internal to router/: the workers' health checks and the /workers endpoint.
#ifndef VLLM_ROUTER_ADMIN_H_
#define VLLM_ROUTER_ADMIN_H_

#include <memory>

#include "absl/strings/string_view.h"
#include "router/http.h"
#include "router/router_state.h"

namespace vllm::router {

// Admits, ejects, adds and removes the workers of a RouterState. Health: GET /health on each
// worker every --health-check-interval-secs (timeout --health-check-timeout-secs);
// --health-failure-threshold failures in a row eject it, one success re-admits it. Runs on the
// I/O thread; `state` outlives it.
class WorkerAdmin {
 public:
  explicit WorkerAdmin(RouterState& state) : state_(state) {}

  // One health check of `w`; updates its health unless it was removed meanwhile.
  net::awaitable<void> CheckWorker(std::shared_ptr<Worker> w);
  // Checks every worker (not already being checked) each interval, forever.
  net::awaitable<void> HealthLoop();
  // GET /workers (the list, with role, health, circuit, outstanding and requests; P/D: a
  // prefill's bootstrap port and both sides' policies); POST /workers {"url": ...} or ?url=...
  // (P/D: also "role": "prefill" or "decode", or ?role=; checked once before the reply; 400 on
  // a bad URL or role, 409 if present); DELETE /workers?url=... (404 if absent; requests in
  // flight on it finish). Others: 405.
  net::awaitable<Outcome> HandleWorkers(beast::tcp_stream& stream, const Request& req,
                                        absl::string_view target);

 private:
  // GET /health on `address` within --health-check-timeout-secs: true on a 200.
  net::awaitable<bool> Probe(WorkerAddress address);
  net::awaitable<Outcome> AddWorker(beast::tcp_stream& stream, const Request& req,
                                    absl::string_view target);
  net::awaitable<Outcome> RemoveWorker(beast::tcp_stream& stream, const Request& req,
                                       absl::string_view target);

  RouterState& state_;
};

}  // namespace vllm::router

#endif  // VLLM_ROUTER_ADMIN_H_
