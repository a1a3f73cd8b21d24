#include "tests/integration/serve/serve_http_flag_checks.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/integration/serve/serve_test_support.h"

namespace vllm::testing {
namespace {

constexpr char kOrigin[] = "https://a.example";

// One request with `headers` ("Name: value\r\n" each) over a fresh connection.
HttpResponse Send(int port, const std::string& method, const std::string& path,
                  const std::string& headers, const std::string& body = "") {
  const std::string raw =
      absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: localhost\r\n", "Connection: close\r\n",
                   headers, "Content-Length: ", body.size(), "\r\n\r\n", body);
  absl::StatusOr<HttpResponse> r = HttpRaw(port, raw);
  return r.ok() ? *r : HttpResponse{};
}

std::string Preflight(const std::string& method, const std::string& header) {
  return absl::StrCat("Origin: ", kOrigin, "\r\nAccess-Control-Request-Method: ", method,
                      "\r\nAccess-Control-Request-Headers: ", header, "\r\n");
}

}  // namespace

std::vector<std::string> WithHttpFlags(std::vector<std::string> args, const std::string& key) {
  for (const std::string& a :
       {std::string("--api-key"), key, std::string("second-key"), std::string("--root-path"),
        std::string("/api"), std::string("--allowed-origins"), absl::StrCat("[\"", kOrigin, "\"]"),
        std::string("--allowed-methods"), std::string(R"(["GET", "POST"])"),
        std::string("--allowed-headers"), std::string(R"(["X-Custom"])"),
        std::string("--allow-credentials"), std::string("--enable-log-requests"),
        std::string("--max-log-len"), std::string("4"), std::string("--disable-uvicorn-access-log"),
        std::string("--disable-log-stats")}) {
    args.push_back(a);
  }
  return args;
}

bool HasAccessLine(const std::string& log) { return absl::StrContains(log, " HTTP/1.1\" 200 OK"); }

bool HasStatsLine(const std::string& log) {
  return absl::StrContains(log, "Engine 000: Avg prompt throughput: ");
}

std::vector<FlagCheck> CheckHttpFlags(int port, const std::string& key,
                                      const std::function<std::string(const std::string&)>& log) {
  std::vector<FlagCheck> out;
  const std::string bearer = absl::StrCat("Authorization: Bearer ", key, "\r\n");
  const HttpResponse second =
      Send(port, "GET", "/v1/models", "Authorization: Bearer second-key\r\n");
  const HttpResponse none = Send(port, "GET", "/v1/models", "");
  out.push_back({"--api-key", second.status == 200 && none.status == 401,
                 absl::StrCat(second.status, " with the second key, ", none.status, " without")});
  const HttpResponse under = Send(port, "GET", "/api/v1/models", bearer);
  out.push_back({"--root-path", under.status == 200 && absl::StrContains(under.body, "fooname"),
                 absl::StrCat(under.status, " ", under.body)});
  // CORS: a preflight is answered on any path, without the key (vLLM's middleware order).
  const HttpResponse ok =
      Send(port, "OPTIONS", "/api/v1/completions", Preflight("POST", "x-custom"));
  const HttpResponse bad_method = Send(port, "OPTIONS", "/x", Preflight("DELETE", "x-custom"));
  const HttpResponse bad_header = Send(port, "OPTIONS", "/x", Preflight("POST", "x-other"));
  const HttpResponse simple =
      Send(port, "GET", "/health", absl::StrCat("Origin: ", kOrigin, "\r\n"));
  const std::string detail =
      absl::StrCat(ok.status, ok.head, bad_method.body, bad_header.body, simple.head);
  out.push_back(
      {"--allowed-origins",
       ok.status == 200 &&
           absl::StrContains(ok.head, "Access-Control-Allow-Origin: https://a.example") &&
           absl::StrContains(simple.head, "Access-Control-Allow-Origin: https://a.example"),
       detail});
  out.push_back({"--allowed-methods",
                 absl::StrContains(ok.head, "Access-Control-Allow-Methods: GET, POST") &&
                     bad_method.status == 400 && bad_method.body == "Disallowed CORS method",
                 detail});
  out.push_back({"--allowed-headers",
                 absl::StrContains(ok.head,
                                   "Access-Control-Allow-Headers: Accept, "
                                   "Accept-Language, Content-Language, Content-Type, "
                                   "X-Custom") &&
                     bad_header.body == "Disallowed CORS headers",
                 detail});
  out.push_back({"--allow-credentials",
                 absl::StrContains(simple.head, "Access-Control-Allow-Credentials: true"), detail});
  // The request log: its INFO line, and the prompt cut to 4 characters at DEBUG.
  const HttpResponse gen = Send(port, "POST", "/v1/completions",
                                absl::StrCat(bearer, "Content-Type: application/json\r\n"),
                                R"({"prompt": "In the beginning", "max_tokens": 2})");
  const std::string text = log("prompt: 'In t', prompt_token_ids");
  out.push_back({"--enable-log-requests",
                 gen.status == 200 && absl::StrContains(text, "Received request cmpl-") &&
                     absl::StrContains(text, "max_tokens=2, "),
                 text});
  out.push_back(
      {"--max-log-len", absl::StrContains(text, "prompt: 'In t', prompt_token_ids"), text});
  out.push_back({"--disable-uvicorn-access-log", !HasAccessLine(text), text});
  out.push_back({"--disable-log-stats", !HasStatsLine(text), text});
  return out;
}

}  // namespace vllm::testing

