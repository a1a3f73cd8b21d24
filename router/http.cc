#include "router/http.h"

#include "nlohmann/json.hpp"

namespace vllm::router {

std::string ErrorJson(int code, absl::string_view type, absl::string_view message) {
  using nlohmann::json;
  json j = {
      {"error", {{"message", std::string(message)}, {"type", std::string(type)}, {"code", code}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

net::awaitable<bool> WriteSimple(beast::tcp_stream& stream, unsigned version, bool keep_alive,
                                 int status, std::string body, absl::string_view content_type) {
  http::response<http::string_body> res{static_cast<http::status>(status), version};
  res.set(http::field::server, "vllm-launch router");
  res.set(http::field::content_type, std::string(content_type));
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  beast::error_code ec;
  stream.expires_after(kClientIoTimeout);
  co_await http::async_write(stream, res, net::redirect_error(kUse, ec));
  co_return !ec;
}

}  // namespace vllm::router
