#include "frontend/router/router.h"

// Boost 1.74's Asio turns co_await support on for clang only with libc++'s
// <experimental/coroutine>; clang 14+ with libstdc++'s <coroutine> works as well. Only Asio's
// coroutine headers read these macros, so other files' view of Asio is unchanged.
#if defined(__clang__) && defined(__cpp_impl_coroutine) && __has_include(<coroutine>)
#ifndef BOOST_ASIO_HAS_CO_AWAIT
#define BOOST_ASIO_HAS_CO_AWAIT 1
#endif
#ifndef BOOST_ASIO_HAS_STD_COROUTINE
#define BOOST_ASIO_HAS_STD_COROUTINE 1
#endif
#endif

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/json_util.h"
#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "frontend/router/kv_event_subscriber.h"
#include "nlohmann/json.hpp"

namespace vllm::router {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using nlohmann::json;
using Request = http::request<http::string_body>;

namespace {

absl::string_view Sv(beast::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr auto kUse = net::use_awaitable;
constexpr std::chrono::seconds kClientIoTimeout{60};
constexpr size_t kRelayBufferBytes = 16384;
constexpr uint64_t kMaxBodyReadBufferBytes = uint64_t{1} << 20;

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// The OpenAI error shape, as vLLM renders it.
std::string ErrorJson(int code, absl::string_view type, absl::string_view message) {
  json j = {
      {"error", {{"message", std::string(message)}, {"type", std::string(type)}, {"code", code}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string PercentDecode(absl::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    int hi = 0;
    int lo = 0;
    auto hex = [](char c, int* v) {
      if (c >= '0' && c <= '9')
        *v = c - '0';
      else if (c >= 'a' && c <= 'f')
        *v = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        *v = c - 'A' + 10;
      else
        return false;
      return true;
    };
    if (in[i] == '%' && i + 2 < in.size() && hex(in[i + 1], &hi) && hex(in[i + 2], &lo)) {
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (in[i] == '+') {
      out.push_back(' ');
    } else {
      out.push_back(in[i]);
    }
  }
  return out;
}

// The value of query parameter `name` in `target` ("/path?a=b&c=d"), decoded; empty if absent.
std::string QueryParam(absl::string_view target, absl::string_view name) {
  const size_t q = target.find('?');
  if (q == absl::string_view::npos) return "";
  for (absl::string_view pair : absl::StrSplit(target.substr(q + 1), '&')) {
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name && eq != absl::string_view::npos) {
      return PercentDecode(pair.substr(eq + 1));
    }
  }
  return "";
}

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

absl::StatusOr<WorkerAddress> ParseWorkerUrl(absl::string_view url) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker URL '", url, "': expected http://HOST[:PORT]"));
  }
  while (absl::ConsumeSuffix(&rest, "/")) {
  }
  WorkerAddress a;
  absl::string_view host = rest;
  absl::string_view port = "80";
  if (!rest.empty() && rest.front() == '[') {  // [IPv6]:port
    const size_t close = rest.find(']');
    if (close == absl::string_view::npos) return absl::InvalidArgumentError("bad IPv6 address");
    host = rest.substr(1, close - 1);
    absl::string_view after = rest.substr(close + 1);
    if (absl::ConsumePrefix(&after, ":"))
      port = after;
    else if (!after.empty())
      return absl::InvalidArgumentError("bad worker URL");
  } else if (const size_t colon = rest.rfind(':'); colon != absl::string_view::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  int port_number = 0;
  const bool host_chars_ok = std::all_of(host.begin(), host.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
           c == ':';
  });
  if (host.empty() || !host_chars_ok || absl::StrContains(host, "/") ||
      !absl::SimpleAtoi(port, &port_number) || port_number < 1 || port_number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker URL '", url, "': expected http://HOST[:PORT] (no path)"));
  }
  a.host = std::string(host);
  a.port = absl::StrCat(port_number);
  a.url = absl::StrCat(
      "http://", absl::StrContains(host, ":") ? absl::StrCat("[", host, "]") : std::string(host),
      ":", port_number);
  return a;
}

namespace {

// A token-id prompt: every element an integer id in int32 range; nullopt otherwise.
std::optional<std::vector<int32_t>> TokenIds(const json& prompt) {
  std::vector<int32_t> ids;
  ids.reserve(prompt.size());
  for (const json& t : prompt) {
    if (!t.is_number_integer()) return std::nullopt;
    const int64_t v = t.get<int64_t>();
    if (v < 0 || v > std::numeric_limits<int32_t>::max()) return std::nullopt;
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

// A chat message's text as the API server reads it: a string, or text parts joined by "\n".
std::string MessageText(const json& m) {
  auto content = m.find("content");
  if (content == m.end()) return "";
  if (content->is_string()) return content->get<std::string>();
  std::string out;
  if (!content->is_array()) return out;
  bool first = true;
  for (const json& part : *content) {
    if (!part.is_object()) continue;
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) continue;
    if (!first) out += "\n";
    out += t->get_ref<const std::string&>();
    first = false;
  }
  return out;
}

}  // namespace

std::optional<std::vector<int32_t>> TokenizeRequestBody(const frontend::Tokenizer& tokenizer,
                                                        const frontend::ChatTemplate* chat_template,
                                                        const std::string& body, bool chat) {
  absl::StatusOr<json> parsed = base::ParseJson(body, "request body");
  if (!parsed.ok() || !parsed->is_object()) return std::nullopt;
  const json& j = *parsed;
  std::string text;
  bool add_special_tokens = true;  // completions: as vLLM, unless the request says otherwise
  if (!chat) {
    auto it = j.find("prompt");
    if (it == j.end()) return std::nullopt;
    const json* prompt = &*it;
    if (prompt->is_array() && !prompt->empty() &&
        (prompt->front().is_string() || prompt->front().is_array())) {
      prompt = &prompt->front();  // a batch: its first prompt
    }
    if (prompt->is_array()) return TokenIds(*prompt);
    if (!prompt->is_string()) return std::nullopt;
    text = prompt->get<std::string>();
    if (auto a = j.find("add_special_tokens"); a != j.end() && a->is_boolean()) {
      add_special_tokens = a->get<bool>();
    }
  } else {
    if (chat_template == nullptr) return std::nullopt;
    auto it = j.find("messages");
    if (it == j.end() || !it->is_array()) return std::nullopt;
    std::vector<frontend::ChatMessage> messages;
    for (const json& m : *it) {
      if (!m.is_object()) return std::nullopt;
      auto role = m.find("role");
      if (role == m.end() || !role->is_string()) return std::nullopt;
      messages.push_back({role->get<std::string>(), MessageText(m)});
    }
    bool add_generation_prompt = true;
    if (auto a = j.find("add_generation_prompt"); a != j.end() && a->is_boolean()) {
      add_generation_prompt = a->get<bool>();
    }
    absl::StatusOr<std::string> rendered = chat_template->Render(
        messages, add_generation_prompt, tokenizer.bos_token(), tokenizer.eos_token());
    if (!rendered.ok()) return std::nullopt;
    text = std::move(*rendered);
    // As the API server (and vLLM): the rendered text is tokenized with special tokens only
    // when the request asks (the template writes BOS itself).
    add_special_tokens = false;
    if (auto a = j.find("add_special_tokens"); a != j.end() && a->is_boolean()) {
      add_special_tokens = a->get<bool>();
    }
  }
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(text, add_special_tokens);
  if (!ids.ok()) return std::nullopt;
  return std::move(*ids);
}

// One worker as the router sees it. Shared with the requests in flight on it, so a worker
// removed at run time stays valid until they finish.
struct Worker {
  explicit Worker(const CircuitBreakerOptions& cb) : breaker(cb) {}
  WorkerAddress address;
  CircuitBreaker breaker;  // requests' outcomes (health checks are separate)
  bool healthy = false;    // admitted by a health check
  bool removed = false;    // DELETE /workers
  bool checking = false;   // a health check is in flight
  int consecutive_failures = 0;
  int64_t outstanding = 0;
  int64_t requests_total = 0;     // attempts sent to it
  int64_t failures_total = 0;     // attempts that failed before a response head
  int64_t connections_total = 0;  // connections opened to it (the rest reused pooled ones)
  // Keep-alive connections whose last response was read to its end, for the next request
  // (the router's one thread owns them), and the resolved address (resolved once).
  std::vector<std::unique_ptr<beast::tcp_stream>> idle;
  std::optional<tcp::resolver::results_type> endpoints;
};

// Idle keep-alive connections kept per worker.
constexpr size_t kMaxIdlePerWorker = 64;

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

class Router::Impl {
 public:
  Impl(const RouterOptions& options, std::unique_ptr<Policy> policy)
      : options_(options), policy_(std::move(policy)), acceptor_(ioc_), signals_(ioc_) {}

  absl::Status Init() {
    for (const std::string& url : options_.worker_urls) {
      auto a = ParseWorkerUrl(url);
      if (!a.ok()) return a.status();
      if (FindWorker(a->url) != nullptr) continue;
      auto w = std::make_shared<Worker>(options_.circuit_breaker);
      w->address = std::move(*a);
      workers_.push_back(std::move(w));
    }
    if (absl::Status s = InitKvAware(); !s.ok()) return s;
    beast::error_code ec;
    auto address = net::ip::make_address(options_.host, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("--host '", options_.host, "': not an IP address"));
    }
    tcp::endpoint endpoint(address, static_cast<uint16_t>(options_.port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", options_.host, ":", options_.port, ": ", ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    return absl::OkStatus();
  }

  int port() const { return port_; }

  // kv_aware: loads the tokenizer and the chat template, and subscribes to the engines' events.
  absl::Status InitKvAware() {
    if (!policy_->NeedsTokens()) {
      if (!options_.kv_event_sources.empty()) {
        return absl::InvalidArgumentError("--kv-event-source needs --policy kv_aware");
      }
      return absl::OkStatus();
    }
    const std::string dir =
        options_.tokenizer_path.empty() ? options_.model_path : options_.tokenizer_path;
    if (dir.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--policy ", policy_->name(),
          " tokenizes prompts as the workers do: pass --model-path or --tokenizer-path (the "
          "workers' model directory)"));
    }
    auto tokenizer = frontend::Tokenizer::Load(dir);
    if (!tokenizer.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tokenizer-path/--model-path: ", tokenizer.status().message()));
    }
    tokenizer_ = std::move(*tokenizer);
    std::string source = tokenizer_->chat_template();
    if (!options_.chat_template.empty()) {
      std::ifstream in(options_.chat_template, std::ios::binary);
      std::stringstream text;
      text << in.rdbuf();
      if (!in) {
        return absl::InvalidArgumentError(
            absl::StrCat("--chat-template: cannot read ", options_.chat_template));
      }
      source = text.str();
    }
    if (!source.empty()) {
      auto parsed = frontend::ChatTemplate::Parse(source);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("chat template: ", parsed.status().message()));
      }
      chat_template_.emplace(std::move(*parsed));
    }
    std::vector<KvEventSource> sources;
    for (const std::string& spec : options_.kv_event_sources) {
      auto parsed = ParseKvEventSource(spec);
      if (!parsed.ok()) return parsed.status();
      if (FindWorker((*parsed)[0].worker_url) == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--kv-event-source: ", (*parsed)[0].worker_url, " is not one of --worker-urls"));
      }
      sources.insert(sources.end(), parsed->begin(), parsed->end());
    }
    if (sources.empty()) {
      std::fprintf(stderr,
                   "vllm-launch router: kv_aware without --kv-event-source: routing on the "
                   "router's own predictions only\n");
      return absl::OkStatus();
    }
    // The subscriber's thread posts every batch to the I/O thread, which owns the index.
    auto subscriber = KvEventSubscriber::Start(
        std::move(sources),
        [this](const KvEventSource& src, uint64_t, uint64_t missed, kv_events::KvEventBatch batch) {
          net::post(ioc_, [this, src, missed, batch = std::move(batch)] {
            KvStats& stats = kv_stats_[src.worker_url];
            ++stats.batches;
            stats.missed += static_cast<int64_t>(missed);
            policy_->kv_index()->Apply(src.worker_url, src.rank, batch);
          });
        },
        [this](const KvEventSource& src, const absl::Status& error) {
          net::post(ioc_, [this, src, error] {
            if (kv_stats_[src.worker_url].errors++ == 0) {
              std::fprintf(stderr, "vllm-launch router: KV events from %s (%s): %s\n",
                           src.worker_url.c_str(), src.endpoint.c_str(),
                           std::string(error.message()).c_str());
            }
          });
        });
    if (!subscriber.ok()) return subscriber.status();
    kv_subscriber_ = std::move(*subscriber);
    return absl::OkStatus();
  }

  // The prompt tokens of a request, computed on the tokenizer pool (tokenizing a long prompt
  // on the I/O thread would stall every stream); nullopt when it cannot be tokenized.
  net::awaitable<std::optional<std::vector<int32_t>>> Tokenize(const std::string& body, bool chat) {
    struct State {
      explicit State(net::io_context& ioc) : done(ioc) {
        done.expires_at(net::steady_timer::time_point::max());
      }
      net::steady_timer done;
      std::optional<std::vector<int32_t>> ids;
    };
    auto state = std::make_shared<State>(ioc_);
    // The I/O thread runs this coroutine, so the completion below cannot run before the wait.
    net::post(tokenize_pool_, [this, state, body = std::make_shared<std::string>(body), chat] {
      auto ids = TokenizeRequestBody(*tokenizer_, chat_template_ ? &*chat_template_ : nullptr,
                                     *body, chat);
      net::post(ioc_, [state, ids = std::move(ids)]() mutable {
        state->ids = std::move(ids);
        state->done.cancel();
      });
    });
    beast::error_code ec;
    co_await state->done.async_wait(net::redirect_error(kUse, ec));
    co_return std::move(state->ids);
  }

  absl::Status Run(const std::function<void()>& on_ready) {
    signals_.add(SIGINT);
    signals_.add(SIGTERM);
    WaitForSignal();
    Spawn(Startup(on_ready));
    ioc_.run();
    return absl::OkStatus();
  }

  void Stop() {
    net::post(ioc_, [this] { ioc_.stop(); });
  }

 private:
  // ---- graceful stop ----

  // The first SIGINT/SIGTERM drains (Drain), a second one stops at once.
  void WaitForSignal() {
    signals_.async_wait([this](const beast::error_code& ec, int signal) {
      if (ec) return;
      if (draining_) {
        std::fprintf(stderr, "vllm-launch router: signal %d again: stopping now\n", signal);
        ioc_.stop();
        return;
      }
      Drain(signal);
      WaitForSignal();
    });
  }

  // Stops accepting connections, closes the idle client connections, lets every request in
  // flight finish (responses say Connection: close) and stops when none is left, or after
  // --shutdown-grace-period-secs. /health answers 503 meanwhile.
  void Drain(int signal) {
    draining_ = true;
    beast::error_code ec;
    acceptor_.close(ec);
    for (ClientConn* c : clients_) {
      if (!c->busy) c->stream->socket().close(ec);  // its pending read ends the session
    }
    std::fprintf(stderr,
                 "vllm-launch router: signal %d: draining %lld request(s) in flight (at most "
                 "%.0f s; a second signal stops at once)\n",
                 signal, static_cast<long long>(requests_in_flight_),
                 options_.shutdown_grace_period_secs);
    drain_timer_.expires_after(Millis(options_.shutdown_grace_period_secs));
    drain_timer_.async_wait([this](const beast::error_code& e) {
      if (e) return;
      std::fprintf(stderr, "vllm-launch router: drain timeout: stopping with %lld in flight\n",
                   static_cast<long long>(requests_in_flight_));
      ioc_.stop();
    });
    MaybeFinishDrain();
  }

  void MaybeFinishDrain() {
    if (draining_ && requests_in_flight_ == 0) {
      std::fprintf(stderr, "vllm-launch router: drained\n");
      ioc_.stop();
    }
  }

  // A client connection, registered while its session runs, so that a drain can close the
  // idle ones.
  struct ClientConn {
    beast::tcp_stream* stream = nullptr;
    bool busy = false;  // a request is being handled
  };
  class ClientRegistration {
   public:
    ClientRegistration(std::vector<ClientConn*>& all, ClientConn* c) : all_(all), c_(c) {
      all_.push_back(c_);
    }
    ~ClientRegistration() { all_.erase(std::find(all_.begin(), all_.end(), c_)); }
    ClientRegistration(const ClientRegistration&) = delete;
    ClientRegistration& operator=(const ClientRegistration&) = delete;

   private:
    std::vector<ClientConn*>& all_;
    ClientConn* c_;
  };

  enum class Outcome { kDone, kDoneClose, kRetry };

  // Runs a coroutine to completion on the I/O thread; an exception (a bug or bad_alloc) ends
  // only that coroutine and is logged.
  template <typename Awaitable>
  void Spawn(Awaitable&& a) {
    net::co_spawn(ioc_, std::forward<Awaitable>(a), [](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        std::fprintf(stderr, "vllm-launch router: connection ended by an error: %s\n", ex.what());
      }
    });
  }

