// Fuzzes what the API server does with the bytes a client sends: Boost.Beast's
// http::request_parser<http::string_body> with the server's limits (ApiServerOptions
// defaults: 32 MiB body, 64 KiB headers), then the server's routing checks, then for a POST
// the body path of openai_request.h (JSON -> CompletionRequest / ChatCompletionRequest ->
// chat template -> tokenizer, or the error body). Invariants: no crash, throw, leak or
// timeout; a request the parser accepts has a target and a method; every bad body gives a
// 4xx error body that is valid JSON.
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "frontend/openai/api_server.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/openai_request.h"

namespace http = boost::beast::http;

namespace vllm::fuzz {
namespace {

// Runs the parser over the whole input as one read. Returns false when the request is
// incomplete or malformed (the server answers 400 or 413, or closes the connection).
bool ParseRequest(const uint8_t* data, size_t size, http::request<http::string_body>* out) {
  const frontend::ApiServerOptions options;
  http::request_parser<http::string_body> parser;
  parser.body_limit(options.max_body_bytes);
  parser.header_limit(static_cast<uint32_t>(options.http.h11_max_incomplete_event_size));
  boost::beast::error_code ec;
  size_t used = 0;
  while (used < size && !parser.is_done()) {
    const size_t n = parser.put(boost::asio::buffer(data + used, size - used), ec);
    if (ec == http::error::need_more) break;  // the rest is an incomplete element
    if (ec) return false;
    if (n == 0) break;
    used += n;
  }
  if (!parser.is_done()) {
    // The client closed the connection. With nothing received Beast's read reports
    // end_of_stream (put_eof requires got_some()); otherwise an EOF-delimited body ends here.
    if (!parser.got_some()) return false;
    ec = {};
    parser.put_eof(ec);
    if (ec || !parser.is_done()) return false;
  }
  *out = parser.release();
  return true;
}

// The server's checks before it reads a body (frontend/openai/ Route and
// CheckContentType): Host for HTTP/1.1, POST, a JSON content type.
void Route(const http::request<http::string_body>& request) {
  if (request.version() >= 11 && request.find(http::field::host) == request.end()) return;
  if (request.method() != http::verb::post) return;
  auto type = request.find(http::field::content_type);
  if (type != request.end()) {
    const std::string value(type->value());
    const std::string mime = absl::AsciiStrToLower(
        absl::StripAsciiWhitespace(absl::string_view(value).substr(0, value.find(';'))));
    if (mime != "application/json" && !absl::EndsWith(mime, "+json")) return;
  }
  // Both endpoints' parsers run on every POST body, whatever the path (coverage).
  CheckGenerationBody(request.body());
}

}  // namespace
}  // namespace vllm::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  vllm::fuzz::Served();  // load the tokenizer and chat template once
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  http::request<http::string_body> request;
  if (!vllm::fuzz::ParseRequest(data, size, &request)) return 0;
  FUZZ_CHECK(!request.target().empty(), "accepted a request without a target");
  FUZZ_CHECK(!request.method_string().empty(), "accepted a request without a method");
  vllm::fuzz::Route(request);
  return 0;
}
