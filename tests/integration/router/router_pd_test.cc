// `vllm-launch router --pd-disaggregation` (router/pd_proxy.cc) in process, in front of fake
// prefill and decode instances started by the test (HTTP servers on 127.0.0.1 that record
// what they got and answer as each test scripts them; no engine runs): the prefill gets the
// request with max_tokens 1 and do_remote_decode, the decode gets the client's request with
// the prefill's kv_transfer_params; a failing prefill instance (5xx, no kv_transfer_params,
// no answer) is replaced by another; a prefill's 4xx reaches the client and no decode runs; a
// failing decode instance is replaced before the first byte with the same kv_transfer_params;
// after the first byte nothing is retried (the stream ends with an error event); /workers
// lists roles, /metrics counts per side.
//
// Every wait is on a condition with a deadline (the router's ready callback, a gate the
// client opens once a byte arrived, socket reads with timeouts); no sleeps.
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/router.h"

namespace vllm::router {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using nlohmann::json;
using tcp = asio::ip::tcp;
using FakeRequest = http::request<http::string_body>;

constexpr auto kDeadline = std::chrono::seconds(10);

// How a fake instance answers one request (on the connection's thread): false closes the
// connection afterwards.
using Handler = std::function<bool(const FakeRequest&, tcp::socket&)>;

// An HTTP/1.1 server on 127.0.0.1: GET /health → 200; every other request is recorded (its
// JSON body) and answered by the handler; keep-alive; one thread per connection. Destroy it
// after the router (the router closing its connections ends the connection threads).
class FakeInstance {
 public:
  explicit FakeInstance(Handler handler)
      : handler_(std::move(handler)),
        acceptor_(ioc_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    accepting_ = std::thread([this] { Accept(); });  // accepts connections until destroyed
  }
  ~FakeInstance() {
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);  // unblocks accept()
    accepting_.join();
    for (std::thread& t : connections_) t.join();
  }
  std::string url() const {
    return absl::StrCat("http://127.0.0.1:", acceptor_.local_endpoint().port());
  }
  std::vector<json> Bodies() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }
  size_t Count() const { return Bodies().size(); }

 private:
  void Accept() {
    while (true) {
      tcp::socket socket(ioc_);
      beast::error_code ec;
      acceptor_.accept(socket, ec);
      if (ec) return;
      // Serves one router connection until either side closes it.
      connections_.emplace_back([this, s = std::move(socket)]() mutable { Serve(std::move(s)); });
    }
  }
  void Serve(tcp::socket socket) {
    beast::flat_buffer buffer;
    while (true) {
      FakeRequest req;
      beast::error_code ec;
      http::read(socket, buffer, req, ec);
      if (ec) return;
      if (req.target() == "/health") {
        http::response<http::string_body> res{http::status::ok, 11};
        res.body() = "{}";
        res.keep_alive(true);
        res.prepare_payload();
        http::write(socket, res, ec);
        if (ec) return;
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        bodies_.push_back(json::parse(req.body(), nullptr, false));
      }
      if (!handler_(req, socket)) return;
    }
  }

  Handler handler_;
  mutable std::mutex mu_;
  std::vector<json> bodies_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  std::thread accepting_;
  std::vector<std::thread> connections_;
};

bool WriteJson(tcp::socket& socket, int status, const json& body) {
  http::response<http::string_body> res{static_cast<http::status>(status), 11};
  res.set(http::field::content_type, "application/json");
  res.body() = body.dump();
  res.keep_alive(true);
  res.prepare_payload();
  beast::error_code ec;
  http::write(socket, res, ec);
  return !ec;
}

// A status and a JSON body for every request.
Handler Answer(int status, json body) {
  return [status, body](const FakeRequest&, tcp::socket& s) { return WriteJson(s, status, body); };
}

// No answer: the connection closes (an instance that died with the request).
Handler Hangup() {
  return [](const FakeRequest&, tcp::socket&) { return false; };
}

// A prefill instance: kv_transfer_params naming `engine` and the request's number.
Handler Prefill(const std::string& engine) {
  auto n = std::make_shared<std::atomic<int>>(0);
  return [engine, n](const FakeRequest&, tcp::socket& s) {
    const json params = {{"do_remote_prefill", true},    {"do_remote_decode", false},
                         {"remote_engine_id", engine},   {"remote_block_ids", {(*n)++, 7}},
                         {"remote_host", "10.0.0.1"},    {"remote_port", 5600},
                         {"remote_request_id", "cmpl-x"}};
    return WriteJson(s, 200,
                     {{"id", "cmpl-x"},
                      {"choices", {{{"index", 0}, {"text", "A"}, {"finish_reason", "length"}}}},
                      {"kv_transfer_params", params}});
  };
}

