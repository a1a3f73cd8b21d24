// The API server's listener: accepting connections (the connection limit, eviction, EMFILE
// back-off), Drain()/Stop() and the I/O and preprocessing threads. A connection is a Session
// (http_session.h); the protocol (parsing, response bodies) lives in openai_protocol.* and
// api_server_response.*. Boost.Beast stays in these .cc files and http_session.h, which only
// frontend/openai/ includes, because it is slow to compile.
#include "frontend/openai/api_server.h"

#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "frontend/openai/http_session.h"
#include "frontend/openai/stats_logger.h"
#include "spdlog/spdlog.h"

namespace vllm::frontend {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
using api_server_internal::ErrorJson;
using api_server_internal::MonoNowNs;
using api_server_internal::ServerContext;
using api_server_internal::Session;
using api_server_internal::StatsLogger;

// How long Stop() waits for connections to take their last bytes.
constexpr absl::Duration kStopGrace = absl::Seconds(5);

// Logs at most once per `interval` (per call site).
class RateLimitedLog {
 public:
  explicit RateLimitedLog(absl::Duration interval) : interval_(interval) {}
  bool ShouldLog() {
    const int64_t now = MonoNowNs();
    int64_t last = last_ns_.load();
    if (last != 0 && now - last < absl::ToInt64Nanoseconds(interval_)) return false;
    return last_ns_.compare_exchange_strong(last, now);
  }

 private:
  const absl::Duration interval_;
  std::atomic<int64_t> last_ns_{0};
};

// The response to a connection past every limit, written without reading its request.
const std::string& BusyResponse() {
  static const std::string* response = [] {
    const std::string body =
        ErrorJson(503, "ServiceUnavailableError",
                  "The server is at its connection limit (--max-connections); retry later");
    return new std::string(
        absl::StrCat("HTTP/1.1 503 Service Unavailable\r\nServer: vllm-launch\r\nContent-Type: "
                     "application/json\r\nConnection: close\r\nContent-Length: ",
                     body.size(), "\r\n\r\n", body));
  }();
  return *response;
}

bool IsOutOfResources(const beast::error_code& ec) {
  return ec == net::error::no_descriptors || ec.value() == ENFILE ||
         ec == net::error::no_buffer_space || ec == net::error::no_memory;
}

}  // namespace

int64_t DefaultMaxConnections() {
  rlimit limit{};
  int64_t soft = 1024;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    soft = static_cast<int64_t>(std::min<rlim_t>(limit.rlim_cur, 1 << 30));
  } else if (limit.rlim_cur == RLIM_INFINITY) {
    soft = 1 << 20;
  }
  return std::max<int64_t>(16, soft - kReservedFileDescriptors - kOverflowConnections);
}

absl::Status CheckListenAddress(const std::string& host, uint16_t port) {
  VLLM_ASSIGN_OR_RETURN(std::string resolved, ResolveListenAddress(host));
  if (port == 0) return absl::OkStatus();
  net::io_context ioc;
  tcp::acceptor acceptor(ioc);
  beast::error_code ec;
  tcp::endpoint endpoint(net::ip::make_address(resolved), port);
  if (acceptor.open(endpoint.protocol(), ec); !ec) {
    acceptor.set_option(net::socket_base::reuse_address(true), ec);
    acceptor.bind(endpoint, ec);
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", host, ":", port, ": ", ec.message()));
  }
  return absl::OkStatus();
}

class ApiServer::Impl {
 public:
  explicit Impl(std::shared_ptr<ServerContext> ctx)
      : ctx_(std::move(ctx)),
        acceptor_(net::make_strand(*ctx_->ioc)),
        accept_timer_(acceptor_.get_executor()) {
    absl::MutexLock lock(&ctx_->prep_mu);
    ctx_->prep = prep_ioc_->get_executor();
  }

  absl::Status Listen() {
    VLLM_ASSIGN_OR_RETURN(std::string resolved, ResolveListenAddress(ctx_->options.host));
    beast::error_code ec;
    tcp::endpoint endpoint(net::ip::make_address(resolved), ctx_->options.port);
    if (acceptor_.open(endpoint.protocol(), ec); !ec) {
      acceptor_.set_option(net::socket_base::reuse_address(true), ec);
      if (!ec && ctx_->options.reuse_port) {
        // --api-server-count N: N processes listen on one port; the kernel spreads the
        // connections over them.
        acceptor_.set_option(net::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>(true),
                             ec);
      }
      if (!ec) acceptor_.bind(endpoint, ec);
    }
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", ctx_->options.host, ":",
                                                 ctx_->options.port, ": ", ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    DoAccept();
    // The io threads run until Stop(), even when no connection is open for a moment: a
    // preprocessing job may still post its result to a session's strand (its requests are
    // aborted there), and a run() out of work would return and drop it.
    io_work_guard_.emplace(ctx_->ioc->get_executor());
    for (int32_t i = 0; i < ctx_->options.num_threads; ++i) {
      // api-io-<i>: runs the io_context (accepting, parsing, writing for all connections).
      threads_.emplace_back([ioc = ctx_->ioc] { ioc->run(); });
      pthread_setname_np(threads_.back().native_handle(), absl::StrCat("api-io-", i).c_str());
    }
    for (int32_t i = 0; i < ctx_->options.num_prep_threads; ++i) {
      // api-prep-<i>: parses request bodies, renders chat templates, tokenizes prompts.
      prep_threads_.emplace_back([ioc = &*prep_ioc_] { ioc->run(); });
      pthread_setname_np(prep_threads_.back().native_handle(),
                         absl::StrCat("api-prep-", i).c_str());
    }
    return absl::OkStatus();
  }

