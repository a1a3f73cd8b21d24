#include "frontend/engine/listen_address.h"

#include "absl/strings/str_cat.h"
#include "boost/asio.hpp"

namespace vllm::frontend {

absl::StatusOr<std::string> ResolveListenAddress(const std::string& host) {
  namespace net = boost::asio;
  using tcp = net::ip::tcp;
  boost::system::error_code ec;
  net::ip::address address = net::ip::make_address(host, ec);
  if (!ec) return address.to_string();
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  auto results =
      resolver.resolve(host, "0", tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--host '", host, "' is neither an IP address nor a host name that resolves",
                     ec ? absl::StrCat(" (", ec.message(), ")") : std::string()));
  }
  for (const auto& entry : results) {
    if (entry.endpoint().address().is_v4()) return entry.endpoint().address().to_string();
  }
  return results.begin()->endpoint().address().to_string();
}

}  // namespace vllm::frontend