bool WriteRaw(tcp::socket& socket, const std::string& bytes) {
  beast::error_code ec;
  asio::write(socket, asio::buffer(bytes), ec);
  return !ec;
}

std::string Chunk(const std::string& data) {
  return absl::StrCat(absl::Hex(data.size()), "\r\n", data, "\r\n");
}

constexpr char kSseHead[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";

// A decode instance: an SSE stream of two events and [DONE] when the request streams, else
// one completion; both say `name`.
Handler Decode(const std::string& name) {
  return [name](const FakeRequest& req, tcp::socket& s) {
    const json body = json::parse(req.body(), nullptr, false);
    if (!body.value("stream", false)) {
      return WriteJson(s, 200, {{"id", "cmpl-x"}, {"choices", {{{"text", name}}}}});
    }
    return WriteRaw(s, absl::StrCat(kSseHead, Chunk("data: {\"text\": \"" + name + "-1\"}\n\n"),
                                    Chunk("data: {\"text\": \"" + name + "-2\"}\n\n"),
                                    Chunk("data: [DONE]\n\n"), "0\r\n\r\n"));
  };
}

// Opened by the test once the client has a byte of the stream.
struct Gate {
  void Open() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
  bool Wait() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, kDeadline, [this] { return open; });
  }
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
};

// A decode instance that sends the head and one event, waits for `gate`, then dies.
Handler DiesMidStream(Gate* gate) {
  return [gate](const FakeRequest&, tcp::socket& s) {
    WriteRaw(s, absl::StrCat(kSseHead, Chunk("data: {\"text\": \"first\"}\n\n")));
    gate->Wait();
    return false;
  };
}

// The router on its own thread, ready (one round of health checks done) when constructed.
class RunningRouter {
 public:
  explicit RunningRouter(const RouterOptions& options) {
    auto router = Router::Create(options);
    EXPECT_TRUE(router.ok()) << router.status();
    if (!router.ok()) return;
    router_ = std::move(*router);
    auto ready = ready_.get_future();
    // The router's I/O thread.
    thread_ =
        std::thread([this] { EXPECT_TRUE(router_->Run([this] { ready_.set_value(); }).ok()); });
    EXPECT_EQ(ready.wait_for(kDeadline), std::future_status::ready);
  }
  ~RunningRouter() {
    if (router_ == nullptr) return;
    router_->Stop();
    thread_.join();
    router_.reset();  // closes its connections to the fakes
  }
  int port() const { return router_ == nullptr ? 0 : router_->port(); }

 private:
  std::unique_ptr<Router> router_;
  std::promise<void> ready_;
  std::thread thread_;
};

RouterOptions PdOptions(const std::vector<const FakeInstance*>& prefill,
                        const std::vector<const FakeInstance*>& decode) {
  RouterOptions o;
  o.port = 0;
  o.pd_disaggregation = true;
  o.policy = "round_robin";
  o.health_check_interval_secs = 60;  // the first round admits them; no more are needed
  for (const FakeInstance* p : prefill) o.prefill_urls.push_back({p->url(), std::nullopt});
  for (const FakeInstance* d : decode) o.decode_urls.push_back(d->url());
  return o;
}

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// One request to the router (blocking, within kDeadline); status 0 on a connection error.
Response Call(int port, http::verb method, const std::string& target, const std::string& body) {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  stream.expires_after(kDeadline);
  stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)),
                 ec);
  Response out;
  if (ec) return out;
  http::request<http::string_body> req{method, target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  http::write(stream, req, ec);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  if (!ec) http::read(stream, buffer, res, ec);
  if (ec) return out;
  out.status = res.result_int();
  for (const auto& f : res.base()) {
    out.headers[absl::AsciiStrToLower(std::string(f.name_string()))] = std::string(f.value());
  }
  out.body = res.body();
  return out;
}

Response Post(int port, const std::string& target, const json& body) {
  return Call(port, http::verb::post, target, body.dump());
}

