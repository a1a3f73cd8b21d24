// serve_flags_test's rows for vLLM's HTTP middleware and logging flags (--api-key with two
// keys, --root-path, CORS, the request log, the access log, the stats log), kept here so the
// test itself stays short: the flags to add to its run with everything away from its default,
// and what the server then does.
#ifndef VLLM_TESTS_INTEGRATION_SERVE_SERVE_HTTP_FLAG_CHECKS_H_
#define VLLM_TESTS_INTEGRATION_SERVE_SERVE_HTTP_FLAG_CHECKS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace vllm::testing {

struct FlagCheck {
  std::string flag;
  bool ok = false;
  std::string detail;
};

// `args` with the HTTP flags added: --api-key `key` and a second key, --root-path /api, CORS
// for https://a.example (GET and POST, header X-Custom, credentials), --enable-log-requests
// --max-log-len 4, --disable-uvicorn-access-log, --disable-log-stats.
std::vector<std::string> WithHttpFlags(std::vector<std::string> args, const std::string& key);

// The log of a server with the defaults shows uvicorn's access lines and the stats line.
bool HasAccessLine(const std::string& log);
bool HasStatsLine(const std::string& log);

// The checks on a server started WithHttpFlags (and VLLM_LOGGING_LEVEL=DEBUG, for the
// prompt's request-log line). `log(marker)` waits for `marker` and returns the server's log.
std::vector<FlagCheck> CheckHttpFlags(int port, const std::string& key,
                                      const std::function<std::string(const std::string&)>& log);

// `args` with vLLM's HTTP server flags: --enable-request-id-headers, --disable-fastapi-docs,
// --disable-access-log-for-endpoints "/health, /metrics", --h11-max-incomplete-event-size
// 16384, --h11-max-header-count 40, --enable-server-load-tracking, --sse-keep-alive-interval 1.
std::vector<std::string> WithHttpServerFlags(std::vector<std::string> args);

// The checks on a server started WithHttpServerFlags, its access log on and
// VLLM_SERVER_DEV_MODE=1 (a stream waits on a paused engine: POST /sleep?level=0, then
// /wake_up, so it idles for the keep-alive interval and /load sees it in flight).
std::vector<FlagCheck> CheckHttpServerFlags(
    int port, const std::function<std::string(const std::string&)>& log);

// GET /load's server_load (-1 when the answer is not vLLM's JSON).
int64_t ServerLoad(int port);

}  // namespace vllm::testing

#endif  // VLLM_TESTS_INTEGRATION_SERVE_SERVE_HTTP_FLAG_CHECKS_H_