  std::shared_ptr<Worker> FindWorker(absl::string_view url) const {
    for (const auto& w : workers_) {
      if (w->address.url == url) return w;
    }
    return nullptr;
  }

  int HealthyCount() const {
    int n = 0;
    for (const auto& w : workers_) n += w->healthy ? 1 : 0;
    return n;
  }

  // ---- health ----

  net::awaitable<void> Startup(std::function<void()> on_ready) {
    // One round first, so a router reporting ready knows which workers are up.
    std::vector<std::shared_ptr<Worker>> initial = workers_;
    for (const auto& w : initial) co_await CheckWorker(w);
    Spawn(AcceptLoop());
    Spawn(HealthLoop());
    if (on_ready) on_ready();
  }

  net::awaitable<void> HealthLoop() {
    net::steady_timer timer(ioc_);
    while (true) {
      timer.expires_after(Millis(options_.health_check_interval_secs));
      beast::error_code ec;
      co_await timer.async_wait(net::redirect_error(kUse, ec));
      for (const auto& w : workers_) {
        if (!w->checking) Spawn(CheckWorker(w));
      }
    }
  }

  // GET /health on `w`; updates its health (ejects after health_failure_threshold failures in
  // a row, re-admits after one success).
  net::awaitable<void> CheckWorker(std::shared_ptr<Worker> w) {
    w->checking = true;
    const bool ok = co_await Probe(w->address);
    w->checking = false;
    if (w->removed) co_return;
    if (ok) {
      w->consecutive_failures = 0;
      if (!w->healthy) {
        w->healthy = true;
        std::fprintf(stderr, "vllm-launch router: worker %s is healthy\n", w->address.url.c_str());
      }
    } else {
      NoteFailure(*w, "health check failed");
    }
  }

