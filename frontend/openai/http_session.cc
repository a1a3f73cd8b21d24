// Session's connection side: reading a request, the disconnect watch, writing responses
// (whole or as chunked SSE), closing. See http_session.h.
#include "frontend/openai/http_session.h"

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
  parser_->header_limit(static_cast<uint32_t>(ctx_->options.max_header_bytes));
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
  if (ec == http::error::header_limit) {
    keep_alive_ = false;
    return SendJson(http::status::request_header_fields_too_large,
                    ErrorJson(431, "RequestHeaderFieldsTooLarge",
                              absl::StrCat("Request headers exceed the limit of ",
                                           ctx_->options.max_header_bytes, " bytes")));
  }
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
  log_access_ = true;
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
    if (buffer_.size() < ctx_->options.max_header_bytes + ctx_->options.max_body_bytes) {
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

void Session::QueueChunk(const std::string& data) {
  if (data.empty()) return;
  QueueBytes(absl::StrCat(absl::Hex(data.size()), "\r\n", data, "\r\n"));
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
