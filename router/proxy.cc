#include "router/proxy.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace vllm::router {
namespace {

// The size of the pieces a worker's answer is read and relayed in.
constexpr size_t kRelayBufferBytes = 16384;

// Headers that describe one connection, not the request: never forwarded.
bool IsHopByHop(absl::string_view name) {
  static constexpr absl::string_view kHop[] = {"connection",
                                               "keep-alive",
                                               "proxy-connection",
                                               "transfer-encoding",
                                               "te",
                                               "trailer",
                                               "upgrade",
                                               "host",
                                               "content-length",
                                               "expect",
                                               "proxy-authorization",
                                               "proxy-authenticate"};
  for (absl::string_view h : kHop) {
    if (absl::EqualsIgnoreCase(name, h)) return true;
  }
  return false;
}

}  // namespace

Request Proxy::ForwardRequest(const Request& req, const Worker& w, const std::string& body) {
  Request forward{req.method(), req.target(), 11};
  for (const auto& field : req.base()) {
    if (!IsHopByHop(Sv(field.name_string()))) forward.insert(field.name_string(), field.value());
  }
  forward.set(http::field::host, absl::StrCat(w.address.host, ":", w.address.port));
  forward.set(http::field::connection, "keep-alive");
  forward.body() = body;
  forward.prepare_payload();
  return forward;
}

// The policy's pick among the healthy workers of `role` not in `tried`; nullptr when there is
// none.
std::shared_ptr<Worker> Proxy::PickWorker(WorkerRole role, const RouteKeys& keys,
                                          const std::vector<std::shared_ptr<Worker>>& tried,
                                          size_t* others_left) {
  std::vector<std::shared_ptr<Worker>> pool;
  std::vector<Candidate> candidates;
  const auto now = std::chrono::steady_clock::now();
  for (const auto& w : state_.workers) {
    if (w->role != role || !w->healthy) continue;
    if (std::find(tried.begin(), tried.end(), w) != tried.end()) continue;
    if (!w->breaker.Allows(now)) continue;
    pool.push_back(w);
    candidates.push_back({w->address.url, w->outstanding});
  }
  *others_left = pool.empty() ? 0 : pool.size() - 1;
  if (pool.empty()) return nullptr;
  const size_t i = state_.PolicyFor(role).Pick(candidates, keys);
  return pool[std::min(i, pool.size() - 1)];
}

net::awaitable<Outcome> Proxy::Forward(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                                       const Request& req, const RouteKeys& keys) {
  // From here on a client that leaves is noticed, even while a worker is still computing a
  // non-streamed answer (no byte to write yet).
  std::shared_ptr<WatchState> watch = StartWatching(stream, buffer);
  std::string last_error = "no healthy worker";
  const WorkerRole role = state_.ServingRole();
  const std::optional<Outcome> outcome =
      co_await TryWorkers(stream, req, req.body(), role, keys, *watch, "", &last_error);
  co_return co_await Finish(stream, req, *watch, outcome, role, "worker", last_error);
}

net::awaitable<std::optional<Outcome>> Proxy::TryWorkers(beast::tcp_stream& stream,
                                                         const Request& req,
                                                         const std::string& body, WorkerRole role,
                                                         const RouteKeys& keys, WatchState& watch,
                                                         absl::string_view extra_head,
                                                         std::string* last_error) {
  std::vector<std::shared_ptr<Worker>> tried;
  for (int attempt = 0; attempt <= state_.options.max_retries && !watch.client_gone; ++attempt) {
    size_t others_left = 0;
    std::shared_ptr<Worker> w = PickWorker(role, keys, tried, &others_left);
    if (w == nullptr) break;
    if (attempt > 0) {
      ++state_.retries_total;
      if (role == WorkerRole::kDecode) ++state_.pd_decode_retries_total;
    }
    tried.push_back(w);
    const bool last_chance = attempt == state_.options.max_retries || others_left == 0;
    std::string error;
    const Outcome o =
        co_await Attempt(stream, req, body, w, last_chance, watch, extra_head, &error);
    if (o != Outcome::kRetry) co_return o;
    if (watch.client_gone) break;
    ++w->failures_total;
    *last_error = absl::StrCat(w->address.url, ": ", error);
  }
  co_return std::nullopt;
}

net::awaitable<Outcome> Proxy::Finish(beast::tcp_stream& stream, const Request& req,
                                      WatchState& watch, std::optional<Outcome> outcome,
                                      WorkerRole role, absl::string_view what,
                                      const std::string& last_error) {
  co_await StopWatching(stream, watch);
  if (watch.client_gone) {
    ++state_.client_disconnects_total;
    co_return Outcome::kDoneClose;
  }
  if (outcome.has_value()) co_return *outcome;
  const int status = state_.HealthyCount(role) > 0 ? 502 : 503;
  co_return co_await state_.Reply(
      stream, req, status,
      ErrorJson(status, "ServiceUnavailableError",
                absl::StrCat("no ", what, " could serve the request (", last_error, ")")));
}

