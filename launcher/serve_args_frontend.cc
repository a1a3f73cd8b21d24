#include "launcher/serve_args_frontend.h"

#include <cstdlib>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace vllm::launcher {
namespace {

// vLLM parses these with json.loads; the value is the list Starlette gets.
absl::Status ParseJsonList(std::string_view flag, const std::string& text,
                           std::vector<std::string>* out) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  bool ok = j.is_array();
  for (const nlohmann::json& e : j) ok = ok && e.is_string();
  if (!ok || j.size() > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(flag), ": '", text.substr(0, 64),
                     "' is not a JSON list of strings (example: '[\"https://example.com\"]')"));
  }
  out->clear();
  for (const nlohmann::json& e : j) out->push_back(e.get<std::string>());
  return absl::OkStatus();
}

constexpr std::pair<std::string_view, frontend::HttpLogLevel> kLevels[] = {
    {"critical", frontend::HttpLogLevel::kCritical}, {"error", frontend::HttpLogLevel::kError},
    {"warning", frontend::HttpLogLevel::kWarning},   {"info", frontend::HttpLogLevel::kInfo},
    {"debug", frontend::HttpLogLevel::kDebug},       {"trace", frontend::HttpLogLevel::kTrace},
};

}  // namespace

double LogStatsIntervalSeconds() {
  const char* v = std::getenv("VLLM_LOG_STATS_INTERVAL");
  double s = 0;
  return v != nullptr && absl::SimpleAtod(v, &s) && s > 0 && s < 1e9 ? s : 10.0;
}

void AddHttpFlags(CLI::App& app, HttpFlagValues& v) {
  app.add_option("--api-key", v.api_keys,
                 "If set, requests under /v1 must send \"Authorization: Bearer <key>\" with one "
                 "of these keys (several may follow the flag).")
      ->expected(1, 64)
      ->group("Frontend");
  app.add_option("--root-path", v.http.root_path,
                 "FastAPI root_path when the app is behind a path-based routing proxy: paths "
                 "under it are served without it.")
      ->group("Frontend");
  app.add_option("--allowed-origins", v.allowed_origins,
                 "CORS: allowed origins, a JSON list (default none: cross-origin browser "
                 "access is disabled).")
      ->group("Frontend");
  app.add_option("--allowed-methods", v.allowed_methods,
                 "CORS: allowed methods, a JSON list (default [\"*\"]).")
      ->group("Frontend");
  app.add_option("--allowed-headers", v.allowed_headers,
                 "CORS: allowed headers, a JSON list (default [\"*\"]).")
      ->group("Frontend");
  app.add_flag("--allow-credentials", v.http.allow_credentials, "CORS: allow credentials.")
      ->group("Frontend");
  std::vector<std::string> levels;
  for (const auto& [name, level] : kLevels) levels.emplace_back(name);
  app.add_option("--uvicorn-log-level", v.uvicorn_log_level,
                 "The HTTP server's log level (its access lines are info).")
      ->check(CLI::IsMember(levels))
      ->group("Frontend");
  app.add_flag_function(
         "--disable-uvicorn-access-log", [&v](int64_t n) { v.http.access_log = n <= 0; },
         "No access-log line per request.")
      ->group("Frontend");
  app.add_option("--disable-access-log-for-endpoints", v.access_log_skip_paths,
                 "Comma-separated paths with no access-log line (the path without its query "
                 "string, exactly), e.g. \"/health,/metrics,/ping\".")
      ->group("Frontend");
  app.add_flag("--enable-request-id-headers", v.http.request_id_headers,
               "Add an X-Request-Id header to every response: the request's own X-Request-Id, "
               "else a fresh uuid4 hex.")
      ->group("Frontend");
  app.add_flag("--disable-fastapi-docs", v.http.disable_fastapi_docs,
               "Disable the OpenAPI schema, Swagger UI and ReDoc endpoints (/openapi.json, "
               "/docs, /redoc). This server never serves them: accepted, changes nothing.")
      ->group("Frontend");
  app.add_option("--h11-max-incomplete-event-size", v.http.h11_max_incomplete_event_size,
                 "Maximum size (bytes) of a request's line and headers (h11's incomplete "
                 "event); larger is a 400. Default: 4194304 (4 MB).")
      ->group("Frontend");
  app.add_option("--h11-max-header-count", v.http.h11_max_header_count,
                 "Maximum number of headers in a request; more is a 400. Default: 256.")
      ->group("Frontend");
  app.add_flag("--enable-server-load-tracking", v.http.server_load_tracking,
               "Count the generation requests in flight for GET /load (without it /load "
               "answers 0).")
      ->group("Frontend");
  app.add_option("--sse-keep-alive-interval", v.http.sse_keep_alive_interval_s,
                 "Send an SSE keep-alive comment line every this many seconds when a "
                 "/v1/chat/completions or /v1/completions stream is idle (queued, prefill or "
                 "between tokens). 0 (the default): never.")
      ->group("Frontend");
  app.add_flag("--enable-log-requests", v.http.log_requests,
               "Log each request's id and sampling parameters (INFO) and its prompt (DEBUG).")
      ->group("options");
  app.add_option("--max-log-len", v.max_log_len,
                 "Max number of prompt characters or prompt ID numbers printed in the request "
                 "log (default: unlimited).")
      ->group("Frontend");
  app.add_flag_function(
         "--disable-log-stats", [&v](int64_t n) { v.http.log_stats = n <= 0; },
         "No periodic stats line per engine (every VLLM_LOG_STATS_INTERVAL s, 10 s).")
      ->group("options");
}

