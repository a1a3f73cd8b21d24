// The Boost.Beast side of the API server: listener, per-connection session, routing. The
// protocol (parsing, response bodies) lives in openai_protocol.* and api_server_response.*;
// Beast is confined to this translation unit because it is slow to compile.
#include "frontend/api_server.h"

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
#include "frontend/api_server_response.h"
#include "frontend/openai_protocol.h"
#include "spdlog/spdlog.h"

namespace vllm::frontend {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
// A connection's strand (type-erased as Beast's stream holds it).
using Strand = net::any_io_executor;

class Session;

// How long Stop() waits for connections to take their last bytes.
constexpr absl::Duration kStopGrace = absl::Seconds(5);

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int64_t MonoNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// Compares in time that depends only on `expected`'s length, not on where the strings differ.
bool ConstantTimeEquals(std::string_view given, std::string_view expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= static_cast<unsigned char>(g ^ static_cast<unsigned char>(expected[i]));
  }
  // Keep the compiler from turning the loop into an early-exit comparison.
  volatile unsigned char result = diff;
  return result == 0;
}

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

// State shared by the listener, every session and every engine callback. Outlives the
// ApiServer when engine callbacks still hold it.
struct ServerContext {
  ServerContext(EngineClient* e, ApiServerOptions o, int64_t max_conn)
      : engine(e),
        options(std::move(o)),
        max_connections(max_conn),
        metrics(&registry, e->ModelName(), static_cast<int32_t>(e->Engines().size()),
                e->Engines().empty() ? 0 : e->Engines()[0].rank),
        created(static_cast<int64_t>(WallSeconds())),
        id_seed(std::random_device{}()) {}

  EngineClient* const engine;
  const ApiServerOptions options;
  const int64_t max_connections;
  MetricsRegistry registry;
  ServerMetrics metrics;
  const int64_t created;
  const uint64_t id_seed;
  std::atomic<uint64_t> next_id{0};
  std::shared_ptr<net::io_context> ioc = std::make_shared<net::io_context>();
  // The preprocessing pool's executor (its io_context is owned by ApiServer::Impl); unset
  // once Stop() has begun tearing the pool down.
  absl::Mutex prep_mu;
  std::optional<net::any_io_executor> prep ABSL_GUARDED_BY(prep_mu);

  // Open client connections (sessions), for the connection limit.
  std::atomic<int64_t> num_connections{0};
  // Drain()/Stop() called: no new generation starts.
  std::atomic<bool> draining{false};

  // Engine callbacks post onto session strands only while !stopped (so no handler holding
  // this context is queued into a stopped io_context).
  absl::Mutex post_mu;
  bool stopped ABSL_GUARDED_BY(post_mu) = false;

  // Live sessions, for Stop(), Drain() and eviction.
  absl::Mutex sessions_mu;
  absl::flat_hash_map<Session*, std::weak_ptr<Session>> sessions ABSL_GUARDED_BY(sessions_mu);

  // Generation requests in flight, for Drain()/WaitForIdle().
  mutable absl::Mutex in_flight_mu;
  int64_t in_flight ABSL_GUARDED_BY(in_flight_mu) = 0;

  void AddInFlight(int64_t delta) {
    absl::MutexLock lock(&in_flight_mu);
    in_flight += delta;
  }

  std::string NewId(absl::string_view prefix) {
    return absl::StrFormat("%s%016x%08x", prefix, id_seed, next_id.fetch_add(1));
  }
};

// Where an engine callback delivers: the session's strand. Members are destroyed in reverse
// order, so the strand goes before the context that keeps its io_context alive.
struct PostTarget {
  std::shared_ptr<ServerContext> ctx;
  Strand strand;
  std::weak_ptr<Session> session;
};

// One engine request of the generation in flight.
struct SubRequest {
  std::string id;
  bool finished = false;
  bool got_first_token = false;
  int32_t num_output_tokens = 0;
  int32_t engine_index = 0;  // the engine serving it, as its outputs say (metrics)
  Clock::time_point last_token_time;
};