// Posts `body` and reads the raw response until the router closes the connection; calls
// `on_marker` once the bytes read contain `marker`.
std::string PostRaw(int port, const json& body, const std::string& marker,
                    const std::function<void()>& on_marker) {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  stream.expires_after(kDeadline);
  stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)),
                 ec);
  if (ec) return "";
  http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
  req.set(http::field::host, "127.0.0.1");
  req.body() = body.dump();
  req.prepare_payload();
  http::write(stream, req, ec);
  std::string raw;
  bool seen = false;
  char buf[4096];
  while (!ec) {
    stream.expires_after(kDeadline);
    const size_t n = stream.read_some(asio::buffer(buf), ec);
    raw.append(buf, n);
    if (!seen && absl::StrContains(raw, marker)) {
      seen = true;
      on_marker();
    }
  }
  if (!seen) on_marker();  // never leave the fake waiting for the gate's deadline
  return raw;
}

// The value of `name{worker="url"}` in a Prometheus text; -1 when absent.
int64_t Series(const std::string& metrics, const std::string& name, const std::string& url) {
  const std::string key = url.empty() ? name + " " : absl::StrCat(name, "{worker=\"", url, "\"} ");
  const size_t at = metrics.find("\n" + key);
  if (at == std::string::npos) return -1;
  return std::stoll(metrics.substr(at + 1 + key.size()));
}

const json kCompletion = {{"model", "m"},
                          {"prompt", "In the beginning"},
                          {"max_tokens", 30},
                          {"stream", true},
                          {"stream_options", {{"include_usage", true}}}};

TEST(PdRouterTest, PrefillThenDecodeWithItsKvTransferParams) {
  FakeInstance prefill(Prefill("engine-p"));
  FakeInstance decode(Decode("d"));
  RouterOptions options = PdOptions({&prefill}, {&decode});
  options.prefill_urls[0].bootstrap_port = 9000;
  RunningRouter router(options);

  const Response streamed = Post(router.port(), "/v1/completions", kCompletion);
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  EXPECT_EQ(streamed.Header("x-router-worker"), decode.url());
  EXPECT_EQ(streamed.Header("x-router-prefill-worker"), prefill.url());
  EXPECT_TRUE(absl::StrContains(streamed.body, "data: {\"text\": \"d-2\"}")) << streamed.body;
  EXPECT_TRUE(absl::StrContains(streamed.body, "data: [DONE]")) << streamed.body;
  // The prefill: one token, not streamed, do_remote_decode.
  ASSERT_EQ(prefill.Count(), 1u);
  const json p = prefill.Bodies()[0];
  EXPECT_EQ(p["max_tokens"], 1) << p;
  EXPECT_EQ(p["stream"], false) << p;
  EXPECT_FALSE(p.contains("stream_options")) << p;
  EXPECT_EQ(p["prompt"], "In the beginning") << p;
  EXPECT_EQ(p["kv_transfer_params"]["do_remote_decode"], true) << p;
  EXPECT_EQ(p["kv_transfer_params"]["do_remote_prefill"], false) << p;
  EXPECT_TRUE(p["kv_transfer_params"]["remote_engine_id"].is_null()) << p;
  // The decode: the client's request with the prefill's kv_transfer_params.
  ASSERT_EQ(decode.Count(), 1u);
  const json d = decode.Bodies()[0];
  EXPECT_EQ(d["max_tokens"], 30) << d;
  EXPECT_EQ(d["stream"], true) << d;
  EXPECT_EQ(d["stream_options"], kCompletion["stream_options"]) << d;
  EXPECT_EQ(d["kv_transfer_params"]["remote_engine_id"], "engine-p") << d;
  EXPECT_EQ(d["kv_transfer_params"]["remote_block_ids"], json::array({0, 7})) << d;
  EXPECT_EQ(d["kv_transfer_params"]["remote_request_id"], "cmpl-x") << d;

  // A chat, not streamed, with max_completion_tokens.
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                     {"max_completion_tokens", 50}};
  const Response answered = Post(router.port(), "/v1/chat/completions", chat);
  ASSERT_EQ(answered.status, 200) << answered.body;
  EXPECT_EQ(json::parse(answered.body)["choices"][0]["text"], "d");
  EXPECT_EQ(prefill.Bodies()[1]["max_completion_tokens"], 1);
  EXPECT_EQ(decode.Bodies()[1]["max_completion_tokens"], 50);
  EXPECT_EQ(decode.Bodies()[1]["kv_transfer_params"]["remote_block_ids"], json::array({1, 7}));

  // /workers: roles and the bootstrap port; /health; /metrics per side.
  const json workers = json::parse(Call(router.port(), http::verb::get, "/workers", "").body);
  ASSERT_EQ(workers["workers"].size(), 2u) << workers;
  EXPECT_EQ(workers["workers"][0]["role"], "prefill") << workers;
  EXPECT_EQ(workers["workers"][0]["bootstrap_port"], 9000) << workers;
  EXPECT_EQ(workers["workers"][1]["role"], "decode") << workers;
  EXPECT_EQ(workers["prefill_policy"], "round_robin") << workers;
  const Response health = Call(router.port(), http::verb::get, "/health", "");
  EXPECT_EQ(health.status, 200) << health.body;
  const std::string m = Call(router.port(), http::verb::get, "/metrics", "").body;
  EXPECT_EQ(Series(m, "vllm_router_pd_prefill_requests_total", prefill.url()), 2) << m;
  EXPECT_EQ(Series(m, "vllm_router_pd_decode_requests_total", decode.url()), 2) << m;
  EXPECT_EQ(Series(m, "vllm_router_pd_requests_total", ""), 2) << m;
  EXPECT_EQ(Series(m, "vllm_router_pd_prefill_requests_total", decode.url()), -1) << m;
}