namespace vllm::testing {
namespace {

// Reads from `fd` into `got` until it holds `marker`, the peer closes, or `deadline`.
bool ReadUntil(int fd, const std::string& marker, absl::Time deadline, std::string* got) {
  while (!absl::StrContains(*got, marker)) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    pollfd p = {fd, POLLIN, 0};
    if (ms <= 0 || poll(&p, 1, static_cast<int>(ms)) <= 0) return false;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return absl::StrContains(*got, marker);
    got->append(buf, static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

std::vector<std::string> WithHttpServerFlags(std::vector<std::string> args) {
  for (const char* a : {"--enable-request-id-headers", "--disable-fastapi-docs",
                        "--disable-access-log-for-endpoints", "/health, /metrics",
                        "--h11-max-incomplete-event-size", "16384", "--h11-max-header-count", "40",
                        "--enable-server-load-tracking", "--sse-keep-alive-interval", "1"}) {
    args.emplace_back(a);
  }
  return args;
}

int64_t ServerLoad(int port) {
  absl::StatusOr<HttpResponse> r = Http(port, "GET", "/load");
  if (!r.ok()) return -1;
  const nlohmann::json j = r->Json();
  return j.is_object() && j.contains("server_load") && j["server_load"].is_number_integer()
             ? j["server_load"].get<int64_t>()
             : -1;
}

std::vector<FlagCheck> CheckHttpServerFlags(
    int port, const std::function<std::string(const std::string&)>& log) {
  std::vector<FlagCheck> out;
  // X-Request-Id: the request's own, else a fresh uuid4 hex (both API servers have the flag).
  const HttpResponse echoed = Send(port, "GET", "/version", "X-Request-Id: abc-123\r\n");
  const HttpResponse fresh = Send(port, "GET", "/version", "");
  out.push_back({"--enable-request-id-headers",
                 absl::StrContains(echoed.head, "X-Request-Id: abc-123\r\n") &&
                     std::regex_search(fresh.head, std::regex("X-Request-Id: [0-9a-f]{12}4[0-9a-f]"
                                                              "{3}[89ab][0-9a-f]{15}\r\n")),
                 echoed.head + fresh.head});
  const HttpResponse docs = Send(port, "GET", "/docs", "");
  out.push_back({"--disable-fastapi-docs", docs.status == 404, docs.head});
  // h11's limits: uvicorn's 400 "Invalid HTTP request received.".
  std::string many;
  for (int i = 0; i < 40; ++i) absl::StrAppend(&many, "X-H", i, ": 1\r\n");
  const HttpResponse counted = Send(port, "GET", "/version", many);
  out.push_back({"--h11-max-header-count",
                 counted.status == 400 && counted.body == "Invalid HTTP request received." &&
                     Send(port, "GET", "/version", "X-H: 1\r\n").status == 200,
                 counted.head + counted.body});
  const HttpResponse big =
      Send(port, "GET", "/version", absl::StrCat("X-Big: ", std::string(16384, 'a'), "\r\n"));
  out.push_back(
      {"--h11-max-incomplete-event-size",
       big.status == 400 && big.body == "Invalid HTTP request received." &&
           Send(port, "GET", "/version", absl::StrCat("X-Big: ", std::string(8000, 'a'), "\r\n"))
                   .status == 200,
       big.head + big.body});
  // A stream on a paused engine: in flight for /load, idle for the keep-alive comment.
  const HttpResponse paused = Send(port, "POST", "/sleep?level=0", "");
  const nlohmann::json body = {{"prompt", "In the beginning"}, {"max_tokens", 3}, {"stream", true}};
  absl::StatusOr<int> fd = SendAndKeepOpen(port, "/v1/completions", body.dump());
  std::string sse;
  const absl::Time start = absl::Now();
  const bool kept_alive =
      fd.ok() && ReadUntil(*fd, ": keep-alive\n\n", start + absl::Seconds(10), &sse);
  const absl::Duration idle = absl::Now() - start;
  int64_t load = 0;  // either API server may answer; the one serving the stream counts it
  for (const absl::Time deadline = absl::Now() + absl::Seconds(10);
       load <= 0 && absl::Now() < deadline;) {
    load = ServerLoad(port);
  }
  const HttpResponse woken = Send(port, "POST", "/wake_up", "");
  const bool done =
      fd.ok() && ReadUntil(*fd, "data: [DONE]", absl::Now() + absl::Seconds(30), &sse);
  if (fd.ok()) close(*fd);
  out.push_back({"--sse-keep-alive-interval",
                 paused.status == 200 && kept_alive && idle >= absl::Milliseconds(900) && done &&
                     woken.status == 200,
                 absl::StrCat(paused.status, " ", paused.body, "; ", woken.status, "; ", sse)});
  out.push_back({"--enable-server-load-tracking", load > 0, absl::StrCat("/load ", load)});
  // No access line for the skipped paths, one for the others.
  (void)Send(port, "GET", "/health", "");
  const std::string text = log("\"GET /version HTTP/1.1\" 200 OK");
  out.push_back({"--disable-access-log-for-endpoints",
                 absl::StrContains(text, "\"GET /version HTTP/1.1\" 200 OK") &&
                     !absl::StrContains(text, "\"GET /health HTTP/1.1\""),
                 text});
  return out;
}

}  // namespace vllm::testing
