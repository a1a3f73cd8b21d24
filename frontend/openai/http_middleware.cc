#include "frontend/openai/http_middleware.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/python_repr.h"
#include "spdlog/spdlog.h"

namespace vllm::frontend {
namespace {

// Starlette 1.x's ALL_METHODS (what "*" in --allowed-methods stands for) and
// SAFELISTED_HEADERS.
constexpr std::string_view kAllMethods[] = {"DELETE", "GET",  "HEAD", "OPTIONS",
                                            "PATCH",  "POST", "PUT",  "QUERY"};
constexpr std::string_view kSafelistedHeaders[] = {"Accept", "Accept-Language", "Content-Language",
                                                   "Content-Type"};

bool Contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Compares in time that depends only on `expected`'s length, not on where the strings differ.
bool ConstantTimeEquals(std::string_view given, std::string_view expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= static_cast<unsigned char>(g ^ static_cast<unsigned char>(expected[i]));
  }
  volatile unsigned char result = diff;  // keeps the loop from becoming an early exit
  return result == 0;
}

// The HTTP reason phrases uvicorn writes (Python's http.HTTPStatus) for our statuses.
std::string_view Phrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Request Entity Too Large";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "";
  }
}

// Python's s[:n] of UTF-8 `s` (code points; a negative n drops the last -n).
std::string_view FirstCodePoints(std::string_view s, int64_t n) {
  if (n < 0) {
    int64_t total = 0;
    for (char c : s) total += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    n = std::max<int64_t>(total + n, 0);
  }
  size_t i = 0;
  for (int64_t k = 0; k < n && i < s.size(); ++k) {
    ++i;
    while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
  }
  return s.substr(0, i);
}

// Python's ids[:n].
size_t SliceEnd(size_t size, int64_t n) {
  const auto total = static_cast<int64_t>(size);
  return static_cast<size_t>(std::clamp<int64_t>(n < 0 ? total + n : n, 0, total));
}

std::string PyOptional(const std::optional<int64_t>& v) {
  return v.has_value() ? absl::StrCat(*v) : "None";
}

std::string PyBool(bool b) { return b ? "True" : "False"; }

template <class T>
std::string PyIntList(const std::vector<T>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
}

}  // namespace

std::string RoutePath(std::string_view path, std::string_view root_path) {
  if (root_path.empty() || !path.starts_with(root_path)) return std::string(path);
  if (path.size() == root_path.size()) return "";
  if (path[root_path.size()] == '/') return std::string(path.substr(root_path.size()));
  return std::string(path);
}

bool NeedsApiKey(std::string_view route_path) {
  for (std::string_view prefix : {"/v1", "/v2", "/inference", "/cohere"}) {
    if (route_path.starts_with(prefix)) return true;
  }
  return false;
}

bool ApiKeyAccepted(const std::vector<std::string>& keys,
                    std::optional<std::string_view> authorization) {
  if (keys.empty()) return true;
  if (!authorization.has_value() || authorization->empty()) return false;
  const size_t space = authorization->find(' ');
  const std::string_view scheme = authorization->substr(0, space);
  if (!absl::EqualsIgnoreCase(absl::string_view(scheme.data(), scheme.size()), "bearer")) {
    return false;
  }
  const std::string_view token =
      space == std::string_view::npos ? std::string_view() : authorization->substr(space + 1);
  bool match = false;
  for (const std::string& key : keys) match |= ConstantTimeEquals(token, key);  // every key
  return match;
}

CorsPolicy::CorsPolicy(const HttpOptions& o)
    : origins_(o.allowed_origins), credentials_(o.allow_credentials) {
  if (Contains(o.allowed_methods, "*")) {
    for (std::string_view m : kAllMethods) methods_.emplace_back(m);
  } else {
    methods_ = o.allowed_methods;
  }
  all_origins_ = Contains(origins_, "*");
  all_headers_ = Contains(o.allowed_headers, "*");
  explicit_origin_ = !all_origins_ || credentials_;
  preflight_headers_.emplace_back(
      "Vary",
      "Origin, Access-Control-Request-Method, Access-Control-Request-Headers, "
      "Access-Control-Request-Private-Network");
  if (!explicit_origin_) preflight_headers_.emplace_back("Access-Control-Allow-Origin", "*");
  preflight_headers_.emplace_back("Access-Control-Allow-Methods", absl::StrJoin(methods_, ", "));
  preflight_headers_.emplace_back("Access-Control-Max-Age", "600");
  std::set<std::string> sorted(o.allowed_headers.begin(), o.allowed_headers.end());
  for (std::string_view h : kSafelistedHeaders) sorted.emplace(h);
  if (!all_headers_) {
    preflight_headers_.emplace_back("Access-Control-Allow-Headers", absl::StrJoin(sorted, ", "));
  }
  if (credentials_) preflight_headers_.emplace_back("Access-Control-Allow-Credentials", "true");
  for (const std::string& h : sorted) headers_lower_.push_back(absl::AsciiStrToLower(h));
}

bool CorsPolicy::AllowedOrigin(std::string_view origin) const {
  return all_origins_ || Contains(origins_, origin);
}

