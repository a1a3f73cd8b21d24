// Internal to frontend/openai/ (tools/lint/check_layering.py refuses an include of it from
// elsewhere): one HTTP connection of the API server (Session) and the state it shares with the
// listener (ServerContext). Session's connection side (reading, the disconnect watch, writing,
// closing) is http_session.cc; its OpenAI routes and generation requests are
// serving_routes.cc; the listener and ApiServer are api_server.cc.
#ifndef VLLM_FRONTEND_OPENAI_HTTP_SESSION_H_
#define VLLM_FRONTEND_OPENAI_HTTP_SESSION_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "frontend/engine/engine_client.h"
#include "frontend/openai/anthropic_messages.h"
#include "frontend/openai/api_server.h"
#include "frontend/openai/api_server_response.h"
#include "frontend/openai/beam_search.h"
#include "frontend/openai/http_middleware.h"
#include "frontend/openai/metrics.h"
#include "frontend/openai/openai_protocol.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend::api_server_internal {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
// A connection's strand (type-erased as Beast's stream holds it).
using Strand = net::any_io_executor;

class Session;

// A steady-clock duration in seconds (metrics).
inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Seconds since the epoch (response "created", request arrival).
inline double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Monotonic nanoseconds (idle times for eviction, log rate limits).
inline int64_t MonoNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// vLLM's error body as a string (see ErrorBody).
inline std::string ErrorJson(int code, absl::string_view type, absl::string_view message) {
  return DumpJson(ErrorBody(code, type, message));
}

// The vLLM release whose OpenAI-compatible API this server matches (GET /version).
inline constexpr char kVllmApiVersion[] = "0.33.0";

// State shared by the listener, every session and every engine callback. Outlives the
// ApiServer when engine callbacks still hold it.
struct ServerContext {
  ServerContext(EngineClient* e, ApiServerOptions o, int64_t max_conn)
      : engine(e),
        options(std::move(o)),
        cors(options.http),
        max_connections(max_conn),
        metrics(&registry, e->ModelName(), static_cast<int32_t>(e->Engines().size()),
                e->Engines().empty() ? 0 : e->Engines()[0].rank, e->NumSpeculativeTokens(),
                ServerMetricsOptions{e->MaxModelLen(), e->CacheConfigInfo()}),
        created(static_cast<int64_t>(WallSeconds())),
        id_seed(std::random_device{}()) {}

  EngineClient* const engine;
  const ApiServerOptions options;
  const CorsPolicy cors;  // from options.http
  // The server's parsers (set once by ApiServer::Create, before any request).
  std::unique_ptr<parsers::ToolParser> tool_parser;
  std::unique_ptr<parsers::ReasoningParser> reasoning_parser;
  ChatParsers chat_parsers;
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

  int64_t InFlight() const {
    absl::MutexLock lock(&in_flight_mu);
    return in_flight;
  }

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
  // POST /v1/messages: the chat answer becomes Anthropic's (null for the OpenAI routes).
  std::unique_ptr<AnthropicStream> anthropic;
  // The request's n and max_tokens (vllm:request_params_*).
  int32_t n = 1;
  std::optional<int32_t> max_tokens;
  // use_beam_search: one search per prompt (aborted with the request).
  std::vector<std::shared_ptr<BeamSearch>> beam_searches;
  // --sse-keep-alive-interval on a completions or chat stream: fires after that many idle
  // seconds (re-armed by every chunk); null otherwise.
  std::unique_ptr<net::steady_timer> keep_alive_timer;
};

// vLLM's SSE keep-alive comment (entrypoints/serve/utils/sse_keep_alive.py).
inline constexpr std::string_view kSseKeepAlive = ": keep-alive\n\n";