absl::Status ApplyHttpFlags(const CLI::App& app, const HttpFlagValues& v,
                            frontend::HttpOptions& out) {
  out = v.http;
  out.api_keys.clear();
  for (const std::string& key : v.api_keys) {
    if (!key.empty()) out.api_keys.push_back(key);  // vLLM drops empty keys
  }
  if (app.count("--allowed-origins") > 0) {
    if (absl::Status s =
            ParseJsonList("--allowed-origins", v.allowed_origins, &out.allowed_origins);
        !s.ok()) {
      return s;
    }
  }
  if (app.count("--allowed-methods") > 0) {
    if (absl::Status s =
            ParseJsonList("--allowed-methods", v.allowed_methods, &out.allowed_methods);
        !s.ok()) {
      return s;
    }
  }
  if (app.count("--allowed-headers") > 0) {
    if (absl::Status s =
            ParseJsonList("--allowed-headers", v.allowed_headers, &out.allowed_headers);
        !s.ok()) {
      return s;
    }
  }
  for (const auto& [name, level] : kLevels) {
    if (v.uvicorn_log_level == name) out.log_level = level;
  }
  // vLLM's optional_type(int): "None" (or "") is unlimited.
  if (!v.max_log_len.empty() && v.max_log_len != "None") {
    int64_t n = 0;
    if (!absl::SimpleAtoi(v.max_log_len, &n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--max-log-len: '", v.max_log_len.substr(0, 64), "' is not an integer"));
    }
    out.max_log_len = n;
  }
  if (out.sse_keep_alive_interval_s < 0) {
    return absl::InvalidArgumentError(
        "Error: --sse-keep-alive-interval must be a non-negative integer (0 disables keep-alive "
        "comments).");
  }
  // vLLM: [p.strip() for p in value.split(",") if p.strip()].
  out.access_log_skip_paths.clear();
  for (absl::string_view p : absl::StrSplit(v.access_log_skip_paths, ',')) {
    p = absl::StripAsciiWhitespace(p);
    if (!p.empty()) out.access_log_skip_paths.emplace_back(p);
  }
  if (out.access_log_skip_paths.size() > 64) {  // what ApiServerSpec carries
    return absl::InvalidArgumentError("--disable-access-log-for-endpoints: more than 64 paths");
  }
  return absl::OkStatus();
}

}  // namespace vllm::launcher
