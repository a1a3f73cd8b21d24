// The serve flags of vLLM's HTTP middleware and logging (frontend::HttpOptions), kept out of
// serve_args.cc: --api-key KEY [KEY ...], --root-path, --allowed-origins / --allowed-methods /
// --allowed-headers (JSON lists, as vLLM's json.loads), --allow-credentials,
// --uvicorn-log-level, --disable-uvicorn-access-log, --enable-log-requests, --max-log-len,
// --disable-log-stats, --disable-access-log-for-endpoints, --enable-request-id-headers,
// --disable-fastapi-docs, --h11-max-incomplete-event-size, --h11-max-header-count,
// --enable-server-load-tracking, --sse-keep-alive-interval. serve_args.cc calls the two functions
// (the flags, then their values).
#ifndef VLLM_LAUNCHER_SERVE_ARGS_FRONTEND_H_
#define VLLM_LAUNCHER_SERVE_ARGS_FRONTEND_H_

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "frontend/openai/http_options.h"

namespace vllm::launcher {

// What the flags are parsed into before ApplyHttpFlags checks them.
struct HttpFlagValues {
  std::vector<std::string> api_keys;
  std::string allowed_origins, allowed_methods, allowed_headers, uvicorn_log_level = "info",
                                                                 max_log_len, access_log_skip_paths;
  frontend::HttpOptions http;  // the flags bound as they are
};

void AddHttpFlags(CLI::App& app, HttpFlagValues& v);
// InvalidArgument naming the flag for a value vLLM refuses (a list that is not JSON, a level
// outside uvicorn's, a --max-log-len that is not an integer, a negative
// --sse-keep-alive-interval).
[[nodiscard]] absl::Status ApplyHttpFlags(const CLI::App& app, const HttpFlagValues& v,
                                          frontend::HttpOptions& out);

// vLLM's VLLM_LOG_STATS_INTERVAL: seconds between stats lines (a number above 0; else 10).
double LogStatsIntervalSeconds();

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_SERVE_ARGS_FRONTEND_H_
