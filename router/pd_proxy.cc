// P/D disaggregation's forwarding (proxy.h's ForwardPd): the prefill instance first, then the
// decode instance with the kv_transfer_params the prefill answered.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "router/pd_request.h"
#include "router/proxy.h"

namespace vllm::router {
namespace {

using nlohmann::json;

// The largest prefill answer read: one token, but prompt_logprobs of a long prompt are large.
constexpr size_t kMaxPrefillAnswerBytes = size_t{64} << 20;
// The pieces a prefill answer is read in.
constexpr size_t kPrefillReadBytes = 65536;

}  // namespace

net::awaitable<Outcome> Proxy::ForwardPd(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                                         const Request& req, const RouteKeys& keys) {
  absl::StatusOr<json> client = ParsePdRequestBody(req.body());
  if (!client.ok()) {
    co_return co_await state_.Reply(stream, req, 400,
                                    ErrorJson(400, "BadRequestError", client.status().message()));
  }
  ++state_.pd_requests_total;
  const std::string prefill_body = DumpJson(PrefillRequest(*client));
  std::shared_ptr<WatchState> watch = StartWatching(stream, buffer);
  std::string last_error = "no healthy prefill worker";
  PrefillResult prefill = co_await Prefill(stream, req, prefill_body, keys, *watch, &last_error);
  if (!prefill.kv_transfer_params.has_value()) {
    co_return co_await Finish(stream, req, *watch, prefill.relayed, WorkerRole::kPrefill,
                              "prefill worker", last_error);
  }
  // Every decode attempt gets the same kv_transfer_params: the prefill instance keeps the
  // prompt's blocks until a decode instance read them (or its timeout).
  const std::string decode_body =
      DumpJson(DecodeRequest(std::move(*client), *prefill.kv_transfer_params));
  const std::string extra_head =
      absl::StrCat("X-Router-Prefill-Worker: ", prefill.worker_url, "\r\n");
  last_error = "no healthy decode worker";
  const std::optional<Outcome> outcome = co_await TryWorkers(
      stream, req, decode_body, WorkerRole::kDecode, keys, *watch, extra_head, &last_error);
  co_return co_await Finish(stream, req, *watch, outcome, WorkerRole::kDecode, "decode worker",
                            last_error);
}

// The prefill instances the prefill policy picks, one after another (at most 1 +
// --max-retries), until one answers with kv_transfer_params or refuses the request (4xx,
// relayed to the client).
net::awaitable<Proxy::PrefillResult> Proxy::Prefill(beast::tcp_stream& stream, const Request& req,
                                                    const std::string& body, const RouteKeys& keys,
                                                    WatchState& watch, std::string* last_error) {
  std::vector<std::shared_ptr<Worker>> tried;
  for (int attempt = 0; attempt <= state_.options.max_retries && !watch.client_gone; ++attempt) {
    size_t others_left = 0;
    std::shared_ptr<Worker> w = PickWorker(WorkerRole::kPrefill, keys, tried, &others_left);
    if (w == nullptr) break;
    if (attempt > 0) {
      ++state_.retries_total;
      ++state_.pd_prefill_retries_total;
    }
    tried.push_back(w);
    std::string error;
    PrefillResult result = co_await PrefillAttempt(stream, req, body, w, watch, &error);
    if (result.kv_transfer_params.has_value() || result.relayed.has_value()) {
      result.worker_url = w->address.url;
      co_return result;
    }
    if (watch.client_gone) break;
    ++w->failures_total;
    *last_error = absl::StrCat(w->address.url, ": ", error);
  }
  co_return PrefillResult{};
}

// One prefill on `w`. Its circuit breaker hears of a 5xx, a broken or unreadable answer and
// one without kv_transfer_params as failures; a 4xx is the request's fault, not the worker's.
net::awaitable<Proxy::PrefillResult> Proxy::PrefillAttempt(beast::tcp_stream& stream,
                                                           const Request& req,
                                                           const std::string& body,
                                                           std::shared_ptr<Worker> w,
                                                           WatchState& watch, std::string* error) {
  PrefillResult result;
  OutstandingGuard guard(w);
  Request forward = ForwardRequest(req, *w, body);
  forward.erase(http::field::accept_encoding);  // the router reads this answer itself
  std::unique_ptr<Upstream> up = co_await Open(w, forward, watch, error);
  if (up == nullptr) co_return result;
  UpstreamWatched watched(watch, *up->conn);
  const int status = up->parser.get().result_int();
  if (status >= 400 && status < 500) {
    NoteOutcome(*w, true);
    result.relayed = co_await Relay(stream, req, *w, *up, "");
    KeepAlive(*w, std::move(up), watch);
    co_return result;
  }
  if (status < 200 || status >= 300) {
    *error = absl::StrCat("HTTP ", status);
    NoteOutcome(*w, false);
    co_return result;  // the unread answer's connection is dropped
  }
  std::string answer;
  const beast::error_code ec = co_await ReadBody(*up, kMaxPrefillAnswerBytes, &answer);
  if (ec) {
    *error = absl::StrCat("reading the answer: ", ec.message());
    if (!watch.client_gone) NoteOutcome(*w, false);
    co_return result;
  }
  KeepAlive(*w, std::move(up), watch);
  absl::StatusOr<json> params = KvTransferParamsOf(answer);
  if (!params.ok()) {
    *error = std::string(params.status().message());
    NoteOutcome(*w, false);
    co_return result;
  }
  NoteOutcome(*w, true);
  result.kv_transfer_params = std::move(*params);
  co_return result;
}

// Reads the rest of `up`'s body into *out; body_limit past `limit` bytes.
net::awaitable<beast::error_code> Proxy::ReadBody(Upstream& up, size_t limit, std::string* out) {
  const auto timeout = Millis(state_.options.request_timeout_secs);
  std::vector<char> buf(kPrefillReadBytes);
  while (!up.parser.is_done()) {
    up.parser.get().body().data = buf.data();
    up.parser.get().body().size = buf.size();
    beast::error_code ec;
    up.conn->expires_after(timeout);
    co_await http::async_read_some(*up.conn, up.buffer, up.parser, net::redirect_error(kUse, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) co_return ec;
    const size_t n = buf.size() - up.parser.get().body().size;
    if (out->size() + n > limit) co_return http::error::body_limit;
    out->append(buf.data(), n);
  }
  co_return beast::error_code{};
}

}  // namespace vllm::router