  // A request's outcome on `w`, for its circuit breaker.
  void NoteOutcome(Worker& w, bool ok) {
    const auto now = std::chrono::steady_clock::now();
    if (ok) {
      if (w.breaker.RecordSuccess(now)) {
        std::fprintf(stderr, "vllm-launch router: worker %s: circuit closed\n",
                     w.address.url.c_str());
      }
      return;
    }
    const int64_t opens = w.breaker.opens();
    w.breaker.RecordFailure(now);
    if (w.breaker.opens() != opens) {
      std::fprintf(stderr, "vllm-launch router: worker %s: circuit open for %lld ms\n",
                   w.address.url.c_str(), static_cast<long long>(w.breaker.open_period().count()));
    }
  }

  void NoteFailure(Worker& w, absl::string_view why) {
    ++w.consecutive_failures;
    if (w.healthy && w.consecutive_failures >= options_.health_failure_threshold) {
      w.healthy = false;
      std::fprintf(stderr, "vllm-launch router: worker %s ejected (%.*s)\n", w.address.url.c_str(),
                   static_cast<int>(why.size()), why.data());
    }
  }

  net::awaitable<bool> Probe(WorkerAddress address) {
    beast::tcp_stream up(ioc_);
    beast::error_code ec;
    tcp::resolver resolver(ioc_);
    auto endpoints =
        co_await resolver.async_resolve(address.host, address.port, net::redirect_error(kUse, ec));
    if (ec) co_return false;
    up.expires_after(Millis(options_.health_check_timeout_secs));
    co_await up.async_connect(endpoints, net::redirect_error(kUse, ec));
    if (ec) co_return false;
    Request req{http::verb::get, "/health", 11};
    req.set(http::field::host, address.host);
    req.set(http::field::connection, "close");
    co_await http::async_write(up, req, net::redirect_error(kUse, ec));
    if (ec) co_return false;
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(1 << 20);
    co_await http::async_read(up, buf, parser, net::redirect_error(kUse, ec));
    co_return !ec && parser.get().result_int() == 200;
  }