  // --disable-log-stats turns vLLM's periodic stats lines off.
  void StartStatsLogger() {
    if (ctx_->options.http.log_stats) stats_logger_ = std::make_unique<StatsLogger>(ctx_);
  }

  void Drain() {
    if (ctx_->draining.exchange(true)) return;
    CloseAcceptor();
    for (auto& s : LiveSessions()) s->CloseIfIdleAsync();
  }

  bool WaitForIdle(absl::Time deadline) {
    absl::MutexLock lock(&ctx_->in_flight_mu);
    return ctx_->in_flight_mu.AwaitWithDeadline(
        absl::Condition(
            +[](int64_t* n) { return *n == 0; }, &ctx_->in_flight),
        deadline);
  }

  int64_t num_in_flight() const {
    absl::MutexLock lock(&ctx_->in_flight_mu);
    return ctx_->in_flight;
  }

  void Stop() {
    if (stopped_) return;
    stopped_ = true;
    stats_logger_.reset();
    ctx_->draining.store(true);
    CloseAcceptor();
    for (auto& s : LiveSessions()) s->ShutdownAsync();
    // Requests still being prepared finish (their sessions answer them); queued ones are
    // dropped with the pool (nothing of theirs was started), releasing their sessions.
    {
      absl::MutexLock lock(&ctx_->prep_mu);
      ctx_->prep.reset();
    }
    work_guard_.reset();
    prep_ioc_->stop();
    for (std::thread& t : prep_threads_) t.join();
    prep_threads_.clear();
    prep_ioc_.reset();
    // Sessions end once their last bytes are written and their handlers ran; bounded wait.
    {
      absl::MutexLock lock(&ctx_->sessions_mu);
      ctx_->sessions_mu.AwaitWithTimeout(
          absl::Condition(
              +[](absl::flat_hash_map<Session*, std::weak_ptr<Session>>* m) { return m->empty(); },
              &ctx_->sessions),
          kStopGrace);
    }
    {
      absl::MutexLock lock(&ctx_->post_mu);
      ctx_->stopped = true;
    }
    io_work_guard_.reset();
    ctx_->ioc->stop();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  uint16_t port() const { return port_; }
  ServerContext& ctx() { return *ctx_; }

 private:
  // --uvicorn-log-level: the HTTP server's warnings show at warning and below.
  bool WarningsOn() const { return ctx_->options.http.log_level <= HttpLogLevel::kWarning; }

  std::vector<std::shared_ptr<Session>> LiveSessions() {
    std::vector<std::shared_ptr<Session>> live;
    absl::MutexLock lock(&ctx_->sessions_mu);
    for (auto& [ptr, weak] : ctx_->sessions) {
      if (auto s = weak.lock()) live.push_back(std::move(s));
    }
    return live;
  }

  void CloseAcceptor() {
    net::post(acceptor_.get_executor(), [this] {
      beast::error_code ignored;
      accept_timer_.cancel();
      acceptor_.close(ignored);
    });
  }

  void DoAccept() {
    acceptor_.async_accept(
        net::make_strand(*ctx_->ioc),
        [this](beast::error_code ec, tcp::socket socket) { OnAccept(ec, std::move(socket)); });
  }

  void OnAccept(beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // Out of descriptors (or kernel memory): the pending connection stays in the backlog
      // and accept would fail again at once. Retry after a pause instead of spinning.
      if (IsOutOfResources(ec)) return BackOff(ec);
      return DoAccept();  // the peer gave up before we accepted (ECONNABORTED, ...)
    }
    accept_delay_ = std::chrono::milliseconds(0);
    bool overflow = false;
    if (ctx_->num_connections.load() >= ctx_->max_connections && !EvictIdleSession()) {
      if (ctx_->num_connections.load() >= ctx_->max_connections + kOverflowConnections) {
        RejectNow(std::move(socket));
        return DoAccept();
      }
      overflow = true;
    }
    if (overflow && WarningsOn() && limit_log_.ShouldLog()) {
      spdlog::warn(
          "{} connections open (--max-connections {}), none idle: new connections answer "
          "/health and 503 until some close",
          ctx_->num_connections.load(), ctx_->max_connections);
    }
    ctx_->num_connections.fetch_add(1);
    std::make_shared<Session>(std::move(socket), ctx_, overflow)->Start();
    DoAccept();
  }

