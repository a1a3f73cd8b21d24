// The HTTP-side settings of vLLM 0.33's serve flags that shape how the API server answers and
// what it logs (vLLM's FrontendArgs in entrypoints/common/cli_args.py, applied by Starlette's
// middleware and uvicorn there): API keys, root path, CORS, request / access / stats logging.
// Plain data, shared by ApiServerOptions, the launcher's ServeArgs and its ApiServerSpec.
#ifndef VLLM_FRONTEND_OPENAI_HTTP_OPTIONS_H_
#define VLLM_FRONTEND_OPENAI_HTTP_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vllm::frontend {

// uvicorn's log levels (--uvicorn-log-level), most verbose first.
enum class HttpLogLevel { kTrace, kDebug, kInfo, kWarning, kError, kCritical };

struct HttpOptions {
  // --api-key KEY [KEY ...] (or VLLM_API_KEY): requests under /v1, /v2, /inference and
  // /cohere must send "Authorization: Bearer <one of them>" (OPTIONS requests excepted, as
  // vLLM's AuthenticationMiddleware). Empty: no key.
  std::vector<std::string> api_keys;
  // --root-path: FastAPI's root_path. A request path that starts with it (followed by "/") is
  // routed without it (Starlette's get_route_path); any other path is routed as is.
  std::string root_path;
  // Starlette's CORSMiddleware as vLLM adds it: --allowed-origins (default none: no CORS),
  // --allowed-methods and --allowed-headers (default ["*"]), --allow-credentials.
  std::vector<std::string> allowed_origins;
  std::vector<std::string> allowed_methods{"*"};
  std::vector<std::string> allowed_headers{"*"};
  bool allow_credentials = false;
  // --uvicorn-log-level: the HTTP server's own messages (access lines at info, its warnings).
  HttpLogLevel log_level = HttpLogLevel::kInfo;
  // uvicorn's access log (one line per response: client, request line, status);
  // --disable-uvicorn-access-log turns it off.
  bool access_log = true;
  // --enable-log-requests: vLLM's RequestLogger lines per engine request (INFO: id and
  // parameters; DEBUG: the prompt and its token ids, cut to --max-log-len).
  bool log_requests = false;
  std::optional<int64_t> max_log_len;
  // vLLM's LoggingStatLogger: every log_stats_interval_s, one line per engine ("Engine 000:
  // Avg prompt throughput: ..."); --disable-log-stats turns it off.
  bool log_stats = true;
  double log_stats_interval_s = 10.0;
  // The stats line's device word (vLLM: "GPU" for cuda, else the device in capitals); set by
  // the launcher from the engine's device, not a flag.
  std::string kv_cache_device = "GPU";
  // --enable-request-id-headers: every answer carries X-Request-Id (the request's own, else a
  // fresh uuid4 hex), as vLLM's XRequestIdMiddleware.
  bool request_id_headers = false;
  // --disable-fastapi-docs: vLLM then serves no /docs, /redoc, /openapi.json; this server never
  // serves them, so the flag changes nothing here.
  bool disable_fastapi_docs = false;
  // --disable-access-log-for-endpoints "/health,/metrics": no access line for a request whose
  // path (query string cut) is one of these exactly (vLLM's UvicornAccessLogFilter).
  std::vector<std::string> access_log_skip_paths;
  // --h11-max-incomplete-event-size (bytes; the request line and headers, h11's
  // max_incomplete_event_size) and --h11-max-header-count; vLLM's defaults. Over either:
  // uvicorn's 400 "Invalid HTTP request received." (and its warning), the connection closed.
  int64_t h11_max_incomplete_event_size = 4194304;
  int64_t h11_max_header_count = 256;
  // --enable-server-load-tracking: GET /load counts the generation requests in flight; without
  // it /load says 0, as vLLM.
  bool server_load_tracking = false;
  // --sse-keep-alive-interval N: ": keep-alive\n\n" on a completions or chat stream after N s
  // without bytes (queued, prefill, between tokens); 0: never.
  int64_t sse_keep_alive_interval_s = 0;

  bool operator==(const HttpOptions&) const = default;
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_OPENAI_HTTP_OPTIONS_H_
