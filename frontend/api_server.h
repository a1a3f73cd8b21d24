// ApiServer: the OpenAI-compatible HTTP/1.1 server (vLLM's vllm/entrypoints/openai/
// api_server.py) over an EngineClient.
//
// Routes: POST /v1/completions, POST /v1/chat/completions (JSON or SSE streaming with
// chunked transfer), GET /v1/models, GET /health (200 / 503), GET /version, GET /metrics
// (Prometheus text). Unknown paths 404, wrong methods 405, malformed requests 400, bodies
// over max_body_bytes 413, headers over max_header_bytes 431; with an API key, /v1/* needs
// "Authorization: Bearer <key>" (401 otherwise). Errors carry vLLM's JSON error body.
//
// Threads: one io_context run by `num_threads` threads ("api-io-<i>"); each connection is
// served on its own strand, and engine callbacks are posted onto that strand, so all
// per-connection state is touched by one thread at a time. A client that disconnects while
// its request is generating (streaming or not) has its engine requests aborted.
#ifndef VLLM_FRONTEND_API_SERVER_H_
#define VLLM_FRONTEND_API_SERVER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "frontend/engine_client.h"
#include "frontend/metrics.h"

namespace vllm::frontend {

struct ApiServerOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 8000;  // 0 picks a free port (see ApiServer::port())
  int32_t num_threads = 2;
  // When set, /v1/* requests must send "Authorization: Bearer <api_key>".
  std::optional<std::string> api_key;
  size_t max_body_bytes = size_t{32} << 20;
  size_t max_header_bytes = size_t{64} << 10;
  // Longest wait for a whole request to arrive (idle keep-alive connections included) and
  // for one write to complete; a slower client is disconnected.
  std::chrono::milliseconds io_timeout{std::chrono::seconds(60)};
  // Reported by GET /version.
  std::string version = "0.1.0";
};

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
  // Stops accepting, closes connections (aborting their in-flight engine requests) and
  // joins the I/O threads. Idempotent; call from any thread but an I/O thread.
  void Stop();

  // The registry behind GET /metrics (the server's vLLM metrics live in it).
  MetricsRegistry& metrics_registry();

  class Impl;

 private:
  explicit ApiServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_API_SERVER_H_