  // Closes the connection that has waited longest for its next request; false if none is
  // idle. One already chosen by an earlier accept (closing, but still counted until its
  // strand gets to it) is passed over: it frees the slot of that accept.
  bool EvictIdleSession() {
    std::shared_ptr<Session> victim;
    int64_t oldest = 0;
    {
      absl::MutexLock lock(&ctx_->sessions_mu);
      for (auto& [ptr, weak] : ctx_->sessions) {
        const int64_t since = ptr->idle_since_ns();
        if (since != 0 && !ptr->claimed_for_eviction() && (oldest == 0 || since < oldest)) {
          if (auto s = weak.lock()) {
            oldest = since;
            victim = std::move(s);
          }
        }
      }
      if (victim == nullptr || !victim->ClaimForEviction()) return false;
    }
    victim->CloseIfIdleAsync();
    return true;
  }

  static void RejectNow(tcp::socket socket) {
    beast::error_code ignored;
    socket.non_blocking(true, ignored);
    socket.write_some(net::buffer(BusyResponse()), ignored);
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
  }

  void BackOff(const beast::error_code& ec) {
    accept_delay_ = std::clamp(accept_delay_ * 2, std::chrono::milliseconds(10),
                               std::chrono::milliseconds(1000));
    if (WarningsOn() && resource_log_.ShouldLog()) {
      spdlog::warn(
          "accept failed ({}); retrying in {} ms. Raise the file-descriptor limit "
          "(ulimit -n) or lower --max-connections",
          ec.message(), accept_delay_.count());
    }
    accept_timer_.expires_after(accept_delay_);
    accept_timer_.async_wait([this](beast::error_code wait_ec) {
      if (!wait_ec && acceptor_.is_open()) DoAccept();
    });
  }

  std::shared_ptr<ServerContext> ctx_;
  tcp::acceptor acceptor_;
  net::steady_timer accept_timer_;  // on the acceptor's strand
  std::chrono::milliseconds accept_delay_{0};
  RateLimitedLog resource_log_{absl::Seconds(10)};
  RateLimitedLog limit_log_{absl::Seconds(10)};
  std::optional<net::io_context> prep_ioc_{std::in_place};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work_guard_{
      prep_ioc_->get_executor()};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> io_work_guard_;
  std::vector<std::thread> threads_;
  std::vector<std::thread> prep_threads_;
  std::unique_ptr<StatsLogger> stats_logger_;
  uint16_t port_ = 0;
  bool stopped_ = false;
};

absl::StatusOr<std::unique_ptr<ApiServer>> ApiServer::Create(EngineClient* engine,
                                                             ApiServerOptions options) {
  if (engine == nullptr) return absl::InvalidArgumentError("engine must not be null");
  if (options.num_threads < 1 || options.num_prep_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads and num_prep_threads must be at least 1, got ",
                     options.num_threads, " and ", options.num_prep_threads));
  }
  if (options.max_connections < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_connections must be >= 0, got ", options.max_connections));
  }
  if (options.enable_auto_tool_choice && options.tool_call_parser.empty()) {
    return absl::InvalidArgumentError("--enable-auto-tool-choice requires --tool-call-parser");
  }
  std::unique_ptr<parsers::ToolParser> tool_parser;
  if (!options.tool_call_parser.empty()) {
    VLLM_ASSIGN_OR_RETURN(tool_parser, parsers::MakeToolParser(options.tool_call_parser));
  }
  std::unique_ptr<parsers::ReasoningParser> reasoning_parser;
  if (!options.reasoning_parser.empty()) {
    VLLM_ASSIGN_OR_RETURN(reasoning_parser, parsers::MakeReasoningParser(options.reasoning_parser));
  }
  const int64_t max_connections =
      options.max_connections > 0 ? options.max_connections : DefaultMaxConnections();
  auto ctx = std::make_shared<ServerContext>(engine, std::move(options), max_connections);
  ctx->tool_parser = std::move(tool_parser);
  ctx->reasoning_parser = std::move(reasoning_parser);
  // As vLLM 0.33: without --enable-auto-tool-choice the parser is not loaded, and every
  // tool_choice but "none" is refused.
  ctx->chat_parsers =
      ChatParsers{ctx->options.enable_auto_tool_choice ? ctx->tool_parser.get() : nullptr,
                  ctx->options.exclude_tools_when_tool_choice_none, ctx->reasoning_parser.get()};
  ctx->chat_parsers.defaults = &ctx->options.request_defaults;
  auto impl = std::make_unique<Impl>(std::move(ctx));
  VLLM_RETURN_IF_ERROR(impl->Listen());
  impl->StartStatsLogger();
  return std::unique_ptr<ApiServer>(new ApiServer(std::move(impl)));
}

ApiServer::ApiServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ApiServer::~ApiServer() { Stop(); }

uint16_t ApiServer::port() const { return impl_->port(); }

void ApiServer::Drain() { impl_->Drain(); }

bool ApiServer::WaitForIdle(absl::Time deadline) { return impl_->WaitForIdle(deadline); }

int64_t ApiServer::num_in_flight() const { return impl_->num_in_flight(); }

void ApiServer::Stop() { impl_->Stop(); }

MetricsRegistry& ApiServer::metrics_registry() { return impl_->ctx().registry; }

}  // namespace vllm::frontend
