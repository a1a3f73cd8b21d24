// The one translation unit of the benchmark that includes Boost.Beast (it is slow to compile).
#include "bench/serve/client.h"

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace vllm::bench_serve {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr size_t kReadChunkBytes = 16 * 1024;
// The part of an error response's body quoted in the request's error.
constexpr size_t kMaxErrorBodyBytes = 300;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One keep-alive HTTP connection and its read buffer.
struct Connection {
  explicit Connection(asio::io_context& ioc) : stream(ioc) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
};

// tqdm-like progress line on stderr, redrawn at most every 100 ms and at the end.
class ProgressBar {
 public:
  ProgressBar(size_t total, bool enabled) : total_(total), enabled_(enabled) {}

  void Update(size_t done) {
    if (!enabled_) return;
    const Clock::time_point now = Clock::now();
    if (done != total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    const double elapsed = SecondsSince(start_);
    const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0;
    const size_t percent = total_ == 0 ? 100 : done * 100 / total_;
    const size_t filled = total_ == 0 ? 40 : done * 40 / total_;
    std::fprintf(stderr, "\r%3zu%%|%s%s| %zu/%zu [%.1fs, %.2f it/s]", percent,
                 std::string(filled, '#').c_str(), std::string(40 - filled, ' ').c_str(), done,
                 total_, elapsed, rate);
    if (done == total_) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  size_t total_;
  bool enabled_;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_draw_;
};

class LoadRunner;

// One streamed request on one connection: connect (unless reusing), write, read the header,
// read the body as it arrives into the SSE parser. Keeps itself alive through its callbacks.
class StreamingCall : public std::enable_shared_from_this<StreamingCall> {
 public:
  StreamingCall(LoadRunner* runner, size_t index, std::unique_ptr<Connection> connection,
                http::request<http::string_body> request, SseResponseParser parser);
  void Start();

 private:
  void Connect();
  void Write();
  void OnWrite(beast::error_code ec);
  void OnHeader(beast::error_code ec);
  void ReadSome();
  void OnRead(beast::error_code ec);
  // A reused keep-alive connection the server already closed fails before any response byte:
  // retry once on a fresh connection.
  bool RetryOnFreshConnection(beast::error_code ec);
  void Fail(const std::string& error);
  void Done();

  LoadRunner* runner_;
  size_t index_;
  std::unique_ptr<Connection> connection_;
  bool reused_;
  http::request<http::string_body> request_;
  std::optional<http::response_parser<http::buffer_body>> response_;
  SseResponseParser sse_;
  // Non-200: the status and the start of the body, for the error message.
  std::string http_error_;
  char chunk_[kReadChunkBytes];
  Clock::time_point start_;
};

// Owns the io_context, the arrival timer, the queue of arrived requests and the idle
// connections. Single-threaded: everything runs on the thread inside Run().
class LoadRunner {
 public:
  LoadRunner(const LoadOptions& options, const std::vector<SampleRequest>& requests)
      : options_(options),
        requests_(requests),
        arrival_timer_(ioc_),
        outputs_(requests.size()),
        progress_(requests.size(), options.show_progress) {}

  LoadResult Run() {
    beast::error_code ec;
    tcp::resolver resolver(ioc_);
    endpoints_ = resolver.resolve(options_.host, options_.port, ec);
    if (ec) {
      for (size_t i = 0; i < requests_.size(); ++i) {
        outputs_[i].prompt_len = requests_[i].prompt_len;
        outputs_[i].error =
            absl::StrCat("cannot resolve ", options_.host, ":", options_.port, ": ", ec.message());
      }
      return {std::move(outputs_), 0.0};
    }
    offsets_ = ArrivalOffsets(requests_.size(), options_.request_rate, options_.burstiness,
                              options_.seed, options_.ramp_up);
    sent_s_.assign(requests_.size(), 0.0);
    start_ = Clock::now();
    end_ = start_;
    OnArrivalTimer();
    ioc_.run();
    idle_.clear();
    return {std::move(outputs_), std::chrono::duration<double>(end_ - start_).count()};
  }

  asio::io_context& ioc() { return ioc_; }
  const tcp::resolver::results_type& endpoints() const { return endpoints_; }
  const LoadOptions& options() const { return options_; }

  // Called by a StreamingCall once: records the output, keeps the connection for reuse when
  // given, and starts the next waiting request.
  void Complete(size_t index, RequestOutput output, std::unique_ptr<Connection> connection) {
    outputs_[index] = std::move(output);
    outputs_[index].start_time = sent_s_[index];
    outputs_[index].client_queue_time = std::max(0.0, sent_s_[index] - offsets_[index]);
    if (connection != nullptr) idle_.push_back(std::move(connection));
    --in_flight_;
    ++done_;
    end_ = Clock::now();
    progress_.Update(done_);
    Dispatch();
  }

 private:
  // Moves every request whose arrival time has come to the ready queue, starts what the
  // concurrency limit allows and re-arms the timer for the next arrival.
  void OnArrivalTimer() {
    const double now = SecondsSince(start_);
    while (next_arrival_ < requests_.size() && offsets_[next_arrival_] <= now) {
      ready_.push_back(next_arrival_++);
    }
    Dispatch();
    if (next_arrival_ == requests_.size()) return;
    arrival_timer_.expires_at(start_ + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(offsets_[next_arrival_])));
    arrival_timer_.async_wait([this](beast::error_code) { OnArrivalTimer(); });
  }

  void Dispatch() {
    while (!ready_.empty() &&
           (!options_.max_concurrency.has_value() ||
            in_flight_ < static_cast<size_t>(std::max(1, *options_.max_concurrency)))) {
      const size_t index = ready_.front();
      ready_.pop_front();
      ++in_flight_;
      StartRequest(index);
    }
  }

  void StartRequest(size_t index) {
    const SampleRequest& sample = requests_[index];
    sent_s_[index] = SecondsSince(start_);
    http::request<http::string_body> request{http::verb::post, options_.path, 11};
    request.set(http::field::host, absl::StrCat(options_.host, ":", options_.port));
    request.set(http::field::user_agent, "vllm-launch-bench-serve");
    request.set(http::field::content_type, "application/json");
    request.set(http::field::accept, "text/event-stream");
    if (const char* key = std::getenv("OPENAI_API_KEY"); key != nullptr) {
      request.set(http::field::authorization, absl::StrCat("Bearer ", key));
    }
    for (const auto& [name, value] : options_.headers) request.set(name, value);
    if (options_.request_id_prefix.has_value()) {
      request.set("x-request-id", absl::StrCat(*options_.request_id_prefix, index));
    }
    request.keep_alive(true);
    request.body() = BuildRequestBody(options_.backend, options_.settings, sample);
    request.prepare_payload();
    std::unique_ptr<Connection> connection;
    if (!idle_.empty()) {
      connection = std::move(idle_.back());
      idle_.pop_back();
    }
    std::make_shared<StreamingCall>(this, index, std::move(connection), std::move(request),
                                    SseResponseParser(options_.backend, sample.prompt_len))
        ->Start();
  }

  const LoadOptions& options_;
  const std::vector<SampleRequest>& requests_;
  asio::io_context ioc_;
  asio::steady_timer arrival_timer_;
  tcp::resolver::results_type endpoints_;
  std::vector<double> offsets_;
  // When each request was sent, seconds from start_.
  std::vector<double> sent_s_;
  std::vector<RequestOutput> outputs_;
  std::deque<size_t> ready_;
  std::vector<std::unique_ptr<Connection>> idle_;
  size_t next_arrival_ = 0;
  size_t in_flight_ = 0;
  size_t done_ = 0;
  Clock::time_point start_;
  Clock::time_point end_;
  ProgressBar progress_;
};

StreamingCall::StreamingCall(LoadRunner* runner, size_t index,
                             std::unique_ptr<Connection> connection,
                             http::request<http::string_body> request, SseResponseParser parser)
    : runner_(runner),
      index_(index),
      connection_(std::move(connection)),
      reused_(connection_ != nullptr),
      request_(std::move(request)),
      sse_(std::move(parser)) {}

void StreamingCall::Start() {
  start_ = Clock::now();
  if (connection_ == nullptr) {
    Connect();
  } else {
    Write();
  }
}

void StreamingCall::Connect() {
  connection_ = std::make_unique<Connection>(runner_->ioc());
  connection_->stream.expires_after(runner_->options().request_timeout);
  connection_->stream.async_connect(
      runner_->endpoints(),
      [self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
        if (ec) return self->Fail(absl::StrCat("connect: ", ec.message()));
        self->Write();
      });
}

void StreamingCall::Write() {
  connection_->stream.expires_after(runner_->options().request_timeout);
  http::async_write(
      connection_->stream, request_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWrite(ec); });
}

void StreamingCall::OnWrite(beast::error_code ec) {
  if (ec) {
    if (RetryOnFreshConnection(ec)) return;
    return Fail(absl::StrCat("write: ", ec.message()));
  }
  response_.emplace();
  response_->body_limit(std::numeric_limits<std::uint64_t>::max());
  connection_->stream.expires_after(runner_->options().request_timeout);
  http::async_read_header(
      connection_->stream, connection_->buffer, *response_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
}

bool StreamingCall::RetryOnFreshConnection(beast::error_code ec) {
  if (!reused_) return false;
  if (ec != http::error::end_of_stream && ec != asio::error::connection_reset &&
      ec != asio::error::broken_pipe && ec != asio::error::eof) {
    return false;
  }
  reused_ = false;
  connection_.reset();
  Connect();
  return true;
}

void StreamingCall::OnHeader(beast::error_code ec) {
  if (ec) {
    if (RetryOnFreshConnection(ec)) return;
    return Fail(absl::StrCat("reading response header: ", ec.message()));
  }
  const auto& header = response_->get();
  if (header.result() != http::status::ok) {
    http_error_ = absl::StrCat("HTTP ", header.result_int(), " ",
                               std::string(header.reason().data(), header.reason().size()));
  }
  ReadSome();
}

void StreamingCall::ReadSome() {
  if (response_->is_done()) return Done();
  auto& body = response_->get().body();
  body.data = chunk_;
  body.size = sizeof(chunk_);
  connection_->stream.expires_after(runner_->options().request_timeout);
  http::async_read_some(
      connection_->stream, connection_->buffer, *response_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
}

void StreamingCall::OnRead(beast::error_code ec) {
  if (ec == http::error::need_buffer) ec = {};
  const size_t received = sizeof(chunk_) - response_->get().body().size;
  const absl::string_view bytes(chunk_, received);
  if (!http_error_.empty()) {
    // Keep the start of an error response's body for the message.
    if (http_error_.size() < kMaxErrorBodyBytes) {
      absl::StrAppend(&http_error_, http_error_.find(": ") == std::string::npos ? ": " : "",
                      bytes.substr(0, kMaxErrorBodyBytes));
    }
  } else {
    sse_.Feed(bytes, SecondsSince(start_));
    // A malformed stream fails the request at once; the connection is dropped.
    if (sse_.failed()) return Done();
  }
  if (ec) return Fail(absl::StrCat("reading response body: ", ec.message()));
  ReadSome();
}

void StreamingCall::Fail(const std::string& error) {
  RequestOutput output = sse_.Finish(SecondsSince(start_));
  output.success = false;
  output.ttft = 0.0;
  output.latency = 0.0;
  output.itl.clear();
  if (!http_error_.empty()) {
    output.error = http_error_;
  } else if (!sse_.failed()) {
    output.error = error;
  }
  if (connection_ != nullptr) {
    beast::error_code ignored;
    connection_->stream.socket().close(ignored);
  }
  runner_->Complete(index_, std::move(output), nullptr);
}

void StreamingCall::Done() {
  if (!http_error_.empty()) return Fail(http_error_);
  RequestOutput output = sse_.Finish(SecondsSince(start_));
  const bool reusable = output.success && response_->is_done() && response_->keep_alive();
  if (!reusable) {
    beast::error_code ignored;
    connection_->stream.socket().close(ignored);
  }
  runner_->Complete(index_, std::move(output), reusable ? std::move(connection_) : nullptr);
}

}  // namespace

std::vector<double> ArrivalOffsets(size_t n, double request_rate, double burstiness, uint64_t seed,
                                   const RampUp& ramp_up) {
  std::vector<double> offsets(n, 0.0);
  std::mt19937_64 rng(seed);
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    double rate = request_rate;
    if (!ramp_up.strategy.empty()) {
      const double progress =
          static_cast<double>(i) / static_cast<double>(std::max<size_t>(n - 1, 1));
      rate = ramp_up.strategy == "linear"
                 ? ramp_up.start_rps + (ramp_up.end_rps - ramp_up.start_rps) * progress
                 : ramp_up.start_rps * std::pow(static_cast<double>(ramp_up.end_rps) /
                                                    static_cast<double>(ramp_up.start_rps),
                                                progress);
    }
    double delay = 0.0;
    if (std::isinf(rate) || rate <= 0.0) {
      delay = 0.0;
    } else if (std::isinf(burstiness)) {
      delay = 1.0 / rate;
    } else {
      delay = std::gamma_distribution<double>(burstiness, 1.0 / (rate * burstiness))(rng);
    }
    total += delay;
    offsets[i] = total;
  }
  if (ramp_up.strategy.empty() && n > 0 && offsets.back() != 0.0 && !std::isinf(request_rate)) {
    const double scale = static_cast<double>(n) / request_rate / offsets.back();
    for (double& offset : offsets) offset *= scale;
  }
  return offsets;
}

LoadResult RunLoad(const LoadOptions& options, const std::vector<SampleRequest>& requests) {
  LoadRunner runner(options, requests);
  return runner.Run();
}

absl::StatusOr<std::string> FetchFirstModelId(const std::string& host, const std::string& port,
                                              std::chrono::milliseconds timeout) {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  const auto endpoints = resolver.resolve(host, port, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("resolve ", host, ": ", ec.message()));
  http::request<http::empty_body> request{http::verb::get, "/v1/models", 11};
  request.set(http::field::host, absl::StrCat(host, ":", port));
  if (const char* key = std::getenv("OPENAI_API_KEY"); key != nullptr) {
    request.set(http::field::authorization, absl::StrCat("Bearer ", key));
  }
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  std::string failure;
  // All three steps share one deadline.
  stream.expires_after(timeout);
  stream.async_connect(endpoints, [&](beast::error_code ec, const tcp::endpoint&) {
    if (ec) return void(failure = absl::StrCat("connect: ", ec.message()));
    http::async_write(stream, request, [&](beast::error_code ec, size_t) {
      if (ec) return void(failure = absl::StrCat("write: ", ec.message()));
      http::async_read(stream, buffer, response, [&](beast::error_code ec, size_t) {
        if (ec) failure = absl::StrCat("read: ", ec.message());
      });
    });
  });
  ioc.run();
  const std::string where = absl::StrCat("GET http://", host, ":", port, "/v1/models: ");
  if (!failure.empty()) return absl::UnavailableError(where + failure);
  if (response.result() != http::status::ok) {
    return absl::UnavailableError(absl::StrCat(where, "HTTP ", response.result_int()));
  }
  const nlohmann::json models = nlohmann::json::parse(response.body(), nullptr, false);
  if (models.is_discarded() || !models.contains("data") || !models["data"].is_array() ||
      models["data"].empty() || !models["data"][0].contains("id") ||
      !models["data"][0]["id"].is_string()) {
    return absl::InvalidArgumentError(where + "no model listed");
  }
  return models["data"][0]["id"].get<std::string>();
}

}  // namespace vllm::bench_serve