// The HTTP generation request in flight on a session.
struct Generation {
  uint64_t serial = 0;
  bool stream = false;
  Clock::time_point arrival;
  std::unique_ptr<ResponseAssembler> assembler;
  std::vector<SubRequest> subs;
};

// What the preprocessing pool hands back to a session: the started engine requests, or why
// none was started.
struct Prepared {
  absl::Status status;
  ApiKind kind = ApiKind::kCompletion;
  ResponseMeta meta;
  GenerationOptions options;
  bool logprobs = false;
  std::vector<std::string> echo_texts;   // per prompt (echo), else empty
  bool echo_logprobs = false;            // echo with logprobs
  std::vector<std::string> request_ids;  // started in the engine, in choice order
};

// An engine output that arrived before its generation was set up on the strand.
struct EarlyOutput {
  int32_t index = 0;
  absl::StatusOr<GenerateOutput> output;
};

const char* const kRoutes[][2] = {
    {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"},
    {"/v1/models", "GET"},       {"/health", "GET"},
    {"/version", "GET"},         {"/metrics", "GET"},
    {"/tokenize", "POST"},       {"/detokenize", "POST"},
};

std::string ErrorJson(int code, absl::string_view type, absl::string_view message) {
  return DumpJson(ErrorBody(code, type, message));
}

// One connection. Every member is touched only on the connection's strand, but for the
// atomics that the acceptor reads when it looks for an idle connection to close.
class Session : public std::enable_shared_from_this<Session> {
 public:
  // `overflow`: accepted past max_connections; answers one request (see api_server.h).
  Session(tcp::socket socket, std::shared_ptr<ServerContext> ctx, bool overflow)
      : stream_(std::move(socket)), ctx_(std::move(ctx)), overflow_(overflow) {}

  ~Session() {
    AbortUnfinished();
    EndInFlight();
    ctx_->num_connections.fetch_sub(1);
    absl::MutexLock lock(&ctx_->sessions_mu);
    ctx_->sessions.erase(this);
  }

  void Start() {
    beast::error_code ignored;
    // SSE chunks are small and latency matters more than packet count.
    stream_.socket().set_option(tcp::no_delay(true), ignored);
    {
      absl::MutexLock lock(&ctx_->sessions_mu);
      ctx_->sessions[this] = weak_from_this();
    }
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->DoRead(); });
  }

  // Closes the connection (from any thread); in-flight engine requests are aborted.
  void CloseAsync() {
    net::post(stream_.get_executor(), [self = shared_from_this()] { self->CloseSocket(); });
  }

  // Closes the connection if it is waiting for a request (Drain(), eviction).
  // A connection whose last response is still being written counts as idle: it closes once
  // the response is out (its client already has, or is about to have, everything it asked
  // for), so a client that just got its answer never makes an eviction miss.
  void CloseIfIdleAsync() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      if (self->idle_since_ns_.load() != 0 && !self->gen_.has_value() &&
          self->preparing_serial_ == 0) {
        if (!self->writing_) return self->CloseSocket();
        self->close_after_write_ = true;
        return;
      }
      self->evicting_.store(false);  // busy after all: it may be chosen again later
    });
  }

  // Stop(): a generation in flight ends with an error; the connection closes once its last
  // bytes are written (at once when it has nothing in flight).
  void ShutdownAsync() {
    net::post(stream_.get_executor(), [self = shared_from_this()] { self->Shutdown(); });
  }

  // Since when the connection waits for its next request (monotonic ns); 0 while a request
  // is being served.
  int64_t idle_since_ns() const { return idle_since_ns_.load(); }
  // Claims the session for eviction; false when another accept claimed it already.
  bool ClaimForEviction() { return !evicting_.exchange(true); }
  bool claimed_for_eviction() const { return evicting_.load(); }

  // Delivers an engine output of generation `serial` (any thread: posts to the strand).
  static OutputCallback MakeCallback(PostTarget target, uint64_t serial, int32_t index) {
    return [target = std::move(target), serial, index](absl::StatusOr<GenerateOutput> out) {
      absl::ReaderMutexLock lock(&target.ctx->post_mu);
      if (target.ctx->stopped) return;
      net::post(target.strand,
                [session = target.session, serial, index, out = std::move(out)]() mutable {
                  if (auto self = session.lock()) {
                    self->OnEngineOutput(serial, index, std::move(out));
                  }
                });
    };
  }

 private:
  // ---- reading requests ----

  void DoRead() {
    if (closed_) return;
    parser_.emplace();
    parser_->body_limit(ctx_->options.max_body_bytes);
    parser_->header_limit(static_cast<uint32_t>(ctx_->options.max_header_bytes));
    idle_since_ns_.store(MonoNowNs());
    if (overflow_) {
      stream_.expires_after(ctx_->options.overflow_read_timeout);
    } else {
      stream_.expires_after(ctx_->options.io_timeout);
    }
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::OnRead, shared_from_this()));
  }

  void OnRead(beast::error_code ec, size_t) {
    if (closed_) return;
    idle_since_ns_.store(0);
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      return SendError(absl::ResourceExhaustedError(absl::StrCat(
          "Request body exceeds the limit of ", ctx_->options.max_body_bytes, " bytes")));
    }
    if (ec == http::error::header_limit) {
      keep_alive_ = false;
      return SendJson(http::status::request_header_fields_too_large,
                      ErrorJson(431, "RequestHeaderFieldsTooLarge",
                                absl::StrCat("Request headers exceed the limit of ",
                                             ctx_->options.max_header_bytes, " bytes")));
    }
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == net::error::operation_aborted || ec == net::error::eof ||
        ec == net::error::connection_reset) {
      return CloseSocket();
    }
    if (ec) {
      keep_alive_ = false;
      return SendError(
          absl::InvalidArgumentError(absl::StrCat("Malformed HTTP request: ", ec.message())));
    }
    request_ = parser_->release();
    keep_alive_ =
        request_.keep_alive() && request_.version() == 11 && !overflow_ && !ctx_->draining.load();
    Route();
  }

  // ---- routing ----

  void Route() {
    std::string target(request_.target());
    std::string path = target.substr(0, target.find('?'));
    if (request_.version() >= 11 && request_.find(http::field::host) == request_.end()) {
      // RFC 9112 section 3.2: a server MUST answer 400 to an HTTP/1.1 request without Host.
      keep_alive_ = false;
      return SendError(absl::InvalidArgumentError("An HTTP/1.1 request needs a Host header"));
    }
    const char* allowed = nullptr;
    for (const auto& route : kRoutes) {
      if (path == route[0]) allowed = route[1];
    }
    if (allowed == nullptr) {
      return SendError(absl::NotFoundError(absl::StrCat("Not Found: ", path)));
    }
    if (request_.method_string() != allowed) {
      return SendJson(http::status::method_not_allowed,
                      ErrorJson(405, "MethodNotAllowed",
                                absl::StrCat("Method ", std::string(request_.method_string()),
                                             " is not allowed on ", path, "; use ", allowed)),
                      allowed);
    }
    if (overflow_ && path != "/health") {
      return SendError(absl::UnavailableError(
          absl::StrCat("The server is at its connection limit (--max-connections ",
                       ctx_->max_connections, "); retry later")));
    }
    if (ctx_->draining.load() && path != "/version" && path != "/metrics") {
      return SendError(absl::UnavailableError("The server is shutting down"));
    }
    if (path.rfind("/v1/", 0) == 0 && !Authorized()) {
      return SendError(absl::UnauthenticatedError(
          "Invalid or missing API key: send \"Authorization: Bearer <key>\""));
    }
    if (path == "/v1/completions") return HandleGenerate(ApiKind::kCompletion);
    if (path == "/v1/chat/completions") return HandleGenerate(ApiKind::kChat);
    if (path == "/tokenize") return HandleTokenization(&frontend::HandleTokenize);
    if (path == "/detokenize") return HandleTokenization(&frontend::HandleDetokenize);
    if (path == "/v1/models") return HandleModels();
    if (path == "/health") return HandleHealth();
    if (path == "/version") {
      return SendJson(http::status::ok,
                      DumpJson(nlohmann::json{{"version", ctx_->options.version}}));
    }
    return HandleMetrics();
  }

  bool Authorized() const {
    if (!ctx_->options.api_key.has_value()) return true;
    auto it = request_.find(http::field::authorization);
    const std::string expected = "Bearer " + *ctx_->options.api_key;
    return it != request_.end() &&
           ConstantTimeEquals(std::string_view(it->value().data(), it->value().size()), expected);
  }

  void HandleModels() {
    EngineClient& e = *ctx_->engine;
    nlohmann::json model{{"id", e.ModelName()},
                         {"object", "model"},
                         {"created", ctx_->created},
                         {"owned_by", "vllm-launch"},
                         {"root", e.ModelName()},
                         {"parent", nullptr},
                         {"max_model_len", e.MaxModelLen()}};
    SendJson(http::status::ok, DumpJson(nlohmann::json{{"object", "list"},
                                                       {"data", nlohmann::json::array({model})}}));
  }

  // 200 with an empty body while every engine serves (as vLLM). With data parallelism and
  // some engines dead: still 200 (the server takes requests; they go to the live engines)
  // with a JSON body naming the live and the dead ranks. 503 once none serves.
  void HandleHealth() {
    absl::Status health = ctx_->engine->Health();
    if (!health.ok()) {
      return SendJson(http::status::service_unavailable,
                      DumpJson(ErrorBody(absl::UnavailableError(health.message()))));
    }
    nlohmann::json live = nlohmann::json::array(), dead = nlohmann::json::array();
    for (const EngineStatus& e : ctx_->engine->Engines()) {
      if (e.health.ok()) {
        live.push_back(e.rank);
      } else {
        dead.push_back({{"engine", e.rank}, {"error", std::string(e.health.message())}});
      }
    }
    if (dead.empty()) return SendBody(http::status::ok, "text/plain", "", nullptr);
    SendJson(http::status::ok, DumpJson(nlohmann::json{{"status", "degraded"},
                                                       {"live_engines", std::move(live)},
                                                       {"dead_engines", std::move(dead)}}));
  }

  void HandleMetrics() {
    for (const EngineStatus& e : ctx_->engine->Engines()) {
      const EngineStats& stats = e.stats;
      const EngineMetrics& m = ctx_->metrics.engine(e.index);
      m.num_requests_running->Set(stats.num_requests_running);
      m.num_requests_waiting->Set(stats.num_requests_waiting);
      m.kv_cache_usage_perc->Set(stats.kv_cache_usage);
      m.prefix_cache_queries->Set(static_cast<double>(stats.prefix_cache_queries));
      m.prefix_cache_hits->Set(static_cast<double>(stats.prefix_cache_hits));
      m.num_preemptions->Set(static_cast<double>(stats.num_preemptions));
    }
    SendBody(http::status::ok, "text/plain; version=0.0.4; charset=utf-8", ctx_->registry.Render(),
             nullptr);
  }

  // ---- generation ----

  // A body is JSON: no Content-Type (taken as JSON), application/json or */*+json, any
  // parameters. Anything else (a form, text/plain) is refused, as vLLM does.
  absl::Status CheckContentType() const {
    auto it = request_.find(http::field::content_type);
    if (it == request_.end()) return absl::OkStatus();
    const std::string value(it->value());
    std::string mime = absl::AsciiStrToLower(
        absl::StripAsciiWhitespace(absl::string_view(value).substr(0, value.find(';'))));
    if (mime == "application/json" || absl::EndsWith(mime, "+json")) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("Content-Type must be application/json, got '", value.substr(0, 100), "'"));
  }

  // POST /tokenize, /detokenize: `handler` runs on the preprocessing pool (a 10 MB prompt
  // must not stall the I/O threads); the answer is written from the strand.
  using TokenizationHandler = absl::StatusOr<nlohmann::json> (*)(std::string_view,
                                                                 const EngineClient&);
  void HandleTokenization(TokenizationHandler handler) {
    if (absl::Status s = CheckContentType(); !s.ok()) return SendError(s);
    Strand strand = stream_.get_executor();
    auto job = [self = shared_from_this(), strand, handler, ctx = ctx_,
                body = std::move(request_.body())]() mutable {
      absl::StatusOr<nlohmann::json> answer = handler(body, *ctx->engine);
      net::post(strand, [self = std::move(self), answer = std::move(answer)]() mutable {
        if (self->closed_) return;
        if (!answer.ok()) return self->SendError(answer.status());
        self->SendJson(http::status::ok, DumpJson(*answer));
      });
    };
    absl::MutexLock lock(&ctx_->prep_mu);
    if (!ctx_->prep.has_value()) {
      return SendError(absl::UnavailableError("The server is shutting down"));
    }
    net::post(*ctx_->prep, std::move(job));
  }

  // Hands the body to the preprocessing pool; OnPrepared continues on the strand. The job
  // holds the session; a read watches for the client leaving meanwhile.
  void HandleGenerate(ApiKind kind) {
    if (absl::Status s = CheckContentType(); !s.ok()) return SendError(s);
    const uint64_t serial = ++generation_serial_;
    PostTarget target{ctx_, stream_.get_executor(), weak_from_this()};
    auto job = [self = shared_from_this(), target = std::move(target), kind, serial,
                body = std::move(request_.body())]() mutable {
      Prepared prepared = Prepare(target, kind, serial, body);
      Strand strand = target.strand;
      net::post(strand, [self = std::move(self), serial, prepared = std::move(prepared)]() mutable {
        self->OnPrepared(serial, std::move(prepared));
      });
    };
    {
      absl::MutexLock lock(&ctx_->prep_mu);
      if (!ctx_->prep.has_value()) {
        return SendError(absl::UnavailableError("The server is shutting down"));
      }
      net::post(*ctx_->prep, std::move(job));
    }
    preparing_serial_ = serial;
    early_outputs_.clear();
    BeginInFlight();
    StartWatch();
  }

  // Runs on the preprocessing pool: parses the body, then starts the engine requests
  // (EngineClient::Generate tokenizes). Their outputs may reach the strand before OnPrepared.
  static Prepared Prepare(const PostTarget& target, ApiKind kind, uint64_t serial,
                          const std::string& body) {
    ServerContext& ctx = *target.ctx;
    Prepared out;
    out.kind = kind;
    absl::StatusOr<ParsedGeneration> parsed = ParseGeneration(kind, body, *ctx.engine);
    if (!parsed.ok()) {
      out.status = parsed.status();
      return out;
    }
    out.meta = ResponseMeta{ctx.NewId(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-"),
                            static_cast<int64_t>(WallSeconds()), ctx.engine->ModelName()};
    out.options = std::move(parsed->options);
    out.logprobs = parsed->logprobs;
    out.echo_texts = std::move(parsed->echo_texts);
    out.echo_logprobs = parsed->echo_logprobs;
    std::vector<GenerateRequest> requests =
        FanOut(parsed->prompts, out.options, out.meta.id, WallSeconds());
    for (size_t i = 0; i < requests.size(); ++i) {
      std::string id = requests[i].request_id;
      absl::Status status = ctx.engine->Generate(
          std::move(requests[i]), MakeCallback(target, serial, static_cast<int32_t>(i)));
      if (!status.ok()) {
        for (const std::string& started : out.request_ids) ctx.engine->Abort(started);
        out.request_ids.clear();
        out.status = status;
        return out;
      }
      out.request_ids.push_back(std::move(id));
    }
    return out;
  }

  void OnPrepared(uint64_t serial, Prepared prepared) {
    if (serial != preparing_serial_ || closed_ || shutting_down_) {
      // The connection went away (or the server stops) while the request was prepared.
      for (const std::string& id : prepared.request_ids) ctx_->engine->Abort(id);
      if (serial == preparing_serial_) {
        preparing_serial_ = 0;
        EndInFlight();
        if (!closed_) SendError(absl::UnavailableError("The server is shutting down"));
      }
      return;
    }
    preparing_serial_ = 0;
    if (!prepared.status.ok()) {
      early_outputs_.clear();  // outputs of engine requests Prepare aborted again
      EndInFlight();
      return SendError(prepared.status);
    }
    Generation& gen = gen_.emplace();
    gen.serial = serial;
    gen.stream = prepared.options.stream;
    gen.arrival = request_arrival_;
    gen.assembler = std::make_unique<ResponseAssembler>(
        prepared.kind, std::move(prepared.meta), static_cast<int32_t>(prepared.request_ids.size()),
        prepared.options.n, prepared.options.stream, prepared.options.include_usage,
        prepared.logprobs);
    gen.assembler->SetEcho(std::move(prepared.echo_texts));
    gen.assembler->SetTokensAsTokenIds(prepared.options.return_tokens_as_token_ids);
    if (prepared.echo_logprobs) {
      gen.assembler->SetEchoLogprobs(prepared.options.params.logprobs.value_or(0));
    }
    for (std::string& id : prepared.request_ids) gen.subs.emplace_back().id = std::move(id);
    if (gen.stream) {
      QueueBytes(
          absl::StrCat("HTTP/1.1 200 OK\r\nServer: ", ctx_->options.server_name,
                       "\r\nContent-Type: text/event-stream; "
                       "charset=utf-8\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n",
                       keep_alive_ ? "" : "Connection: close\r\n", "\r\n"));
      QueueChunk(gen.assembler->Start());
    }
    std::vector<EarlyOutput> early = std::move(early_outputs_);
    early_outputs_.clear();
    for (EarlyOutput& e : early) OnEngineOutput(serial, e.index, std::move(e.output));
    StartWatch();
  }

  void OnEngineOutput(uint64_t serial, int32_t index, absl::StatusOr<GenerateOutput> out) {
    if (closed_) return;
    if (serial == preparing_serial_) {
      early_outputs_.push_back(EarlyOutput{index, std::move(out)});
      return;
    }
    if (!gen_.has_value() || gen_->serial != serial || index < 0 ||
        static_cast<size_t>(index) >= gen_->subs.size() || gen_->subs[index].finished) {
      return;
    }
    if (!out.ok()) return FailGeneration(out.status());
    RecordMetrics(gen_->subs[index], *out);
    if (out->finished()) gen_->subs[index].finished = true;
    std::string events = gen_->assembler->OnOutput(index, *out);
    if (gen_->stream) QueueChunk(events);
    if (gen_->assembler->AllFinished()) CompleteGeneration();
  }

  void RecordMetrics(SubRequest& sub, const GenerateOutput& out) {
    sub.engine_index = out.engine_index;
    const EngineMetrics& m = ctx_->metrics.engine(sub.engine_index);
    Clock::time_point now = Clock::now();
    int32_t new_tokens = out.num_output_tokens - sub.num_output_tokens;
    if (new_tokens > 0) {
      if (!sub.got_first_token) {
        sub.got_first_token = true;
        m.time_to_first_token->Observe(Seconds(now - gen_->arrival));
        m.prompt_tokens->Add(out.num_prompt_tokens);
      } else {
        m.inter_token_latency->Observe(Seconds(now - sub.last_token_time));
      }
      sub.last_token_time = now;
      sub.num_output_tokens = out.num_output_tokens;
      m.generation_tokens->Add(new_tokens);
    }
    if (out.finished()) {
      if (!sub.got_first_token) m.prompt_tokens->Add(out.num_prompt_tokens);
      m.e2e_request_latency->Observe(Seconds(now - gen_->arrival));
      m.RequestSuccess(*out.finish_reason)->Add(1);
    }
  }

  void CompleteGeneration() {
    std::string tail = gen_->assembler->Finish();
    bool stream = gen_->stream;
    gen_.reset();
    EndInFlight();
    if (stream) {
      QueueChunk(tail);
      QueueLastChunk();
    } else {
      SendJson(http::status::ok, std::move(tail));
    }
  }

  void FailGeneration(const absl::Status& status) {
    AbortUnfinished(core::FinishReason::kError);
    bool stream = gen_->stream;
    gen_.reset();
    EndInFlight();
    if (stream) {
      QueueChunk(ResponseAssembler::StreamError(status));
      QueueLastChunk();
    } else {
      SendError(status);
    }
  }

  // Aborts every unfinished engine request of the generation in flight and counts each in
  // request_success under `reason` (none: the HTTP request was refused, nothing is counted).
  void AbortUnfinished(std::optional<core::FinishReason> reason = core::FinishReason::kAbort) {
    if (!gen_.has_value()) return;
    for (SubRequest& sub : gen_->subs) {
      if (!sub.finished) {
        ctx_->engine->Abort(sub.id);
        if (reason.has_value()) {
          ctx_->metrics.engine(sub.engine_index).RequestSuccess(*reason)->Add(1);
        }
      }
      sub.finished = true;
    }
  }

  // The in-flight count (Drain/WaitForIdle) covers a generation from its request to its
  // last response byte being queued (or the connection closing).
  void BeginInFlight() {
    if (in_flight_) return;
    in_flight_ = true;
    request_arrival_ = Clock::now();
    ctx_->AddInFlight(1);
  }
  void EndInFlight() {
    if (!in_flight_) return;
    in_flight_ = false;
    ctx_->AddInFlight(-1);
  }

  void Shutdown() {
    if (closed_) return;
    shutting_down_ = true;
    keep_alive_ = false;
    if (gen_.has_value()) {
      return FailGeneration(absl::UnavailableError(
          "The server is shutting down; the request was aborted before it finished"));
    }
    if (preparing_serial_ != 0) {
      // Its engine requests, if the pool gets to start them, are aborted in OnPrepared.
      preparing_serial_ = 0;
      early_outputs_.clear();
      EndInFlight();
      return SendError(absl::UnavailableError("The server is shutting down"));
    }
    // A response being written closes the connection when done (keep_alive_ is false).
    if (!writing_) CloseSocket();
  }

  // While a generation is in flight, a read on the raw socket notices a client that goes
  // away (EOF or reset). Bytes that arrive (a pipelined request) are kept for the parser.
  void StartWatch() {
    if (watching_ || closed_) return;
    watching_ = true;
    stream_.socket().async_read_some(
        buffer_.prepare(4096), beast::bind_front_handler(&Session::OnWatch, shared_from_this()));
  }

  void OnWatch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (closed_) return;
    if (!ec) buffer_.commit(n);
    if (resume_read_after_watch_) {
      // The response is complete and the watch was cancelled (or completed first).
      resume_read_after_watch_ = false;
      if (!ec || ec == net::error::operation_aborted) return DoRead();
      return CloseSocket();
    }
    if (!ec) {
      if (buffer_.size() < ctx_->options.max_header_bytes + ctx_->options.max_body_bytes) {
        StartWatch();
      }
      return;
    }
    if (gen_.has_value() || preparing_serial_ != 0) {
      // The client left: abort (a request still being prepared is aborted in OnPrepared).
      AbortUnfinished();
      gen_.reset();
      CloseSocket();
    }
    // Otherwise the response is complete or being written; the next read sees the close.
  }

  // ---- writing ----

  void SendError(const absl::Status& status) {
    if (absl::IsUnavailable(status) && ctx_->draining.load()) keep_alive_ = false;
    SendJson(static_cast<http::status>(HttpStatusFor(status)), DumpJson(ErrorBody(status)));
  }

  void SendJson(http::status status, std::string body, const char* allow = nullptr) {
    SendBody(status, "application/json", std::move(body), allow);
  }

  void SendBody(http::status status, const char* content_type, std::string body,
                const char* allow) {
    auto res = std::make_shared<http::response<http::string_body>>(status, 11);
    res->set(http::field::server, ctx_->options.server_name);
    res->set(http::field::content_type, content_type);
    if (allow != nullptr) res->set(http::field::allow, allow);
    res->keep_alive(keep_alive_);
    res->body() = std::move(body);
    res->prepare_payload();
    MarkIdleAfterWrite();
    writing_ = true;
    stream_.expires_after(ctx_->options.io_timeout);
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res](beast::error_code ec, size_t) {
                        self->writing_ = false;
                        self->OnMessageWritten(ec);
                      });
  }

  void QueueChunk(const std::string& data) {
    if (data.empty()) return;
    QueueBytes(absl::StrCat(absl::Hex(data.size()), "\r\n", data, "\r\n"));
  }

  void QueueLastChunk() {
    QueueBytes("0\r\n\r\n");
    end_of_message_queued_ = true;
    MarkIdleAfterWrite();
  }

  // Called as the last bytes of a response are handed to the socket: when the connection
  // will wait for another request after them (keep-alive, nothing pipelined), it is idle from
  // now on for eviction (CloseIfIdleAsync), not only once the write handler has run.
  void MarkIdleAfterWrite() {
    if (keep_alive_ && !overflow_ && !shutting_down_ && buffer_.size() == 0 &&
        !ctx_->draining.load()) {
      idle_since_ns_.store(MonoNowNs());
    }
  }

  void QueueBytes(std::string bytes) {
    if (closed_) return;
    write_queue_.push_back(std::move(bytes));
    if (!writing_) WriteNext();
  }

  void WriteNext() {
    writing_ = true;
    stream_.expires_after(ctx_->options.io_timeout);
    net::async_write(stream_, net::buffer(write_queue_.front()),
                     beast::bind_front_handler(&Session::OnQueuedWrite, shared_from_this()));
  }

  void OnQueuedWrite(beast::error_code ec, size_t) {
    writing_ = false;
    if (closed_) return;
    if (ec) {
      AbortUnfinished();
      gen_.reset();
      return CloseSocket();
    }
    write_queue_.pop_front();
    if (!write_queue_.empty()) return WriteNext();
    if (end_of_message_queued_) {
      end_of_message_queued_ = false;
      OnMessageWritten(ec);
    }
  }

  void OnMessageWritten(beast::error_code ec) {
    if (closed_) return;
    if (ec || !keep_alive_ || close_after_write_ || shutting_down_ || ctx_->draining.load()) {
      return CloseSocket();
    }
    if (watching_) {
      // Cancel the disconnect watch; its handler resumes reading.
      resume_read_after_watch_ = true;
      beast::error_code ignored;
      stream_.socket().cancel(ignored);
      return;
    }
    DoRead();
  }

  void CloseSocket() {
    if (closed_) return;
    closed_ = true;
    idle_since_ns_.store(0);
    AbortUnfinished();
    gen_.reset();
    EndInFlight();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  std::shared_ptr<ServerContext> ctx_;
  const bool overflow_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  bool keep_alive_ = true;
  bool closed_ = false;
  bool shutting_down_ = false;
  std::optional<Generation> gen_;
  uint64_t generation_serial_ = 0;
  // The serial of the generation being prepared on the pool (0: none); its outputs that
  // arrive meanwhile wait in early_outputs_.
  uint64_t preparing_serial_ = 0;
  std::vector<EarlyOutput> early_outputs_;
  Clock::time_point request_arrival_;
  bool in_flight_ = false;
  bool watching_ = false;
  bool resume_read_after_watch_ = false;
  std::deque<std::string> write_queue_;
  bool writing_ = false;
  bool close_after_write_ = false;  // evicted while its last response was being written
  bool end_of_message_queued_ = false;
  std::atomic<int64_t> idle_since_ns_{0};
  std::atomic<bool> evicting_{false};
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

absl::StatusOr<std::string> ResolveListenAddress(const std::string& host) {
  beast::error_code ec;
  net::ip::address address = net::ip::make_address(host, ec);
  if (!ec) return address.to_string();
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  auto results =
      resolver.resolve(host, "0", tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--host '", host, "' is neither an IP address nor a host name that resolves",
                     ec ? absl::StrCat(" (", ec.message(), ")") : std::string()));
  }
  for (const auto& entry : results) {
    if (entry.endpoint().address().is_v4()) return entry.endpoint().address().to_string();
  }
  return results.begin()->endpoint().address().to_string();
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
    if (overflow && limit_log_.ShouldLog()) {
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
    if (resource_log_.ShouldLog()) {
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
  const int64_t max_connections =
      options.max_connections > 0 ? options.max_connections : DefaultMaxConnections();
  auto impl = std::make_unique<Impl>(
      std::make_shared<ServerContext>(engine, std::move(options), max_connections));
  VLLM_RETURN_IF_ERROR(impl->Listen());
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
