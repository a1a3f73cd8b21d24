// Session's connection side: reading a request, the disconnect watch, writing responses
// (whole or as chunked SSE), closing. See http_session.h.
#include "frontend/openai/http_session.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace vllm::frontend::api_server_internal {

Session::~Session() {
  AbortUnfinished();
  EndInFlight();
  ctx_->num_connections.fetch_sub(1);
  absl::MutexLock lock(&ctx_->sessions_mu);
  ctx_->sessions.erase(this);
}

void Session::Start() {
  beast::error_code ignored;
  // SSE chunks are small and latency matters more than packet count.
  stream_.socket().set_option(tcp::no_delay(true), ignored);
  {
    absl::MutexLock lock(&ctx_->sessions_mu);
    ctx_->sessions[this] = weak_from_this();
  }
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->DoRead(); });
}

void Session::CloseAsync() {
  net::post(stream_.get_executor(), [self = shared_from_this()] { self->CloseSocket(); });
}

void Session::CloseIfIdleAsync() {
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    if (self->idle_since_ns_.load() != 0 && !self->gen_.has_value() &&
        self->preparing_serial_ == 0) {
      if (!self->writing_) return self->CloseSocket();
      self->close_after_write_ = true;
      return;
    }
    self->evicting_.store(false);  // busy after all: it may be chosen again later
  });
}

void Session::ShutdownAsync() {
  net::post(stream_.get_executor(), [self = shared_from_this()] { self->Shutdown(); });
}

void Session::DoRead() {
  if (closed_) return;
  parser_.emplace();
  parser_->body_limit(ctx_->options.max_body_bytes);
  parser_->header_limit(HeaderLimit());
  // Idle since its last response went to the socket (MarkIdleAfterWrite) when it was stamped
  // then, not since this write handler ran: a later stamp would make it look newer than a
  // connection answered after it, and eviction would pass over it.
  if (idle_since_ns_.load() == 0) idle_since_ns_.store(MonoNowNs());
  if (overflow_) {
    stream_.expires_after(ctx_->options.overflow_read_timeout);
  } else if (request_.method() != http::verb::unknown) {
    // A keep-alive connection after a response (request_ holds the last request).
    stream_.expires_after(ctx_->options.keep_alive_timeout);
  } else {
    stream_.expires_after(ctx_->options.io_timeout);
  }
  http::async_read(stream_, buffer_, *parser_,
                   beast::bind_front_handler(&Session::OnRead, shared_from_this()));
}

void Session::OnRead(beast::error_code ec, size_t) {
  if (closed_) return;
  idle_since_ns_.store(0);
  cors_headers_.clear();
  log_access_ = false;
  if (ec == http::error::body_limit) {
    keep_alive_ = false;
    return SendError(absl::ResourceExhaustedError(absl::StrCat(
        "Request body exceeds the limit of ", ctx_->options.max_body_bytes, " bytes")));
  }
  if (ec == http::error::header_limit) return SendInvalidHttpRequest();
  if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
      ec == net::error::operation_aborted || ec == net::error::eof ||
      ec == net::error::connection_reset) {
    return CloseSocket();
  }
  if (ec) {
    keep_alive_ = false;
    return SendError(
        absl::InvalidArgumentError(absl::StrCat("Malformed HTTP request: ", ec.message())));
  }
  request_ = parser_->release();
  if (std::distance(request_.begin(), request_.end()) > ctx_->options.http.h11_max_header_count) {
    return SendInvalidHttpRequest();  // h11's max header count (--h11-max-header-count)
  }
  log_access_ = true;
  request_id_.clear();
  if (ctx_->options.http.request_id_headers) {  // vLLM's XRequestIdMiddleware
    const auto it = request_.find("X-Request-Id");
    request_id_ = it != request_.end() ? std::string(it->value()) : NewUuid4Hex();
  }
  keep_alive_ =
      request_.keep_alive() && request_.version() == 11 && !overflow_ && !ctx_->draining.load();
  Route();
}

void Session::Shutdown() {
  if (closed_) return;
  shutting_down_ = true;
  keep_alive_ = false;
  if (gen_.has_value()) {
    return FailGeneration(absl::UnavailableError(
        "The server is shutting down; the request was aborted before it finished"));
  }
  if (preparing_serial_ != 0) {
    // Its engine requests, if the pool gets to start them, are aborted in OnPrepared.
    preparing_serial_ = 0;
    early_outputs_.clear();
    EndInFlight();
    return SendError(absl::UnavailableError("The server is shutting down"));
  }
  // A response being written closes the connection when done (keep_alive_ is false).
  if (!writing_) CloseSocket();
}