CorsPolicy::Answer CorsPolicy::Preflight(std::string_view origin, std::string_view method,
                                         std::optional<std::string_view> requested_headers,
                                         bool private_network) const {
  Answer a;
  a.headers = preflight_headers_;
  std::vector<std::string> failures;
  if (AllowedOrigin(origin)) {
    if (explicit_origin_) a.headers.emplace_back("Access-Control-Allow-Origin", origin);
  } else {
    failures.push_back("origin");
  }
  if (!Contains(methods_, method)) failures.push_back("method");
  if (all_headers_ && requested_headers.has_value()) {
    a.headers.emplace_back("Access-Control-Allow-Headers", *requested_headers);
  } else if (requested_headers.has_value()) {
    for (absl::string_view h : absl::StrSplit(
             absl::string_view(requested_headers->data(), requested_headers->size()), ',')) {
      const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(h));
      if (!Contains(headers_lower_, lower)) {
        failures.push_back("headers");
        break;
      }
    }
  }
  if (private_network) failures.push_back("private-network");  // vLLM does not allow it
  if (failures.empty()) {
    a.body = "OK";
  } else {
    a.status = 400;
    a.body = absl::StrCat("Disallowed CORS ", absl::StrJoin(failures, ", "));
  }
  return a;
}

HeaderList CorsPolicy::SimpleHeaders(std::optional<std::string_view> origin) const {
  HeaderList h;
  if (origin.has_value()) {
    if (all_origins_) h.emplace_back("Access-Control-Allow-Origin", "*");
    if (credentials_) h.emplace_back("Access-Control-Allow-Credentials", "true");
  }
  const bool mirror = origin.has_value() && (all_origins_ ? credentials_ : AllowedOrigin(*origin));
  if (mirror) {
    auto it = std::find_if(h.begin(), h.end(), [](const auto& kv) {
      return kv.first == "Access-Control-Allow-Origin";
    });
    if (it != h.end()) {
      it->second = std::string(*origin);
    } else {
      h.emplace_back("Access-Control-Allow-Origin", *origin);
    }
  }
  h.emplace_back("Vary", "Origin");  // Starlette 1.x adds it to every answer
  return h;
}

std::string AccessLogLine(std::string_view client, std::string_view method, std::string_view target,
                          unsigned version, int status) {
  return absl::StrCat(std::string(client), " - \"", std::string(method), " ", std::string(target),
                      " HTTP/", version / 10, ".", version % 10, "\" ", status, " ",
                      std::string(Phrase(status)));
}

std::string PythonStrRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const char quote = has_single && s.find('"') == std::string_view::npos ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\' || c == quote) {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(u, absl::kZeroPad2));
    } else {
      out += c;
    }
  }
  out += quote;
  return out;
}

std::string RequestLogLine(const GenerateRequest& r) {
  const core::SamplingParams& p = r.params;
  std::vector<std::string> stop;
  for (const std::string& s : r.stop) stop.push_back(PythonStrRepr(s));
  const std::string params = absl::StrCat(
      "SamplingParams(n=", p.n, ", presence_penalty=", base::PythonFloatRepr(p.presence_penalty),
      ", frequency_penalty=", base::PythonFloatRepr(p.frequency_penalty),
      ", repetition_penalty=", base::PythonFloatRepr(p.repetition_penalty),
      ", temperature=", base::PythonFloatRepr(p.temperature),
      ", watermarking=None, top_p=", base::PythonFloatRepr(p.top_p), ", top_k=", p.top_k,
      ", min_p=", base::PythonFloatRepr(p.min_p), ", seed=", PyOptional(p.seed), ", stop=[",
      absl::StrJoin(stop, ", "), "], stop_token_ids=", PyIntList(p.stop_token_ids),
      ", bad_words=[], thinking_token_budget=None, include_stop_str_in_output=",
      PyBool(r.include_stop_str_in_output), ", ignore_eos=", PyBool(p.ignore_eos),
      ", max_tokens=", PyOptional(p.max_tokens), ", min_tokens=", p.min_tokens,
      ", logprobs=", PyOptional(p.logprobs), ", prompt_logprobs=", PyOptional(p.prompt_logprobs),
      ", skip_special_tokens=", PyBool(r.skip_special_tokens),
      ", spaces_between_special_tokens=True, structured_outputs=",
      p.structured_outputs.has_value() ? "StructuredOutputsParams(...)" : "None",
      ", extra_args=None)");
  return absl::StrCat("Received request ", r.request_id, ": params: ", params,
                      ", lora_request: None.");
}

std::string RequestDetailsLogLine(const GenerateRequest& r, std::optional<int64_t> max_log_len) {
  const int64_t n = max_log_len.value_or(INT64_MAX);
  std::string prompt = "None";
  if (r.prompt_text.has_value()) prompt = PythonStrRepr(FirstCodePoints(*r.prompt_text, n));
  std::string ids = "None";
  if (!r.prompt_text.has_value()) {
    const size_t keep = SliceEnd(r.prompt_token_ids.size(), n);
    ids = PyIntList(std::vector<int32_t>(r.prompt_token_ids.begin(),
                                         r.prompt_token_ids.begin() + static_cast<long>(keep)));
  }
  return absl::StrCat("Request ", r.request_id, " details: prompt: ", prompt,
                      ", prompt_token_ids: ", ids, ", prompt_embeds shape: None.");
}

void LogRequest(const HttpOptions& options, const GenerateRequest& request) {
  if (!options.log_requests) return;
  if (spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("{}", RequestDetailsLogLine(request, options.max_log_len));
  }
  spdlog::info("{}", RequestLogLine(request));
}

}  // namespace vllm::frontend
