// Internal to router/: the proxy. It sends a client's request to the policy's worker, retries
// on another one while no byte reached the client, relays the answer as it arrives (SSE chunk
// by chunk) and keeps the workers' keep-alive connections pooled. With P/D disaggregation
// (pd_proxy.cc) a completion goes to a prefill instance first, then to a decode instance.
#ifndef VLLM_ROUTER_PROXY_H_
#define VLLM_ROUTER_PROXY_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "router/http.h"
#include "router/policy.h"
#include "router/router_state.h"

namespace vllm::router {

// Runs on the I/O thread; `state` outlives it. Faults (router/README.md "Faults"): a connection
// error, a timeout or a 5xx before any byte reached the client is retried on another healthy
// worker, at most --max-retries times (the last 5xx is passed through); after that an SSE
// stream ends with an error event and any other body is cut short. A client that leaves makes
// the proxy close the upstream connection, so the worker aborts the request. A failed connect
// also counts towards the worker's ejection (NoteFailure), and every attempt's outcome goes to
// its circuit breaker (NoteOutcome). Connections: a response read to its end on a connection
// the worker keeps alive returns it to that worker's pool (at most kMaxIdlePerWorker idle); a
// pooled connection the worker closed meanwhile (no response head) is dropped and the request
// sent once more on a new connection to the same worker. Each worker's address is resolved
// once (again after a failed connect).
class Proxy {
 public:
  explicit Proxy(RouterState& state) : state_(state) {}

  // Proxies `req` (read from `stream`; `buffer` holds what the client sent after it) to the
  // workers the policy picks with `keys` (P/D: the decode side), and answers the client: the
  // worker's response, or a 502 (503 with no healthy worker) when none could serve it.
  // kDoneClose when the connection must close (the client left, the response is not
  // keep-alive, a body was cut short).
  net::awaitable<Outcome> Forward(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                                  const Request& req, const RouteKeys& keys);

  // P/D disaggregation (pd_proxy.cc, docs/PD.md): sends the prefill version of the completion
  // request `req` (pd_request.h's PrefillRequest) to a prefill instance the prefill policy
  // picks, reads the kv_transfer_params of its answer, then proxies the client's request with
  // them to a decode instance as Forward does (the answer names both: X-Router-Worker and
  // X-Router-Prefill-Worker). Faults: a prefill instance that fails (connection error,
  // timeout, 5xx, an answer without kv_transfer_params) is replaced by another one, at most
  // --max-retries times; a prefill's 4xx (the request itself is refused) goes to the client
  // and no decode runs. A decode instance that fails before any byte reached the client is
  // replaced by another one, at most --max-retries times, with the same kv_transfer_params;
  // after that nothing is retried. 400 when the body is not a JSON object; 502 (503 with no
  // healthy instance on that side) when a side could not serve it.
  net::awaitable<Outcome> ForwardPd(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                                    const Request& req, const RouteKeys& keys);

 private:
  // What Watch shares with the proxy it watches.
  struct WatchState {
    explicit WatchState(net::io_context& ioc) : done_timer(ioc) {
      done_timer.expires_at(net::steady_timer::time_point::max());
    }
    beast::tcp_stream* upstream = nullptr;  // the attempt's connection, while one is open
    bool stopping = false;                  // StopWatching cancelled the read
    bool client_gone = false;
    bool done = false;
    net::steady_timer done_timer;  // cancelled when Watch returns
  };

  // Points the watch at an attempt's upstream connection for the attempt's lifetime.
  class UpstreamWatched {
   public:
    UpstreamWatched(WatchState& state, beast::tcp_stream& up) : state_(state) {
      state_.upstream = &up;
    }
    ~UpstreamWatched() { state_.upstream = nullptr; }
    UpstreamWatched(const UpstreamWatched&) = delete;
    UpstreamWatched& operator=(const UpstreamWatched&) = delete;

   private:
    WatchState& state_;
  };

  // A connection to a worker whose response head was read (Open); the body follows.
  struct Upstream {
    explicit Upstream(std::unique_ptr<beast::tcp_stream> c) : conn(std::move(c)) {}
    std::unique_ptr<beast::tcp_stream> conn;
    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
  };

  // What a P/D prefill round gave: the kv_transfer_params (and who gave them), or the answer
  // went to the client (a prefill's 4xx), or neither (no prefill instance could serve it).
  struct PrefillResult {
    std::optional<nlohmann::json> kv_transfer_params;
    std::string worker_url;
    std::optional<Outcome> relayed;
  };

  // The request sent to `w`: `req`'s method, target and end-to-end headers, `body`.
  static Request ForwardRequest(const Request& req, const Worker& w, const std::string& body);
  std::shared_ptr<Worker> PickWorker(WorkerRole role, const RouteKeys& keys,
                                     const std::vector<std::shared_ptr<Worker>>& tried,
                                     size_t* others_left);
  std::shared_ptr<WatchState> StartWatching(beast::tcp_stream& stream, beast::flat_buffer& buffer);
  net::awaitable<void> Watch(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                             std::shared_ptr<WatchState> state);
  net::awaitable<void> StopWatching(beast::tcp_stream& stream, WatchState& state);
  // Ends a proxied request: stops watching, then `outcome`, or a 502/503 naming `what` (e.g.
  // "worker") and `last_error` when there is none, or kDoneClose when the client left.
  net::awaitable<Outcome> Finish(beast::tcp_stream& stream, const Request& req, WatchState& watch,
                                 std::optional<Outcome> outcome, WorkerRole role,
                                 absl::string_view what, const std::string& last_error);
  // Tries the workers of `role` the policy picks, at most 1 + --max-retries, with `body`,
  // relaying the first answer (`extra_head`: header lines added to it). nullopt when none
  // could serve it (*last_error says why) or the client left.
  net::awaitable<std::optional<Outcome>> TryWorkers(beast::tcp_stream& stream, const Request& req,
                                                    const std::string& body, WorkerRole role,
                                                    const RouteKeys& keys, WatchState& watch,
                                                    absl::string_view extra_head,
                                                    std::string* last_error);
  net::awaitable<Outcome> Attempt(beast::tcp_stream& stream, const Request& req,
                                  const std::string& body, std::shared_ptr<Worker> w,
                                  bool last_chance, WatchState& watch, absl::string_view extra_head,
                                  std::string* error);
  // Sends `forward` to `w` and reads the response head; nullptr (with *error) when it failed.
  net::awaitable<std::unique_ptr<Upstream>> Open(std::shared_ptr<Worker> w, const Request& forward,
                                                 WatchState& watch, std::string* error);
  // Returns `up` to `w`'s pool when its response was read to its end and it stays open.
  void KeepAlive(Worker& w, std::unique_ptr<Upstream> up, const WatchState& watch);
  net::awaitable<Outcome> Relay(beast::tcp_stream& stream, const Request& req, const Worker& w,
                                Upstream& up, absl::string_view extra_head);
  // P/D (pd_proxy.cc).
  net::awaitable<PrefillResult> Prefill(beast::tcp_stream& stream, const Request& req,
                                        const std::string& body, const RouteKeys& keys,
                                        WatchState& watch, std::string* last_error);
  net::awaitable<PrefillResult> PrefillAttempt(beast::tcp_stream& stream, const Request& req,
                                               const std::string& body, std::shared_ptr<Worker> w,
                                               WatchState& watch, std::string* error);
  net::awaitable<beast::error_code> ReadBody(Upstream& up, size_t limit, std::string* out);

  RouterState& state_;
};

}  // namespace vllm::router

#endif  // VLLM_ROUTER_PROXY_H_