void Session::StartWatch() {
  if (watching_ || closed_) return;
  watching_ = true;
  stream_.socket().async_read_some(
      buffer_.prepare(4096), beast::bind_front_handler(&Session::OnWatch, shared_from_this()));
}

void Session::OnWatch(beast::error_code ec, size_t n) {
  watching_ = false;
  if (closed_) return;
  if (!ec) buffer_.commit(n);
  if (resume_read_after_watch_) {
    // The response is complete and the watch was cancelled (or completed first).
    resume_read_after_watch_ = false;
    if (!ec || ec == net::error::operation_aborted) return DoRead();
    return CloseSocket();
  }
  if (!ec) {
    if (buffer_.size() < HeaderLimit() + ctx_->options.max_body_bytes) {
      StartWatch();
    }
    return;
  }
  if (gen_.has_value() || preparing_serial_ != 0) {
    // The client left: abort (a request still being prepared is aborted in OnPrepared).
    AbortUnfinished();
    gen_.reset();
    CloseSocket();
  }
  // Otherwise the response is complete or being written; the next read sees the close.
}

std::optional<std::string_view> Session::Header(http::field field) const {
  auto it = request_.find(field);
  if (it == request_.end()) return std::nullopt;
  return std::string_view(it->value().data(), it->value().size());
}

bool Session::AnswerCorsPreflight() {
  const std::optional<std::string_view> origin = Header(http::field::origin);
  const std::optional<std::string_view> method = Header(http::field::access_control_request_method);
  if (request_.method() != http::verb::options || !origin.has_value() || !method.has_value()) {
    return false;
  }
  CorsPolicy::Answer answer = ctx_->cors.Preflight(
      *origin, *method, Header(http::field::access_control_request_headers),
      request_.find("Access-Control-Request-Private-Network") != request_.end());
  cors_headers_ = std::move(answer.headers);
  SendBody(static_cast<http::status>(answer.status), "text/plain; charset=utf-8",
           std::move(answer.body), nullptr);
  return true;
}

void Session::LogAccess(int status) {
  const HttpOptions& o = ctx_->options.http;
  if (!log_access_ || !o.access_log || o.log_level > HttpLogLevel::kInfo) return;
  log_access_ = false;  // once per request
  beast::error_code ec;
  const tcp::endpoint peer = stream_.socket().remote_endpoint(ec);
  const std::string client =
      ec ? std::string("-") : absl::StrCat(peer.address().to_string(), ":", peer.port());
  const auto method = request_.method_string();
  const auto target = request_.target();
  const std::string_view path(target.data(), std::min(target.find('?'), target.size()));
  for (const std::string& skip : o.access_log_skip_paths) {
    if (path == skip) return;  // --disable-access-log-for-endpoints: the path exactly
  }
  spdlog::info("{}", AccessLogLine(client, std::string_view(method.data(), method.size()),
                                   std::string_view(target.data(), target.size()),
                                   request_.version(), status));
}

void Session::SendError(const absl::Status& status) {
  if (absl::IsUnavailable(status) && ctx_->draining.load()) keep_alive_ = false;
  SendJson(static_cast<http::status>(HttpStatusFor(status)), DumpJson(ErrorBody(status)));
}

void Session::SendJson(http::status status, std::string body, const char* allow) {
  SendBody(status, "application/json", std::move(body), allow);
}

void Session::SendBody(http::status status, const char* content_type, std::string body,
                       const char* allow) {
  auto res = std::make_shared<http::response<http::string_body>>(status, 11);
  res->set(http::field::server, ctx_->options.server_name);
  res->set(http::field::content_type, content_type);
  if (allow != nullptr) res->set(http::field::allow, allow);
  for (const auto& [name, value] : cors_headers_) res->set(name, value);
  if (!request_id_.empty() && log_access_) res->set("X-Request-Id", request_id_);
  LogAccess(static_cast<int>(status));
  res->keep_alive(keep_alive_);
  res->body() = std::move(body);
  res->prepare_payload();
  MarkIdleAfterWrite();
  writing_ = true;
  stream_.expires_after(ctx_->options.io_timeout);
  http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
    self->writing_ = false;
    self->OnMessageWritten(ec);
  });
}