TEST(PdRouterTest, PrefillFailover) {
  FakeInstance failing(Answer(500, {{"error", {{"message", "boom"}}}}));
  FakeInstance no_params(Answer(200, {{"choices", json::array()}}));
  FakeInstance dead(Hangup());
  FakeInstance good(Prefill("engine-good"));
  FakeInstance decode(Decode("d"));
  RouterOptions options = PdOptions({&failing, &no_params, &dead, &good}, {&decode});
  options.max_retries = 3;
  RunningRouter router(options);

  for (int i = 0; i < 3; ++i) {
    const Response r = Post(router.port(), "/v1/completions", kCompletion);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.Header("x-router-prefill-worker"), good.url());
  }
  // Round robin over the instances not tried yet: the first request met every failing one.
  EXPECT_GE(failing.Count(), 1u);
  EXPECT_GE(no_params.Count(), 1u);
  EXPECT_GE(dead.Count(), 1u);
  EXPECT_EQ(good.Count(), 3u);
  ASSERT_EQ(decode.Count(), 3u);
  for (const json& d : decode.Bodies()) {
    EXPECT_EQ(d["kv_transfer_params"]["remote_engine_id"], "engine-good") << d;
  }
  const std::string m = Call(router.port(), http::verb::get, "/metrics", "").body;
  EXPECT_EQ(Series(m, "vllm_router_pd_prefill_retries_total", ""),
            static_cast<int64_t>(failing.Count() + no_params.Count() + dead.Count()))
      << m;
  EXPECT_EQ(Series(m, "vllm_router_pd_prefill_errors_total", no_params.url()),
            static_cast<int64_t>(no_params.Count()))
      << m;
  EXPECT_EQ(Series(m, "vllm_router_pd_decode_retries_total", ""), 0) << m;
}

TEST(PdRouterTest, NoDecodeWithoutAPrefill) {
  FakeInstance failing(Answer(500, {{"error", {{"message", "boom"}}}}));
  FakeInstance refusing(Answer(400, {{"error", {{"message", "prompt too long"}}}}));
  FakeInstance decode(Decode("d"));
  {
    RouterOptions options = PdOptions({&failing}, {&decode});
    RunningRouter router(options);
    const Response r = Post(router.port(), "/v1/completions", kCompletion);
    EXPECT_EQ(r.status, 502) << r.body;
    EXPECT_TRUE(absl::StrContains(r.body, "no prefill worker")) << r.body;
  }
  {
    // The request itself is refused: the client gets the prefill's 400, no retry, no decode.
    RouterOptions options = PdOptions({&refusing, &failing}, {&decode});
    RunningRouter router(options);
    const size_t failing_before = failing.Count();
    const Response r = Post(router.port(), "/v1/completions", kCompletion);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_TRUE(absl::StrContains(r.body, "prompt too long")) << r.body;
    EXPECT_EQ(failing.Count(), failing_before);
  }
  EXPECT_EQ(decode.Count(), 0u);
}

