// Internal to router/: Asio and Beast as the router's coroutines use them, and the small HTTP
// pieces the server, the proxy and the admin endpoints share. Every file of router/ includes
// Asio and Beast through this header only, so each one sees the same Asio configuration.
//
// Boost 1.74's Asio turns co_await support on for clang only with libc++'s
// <experimental/coroutine>; clang 14+ with libstdc++'s <coroutine> works as well. Only Asio's
// coroutine headers read these macros, so other folders' view of Asio is unchanged.
#ifndef VLLM_ROUTER_HTTP_H_
#define VLLM_ROUTER_HTTP_H_

#if defined(__clang__) && defined(__cpp_impl_coroutine) && __has_include(<coroutine>)
#ifndef BOOST_ASIO_HAS_CO_AWAIT
#define BOOST_ASIO_HAS_CO_AWAIT 1
#endif
#ifndef BOOST_ASIO_HAS_STD_COROUTINE
#define BOOST_ASIO_HAS_STD_COROUTINE 1
#endif
#endif

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it

#include "absl/strings/string_view.h"
#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"

namespace vllm::router {

// The router's spelling of Asio and Beast (this header is internal to router/).
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Request = http::request<http::string_body>;

inline constexpr auto kUse = net::use_awaitable;
// The longest wait for a client to send a request or to take a response's bytes.
inline constexpr std::chrono::seconds kClientIoTimeout{60};

// How a request ended, for its client connection: kDone keeps it for the next request,
// kDoneClose closes it, kRetry (from a proxy attempt only) asks for another worker.
enum class Outcome { kDone, kDoneClose, kRetry };

inline absl::string_view Sv(beast::string_view s) { return absl::string_view(s.data(), s.size()); }

inline std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// The OpenAI error shape, as vLLM renders it: {"error": {"message", "type", "code"}}.
std::string ErrorJson(int code, absl::string_view type, absl::string_view message);

// Writes a whole response (Server: vllm-launch router) within kClientIoTimeout; false when the
// client is gone.
net::awaitable<bool> WriteSimple(beast::tcp_stream& stream, unsigned version, bool keep_alive,
                                 int status, std::string body,
                                 absl::string_view content_type = "application/json");

// Runs a coroutine to completion on `ioc` (the router's I/O thread); an exception (a bug or
// bad_alloc) ends only that coroutine and is logged.
template <typename Awaitable>
void Spawn(net::io_context& ioc, Awaitable&& a) {
  net::co_spawn(ioc, std::forward<Awaitable>(a), [](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "vllm-launch router: connection ended by an error: %s\n", ex.what());
    }
  });
}

}  // namespace vllm::router

#endif  // VLLM_ROUTER_HTTP_H_