  // ---- server ----

  net::awaitable<void> AcceptLoop() {
    while (true) {
      beast::error_code ec;
      tcp::socket socket = co_await acceptor_.async_accept(net::redirect_error(kUse, ec));
      if (ec) {
        // Out of descriptors and the like: back off instead of spinning.
        net::steady_timer t(ioc_);
        t.expires_after(std::chrono::milliseconds(50));
        co_await t.async_wait(net::redirect_error(kUse, ec));
        continue;
      }
      Spawn(Session(std::move(socket)));
    }
  }

  net::awaitable<void> Session(tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    beast::error_code ec;
    stream.socket().set_option(tcp::no_delay(true), ec);
    ClientConn conn{&stream};
    ClientRegistration registration(clients_, &conn);
    beast::flat_buffer buffer;
    while (!draining_) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(options_.max_payload_size);
      parser.header_limit(64 * 1024);
      stream.expires_after(kClientIoTimeout);
      co_await http::async_read_header(stream, buffer, parser, net::redirect_error(kUse, ec));
      if (!ec && !parser.is_done()) {
        // Beast reads at most the buffer's free capacity (512 bytes at least): make room for
        // a large body, so it arrives in a few reads instead of one per 512 bytes.
        const auto length = parser.content_length();
        if (length.has_value() && *length > buffer.capacity() - buffer.size()) {
          buffer.reserve(buffer.size() +
                         static_cast<size_t>(std::min<uint64_t>(*length, kMaxBodyReadBufferBytes)));
        }
        co_await http::async_read(stream, buffer, parser, net::redirect_error(kUse, ec));
      }
      if (ec == http::error::body_limit) {
        co_await WriteSimple(
            stream, 11, false, 413,
            ErrorJson(413, "BadRequestError",
                      absl::StrCat("request body exceeds ", options_.max_payload_size, " bytes")));
        break;
      }
      if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
          ec == net::error::connection_reset || ec == net::error::operation_aborted) {
        break;
      }
      if (ec) {
        // Malformed HTTP: answer 400 when the client can still hear it, then close.
        co_await WriteSimple(stream, 11, false, 400,
                             ErrorJson(400, "BadRequestError",
                                       absl::StrCat("malformed HTTP request: ", ec.message())));
        break;
      }
      Request req = parser.release();
      if (draining_) req.keep_alive(false);  // read before the drain began: answer, then close
      conn.busy = true;
      ++requests_in_flight_;
      const Outcome outcome = co_await Handle(stream, buffer, req);
      --requests_in_flight_;
      conn.busy = false;
      MaybeFinishDrain();
      if (outcome != Outcome::kDone || !req.keep_alive() || draining_) break;
    }
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  // Writes a whole response; false when the client is gone.
  net::awaitable<bool> WriteSimple(beast::tcp_stream& stream, unsigned version, bool keep_alive,
                                   int status, std::string body,
                                   absl::string_view content_type = "application/json") {
    http::response<http::string_body> res{static_cast<http::status>(status), version};
    res.set(http::field::server, "vllm-launch router");
    res.set(http::field::content_type, std::string(content_type));
    res.keep_alive(keep_alive);
    res.body() = std::move(body);
    res.prepare_payload();
    beast::error_code ec;
    stream.expires_after(kClientIoTimeout);
    co_await http::async_write(stream, res, net::redirect_error(kUse, ec));
    co_return !ec;
  }