std::shared_ptr<Proxy::WatchState> Proxy::StartWatching(beast::tcp_stream& stream,
                                                        beast::flat_buffer& buffer) {
  auto watch = std::make_shared<WatchState>(state_.ioc);
  Spawn(state_.ioc, Watch(stream, buffer, watch));
  return watch;
}

// While a request is proxied, reads from the client: EOF or an error means the client left,
// so the upstream connection is closed (the worker then aborts the request). Bytes of a next
// (pipelined) request are kept in `buffer`, and watching stops.
net::awaitable<void> Proxy::Watch(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                                  std::shared_ptr<WatchState> state) {
  beast::error_code ec;
  if (state->stopping) {  // the proxy ended before this coroutine began: nothing to cancel
    state->done = true;
    state->done_timer.cancel();
    co_return;
  }
  const size_t n =
      co_await stream.socket().async_read_some(buffer.prepare(4096), net::redirect_error(kUse, ec));
  if (!ec) {
    buffer.commit(n);
  } else if (!state->stopping) {
    state->client_gone = true;
    if (state->upstream != nullptr) state->upstream->socket().close(ec);
  }
  state->done = true;
  state->done_timer.cancel();
}

// Ends Watch (cancels its read) and waits until it has returned, so `buffer` and the socket
// are the session's again.
net::awaitable<void> Proxy::StopWatching(beast::tcp_stream& stream, WatchState& state) {
  state.stopping = true;
  if (state.done) co_return;
  beast::error_code ec;
  stream.socket().cancel(ec);
  co_await state.done_timer.async_wait(net::redirect_error(kUse, ec));
}

// Sends `body` to `w` and relays the answer. kRetry (with *error) when it failed before any
// byte went to the client and another worker may be tried.
net::awaitable<Outcome> Proxy::Attempt(beast::tcp_stream& stream, const Request& req,
                                       const std::string& body, std::shared_ptr<Worker> w,
                                       bool last_chance, WatchState& watch,
                                       absl::string_view extra_head, std::string* error) {
  OutstandingGuard guard(w);
  const Request forward = ForwardRequest(req, *w, body);
  std::unique_ptr<Upstream> up = co_await Open(w, forward, watch, error);
  if (up == nullptr) co_return Outcome::kRetry;
  UpstreamWatched watched(watch, *up->conn);
  const int status = up->parser.get().result_int();
  NoteOutcome(*w, status < 500);
  if (status >= 500 && !last_chance) {
    *error = absl::StrCat("HTTP ", status);
    co_return Outcome::kRetry;
  }
  const Outcome outcome = co_await Relay(stream, req, *w, *up, extra_head);
  KeepAlive(*w, std::move(up), watch);
  co_return outcome;
}

// A pooled connection first; one the worker closed meanwhile (no response head at all) is
// dropped and the request goes once more over a new connection to the same worker. A failed
// connect counts towards ejection; every failure goes to the circuit breaker (unless the
// client left, which closed the connection).
net::awaitable<std::unique_ptr<Proxy::Upstream>> Proxy::Open(std::shared_ptr<Worker> w,
                                                             const Request& forward,
                                                             WatchState& watch,
                                                             std::string* error) {
  const auto timeout = Millis(state_.options.request_timeout_secs);
  for (bool reused = !w->idle.empty();; reused = false) {
    std::unique_ptr<beast::tcp_stream> conn;
    beast::error_code ec;
    if (reused) {
      conn = std::move(w->idle.back());
      w->idle.pop_back();
    } else {
      conn = std::make_unique<beast::tcp_stream>(state_.ioc);
      if (!w->endpoints.has_value()) {
        tcp::resolver resolver(state_.ioc);
        auto resolved = co_await resolver.async_resolve(w->address.host, w->address.port,
                                                        net::redirect_error(kUse, ec));
        if (!ec) w->endpoints = std::move(resolved);
      }
      if (!ec) {
        conn->expires_after(std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(10)));
        co_await conn->async_connect(*w->endpoints, net::redirect_error(kUse, ec));
      }
      if (!ec) ++w->connections_total;
      if (ec) {
        w->endpoints.reset();  // resolve again next time
        *error = absl::StrCat("connect: ", ec.message());
        if (!watch.client_gone) {
          NoteFailure(*w, state_.options.health_failure_threshold, *error);
          NoteOutcome(*w, false);
        }
        co_return nullptr;
      }
    }
    auto up = std::make_unique<Upstream>(std::move(conn));
    UpstreamWatched watched(watch, *up->conn);
    up->conn->expires_after(timeout);
    co_await http::async_write(*up->conn, forward, net::redirect_error(kUse, ec));
    up->buffer.reserve(kRelayBufferBytes);  // read the worker's answer in pieces of this size
    up->parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    if (!ec) {
      up->conn->expires_after(timeout);
      co_await http::async_read_header(*up->conn, up->buffer, up->parser,
                                       net::redirect_error(kUse, ec));
    }
    if (ec && reused && !watch.client_gone && up->buffer.size() == 0) continue;
    if (ec) {
      *error = absl::StrCat("no response: ", ec.message());
      if (!watch.client_gone) NoteOutcome(*w, false);
      co_return nullptr;
    }
    co_return up;
  }
}

