// What vLLM 0.33's HTTP middleware does to a request and its answer, as pure functions over
// HttpOptions (no Boost.Beast here; the session applies them): the route path under
// --root-path (Starlette's get_route_path), the API key check (vLLM's
// AuthenticationMiddleware), CORS (Starlette 1.x's CORSMiddleware, which vLLM always adds),
// uvicorn's access-log line and vLLM's RequestLogger lines (--enable-log-requests,
// --max-log-len).
#ifndef VLLM_FRONTEND_OPENAI_HTTP_MIDDLEWARE_H_
#define VLLM_FRONTEND_OPENAI_HTTP_MIDDLEWARE_H_

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "frontend/engine/engine_client.h"
#include "frontend/openai/http_options.h"

namespace vllm::frontend {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// The path routing sees: `path` without `root_path` when it starts with it followed by "/"
// ("" when it is `root_path` itself: no route), else `path` as is.
std::string RoutePath(std::string_view path, std::string_view root_path);

// vLLM's GUARDED_PREFIX: a route path starting with /v1, /v2, /inference or /cohere needs a
// key (when keys are set; never for OPTIONS).
bool NeedsApiKey(std::string_view route_path);
// "Bearer <key>" (scheme in any case) with one of `keys`, compared in constant time per key.
bool ApiKeyAccepted(const std::vector<std::string>& keys,
                    std::optional<std::string_view> authorization);

// Starlette's CORSMiddleware with vLLM's arguments.
class CorsPolicy {
 public:
  explicit CorsPolicy(const HttpOptions& options);

  struct Answer {
    int status = 200;
    std::string body;  // text/plain; charset=utf-8
    HeaderList headers;
  };
  // A preflight (OPTIONS with Origin and Access-Control-Request-Method): answered here, on
  // any path. `requested_headers`: Access-Control-Request-Headers, if sent;
  // `private_network`: Access-Control-Request-Private-Network was sent.
  Answer Preflight(std::string_view origin, std::string_view method,
                   std::optional<std::string_view> requested_headers, bool private_network) const;
  // The headers every other answer gets (`origin`: the request's Origin, if any).
  HeaderList SimpleHeaders(std::optional<std::string_view> origin) const;

 private:
  bool AllowedOrigin(std::string_view origin) const;

  std::vector<std::string> origins_, methods_, headers_lower_;
  bool all_origins_ = false, all_headers_ = false, credentials_ = false;
  bool explicit_origin_ = false;
  HeaderList preflight_headers_;
};

// uvicorn's access line: `127.0.0.1:5000 - "GET /v1/models HTTP/1.1" 200 OK`.
std::string AccessLogLine(std::string_view client, std::string_view method, std::string_view target,
                          unsigned version, int status);

// vLLM's RequestLogger.log_inputs for one engine request: the INFO line ("Received request
// <id>: params: SamplingParams(...), lora_request: None.") and the DEBUG one (the prompt and
// its ids, each cut to max_log_len).
std::string RequestLogLine(const GenerateRequest& request);
std::string RequestDetailsLogLine(const GenerateRequest& request,
                                  std::optional<int64_t> max_log_len);
// Logs both for a request when options.log_requests (spdlog, at INFO and DEBUG).
void LogRequest(const HttpOptions& options, const GenerateRequest& request);

// Python's repr() of a str (what vLLM's %r writes).
std::string PythonStrRepr(std::string_view s);

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_OPENAI_HTTP_MIDDLEWARE_H_
