// Internal to router/: the proxy. It sends a client's request to the policy's worker, retries
// on another one while no byte reached the client, relays the answer as it arrives (SSE chunk
// by chunk) and keeps the workers' keep-alive connections pooled.
#ifndef VLLM_ROUTER_PROXY_H_
#define VLLM_ROUTER_PROXY_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

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
  // workers the policy picks with `keys`, and answers the client: the worker's response, or a
  // 502 (503 with no healthy worker) when none could serve it. kDoneClose when the connection
  // must close (the client left, the response is not keep-alive, a body was cut short).
  net::awaitable<Outcome> Forward(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                                  const Request& req, const RouteKeys& keys);

 private:
  struct WatchState;
  class UpstreamWatched;

  std::shared_ptr<Worker> PickWorker(const RouteKeys& keys,
                                     const std::vector<std::shared_ptr<Worker>>& tried,
                                     size_t* others_left);
  net::awaitable<void> Watch(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                             std::shared_ptr<WatchState> state);
  net::awaitable<void> StopWatching(beast::tcp_stream& stream, WatchState& state);
  net::awaitable<Outcome> Attempt(beast::tcp_stream& stream, const Request& req,
                                  std::shared_ptr<Worker> w, bool last_chance, WatchState& watch,
                                  std::string* error);
  net::awaitable<Outcome> Relay(beast::tcp_stream& stream, const Request& req, const Worker& w,
                                beast::tcp_stream& up, beast::flat_buffer& up_buffer,
                                http::response_parser<http::buffer_body>& parser);

  RouterState& state_;
};

}  // namespace vllm::router

#endif  // VLLM_ROUTER_PROXY_H_