// What the preprocessing pool hands back to a session: the started engine requests, or why
// none was started.
struct Prepared {
  absl::Status status;
  ApiKind kind = ApiKind::kCompletion;
  ResponseMeta meta;
  GenerationOptions options;
  bool logprobs = false;
  std::vector<std::string> echo_texts;                     // per prompt (echo), else empty
  bool echo_logprobs = false;                              // echo with logprobs
  ChatOutputOptions chat_output;                           // chat: reasoning and tool-call parsing
  std::vector<std::string> request_ids;                    // started in the engine, in choice order
  bool anthropic = false;                                  // POST /v1/messages
  std::vector<std::shared_ptr<BeamSearch>> beam_searches;  // use_beam_search: started
};

// An engine output that arrived before its generation was set up on the strand.
struct EarlyOutput {
  int32_t index = 0;
  absl::StatusOr<GenerateOutput> output;
};

// One connection. Every member is touched only on the connection's strand, but for the
// atomics that the acceptor reads when it looks for an idle connection to close.
class Session : public std::enable_shared_from_this<Session> {
 public:
  // `overflow`: accepted past max_connections; answers one request (see api_server.h).
  Session(tcp::socket socket, std::shared_ptr<ServerContext> ctx, bool overflow)
      : stream_(std::move(socket)), ctx_(std::move(ctx)), overflow_(overflow) {}

  ~Session();
  void Start();

  // Closes the connection (from any thread); in-flight engine requests are aborted.
  void CloseAsync();

  // Closes the connection if it is waiting for a request (Drain(), eviction).
  // A connection whose last response is still being written counts as idle: it closes once
  // the response is out (its client already has, or is about to have, everything it asked
  // for), so a client that just got its answer never makes an eviction miss.
  void CloseIfIdleAsync();

  // Stop(): a generation in flight ends with an error; the connection closes once its last
  // bytes are written (at once when it has nothing in flight).
  void ShutdownAsync();

  // Since when the connection waits for its next request (monotonic ns); 0 while a request
  // is being served.
  int64_t idle_since_ns() const { return idle_since_ns_.load(); }
  // Claims the session for eviction; false when another accept claimed it already.
  bool ClaimForEviction() { return !evicting_.exchange(true); }
  bool claimed_for_eviction() const { return evicting_.load(); }

  // Delivers an engine output of generation `serial` (any thread: posts to the strand).
  static OutputCallback MakeCallback(PostTarget target, uint64_t serial, int32_t index);

 private:
  // ---- reading requests (http_session.cc) ----

  void DoRead();
  void OnRead(beast::error_code ec, size_t);

  // ---- routing (serving_routes.cc) ----

  void Route();
  bool Authorized() const;
  // A request header's value, if sent.
  std::optional<std::string_view> Header(http::field field) const;
  // A CORS preflight (OPTIONS with Origin and Access-Control-Request-Method), answered on any
  // path as Starlette's CORSMiddleware; false when the request is not one.
  bool AnswerCorsPreflight();
  // uvicorn's access line for the response about to be sent (http_middleware.h).
  void LogAccess(int status);
  void HandleModels();

  // 200 with an empty body while every engine serves (as vLLM). With data parallelism and
  // some engines dead: still 200 (the server takes requests; they go to the live engines)
  // with a JSON body naming the live and the dead ranks. 503 once none serves.
  void HandleHealth();
  void HandleMetrics();
  // GET /load, POST /invocations (SageMaker: a chat body if it has messages, else a completion
  // body if it has a prompt, as vLLM's pydantic dispatch), /reset_prefix_cache and the
  // dev-mode sleep family (VLLM_SERVER_DEV_MODE=1).
  void HandleInvocations();
  void HandleDevRoute(const std::string& path, const std::string& query);
  // An error of a generation as its API shapes it (Anthropic's or OpenAI's body).
  void SendGenerationError(const absl::Status& status, bool anthropic);

  // ---- generation (serving_routes.cc) ----

  // A body is JSON: no Content-Type (taken as JSON), application/json or */*+json, any
  // parameters. Anything else (a form, text/plain) is refused, as vLLM does.
  absl::Status CheckContentType() const;

