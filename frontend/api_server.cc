// The Boost.Beast side of the API server: listener, per-connection session, routing. The
// protocol (parsing, response bodies) lives in openai_protocol.* and api_server_response.*;
// Beast is confined to this translation unit because it is slow to compile.
#include "frontend/api_server.h"

#include <pthread.h>

#include <atomic>
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
#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "frontend/api_server_response.h"
#include "frontend/openai_protocol.h"
#include "ipc/status_macros.h"

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

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// State shared by the listener, every session and every engine callback. Outlives the
// ApiServer when engine callbacks still hold it.
struct ServerContext {
  ServerContext(EngineClient* e, ApiServerOptions o)
      : engine(e),
        options(std::move(o)),
        metrics(&registry, e->ModelName()),
        created(static_cast<int64_t>(WallSeconds())),
        id_seed(std::random_device{}()) {}

  EngineClient* const engine;
  const ApiServerOptions options;
  MetricsRegistry registry;
  ServerMetrics metrics;
  const int64_t created;
  const uint64_t id_seed;
  std::atomic<uint64_t> next_id{0};
  std::shared_ptr<net::io_context> ioc = std::make_shared<net::io_context>();

  // Engine callbacks post onto session strands only while !stopped (so no handler holding
  // this context is queued into a stopped io_context).
  absl::Mutex post_mu;
  bool stopped ABSL_GUARDED_BY(post_mu) = false;