uint32_t Session::HeaderLimit() const {
  return static_cast<uint32_t>(std::clamp<int64_t>(ctx_->options.http.h11_max_incomplete_event_size,
                                                   1, std::numeric_limits<uint32_t>::max()));
}

void Session::SendInvalidHttpRequest() {
  // uvicorn's answer to what h11 refuses (RemoteProtocolError): a warning, 400, close.
  keep_alive_ = false;
  log_access_ = false;
  if (ctx_->options.http.log_level <= HttpLogLevel::kWarning) {
    spdlog::warn("Invalid HTTP request received.");
  }
  SendBody(http::status::bad_request, "text/plain; charset=utf-8", "Invalid HTTP request received.",
           nullptr);
}

std::string Session::NewUuid4Hex() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  uint64_t hi = rng(), lo = rng();
  hi = (hi & ~uint64_t{0xF000}) | uint64_t{0x4000};            // version 4
  lo = (lo & ~(uint64_t{0xC} << 60)) | (uint64_t{0x8} << 60);  // RFC 4122 variant
  return absl::StrFormat("%016x%016x", hi, lo);
}

void Session::ArmSseKeepAlive() {
  if (!gen_.has_value() || !gen_->keep_alive_timer) return;
  // Capped at ~31 years so that now + interval cannot overflow the clock.
  gen_->keep_alive_timer->expires_after(std::chrono::seconds(
      std::min<int64_t>(ctx_->options.http.sse_keep_alive_interval_s, int64_t{1} << 30)));
  gen_->keep_alive_timer->async_wait([weak = weak_from_this(),
                                      serial = gen_->serial](beast::error_code ec) {
    auto self = weak.lock();  // the timer lives in the session: no reference cycle
    if (ec || !self || self->closed_ || !self->gen_.has_value() || self->gen_->serial != serial) {
      return;
    }
    self->QueueChunk(std::string(kSseKeepAlive));  // re-arms the timer
  });
}

void Session::QueueChunk(const std::string& data) {
  if (data.empty()) return;
  QueueBytes(absl::StrCat(absl::Hex(data.size()), "\r\n", data, "\r\n"));
  // --sse-keep-alive-interval: the stream's idle time counts from its last bytes.
  if (gen_.has_value() && gen_->keep_alive_timer) ArmSseKeepAlive();
}

void Session::QueueLastChunk() {
  QueueBytes("0\r\n\r\n");
  end_of_message_queued_ = true;
  MarkIdleAfterWrite();
}

void Session::MarkIdleAfterWrite() {
  if (keep_alive_ && !overflow_ && !shutting_down_ && buffer_.size() == 0 &&
      !ctx_->draining.load()) {
    idle_since_ns_.store(MonoNowNs());
  }
}

void Session::QueueBytes(std::string bytes) {
  if (closed_) return;
  write_queue_.push_back(std::move(bytes));
  if (!writing_) WriteNext();
}

void Session::WriteNext() {
  writing_ = true;
  stream_.expires_after(ctx_->options.io_timeout);
  net::async_write(stream_, net::buffer(write_queue_.front()),
                   beast::bind_front_handler(&Session::OnQueuedWrite, shared_from_this()));
}

void Session::OnQueuedWrite(beast::error_code ec, size_t) {
  writing_ = false;
  if (closed_) return;
  if (ec) {
    AbortUnfinished();
    gen_.reset();
    return CloseSocket();
  }
  write_queue_.pop_front();
  if (!write_queue_.empty()) return WriteNext();
  if (end_of_message_queued_) {
    end_of_message_queued_ = false;
    OnMessageWritten(ec);
  }
}

void Session::OnMessageWritten(beast::error_code ec) {
  if (closed_) return;
  if (ec || !keep_alive_ || close_after_write_ || shutting_down_ || ctx_->draining.load()) {
    return CloseSocket();
  }
  if (watching_) {
    // Cancel the disconnect watch; its handler resumes reading.
    resume_read_after_watch_ = true;
    beast::error_code ignored;
    stream_.socket().cancel(ignored);
    return;
  }
  DoRead();
}

void Session::CloseSocket() {
  if (closed_) return;
  closed_ = true;
  idle_since_ns_.store(0);
  AbortUnfinished();
  gen_.reset();
  EndInFlight();
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream_.close();
}

}  // namespace vllm::frontend::api_server_internal