TEST(PdRouterTest, DecodeFailoverBeforeTheFirstByteKeepsTheKvTransferParams) {
  FakeInstance prefill(Prefill("engine-p"));
  FakeInstance dead(Hangup());
  FakeInstance unavailable(Answer(503, {{"error", {{"message", "overloaded"}}}}));
  FakeInstance good(Decode("good"));
  RouterOptions options = PdOptions({&prefill}, {&dead, &unavailable, &good});
  RunningRouter router(options);

  for (int i = 0; i < 3; ++i) {
    const Response r = Post(router.port(), "/v1/completions", kCompletion);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.Header("x-router-worker"), good.url());
    EXPECT_TRUE(absl::StrContains(r.body, "good-2")) << r.body;
  }
  EXPECT_EQ(prefill.Count(), 3u);  // a decode retry does not prefill again
  EXPECT_GE(dead.Count(), 1u);
  EXPECT_GE(unavailable.Count(), 1u);
  ASSERT_EQ(good.Count(), 3u);
  // Every failed decode had the kv_transfer_params the good one then got for that request.
  std::vector<json> good_params;
  for (const json& d : good.Bodies()) good_params.push_back(d["kv_transfer_params"]);
  for (const FakeInstance* bad : {&dead, &unavailable}) {
    for (const json& d : bad->Bodies()) {
      EXPECT_NE(std::find(good_params.begin(), good_params.end(), d["kv_transfer_params"]),
                good_params.end())
          << d;
    }
  }
  const std::string m = Call(router.port(), http::verb::get, "/metrics", "").body;
  EXPECT_EQ(Series(m, "vllm_router_pd_decode_retries_total", ""),
            static_cast<int64_t>(dead.Count() + unavailable.Count()))
      << m;
}

TEST(PdRouterTest, WorkersAddedAtRunTimeSayTheirRole) {
  FakeInstance prefill(Prefill("engine-p"));
  FakeInstance decode(Decode("d"));
  FakeInstance added(Decode("added"));
  RunningRouter router(PdOptions({&prefill}, {&decode}));
  const Response no_role = Post(router.port(), "/workers", {{"url", added.url()}});
  EXPECT_EQ(no_role.status, 400) << no_role.body;
  const Response bad_role =
      Post(router.port(), "/workers", {{"url", added.url()}, {"role", "regular"}});
  EXPECT_EQ(bad_role.status, 400) << bad_role.body;
  const Response ok = Post(router.port(), "/workers", {{"url", added.url()}, {"role", "decode"}});
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(json::parse(ok.body)["role"], "decode") << ok.body;
  EXPECT_EQ(json::parse(ok.body)["healthy"], true) << ok.body;
  // Round robin over the two decode instances: the added one serves.
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(Post(router.port(), "/v1/completions", kCompletion).status, 200);
  }
  EXPECT_EQ(added.Count(), 1u);
  EXPECT_EQ(prefill.Count(), 2u);
}

TEST(PdRouterTest, NoRetryAfterTheFirstByte) {
  Gate gate;
  FakeInstance prefill(Prefill("engine-p"));
  FakeInstance dies(DiesMidStream(&gate));
  FakeInstance other(Decode("other"));
  RouterOptions options = PdOptions({&prefill}, {&dies, &other});  // round robin: `dies` first
  RunningRouter router(options);

  const std::string raw =
      PostRaw(router.port(), kCompletion, "data: {\"text\": \"first\"}", [&gate] { gate.Open(); });
  EXPECT_TRUE(absl::StrContains(raw, "HTTP/1.1 200")) << raw;
  EXPECT_TRUE(absl::StrContains(raw, "data: {\"text\": \"first\"}")) << raw;
  EXPECT_TRUE(absl::StrContains(raw, "the worker failed mid-stream")) << raw;
  EXPECT_TRUE(absl::EndsWith(raw, "0\r\n\r\n")) << raw;  // a well-formed end
  EXPECT_EQ(dies.Count(), 1u);
  EXPECT_EQ(other.Count(), 0u);  // the response had begun: no retry
  const std::string m = Call(router.port(), http::verb::get, "/metrics", "").body;
  EXPECT_EQ(Series(m, "vllm_router_pd_decode_retries_total", ""), 0) << m;
}

}  // namespace
}  // namespace vllm::router