// The response was read to its end and the worker keeps the connection: pool it (a client
// that left closed it, so the worker aborted the request).
void Proxy::KeepAlive(Worker& w, std::unique_ptr<Upstream> up, const WatchState& watch) {
  if (up->parser.is_done() && up->parser.get().keep_alive() && !watch.client_gone && !w.removed &&
      up->conn->socket().is_open() && up->buffer.size() == 0 && w.idle.size() < kMaxIdlePerWorker) {
    up->conn->expires_never();
    w.idle.push_back(std::move(up->conn));
  }
}

// Relays the worker's response: the head (hop-by-hop fields replaced), then the body as it
// arrives. A body with a Content-Length (not SSE) keeps it; others are chunked to HTTP/1.1
// clients and sent raw, then closed, to HTTP/1.0 ones. Each piece read from the worker is one
// gathered write: the head goes out with the first piece, the end of a chunked body with the
// last (a small response is one write).
net::awaitable<Outcome> Proxy::Relay(beast::tcp_stream& stream, const Request& req, const Worker& w,
                                     Upstream& upstream, absl::string_view extra_head) {
  beast::tcp_stream& up = *upstream.conn;
  beast::flat_buffer& up_buffer = upstream.buffer;
  http::response_parser<http::buffer_body>& parser = upstream.parser;
  const auto& head = parser.get();
  const bool http11 = req.version() >= 11;
  const bool keep_alive = http11 && req.keep_alive() && !state_.draining;
  const bool sse = absl::StartsWith(Sv(head[http::field::content_type]), "text/event-stream");
  const auto length = parser.content_length();
  const bool chunked = http11 && (sse || !length.has_value());
  std::string head_text = absl::StrCat("HTTP/1.", http11 ? "1" : "0", " ", head.result_int(), " ",
                                       Sv(head.reason()), "\r\n");
  for (const auto& field : head.base()) {
    if (!IsHopByHop(Sv(field.name_string()))) {
      absl::StrAppend(&head_text, Sv(field.name_string()), ": ", Sv(field.value()), "\r\n");
    }
  }
  absl::StrAppend(&head_text, "X-Router-Worker: ", w.address.url, "\r\n", extra_head);
  if (chunked) {
    absl::StrAppend(&head_text, "Transfer-Encoding: chunked\r\n");
  } else if (http11) {
    absl::StrAppend(&head_text, "Content-Length: ", *length, "\r\n");
  }
  absl::StrAppend(&head_text,
                  keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n");

  const auto timeout = Millis(state_.options.request_timeout_secs);
  std::vector<char> buf(kRelayBufferBytes);
  std::vector<net::const_buffer> parts;
  bool head_sent = false;
  while (true) {
    beast::error_code ec;
    size_t n = 0;
    if (!parser.is_done()) {
      parser.get().body().data = buf.data();
      parser.get().body().size = buf.size();
      up.expires_after(timeout);
      co_await http::async_read_some(up, up_buffer, parser, net::redirect_error(kUse, ec));
      if (ec == http::error::need_buffer) ec = {};
      n = buf.size() - parser.get().body().size;
    }
    const bool done = !ec && parser.is_done();
    parts.clear();
    if (!head_sent) parts.push_back(net::buffer(head_text));
    std::string size_line;
    if (n > 0 && chunked) {
      size_line = absl::StrFormat("%x\r\n", n);
      parts.push_back(net::buffer(size_line));
      parts.push_back(net::buffer(buf.data(), n));
      parts.push_back(net::buffer("\r\n", 2));
    } else if (n > 0) {
      parts.push_back(net::buffer(buf.data(), n));
    }
    // The worker failed after the response began: no retry. An SSE client gets an error
    // event and a well-formed end; any other client a truncated body (connection closed).
    std::string error_chunk;
    if (ec && sse && chunked) {
      const std::string event =
          absl::StrCat("data: ",
                       ErrorJson(502, "ServiceUnavailableError",
                                 absl::StrCat("the worker failed mid-stream: ", ec.message())),
                       "\n\n");
      error_chunk = absl::StrFormat("%x\r\n%s\r\n", event.size(), event);
      parts.push_back(net::buffer(error_chunk));
    }
    if (chunked && (done || !error_chunk.empty())) parts.push_back(net::buffer("0\r\n\r\n", 5));
    if (!parts.empty()) {
      beast::error_code wec;
      stream.expires_after(kClientIoTimeout);
      co_await net::async_write(stream, parts, net::redirect_error(kUse, wec));
      if (wec) co_return Outcome::kDoneClose;  // the client left: `up` closes on return
      head_sent = true;
    }
    if (ec) co_return Outcome::kDoneClose;
    if (done) break;
  }
  co_return keep_alive ? Outcome::kDone : Outcome::kDoneClose;
}

}  // namespace vllm::router
