// ApiServer: the OpenAI-compatible HTTP/1.1 server (vLLM's vllm/entrypoints/openai/
// api_server.py) over an EngineClient.
//
// Routes: POST /v1/completions, POST /v1/chat/completions (JSON or SSE streaming with
// chunked transfer), POST /tokenize, POST /detokenize (vLLM's token-id endpoints; no API key
// needed, as vLLM guards only /v1/*), GET /v1/models, GET /health (200 / 503), GET /version,
// GET /metrics (Prometheus text). Unknown paths 404, wrong methods 405, malformed requests 400,
// bodies over max_body_bytes 413, headers over http.h11_max_incomplete_event_size bytes or
// http.h11_max_header_count fields 400 (uvicorn's), an HTTP/1.1 request without a
// Host header 400; with API keys, /v1/* needs "Authorization: Bearer <one of them>" (401
// otherwise; compared in constant time). HttpOptions add vLLM's --root-path (paths under it
// are routed without it), CORS (preflights answered on any path) and the access, request and
// stats log lines (http_middleware.h, stats_logger.h). Errors carry vLLM's JSON error body
// {"error": {"message", "type", "param", "code"}}, as a body or as an SSE event mid-stream.
//
// Threads: one io_context run by `num_threads` threads ("api-io-<i>"); each connection is
// served on its own strand, and engine callbacks are posted onto that strand, so all
// per-connection state is touched by one thread at a time. The CPU-heavy part of a generation
// request (JSON parsing, the chat template, tokenization inside EngineClient::Generate) runs
// on `num_prep_threads` other threads ("api-prep-<i>"), so a 10 MB prompt never stalls the
// I/O threads (other connections, /health). A client that disconnects while its request is
// generating (streaming or not) has its engine requests aborted.
//
// Connections: at most `max_connections` are served normally. Past it, the connection that
// has waited longest for its next request (idle keep-alive, or not yet a whole request) is
// closed to make room; when none is idle, up to kOverflowConnections more are accepted to
// answer one request each — GET /health normally, anything else 503 — within a short read
// deadline, and beyond those a connection gets an immediate 503. Accepting backs off (10 ms
// doubling to 1 s) when the process is out of file descriptors (EMFILE/ENFILE) instead of
// spinning.
#ifndef VLLM_FRONTEND_OPENAI_API_SERVER_H_
#define VLLM_FRONTEND_OPENAI_API_SERVER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "frontend/engine/engine_client.h"
#include "frontend/engine/listen_address.h"  // ResolveListenAddress, for the launcher
#include "frontend/openai/http_options.h"
#include "frontend/openai/metrics.h"
#include "frontend/openai/request_defaults.h"

namespace vllm::frontend {

struct ApiServerOptions {
  // An address or a host name ("localhost"); a name is resolved and the first IPv4 address
  // is preferred.
  std::string host = "0.0.0.0";
  uint16_t port = 8000;  // 0 picks a free port (see ApiServer::port())
  int32_t num_threads = 2;
  // Threads for request preprocessing (JSON, chat template, tokenization).
  int32_t num_prep_threads = 2;
  // Connections served at once (see the file comment); 0 picks DefaultMaxConnections().
  int64_t max_connections = 0;
  // API keys, --root-path, CORS, request / access / stats logging (vLLM's middleware and
  // uvicorn settings; http_options.h).
  HttpOptions http;
  size_t max_body_bytes = size_t{32} << 20;
  // Longest wait for a whole request to arrive (idle keep-alive connections included) and
  // for one write to complete; a slower client is disconnected.
  std::chrono::milliseconds io_timeout{std::chrono::seconds(60)};
  // After a response, how long a keep-alive connection may wait for its next request (uvicorn's
  // timeout_keep_alive: vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE, default 5 s); then it is closed.
  std::chrono::milliseconds keep_alive_timeout{std::chrono::seconds(5)};
  // An overflow connection (past max_connections) must send its one request within this.
  std::chrono::milliseconds overflow_read_timeout{std::chrono::seconds(2)};
  // Reported by GET /version.
  std::string version = "0.1.0";
  // SO_REUSEPORT on the listening socket (--api-server-count N: every API server process
  // binds the same port).
  bool reuse_port = false;
  // The Server header of every answer (with several API servers, "vllm-launch api-server/<i>"
  // says which process answered).
  std::string server_name = "vllm-launch";
  // Tool calling (vLLM's flags): --tool-call-parser (hermes, llama3_json, mistral, pythonic;
  // "" none), --enable-auto-tool-choice (tool_choice "auto" parses calls from the text; needs
  // the parser), --exclude-tools-when-tool-choice-none.
  std::string tool_call_parser;
  bool enable_auto_tool_choice = false;
  bool exclude_tools_when_tool_choice_none = false;
  // --generation-config, --override-generation-config, --chat-template-content-format,
  // resolved (ResolveRequestDefaults): applied to every generation request.
  RequestDefaults request_defaults;
  // --reasoning-parser (deepseek_r1, qwen3; "" none): chat answers split <think>...</think>
  // into reasoning.
  std::string reasoning_parser;
  // --stream-interval: streamed chunks carry at least this many tokens (first and last
  // excepted); a request's stream_interval may raise it.
  int32_t stream_interval = 1;
};

// Connections answered past max_connections (one request each, /health normally).
inline constexpr int64_t kOverflowConnections = 32;
// File descriptors kept free for everything but client connections (ZMQ sockets, files).
inline constexpr int64_t kReservedFileDescriptors = 128;

// The default for max_connections: the process's file-descriptor limit (RLIMIT_NOFILE, soft)
// less kReservedFileDescriptors and kOverflowConnections, at least 16.
int64_t DefaultMaxConnections();

// Binds host:port once and releases it, so a command line with an address that cannot be
// served fails before anything is started. Port 0 always succeeds. InvalidArgument for a
// host that does not resolve, Unavailable when the address cannot be bound (in use, not
// local).
[[nodiscard]] absl::Status CheckListenAddress(const std::string& host, uint16_t port);

class ApiServer {
 public:
  // Binds, listens and starts the I/O threads. `engine` must outlive the server and any
  // callbacks it still makes after the server is destroyed must be harmless to it (they
  // are: callbacks hold no reference to the server). Fails (Unavailable) when the address
  // cannot be bound, InvalidArgument for bad options.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ApiServer>> Create(EngineClient* engine,
                                                                         ApiServerOptions options);

  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;
  // Stop()s.
  ~ApiServer();

  // The bound port.
  uint16_t port() const;
  // Graceful shutdown, first half: stops accepting connections, answers new requests with
  // 503 (/health too, so load balancers move away), closes idle connections, and lets the
  // requests in flight finish. Returns at once; idempotent.
  void Drain();
  // Waits until no generation request is in flight (or the deadline); true when none is.
  bool WaitForIdle(absl::Time deadline);
  // Generation requests in flight (being prepared, generating, or being written).
  int64_t num_in_flight() const;

  // Stops accepting; every generation still in flight ends with an error (an SSE error event
  // mid-stream, a 503 otherwise) and its engine requests are aborted; connections close and
  // the threads are joined (connections that do not take their last bytes within 5 s are cut).
  // Idempotent; call from any thread but a server thread.
  void Stop();

  // The registry behind GET /metrics (the server's vLLM metrics live in it).
  MetricsRegistry& metrics_registry();

  class Impl;

 private:
  explicit ApiServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_OPENAI_API_SERVER_H_