  // Live sessions, for Stop().
  absl::Mutex sessions_mu;
  absl::flat_hash_map<Session*, std::weak_ptr<Session>> sessions ABSL_GUARDED_BY(sessions_mu);

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

const char* const kRoutes[][2] = {
    {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"},
    {"/v1/models", "GET"},       {"/health", "GET"},
    {"/version", "GET"},         {"/metrics", "GET"},
};

// One connection. Every member is touched only on the connection's strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<ServerContext> ctx)
      : stream_(std::move(socket)), ctx_(std::move(ctx)) {}

  ~Session() {
    AbortUnfinished();
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

 private:
  // ---- reading requests ----

  void DoRead() {
    if (closed_) return;
    parser_.emplace();
    parser_->body_limit(ctx_->options.max_body_bytes);
    parser_->header_limit(static_cast<uint32_t>(ctx_->options.max_header_bytes));
    stream_.expires_after(ctx_->options.io_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::OnRead, shared_from_this()));
  }

  void OnRead(beast::error_code ec, size_t) {
    if (closed_) return;
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      return SendError(absl::ResourceExhaustedError(absl::StrCat(
          "Request body exceeds the limit of ", ctx_->options.max_body_bytes, " bytes")));
    }
    if (ec == http::error::header_limit) {
      keep_alive_ = false;
      return SendJson(http::status::request_header_fields_too_large,
                      DumpJson(nlohmann::json{
                          {"object", "error"},
                          {"message", absl::StrCat("Request headers exceed the limit of ",
                                                   ctx_->options.max_header_bytes, " bytes")},
                          {"type", "RequestHeaderFieldsTooLarge"},
                          {"param", nullptr},
                          {"code", 431}}));
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
    keep_alive_ = request_.keep_alive() && request_.version() == 11;
    Route();
  }

  // ---- routing ----

  void Route() {
    std::string target(request_.target());
    std::string path = target.substr(0, target.find('?'));
    const char* allowed = nullptr;
    for (const auto& route : kRoutes) {
      if (path == route[0]) allowed = route[1];
    }
    if (allowed == nullptr) {
      return SendError(absl::NotFoundError(absl::StrCat("Not Found: ", path)));
    }
    if (request_.method_string() != allowed) {
      return SendJson(http::status::method_not_allowed,
                      DumpJson(nlohmann::json{
                          {"object", "error"},
                          {"message", absl::StrCat("Method ", std::string(request_.method_string()),
                                                   " is not allowed on ", path, "; use ", allowed)},
                          {"type", "MethodNotAllowed"},
                          {"param", nullptr},
                          {"code", 405}}),
                      allowed);
    }
    if (path.rfind("/v1/", 0) == 0 && !Authorized()) {
      return SendError(absl::UnauthenticatedError(
          "Invalid or missing API key: send \"Authorization: Bearer <key>\""));
    }
    if (path == "/v1/completions") return HandleGenerate(ApiKind::kCompletion);
    if (path == "/v1/chat/completions") return HandleGenerate(ApiKind::kChat);
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
    return it != request_.end() && it->value() == "Bearer " + *ctx_->options.api_key;
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

  void HandleHealth() {
    absl::Status health = ctx_->engine->Health();
    if (health.ok()) return SendBody(http::status::ok, "text/plain", "", nullptr);
    SendJson(http::status::service_unavailable,
             DumpJson(ErrorBody(absl::UnavailableError(health.message()))));
  }

  void HandleMetrics() {
    EngineStats stats = ctx_->engine->Stats();
    ServerMetrics& m = ctx_->metrics;
    m.num_requests_running->Set(stats.num_requests_running);
    m.num_requests_waiting->Set(stats.num_requests_waiting);
    m.kv_cache_usage_perc->Set(stats.kv_cache_usage);
    m.prefix_cache_queries->Set(static_cast<double>(stats.prefix_cache_queries));
    m.prefix_cache_hits->Set(static_cast<double>(stats.prefix_cache_hits));
    m.num_preemptions->Set(static_cast<double>(stats.num_preemptions));
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

  void HandleGenerate(ApiKind kind) {
    if (absl::Status s = CheckContentType(); !s.ok()) return SendError(s);
    absl::StatusOr<nlohmann::json> body = ParseJsonObject(request_.body());
    if (!body.ok()) return SendError(body.status());
    const std::string model_name = ctx_->engine->ModelName();
    std::vector<Prompt> prompts;
    GenerationOptions options;
    bool logprobs = false;
    if (kind == ApiKind::kCompletion) {
      absl::StatusOr<CompletionRequest> r = ParseCompletionRequest(*body, model_name);
      if (!r.ok()) return SendError(r.status());
      prompts = std::move(r->prompts);
      options = std::move(r->options);
      logprobs = options.params.logprobs.has_value();
    } else {
      absl::StatusOr<ChatCompletionRequest> r = ParseChatCompletionRequest(*body, model_name);
      if (!r.ok()) return SendError(r.status());
      absl::StatusOr<std::string> prompt = ctx_->engine->ApplyChatTemplate(
          r->messages, r->add_generation_prompt, r->continue_final_message);
      if (!prompt.ok()) return SendError(prompt.status());
      prompts.push_back(Prompt{std::move(*prompt), {}});
      options = std::move(r->options);
      logprobs = r->logprobs;
    }
    ResponseMeta meta{ctx_->NewId(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-"),
                      static_cast<int64_t>(WallSeconds()), model_name};
    std::vector<GenerateRequest> requests = FanOut(prompts, options, meta.id, WallSeconds());
    StartGeneration(kind, std::move(meta), options, logprobs, std::move(requests));
  }

  void StartGeneration(ApiKind kind, ResponseMeta meta, const GenerationOptions& options,
                       bool logprobs, std::vector<GenerateRequest> requests) {
    Generation& gen = gen_.emplace();
    gen.serial = ++generation_serial_;
    gen.stream = options.stream;
    gen.arrival = Clock::now();
    gen.assembler = std::make_unique<ResponseAssembler>(
        kind, std::move(meta), static_cast<int32_t>(requests.size()), options.n, options.stream,
        options.include_usage, logprobs);
    for (size_t i = 0; i < requests.size(); ++i) {
      gen.subs.emplace_back().id = requests[i].request_id;
      absl::Status status = ctx_->engine->Generate(
          std::move(requests[i]), MakeCallback(gen.serial, static_cast<int32_t>(i)));
      if (!status.ok()) {
        gen.subs.back().finished = true;  // never started
        AbortUnfinished(std::nullopt);
        gen_.reset();
        return SendError(status);
      }
    }
    if (gen.stream) {
      QueueBytes(
          absl::StrCat("HTTP/1.1 200 OK\r\nServer: vllm-launch\r\nContent-Type: text/event-stream; "
                       "charset=utf-8\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n",
                       keep_alive_ ? "" : "Connection: close\r\n", "\r\n"));
      QueueChunk(gen.assembler->Start());
    }
    StartWatch();
  }

  OutputCallback MakeCallback(uint64_t serial, int32_t index) {
    PostTarget target{ctx_, stream_.get_executor(), weak_from_this()};
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

  void OnEngineOutput(uint64_t serial, int32_t index, absl::StatusOr<GenerateOutput> out) {
    if (closed_ || !gen_.has_value() || gen_->serial != serial || gen_->subs[index].finished) {
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
    ServerMetrics& m = ctx_->metrics;
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
        if (reason.has_value()) ctx_->metrics.RequestSuccess(*reason)->Add(1);
      }
      sub.finished = true;
    }
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
    if (gen_.has_value()) {
      AbortUnfinished();
      gen_.reset();
      CloseSocket();
    }
    // Otherwise the response is complete or being written; the next read sees the close.
  }

  // ---- writing ----

  void SendError(const absl::Status& status) {
    SendJson(static_cast<http::status>(HttpStatusFor(status)), DumpJson(ErrorBody(status)));
  }

  void SendJson(http::status status, std::string body, const char* allow = nullptr) {
    SendBody(status, "application/json", std::move(body), allow);
  }

  void SendBody(http::status status, const char* content_type, std::string body,
                const char* allow) {
    auto res = std::make_shared<http::response<http::string_body>>(status, 11);
    res->set(http::field::server, "vllm-launch");
    res->set(http::field::content_type, content_type);
    if (allow != nullptr) res->set(http::field::allow, allow);
    res->keep_alive(keep_alive_);
    res->body() = std::move(body);
    res->prepare_payload();
    stream_.expires_after(ctx_->options.io_timeout);
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res](beast::error_code ec, size_t) {
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
    if (ec || !keep_alive_) return CloseSocket();
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
    AbortUnfinished();
    gen_.reset();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  std::shared_ptr<ServerContext> ctx_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  bool keep_alive_ = true;
  bool closed_ = false;
  std::optional<Generation> gen_;
  uint64_t generation_serial_ = 0;
  bool watching_ = false;
  bool resume_read_after_watch_ = false;
  std::deque<std::string> write_queue_;
  bool writing_ = false;
  bool end_of_message_queued_ = false;
};

}  // namespace

class ApiServer::Impl {
 public:
  explicit Impl(std::shared_ptr<ServerContext> ctx)
      : ctx_(std::move(ctx)), acceptor_(net::make_strand(*ctx_->ioc)) {}

  absl::Status Listen() {
    beast::error_code ec;
    net::ip::address address = net::ip::make_address(ctx_->options.host, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid host '", ctx_->options.host, "': ", ec.message()));
    }
    tcp::endpoint endpoint(address, ctx_->options.port);
    if (acceptor_.open(endpoint.protocol(), ec); !ec) {
      acceptor_.set_option(net::socket_base::reuse_address(true), ec);
      acceptor_.bind(endpoint, ec);
    }
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", ctx_->options.host, ":",
                                                 ctx_->options.port, ": ", ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    DoAccept();
    for (int32_t i = 0; i < ctx_->options.num_threads; ++i) {
      // api-io-<i>: runs the io_context (accepting, parsing, writing for all connections).
      threads_.emplace_back([ioc = ctx_->ioc] { ioc->run(); });
      pthread_setname_np(threads_.back().native_handle(), absl::StrCat("api-io-", i).c_str());
    }
    return absl::OkStatus();
  }

  void Stop() {
    if (stopped_) return;
    stopped_ = true;
    {
      absl::MutexLock lock(&ctx_->post_mu);
      ctx_->stopped = true;
    }
    net::post(acceptor_.get_executor(), [this] {
      beast::error_code ignored;
      acceptor_.close(ignored);
    });
    std::vector<std::shared_ptr<Session>> live;
    {
      absl::MutexLock lock(&ctx_->sessions_mu);
      for (auto& [ptr, weak] : ctx_->sessions) {
        if (auto s = weak.lock()) live.push_back(std::move(s));
      }
    }
    for (auto& s : live) s->CloseAsync();
    live.clear();
    // Sessions end once their closed sockets' handlers ran; bounded wait.
    {
      absl::MutexLock lock(&ctx_->sessions_mu);
      ctx_->sessions_mu.AwaitWithTimeout(
          absl::Condition(
              +[](absl::flat_hash_map<Session*, std::weak_ptr<Session>>* m) { return m->empty(); },
              &ctx_->sessions),
          absl::Seconds(5));
    }
    ctx_->ioc->stop();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  uint16_t port() const { return port_; }
  ServerContext& ctx() { return *ctx_; }

 private:
  void DoAccept() {
    acceptor_.async_accept(net::make_strand(*ctx_->ioc),
                           [this](beast::error_code ec, tcp::socket socket) {
                             if (ec == net::error::operation_aborted || !acceptor_.is_open())
                               return;
                             if (!ec) std::make_shared<Session>(std::move(socket), ctx_)->Start();
                             DoAccept();
                           });
  }

  std::shared_ptr<ServerContext> ctx_;
  tcp::acceptor acceptor_;
  std::vector<std::thread> threads_;
  uint16_t port_ = 0;
  bool stopped_ = false;
};

absl::StatusOr<std::unique_ptr<ApiServer>> ApiServer::Create(EngineClient* engine,
                                                             ApiServerOptions options) {
  if (engine == nullptr) return absl::InvalidArgumentError("engine must not be null");
  if (options.num_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads must be at least 1, got ", options.num_threads));
  }
  auto impl = std::make_unique<Impl>(std::make_shared<ServerContext>(engine, std::move(options)));
  VLLM_RETURN_IF_ERROR(impl->Listen());
  return std::unique_ptr<ApiServer>(new ApiServer(std::move(impl)));
}

ApiServer::ApiServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ApiServer::~ApiServer() { Stop(); }

uint16_t ApiServer::port() const { return impl_->port(); }

void ApiServer::Stop() { impl_->Stop(); }

MetricsRegistry& ApiServer::metrics_registry() { return impl_->ctx().registry; }

}  // namespace vllm::frontend