  net::awaitable<Outcome> Reply(beast::tcp_stream& stream, const Request& req, int status,
                                std::string body,
                                absl::string_view content_type = "application/json") {
    const bool ok = co_await WriteSimple(stream, req.version(), req.keep_alive() && !draining_,
                                         status, std::move(body), content_type);
    co_return ok ? Outcome::kDone : Outcome::kDoneClose;
  }

  net::awaitable<Outcome> Handle(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                                 Request& req) {
    const absl::string_view target(req.target().data(), req.target().size());
    const absl::string_view path = target.substr(0, target.find('?'));
    const http::verb method = req.method();
    if (path == "/v1/completions" || path == "/v1/chat/completions") {
      if (method != http::verb::post) co_return co_await MethodNotAllowed(stream, req);
      std::string text;
      std::string user;
      if (!ExtractRoutingKeys(req.body(), &text, &user)) {
        co_return co_await Reply(
            stream, req, 400,
            ErrorJson(400, "BadRequestError", "the request body is not a JSON object"));
      }
      auto session = req.find("x-session-id");
      const std::string session_key = session != req.end() ? std::string(session->value()) : user;
      RouteKeys keys;
      keys.text = text;
      keys.session_key = session_key;
      std::optional<std::vector<int32_t>> tokens;
      if (tokenizer_ != nullptr) {
        tokens = co_await Tokenize(req.body(), path == "/v1/chat/completions");
        if (tokens.has_value()) {
          keys.has_tokens = true;
          keys.tokens = *tokens;
        } else {
          ++untokenized_total_;
        }
      }
      keys.now = absl::Now();
      co_return co_await Proxy(stream, buffer, req, keys);
    }
    if (path == "/v1/models") {
      if (method != http::verb::get) co_return co_await MethodNotAllowed(stream, req);
      co_return co_await Proxy(stream, buffer, req, RouteKeys());
    }
    // vLLM's token-id endpoints: any worker answers them the same (the policy picks by load).
    if (path == "/tokenize" || path == "/detokenize") {
      if (method != http::verb::post) co_return co_await MethodNotAllowed(stream, req);
      co_return co_await Proxy(stream, buffer, req, RouteKeys());
    }
    if (path == "/health") {
      const int healthy = HealthyCount();
      const bool ok = healthy > 0 && !draining_;
      const json j = {{"status", draining_ ? "draining" : (ok ? "ok" : "unhealthy")},
                      {"healthy_workers", healthy},
                      {"workers", workers_.size()}};
      co_return co_await Reply(stream, req, ok ? 200 : 503, j.dump());
    }
    if (path == "/metrics") {
      co_return co_await Reply(stream, req, 200, RenderMetrics(),
                               "text/plain; version=0.0.4; charset=utf-8");
    }
    if (path == "/workers") co_return co_await HandleWorkers(stream, req, target);
    co_return co_await Reply(
        stream, req, 404,
        ErrorJson(404, "NotFoundError", absl::StrCat("no route for ", std::string(path))));
  }

