#include "tests/integration/serve/serve_http_flag_checks.h"

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