  // POST /tokenize, /detokenize: `handler` runs on the preprocessing pool (a 10 MB prompt
  // must not stall the I/O threads); the answer is written from the strand.
  using TokenizationHandler = absl::StatusOr<nlohmann::json> (*)(std::string_view,
                                                                 const EngineClient&);
  void HandleTokenization(TokenizationHandler handler);
  // Runs `call` on the preprocessing pool (tokenization, utility calls that wait for every
  // engine: never on an I/O thread) and answers its JSON, or its error, from the strand; 503
  // while the server shuts down.
  void AnswerFromPrepPool(std::function<absl::StatusOr<nlohmann::json>()> call);

  // Hands the body to the preprocessing pool; OnPrepared continues on the strand. The job
  // holds the session; a read watches for the client leaving meanwhile.
  void HandleGenerate(ApiKind kind, bool anthropic = false);

  // Runs on the preprocessing pool: parses the body, then starts the engine requests
  // (EngineClient::Generate tokenizes). Their outputs may reach the strand before OnPrepared.
  static Prepared Prepare(const PostTarget& target, ApiKind kind, uint64_t serial,
                          const std::string& body, bool anthropic);
  // The per-request histograms of a finished engine request (vLLM's FinishedRequestStats).
  void RecordFinished(const EngineMetrics& m, const GenerateOutput& out);

  void OnPrepared(uint64_t serial, Prepared prepared);
  void OnEngineOutput(uint64_t serial, int32_t index, absl::StatusOr<GenerateOutput> out);
  void RecordMetrics(SubRequest& sub, const GenerateOutput& out);
  void CompleteGeneration();
  void FailGeneration(const absl::Status& status);

  // Aborts every unfinished engine request of the generation in flight and counts each in
  // request_success under `reason` (none: the HTTP request was refused, nothing is counted).
  void AbortUnfinished(std::optional<core::FinishReason> reason = core::FinishReason::kAbort);

  // The in-flight count (Drain/WaitForIdle) covers a generation from its request to its
  // last response byte being queued (or the connection closing).
  void BeginInFlight();
  void EndInFlight();
  void Shutdown();

  // While a generation is in flight, a read on the raw socket notices a client that goes
  // away (EOF or reset). Bytes that arrive (a pipelined request) are kept for the parser.
  void StartWatch();
  void OnWatch(beast::error_code ec, size_t n);

  // ---- writing (http_session.cc) ----

  void SendError(const absl::Status& status);
  void SendJson(http::status status, std::string body, const char* allow = nullptr);
  void SendBody(http::status status, const char* content_type, std::string body, const char* allow);

  // The request-line-and-headers limit (--h11-max-incomplete-event-size).
  uint32_t HeaderLimit() const;
  // uvicorn's 400 for a request h11 refuses (headers over the size or count limit).
  void SendInvalidHttpRequest();
  static std::string NewUuid4Hex();
  // (Re)starts the stream's keep-alive timer (Generation::keep_alive_timer).
  void ArmSseKeepAlive();

  void QueueChunk(const std::string& data);
  void QueueLastChunk();

  // Called as the last bytes of a response are handed to the socket: when the connection
  // will wait for another request after them (keep-alive, nothing pipelined), it is idle from
  // now on for eviction (CloseIfIdleAsync), not only once the write handler has run.
  void MarkIdleAfterWrite();
  void QueueBytes(std::string bytes);
  void WriteNext();
  void OnQueuedWrite(beast::error_code ec, size_t);
  void OnMessageWritten(beast::error_code ec);
  void CloseSocket();

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
  // The CORS headers of the current request's answer (ServerContext::cors).
  HeaderList cors_headers_;
  // --enable-request-id-headers: the current answer's X-Request-Id (empty: none).
  std::string request_id_;
  // The answer being sent is to a whole request (uvicorn logs those; not a malformed one).
  bool log_access_ = false;
  std::atomic<bool> evicting_{false};
};

}  // namespace vllm::frontend::api_server_internal

#endif  // VLLM_FRONTEND_OPENAI_HTTP_SESSION_H_