  net::awaitable<Outcome> MethodNotAllowed(beast::tcp_stream& stream, const Request& req) {
    co_return co_await Reply(stream, req, 405,
                             ErrorJson(405, "BadRequestError", "method not allowed"));
  }

  // ---- worker management ----

  json WorkersJson() const {
    json list = json::array();
    for (const auto& w : workers_) {
      list.push_back({{"url", w->address.url},
                      {"healthy", w->healthy},
                      {"circuit", std::string(CircuitStateName(
                                      w->breaker.state(std::chrono::steady_clock::now())))},
                      {"outstanding", w->outstanding},
                      {"requests_total", w->requests_total}});
    }
    return {{"workers", list}, {"policy", policy_->name()}};
  }

  net::awaitable<Outcome> HandleWorkers(beast::tcp_stream& stream, const Request& req,
                                        absl::string_view target) {
    if (req.method() == http::verb::get)
      co_return co_await Reply(stream, req, 200, WorkersJson().dump());
    if (req.method() == http::verb::post) {
      absl::StatusOr<json> parsed = base::ParseJson(req.body(), "request body");
      const json body = parsed.ok() ? std::move(*parsed) : json(json::value_t::discarded);
      std::string url = QueryParam(target, "url");
      if (body.is_object() && body.contains("url") && body["url"].is_string()) {
        url = body["url"].get<std::string>();
      }
      auto address = ParseWorkerUrl(url);
      if (!address.ok()) {
        co_return co_await Reply(
            stream, req, 400,
            ErrorJson(400, "BadRequestError", std::string(address.status().message())));
      }
      if (FindWorker(address->url) != nullptr) {
        co_return co_await Reply(
            stream, req, 409,
            ErrorJson(409, "BadRequestError", absl::StrCat(address->url, " is already a worker")));
      }
      auto w = std::make_shared<Worker>(options_.circuit_breaker);
      w->address = *address;
      workers_.push_back(w);
      std::fprintf(stderr, "vllm-launch router: worker %s added\n", w->address.url.c_str());
      co_await CheckWorker(w);  // so the reply says whether it is serving
      const json j = {{"url", w->address.url}, {"healthy", w->healthy}};
      co_return co_await Reply(stream, req, 200, j.dump());
    }
    if (req.method() == http::verb::delete_) {
      auto address = ParseWorkerUrl(QueryParam(target, "url"));
      std::shared_ptr<Worker> w = address.ok() ? FindWorker(address->url) : nullptr;
      if (w == nullptr) {
        co_return co_await Reply(stream, req, 404,
                                 ErrorJson(404, "NotFoundError", "no such worker (?url=...)"));
      }
      // Requests in flight hold their own reference and finish; new ones no longer see it.
      w->removed = true;
      w->healthy = false;
      w->idle.clear();
      workers_.erase(std::find(workers_.begin(), workers_.end(), w));
      policy_->RemoveWorker(w->address.url);
      std::fprintf(stderr, "vllm-launch router: worker %s removed\n", w->address.url.c_str());
      const json j = {{"url", w->address.url}, {"removed", true}};
      co_return co_await Reply(stream, req, 200, j.dump());
    }
    co_return co_await MethodNotAllowed(stream, req);
  }

  // ---- metrics ----

