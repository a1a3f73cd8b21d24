// The server: the accept loop, the client sessions, the dispatch of each request to the proxy
// (proxy.h), the admin endpoints (admin.h) or /metrics (metrics.h), kv_aware's tokenizer and
// KV-event subscription, and the graceful stop.
#include "router/router.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "router/admin.h"
#include "router/http.h"
#include "router/kv_event_subscriber.h"
#include "router/kv_index.h"
#include "router/metrics.h"
#include "router/proxy.h"
#include "router/router_state.h"

namespace vllm::router {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxBodyReadBufferBytes = uint64_t{1} << 20;

}  // namespace

class Router::Impl {
 public:
  Impl(const RouterOptions& options, std::unique_ptr<Policy> policy,
       std::unique_ptr<Policy> prefill_policy)
      : state_(options, std::move(policy), std::move(prefill_policy), ioc_),
        admin_(state_),
        proxy_(state_) {}

  absl::Status Init() {
    const RouterOptions& o = state_.options;
    for (const std::string& url : o.worker_urls) {
      if (absl::Status s = AddWorker(url, WorkerRole::kRegular, std::nullopt); !s.ok()) return s;
    }
    for (const PrefillUrl& p : o.prefill_urls) {
      if (absl::Status s = AddWorker(p.url, WorkerRole::kPrefill, p.bootstrap_port); !s.ok()) {
        return s;
      }
    }
    for (const std::string& url : o.decode_urls) {
      if (absl::Status s = AddWorker(url, WorkerRole::kDecode, std::nullopt); !s.ok()) return s;
    }
    if (absl::Status s = InitKvAware(); !s.ok()) return s;
    beast::error_code ec;
    auto address = net::ip::make_address(state_.options.host, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("--host '", state_.options.host, "': not an IP address"));
    }
    tcp::endpoint endpoint(address, static_cast<uint16_t>(state_.options.port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", state_.options.host, ":",
                                                 state_.options.port, ": ", ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    return absl::OkStatus();
  }

  int port() const { return port_; }

  // A worker of the command line; a URL given twice on one side is one worker, a URL on both
  // sides of P/D is refused.
  absl::Status AddWorker(const std::string& url, WorkerRole role, std::optional<int> bootstrap) {
    auto a = ParseWorkerUrl(url);
    if (!a.ok()) return a.status();
    if (std::shared_ptr<Worker> known = state_.FindWorker(a->url); known != nullptr) {
      if (known->role == role) return absl::OkStatus();
      return absl::InvalidArgumentError(
          absl::StrCat(a->url, " is both a prefill and a decode worker"));
    }
    auto w = std::make_shared<Worker>(state_.options.circuit_breaker);
    w->address = std::move(*a);
    w->role = role;
    w->bootstrap_port = bootstrap;
    state_.workers.push_back(std::move(w));
    return absl::OkStatus();
  }

  // Whether a policy of either side needs the prompts' tokens (kv_aware).
  bool NeedsTokens() const {
    return state_.policy->NeedsTokens() ||
           (state_.prefill_policy != nullptr && state_.prefill_policy->NeedsTokens());
  }

  // kv_aware: loads the tokenizer and the chat template, and subscribes to the engines' events.
  absl::Status InitKvAware() {
    if (!NeedsTokens()) {
      if (!state_.options.kv_event_sources.empty()) {
        return absl::InvalidArgumentError("--kv-event-source needs --policy kv_aware");
      }
      return absl::OkStatus();
    }
    const std::string dir = state_.options.tokenizer_path.empty() ? state_.options.model_path
                                                                  : state_.options.tokenizer_path;
    if (dir.empty()) {
      return absl::InvalidArgumentError(
          "--policy kv_aware tokenizes prompts as the workers do: pass --model-path or "
          "--tokenizer-path (the workers' model directory)");
    }
    auto tokenizer = frontend::Tokenizer::Load(dir);
    if (!tokenizer.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tokenizer-path/--model-path: ", tokenizer.status().message()));
    }
    tokenizer_ = std::move(*tokenizer);
    std::string source = tokenizer_->chat_template();
    if (!state_.options.chat_template.empty()) {
      std::ifstream in(state_.options.chat_template, std::ios::binary);
      std::stringstream text;
      text << in.rdbuf();
      if (!in) {
        return absl::InvalidArgumentError(
            absl::StrCat("--chat-template: cannot read ", state_.options.chat_template));
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
    for (const std::string& spec : state_.options.kv_event_sources) {
      auto parsed = ParseKvEventSource(spec);
      if (!parsed.ok()) return parsed.status();
      std::shared_ptr<Worker> w = state_.FindWorker((*parsed)[0].worker_url);
      if (w == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--kv-event-source: ", (*parsed)[0].worker_url, " is not one of the workers"));
      }
      if (state_.PolicyFor(w->role).kv_index() == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("--kv-event-source: ", w->address.url,
                                                       " is a ", RoleName(w->role),
                                                       " worker, whose policy is not kv_aware"));
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
            KvStats& stats = state_.kv_stats[src.worker_url];
            ++stats.batches;
            stats.missed += static_cast<int64_t>(missed);
            // The worker's side's index (a worker removed meanwhile: dropped).
            std::shared_ptr<Worker> w = state_.FindWorker(src.worker_url);
            if (w == nullptr) return;
            KvIndex* index = state_.PolicyFor(w->role).kv_index();
            if (index != nullptr) index->Apply(src.worker_url, src.rank, batch);
          });
        },
        [this](const KvEventSource& src, const absl::Status& error) {
          net::post(ioc_, [this, src, error] {
            if (state_.kv_stats[src.worker_url].errors++ == 0) {
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
      // Shared, not moved into the handler: GCC 12 sees a moved optional<vector> in a handler
      // as maybe-uninitialized.
      auto ids = std::make_shared<std::optional<std::vector<int32_t>>>(TokenizeRequestBody(
          *tokenizer_, chat_template_ ? &*chat_template_ : nullptr, *body, chat));
      net::post(ioc_, [state, ids] {
        state->ids = std::move(*ids);
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
    Spawn(ioc_, Startup(on_ready));
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
      if (state_.draining) {
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
    state_.draining = true;
    beast::error_code ec;
    acceptor_.close(ec);
    for (ClientConn* c : clients_) {
      if (!c->busy) c->stream->socket().close(ec);  // its pending read ends the session
    }
    std::fprintf(stderr,
                 "vllm-launch router: signal %d: draining %lld request(s) in flight (at most "
                 "%.0f s; a second signal stops at once)\n",
                 signal, static_cast<long long>(requests_in_flight_),
                 state_.options.shutdown_grace_period_secs);
    drain_timer_.expires_after(Millis(state_.options.shutdown_grace_period_secs));
    drain_timer_.async_wait([this](const beast::error_code& e) {
      if (e) return;
      std::fprintf(stderr, "vllm-launch router: drain timeout: stopping with %lld in flight\n",
                   static_cast<long long>(requests_in_flight_));
      ioc_.stop();
    });
    MaybeFinishDrain();
  }

  void MaybeFinishDrain() {
    if (state_.draining && requests_in_flight_ == 0) {
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

  net::awaitable<void> Startup(std::function<void()> on_ready) {
    // One round first, so a router reporting ready knows which workers are up.
    std::vector<std::shared_ptr<Worker>> initial = state_.workers;
    for (const auto& w : initial) co_await admin_.CheckWorker(w);
    Spawn(ioc_, AcceptLoop());
    Spawn(ioc_, admin_.HealthLoop());
    if (on_ready) on_ready();
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
      Spawn(ioc_, Session(std::move(socket)));
    }
  }

  net::awaitable<void> Session(tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    beast::error_code ec;
    stream.socket().set_option(tcp::no_delay(true), ec);
    ClientConn conn{&stream};
    ClientRegistration registration(clients_, &conn);
    beast::flat_buffer buffer;
    while (!state_.draining) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(state_.options.max_payload_size);
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
        co_await WriteSimple(stream, 11, false, 413,
                             ErrorJson(413, "BadRequestError",
                                       absl::StrCat("request body exceeds ",
                                                    state_.options.max_payload_size, " bytes")));
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
      // Read before the drain began: answer, then close.
      if (state_.draining) req.keep_alive(false);
      conn.busy = true;
      ++requests_in_flight_;
      const Outcome outcome = co_await Handle(stream, buffer, req);
      --requests_in_flight_;
      conn.busy = false;
      MaybeFinishDrain();
      if (outcome != Outcome::kDone || !req.keep_alive() || state_.draining) break;
    }
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  net::awaitable<Outcome> Handle(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                                 Request& req) {
    const absl::string_view target(req.target().data(), req.target().size());
    const absl::string_view path = target.substr(0, target.find('?'));
    const http::verb method = req.method();
    if (path == "/v1/completions" || path == "/v1/chat/completions") {
      if (method != http::verb::post) co_return co_await state_.MethodNotAllowed(stream, req);
      std::string text;
      std::string user;
      if (!ExtractRoutingKeys(req.body(), &text, &user)) {
        co_return co_await state_.Reply(
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
          ++state_.untokenized_total;
        }
      }
      keys.now = absl::Now();
      if (state_.options.pd_disaggregation) {
        co_return co_await proxy_.ForwardPd(stream, buffer, req, keys);
      }
      co_return co_await proxy_.Forward(stream, buffer, req, keys);
    }
    if (path == "/v1/models") {
      if (method != http::verb::get) co_return co_await state_.MethodNotAllowed(stream, req);
      co_return co_await proxy_.Forward(stream, buffer, req, RouteKeys());
    }
    // vLLM's token-id endpoints: any worker answers them the same (the policy picks by load).
    if (path == "/tokenize" || path == "/detokenize") {
      if (method != http::verb::post) co_return co_await state_.MethodNotAllowed(stream, req);
      co_return co_await proxy_.Forward(stream, buffer, req, RouteKeys());
    }
    if (path == "/health") {
      const bool ok = state_.Serving() && !state_.draining;
      json j = {{"status", state_.draining ? "draining" : (ok ? "ok" : "unhealthy")},
                {"healthy_workers", state_.HealthyCount()},
                {"workers", state_.workers.size()}};
      if (state_.options.pd_disaggregation) {
        j["healthy_prefill_workers"] = state_.HealthyCount(WorkerRole::kPrefill);
        j["healthy_decode_workers"] = state_.HealthyCount(WorkerRole::kDecode);
      }
      co_return co_await state_.Reply(stream, req, ok ? 200 : 503, j.dump());
    }
    if (path == "/metrics") {
      co_return co_await state_.Reply(stream, req, 200, RenderMetrics(state_),
                                      "text/plain; version=0.0.4; charset=utf-8");
    }
    if (path == "/workers") co_return co_await admin_.HandleWorkers(stream, req, target);
    co_return co_await state_.Reply(
        stream, req, 404,
        ErrorJson(404, "NotFoundError", absl::StrCat("no route for ", std::string(path))));
  }

  // Graceful stop. Declared before ioc_: the sessions' coroutine frames, destroyed with ioc_
  // when it stops with connections open, unregister from clients_.
  int64_t requests_in_flight_ = 0;
  std::vector<ClientConn*> clients_;
  net::io_context ioc_{1};
  // After ioc_: the workers' pooled connections live on it.
  RouterState state_;
  tcp::acceptor acceptor_{ioc_};
  net::signal_set signals_{ioc_};
  int port_ = 0;
  net::steady_timer drain_timer_{ioc_};
  WorkerAdmin admin_;
  Proxy proxy_;
  // kv_aware. Declared after ioc_: the pool and the subscriber post to it, so they stop first.
  std::unique_ptr<frontend::Tokenizer> tokenizer_;
  std::optional<frontend::ChatTemplate> chat_template_;
  net::thread_pool tokenize_pool_{2};
  std::unique_ptr<KvEventSubscriber> kv_subscriber_;
};

absl::Status CheckPdOptions(const RouterOptions& options) {
  if (!options.pd_disaggregation) {
    if (!options.prefill_urls.empty() || !options.decode_urls.empty() ||
        !options.prefill_policy.empty() || !options.decode_policy.empty()) {
      return absl::InvalidArgumentError(
          "--prefill, --decode, --prefill-policy and --decode-policy need --pd-disaggregation");
    }
    return absl::OkStatus();
  }
  if (!options.worker_urls.empty()) {
    return absl::InvalidArgumentError(
        "--worker-urls cannot be used with --pd-disaggregation: give the prefill instances as "
        "--prefill URL and the decode instances as --decode URL");
  }
  if (options.prefill_urls.empty()) {
    return absl::InvalidArgumentError("--pd-disaggregation needs at least one --prefill URL");
  }
  if (options.decode_urls.empty()) {
    return absl::InvalidArgumentError("--pd-disaggregation needs at least one --decode URL");
  }
  for (const std::string* name : {&options.prefill_policy, &options.decode_policy}) {
    if (name->empty()) continue;
    if (auto p = MakePolicy(*name, options.policy_options); !p.ok()) return p.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Router>> Router::Create(const RouterOptions& options) {
  if (options.max_retries < 0) return absl::InvalidArgumentError("--max-retries must be >= 0");
  if (!(options.health_check_interval_secs > 0) || !(options.health_check_timeout_secs > 0) ||
      !(options.request_timeout_secs > 0)) {
    return absl::InvalidArgumentError("intervals and timeouts must be > 0");
  }
  if (!(options.shutdown_grace_period_secs >= 0)) {
    return absl::InvalidArgumentError("--shutdown-grace-period-secs must be >= 0");
  }
  if (absl::Status s = CheckPdOptions(options); !s.ok()) return s;
  // With P/D, `policy` picks among the decode instances and prefill_policy among the prefill
  // ones.
  auto policy =
      MakePolicy(options.pd_disaggregation && !options.decode_policy.empty() ? options.decode_policy
                                                                             : options.policy,
                 options.policy_options);
  if (!policy.ok()) return policy.status();
  std::unique_ptr<Policy> prefill_policy;
  if (options.pd_disaggregation) {
    auto made = MakePolicy(options.prefill_policy.empty() ? options.policy : options.prefill_policy,
                           options.policy_options);
    if (!made.ok()) return made.status();
    prefill_policy = std::move(*made);
  }
  auto impl = std::make_unique<Impl>(options, std::move(*policy), std::move(prefill_policy));
  if (absl::Status s = impl->Init(); !s.ok()) return s;
  return std::unique_ptr<Router>(new Router(std::move(impl)));
}

Router::Router(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Router::~Router() = default;
int Router::port() const { return impl_->port(); }
absl::Status Router::Run(const std::function<void()>& on_ready) { return impl_->Run(on_ready); }
void Router::Stop() { impl_->Stop(); }

}  // namespace vllm::router