  std::string RenderMetrics() const {
    std::string out;
    auto series = [&](absl::string_view name, absl::string_view type, absl::string_view help,
                      auto value_of) {
      absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
      for (const auto& w : workers_) {
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
    series(
        "vllm_router_worker_circuit_open", "gauge",
        "1 while the worker's circuit breaker keeps requests away from it.",
        [](const Worker& w) { return w.breaker.Allows(std::chrono::steady_clock::now()) ? 0 : 1; });
    series("vllm_router_worker_circuit_opens_total", "counter",
           "Times the worker's circuit breaker opened.",
           [](const Worker& w) { return w.breaker.opens(); });
    series("vllm_router_worker_failures_total", "counter",
           "Requests that failed on the worker before a response head.",
           [](const Worker& w) { return w.failures_total; });
    if (KvIndex* index = policy_->kv_index(); index != nullptr) {
      series("vllm_router_kv_blocks", "gauge",
             "KV-cache blocks the worker's engines hold, from their events (kv_aware).",
             [index](const Worker& w) { return index->StoredBlocks(w.address.url); });
      auto stat = [this](const Worker& w) {
        auto it = kv_stats_.find(w.address.url);
        return it == kv_stats_.end() ? KvStats{} : it->second;
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
                      untokenized_total_, "\n");
    }
    absl::StrAppend(&out,
                    "# HELP vllm_router_retries_total Requests retried on another worker.\n"
                    "# TYPE vllm_router_retries_total counter\nvllm_router_retries_total ",
                    retries_total_, "\n");
    absl::StrAppend(&out,
                    "# HELP vllm_router_client_disconnects_total Clients that left before the "
                    "end of their response.\n# TYPE vllm_router_client_disconnects_total "
                    "counter\nvllm_router_client_disconnects_total ",
                    client_disconnects_total_, "\n");
    return out;
  }

  // ---- proxy ----

  // The policy's pick among healthy workers not in `tried`; nullptr when there is none.
  std::shared_ptr<Worker> PickWorker(const RouteKeys& keys,
                                     const std::vector<std::shared_ptr<Worker>>& tried,
                                     size_t* others_left) {
    std::vector<std::shared_ptr<Worker>> pool;
    std::vector<Candidate> candidates;
    const auto now = std::chrono::steady_clock::now();
    for (const auto& w : workers_) {
      if (!w->healthy || std::find(tried.begin(), tried.end(), w) != tried.end()) continue;
      if (!w->breaker.Allows(now)) continue;
      pool.push_back(w);
      candidates.push_back({w->address.url, w->outstanding});
    }
    *others_left = pool.empty() ? 0 : pool.size() - 1;
    if (pool.empty()) return nullptr;
    const size_t i = policy_->Pick(candidates, keys);
    return pool[std::min(i, pool.size() - 1)];
  }

  net::awaitable<Outcome> Proxy(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                                const Request& req, const RouteKeys& keys) {
    std::vector<std::shared_ptr<Worker>> tried;
    std::string last_error = "no healthy worker";
    // From here on a client that leaves is noticed, even while a worker is still computing a
    // non-streamed answer (no byte to write yet).
    auto watch = std::make_shared<WatchState>(ioc_);
    Spawn(Watch(stream, buffer, watch));
    std::optional<Outcome> outcome;
    for (int attempt = 0; attempt <= options_.max_retries && !watch->client_gone; ++attempt) {
      size_t others_left = 0;
      std::shared_ptr<Worker> w = PickWorker(keys, tried, &others_left);
      if (w == nullptr) break;
      if (attempt > 0) ++retries_total_;
      tried.push_back(w);
      const bool last_chance = attempt == options_.max_retries || others_left == 0;
      std::string error;
      const Outcome o = co_await Attempt(stream, req, w, last_chance, *watch, &error);
      if (o != Outcome::kRetry) {
        outcome = o;
        break;
      }
      if (watch->client_gone) break;
      ++w->failures_total;
      last_error = absl::StrCat(w->address.url, ": ", error);
    }
    co_await StopWatching(stream, *watch);
    if (watch->client_gone) {
      ++client_disconnects_total_;
      co_return Outcome::kDoneClose;
    }
    if (outcome.has_value()) co_return *outcome;
    co_return co_await Reply(
        stream, req, HealthyCount() > 0 ? 502 : 503,
        ErrorJson(HealthyCount() > 0 ? 502 : 503, "ServiceUnavailableError",
                  absl::StrCat("no worker could serve the request (", last_error, ")")));
  }

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

  // While a request is proxied, reads from the client: EOF or an error means the client left,
  // so the upstream connection is closed (the worker then aborts the request). Bytes of a next
  // (pipelined) request are kept in `buffer`, and watching stops.
  net::awaitable<void> Watch(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                             std::shared_ptr<WatchState> state) {
    beast::error_code ec;
    if (state->stopping) {  // the proxy ended before this coroutine began: nothing to cancel
      state->done = true;
      state->done_timer.cancel();
      co_return;
    }
    const size_t n = co_await stream.socket().async_read_some(buffer.prepare(4096),
                                                              net::redirect_error(kUse, ec));
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
  net::awaitable<void> StopWatching(beast::tcp_stream& stream, WatchState& state) {
    state.stopping = true;
    if (state.done) co_return;
    beast::error_code ec;
    stream.socket().cancel(ec);
    co_await state.done_timer.async_wait(net::redirect_error(kUse, ec));
  }

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

  // Sends `req` to `w` and relays the answer. kRetry (with *error) when it failed before any
  // byte went to the client and another worker may be tried.
  net::awaitable<Outcome> Attempt(beast::tcp_stream& stream, const Request& req,
                                  std::shared_ptr<Worker> w, bool last_chance, WatchState& watch,
                                  std::string* error) {
    OutstandingGuard guard(w);
    const auto timeout = Millis(options_.request_timeout_secs);
    Request forward{req.method(), req.target(), 11};
    for (const auto& field : req.base()) {
      if (!IsHopByHop(Sv(field.name_string()))) forward.insert(field.name_string(), field.value());
    }
    forward.set(http::field::host, absl::StrCat(w->address.host, ":", w->address.port));
    forward.set(http::field::connection, "keep-alive");
    forward.body() = req.body();
    forward.prepare_payload();
    // A pooled connection first; one the worker closed meanwhile (no response head at all)
    // is dropped and the request goes once more over a new connection to the same worker.
    for (bool reused = !w->idle.empty();; reused = false) {
      std::unique_ptr<beast::tcp_stream> up;
      beast::error_code ec;
      if (reused) {
        up = std::move(w->idle.back());
        w->idle.pop_back();
      } else {
        up = std::make_unique<beast::tcp_stream>(ioc_);
        if (!w->endpoints.has_value()) {
          tcp::resolver resolver(ioc_);
          auto resolved = co_await resolver.async_resolve(w->address.host, w->address.port,
                                                          net::redirect_error(kUse, ec));
          if (!ec) w->endpoints = std::move(resolved);
        }
        if (!ec) {
          up->expires_after(std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(10)));
          co_await up->async_connect(*w->endpoints, net::redirect_error(kUse, ec));
        }
        if (!ec) ++w->connections_total;
        if (ec) {
          w->endpoints.reset();  // resolve again next time
          *error = absl::StrCat("connect: ", ec.message());
          if (!watch.client_gone) {
            NoteFailure(*w, *error);
            NoteOutcome(*w, false);
          }
          co_return Outcome::kRetry;
        }
      }
      UpstreamWatched watched(watch, *up);
      up->expires_after(timeout);
      co_await http::async_write(*up, forward, net::redirect_error(kUse, ec));
      beast::flat_buffer up_buffer;
      up_buffer.reserve(kRelayBufferBytes);  // read the worker's answer in pieces of this size
      http::response_parser<http::buffer_body> parser;
      parser.body_limit(std::numeric_limits<std::uint64_t>::max());
      if (!ec) {
        up->expires_after(timeout);
        co_await http::async_read_header(*up, up_buffer, parser, net::redirect_error(kUse, ec));
      }
      if (ec && reused && !watch.client_gone && up_buffer.size() == 0) continue;
      if (ec) {
        *error = absl::StrCat("no response: ", ec.message());
        if (!watch.client_gone) NoteOutcome(*w, false);
        co_return Outcome::kRetry;
      }
      const int status = parser.get().result_int();
      NoteOutcome(*w, status < 500);
      if (status >= 500 && !last_chance) {
        *error = absl::StrCat("HTTP ", status);
        co_return Outcome::kRetry;
      }
      const Outcome outcome = co_await Relay(stream, req, *w, *up, up_buffer, parser);
      // The response was read to its end and the worker keeps the connection: pool it (a
      // client that left closed it, so the worker aborted the request).
      if (parser.is_done() && parser.get().keep_alive() && !watch.client_gone && !w->removed &&
          up->socket().is_open() && up_buffer.size() == 0 && w->idle.size() < kMaxIdlePerWorker) {
        up->expires_never();
        w->idle.push_back(std::move(up));
      }
      co_return outcome;
    }
  }

  // Relays the worker's response: the head (hop-by-hop fields replaced), then the body as it
  // arrives. A body with a Content-Length (not SSE) keeps it; others are chunked to HTTP/1.1
  // clients and sent raw, then closed, to HTTP/1.0 ones. Each piece read from the worker is one
  // gathered write: the head goes out with the first piece, the end of a chunked body with the
  // last (a small response is one write).
  net::awaitable<Outcome> Relay(beast::tcp_stream& stream, const Request& req, const Worker& w,
                                beast::tcp_stream& up, beast::flat_buffer& up_buffer,
                                http::response_parser<http::buffer_body>& parser) {
    const auto& head = parser.get();
    const bool http11 = req.version() >= 11;
    const bool keep_alive = http11 && req.keep_alive() && !draining_;
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
    absl::StrAppend(&head_text, "X-Router-Worker: ", w.address.url, "\r\n");
    if (chunked) {
      absl::StrAppend(&head_text, "Transfer-Encoding: chunked\r\n");
    } else if (http11) {
      absl::StrAppend(&head_text, "Content-Length: ", *length, "\r\n");
    }
    absl::StrAppend(&head_text,
                    keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n");

    const auto timeout = Millis(options_.request_timeout_secs);
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

  RouterOptions options_;
  std::unique_ptr<Policy> policy_;
  // Graceful stop. Declared before ioc_: the sessions' coroutine frames, destroyed with ioc_
  // when it stops with connections open, unregister from clients_.
  bool draining_ = false;
  int64_t requests_in_flight_ = 0;
  std::vector<ClientConn*> clients_;
  net::io_context ioc_{1};
  tcp::acceptor acceptor_;
  net::signal_set signals_;
  int port_ = 0;
  std::vector<std::shared_ptr<Worker>> workers_;
  int64_t retries_total_ = 0;
  int64_t client_disconnects_total_ = 0;
  net::steady_timer drain_timer_{ioc_};
  // kv_aware. Declared after ioc_: the pool and the subscriber post to it, so they stop first.
  struct KvStats {
    int64_t batches = 0;
    int64_t missed = 0;
    int64_t errors = 0;
  };
  std::unique_ptr<frontend::Tokenizer> tokenizer_;
  std::optional<frontend::ChatTemplate> chat_template_;
  absl::flat_hash_map<std::string, KvStats> kv_stats_;
  int64_t untokenized_total_ = 0;
  net::thread_pool tokenize_pool_{2};
  std::unique_ptr<KvEventSubscriber> kv_subscriber_;
};

absl::StatusOr<std::unique_ptr<Router>> Router::Create(const RouterOptions& options) {
  if (options.max_retries < 0) return absl::InvalidArgumentError("--max-retries must be >= 0");
  if (!(options.health_check_interval_secs > 0) || !(options.health_check_timeout_secs > 0) ||
      !(options.request_timeout_secs > 0)) {
    return absl::InvalidArgumentError("intervals and timeouts must be > 0");
  }
  if (!(options.shutdown_grace_period_secs >= 0)) {
    return absl::InvalidArgumentError("--shutdown-grace-period-secs must be >= 0");
  }
  auto policy = MakePolicy(options.policy, options.policy_options);
  if (!policy.ok()) return policy.status();
  auto impl = std::make_unique<Impl>(options, std::move(*policy));
  if (absl::Status s = impl->Init(); !s.ok()) return s;
  return std::unique_ptr<Router>(new Router(std::move(impl)));
}

Router::Router(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Router::~Router() = default;
int Router::port() const { return impl_->port(); }
absl::Status Router::Run(const std::function<void()>& on_ready) { return impl_->Run(on_ready); }
void Router::Stop() { impl_->Stop(); }

}  // namespace vllm::router
