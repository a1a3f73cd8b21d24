// The router's request parsing: worker URLs, routing keys, flags; an in-process router with
// no live worker, and with fake upstreams (the circuit breaker); the P/D flags.
#include "router/router.h"

#include <sys/socket.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it
#include <vector>

#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/router_main.h"

namespace vllm::router {
namespace {

TEST(ParseWorkerUrlTest, AcceptsHostPort) {
  auto a = ParseWorkerUrl("http://127.0.0.1:8001/");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->url, "http://127.0.0.1:8001");
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, "8001");
  auto d = ParseWorkerUrl("http://worker-3");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->url, "http://worker-3:80");
  auto v6 = ParseWorkerUrl("http://[::1]:9000");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->url, "http://[::1]:9000");
}

TEST(ParseWorkerUrlTest, RejectsOthers) {
  for (const char* bad : {"", "127.0.0.1:8000", "https://a:1", "http://", "http://a:0",
                          "http://a:99999", "http://a:12x", "http://a:1/v1", "http://[::1"}) {
    EXPECT_FALSE(ParseWorkerUrl(bad).ok()) << bad;
  }
}

TEST(ExtractRoutingKeysTest, CompletionPrompt) {
  std::string text, user;
  EXPECT_TRUE(ExtractRoutingKeys(R"({"prompt": "In the beginning", "user": "u1"})", &text, &user));
  EXPECT_EQ(text, "In the beginning");
  EXPECT_EQ(user, "u1");
  EXPECT_TRUE(ExtractRoutingKeys(R"({"prompt": ["first", "second"]})", &text, &user));
  EXPECT_EQ(text, "first");
  EXPECT_EQ(user, "");
  EXPECT_TRUE(ExtractRoutingKeys(R"({"prompt": [1, 2, 3]})", &text, &user));
  EXPECT_EQ(text, "1,2,3,");
}

TEST(ExtractRoutingKeysTest, ChatMessages) {
  std::string text, user;
  EXPECT_TRUE(ExtractRoutingKeys(
      R"({"messages": [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
          "user": 5})",
      &text, &user));
  EXPECT_EQ(text, "system\nBe brief.\nuser\nHi\n");
  EXPECT_EQ(user, "");  // not a string
}

TEST(ExtractRoutingKeysTest, NeverFailsOnJunk) {
  std::string text, user;
  for (const char* junk : {"", "null", "[]", "{", "\"x\"", R"({"prompt": {"a": 1}})",
                           R"({"messages": [1, null, {"content": 7}]})", "{\"prompt\": [[[]]]}"}) {
    ExtractRoutingKeys(junk, &text, &user);
  }
  EXPECT_FALSE(ExtractRoutingKeys("not json", &text, &user));
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_FALSE(ExtractRoutingKeys(deep, &text, &user));
  // A prompt nested a million levels deep (token-id and batch forms): refused before parsing,
  // not a stack overflow in the prompt walk (found by the router_request fuzzer's author with
  // inputs past the fuzzer's size cap).
  std::string tokens = "{\"prompt\":";
  for (int i = 0; i < 1000000; ++i) tokens += "[1,";
  tokens += "0" + std::string(1000000, ']') + "}";
  EXPECT_FALSE(ExtractRoutingKeys(tokens, &text, &user));
  const std::string batch =
      "{\"prompt\":" + std::string(1000000, '[') + "\"x\"" + std::string(1000000, ']') + "}";
  EXPECT_FALSE(ExtractRoutingKeys(batch, &text, &user));
  // Within the limit it still routes.
  std::string shallow = "{\"prompt\":";
  for (int i = 0; i < 100; ++i) shallow += "[1,";
  shallow += "0" + std::string(100, ']') + "}";
  EXPECT_TRUE(ExtractRoutingKeys(shallow, &text, &user));
}

TEST(ParseRouterArgsTest, SglangFlagNames) {
  auto p = ParseRouterArgs({"--worker-urls",
                            "http://a:1",
                            "http://b:2",
                            "--policy",
                            "consistent_hash",
                            "--port",
                            "0",
                            "--cache-threshold",
                            "0.3",
                            "--balance-abs-threshold",
                            "8",
                            "--balance-rel-threshold",
                            "1.2",
                            "--max-tree-size",
                            "1000",
                            "--health-check-interval-secs",
                            "0.5",
                            "--request-timeout-secs",
                            "9",
                            "--max-retries",
                            "1"});
  ASSERT_TRUE(p.ok()) << p.status();
  const RouterOptions& o = p->options;
  EXPECT_EQ(o.worker_urls, (std::vector<std::string>{"http://a:1", "http://b:2"}));
  EXPECT_EQ(o.policy, "consistent_hash");
  EXPECT_EQ(o.port, 0);
  EXPECT_DOUBLE_EQ(o.policy_options.cache_threshold, 0.3);
  EXPECT_EQ(o.policy_options.balance_abs_threshold, 8);
  EXPECT_DOUBLE_EQ(o.policy_options.balance_rel_threshold, 1.2);
  EXPECT_EQ(o.policy_options.max_tree_size, 1000u);
  EXPECT_DOUBLE_EQ(o.health_check_interval_secs, 0.5);
  EXPECT_DOUBLE_EQ(o.request_timeout_secs, 9);
  EXPECT_EQ(o.max_retries, 1);
}

TEST(ParseRouterArgsTest, HelpAndErrors) {
  auto help = ParseRouterArgs({"--help"});
  ASSERT_TRUE(help.ok());
  EXPECT_NE(help->text.find("--worker-urls"), std::string::npos);
  EXPECT_FALSE(ParseRouterArgs({"--policy", "fastest"}).ok());
  EXPECT_FALSE(ParseRouterArgs({"--cache-threshold", "2"}).ok());
  EXPECT_FALSE(ParseRouterArgs({"--no-such-flag"}).ok());
}

TEST(ParseRouterArgsTest, PdDisaggregation) {
  auto p = ParseRouterArgs({"--pd-disaggregation", "--prefill", "http://p1:8100", "9000",
                            "--prefill", "http://p2:8100", "none", "--prefill", "http://p3:8100",
                            "--decode", "http://d1:8200", "--decode", "http://d2:8200", "--policy",
                            "round_robin", "--prefill-policy", "cache_aware"});
  ASSERT_TRUE(p.ok()) << p.status();
  const RouterOptions& o = p->options;
  EXPECT_TRUE(o.pd_disaggregation);
  ASSERT_EQ(o.prefill_urls.size(), 3u);
  EXPECT_EQ(o.prefill_urls[0].url, "http://p1:8100");
  EXPECT_EQ(o.prefill_urls[0].bootstrap_port, 9000);
  EXPECT_EQ(o.prefill_urls[1].url, "http://p2:8100");
  EXPECT_FALSE(o.prefill_urls[1].bootstrap_port.has_value());
  EXPECT_FALSE(o.prefill_urls[2].bootstrap_port.has_value());
  EXPECT_EQ(o.decode_urls, (std::vector<std::string>{"http://d1:8200", "http://d2:8200"}));
  EXPECT_EQ(o.policy, "round_robin");
  EXPECT_EQ(o.prefill_policy, "cache_aware");
  EXPECT_EQ(o.decode_policy, "");  // --policy's
  // vllm-router's name for the mode.
  auto v = ParseRouterArgs({"--vllm-pd-disaggregation", "--prefill", "http://p:1", "--decode",
                            "http://d:2", "--decode-policy", "power_of_two"});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->options.pd_disaggregation);
  EXPECT_EQ(v->options.decode_policy, "power_of_two");
  auto help = ParseRouterArgs({"--help"});
  ASSERT_TRUE(help.ok());
  for (const char* flag :
       {"--pd-disaggregation", "--prefill", "--decode", "--prefill-policy", "--decode-policy"}) {
    EXPECT_NE(help->text.find(flag), std::string::npos) << flag;
  }
}

TEST(ParseRouterArgsTest, PdDisaggregationRefusals) {
  using Args = std::vector<std::string>;
  const Args pd = {"--pd-disaggregation", "--prefill", "http://p:1", "--decode", "http://d:2"};
  auto with = [&pd](Args more) {
    Args all = pd;
    all.insert(all.end(), more.begin(), more.end());
    return ParseRouterArgs(all);
  };
  ASSERT_TRUE(with({}).ok());
  // --worker-urls and P/D: refused with a message naming both.
  auto mixed = with({"--worker-urls", "http://w:3"});
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("--worker-urls"), std::string::npos) << mixed.status();
  EXPECT_NE(mixed.status().message().find("--pd-disaggregation"), std::string::npos);
  EXPECT_FALSE(with({"--prefill", "http://p2:1", "http:/x"}).ok());       // a bad port
  EXPECT_FALSE(with({"--prefill", "http://p2:1", "70000"}).ok());         // out of range
  EXPECT_FALSE(with({"--prefill", "http://p2:1", "9000", "9001"}).ok());  // URL [PORT] only
  EXPECT_FALSE(with({"--prefill-policy", "fastest"}).ok());
  EXPECT_FALSE(ParseRouterArgs({"--pd-disaggregation", "--decode", "http://d:2"}).ok());
  EXPECT_FALSE(ParseRouterArgs({"--pd-disaggregation", "--prefill", "http://p:1"}).ok());
  // The P/D flags without the mode.
  EXPECT_FALSE(ParseRouterArgs({"--prefill", "http://p:1"}).ok());
  EXPECT_FALSE(ParseRouterArgs({"--decode", "http://d:1"}).ok());
  EXPECT_FALSE(ParseRouterArgs({"--worker-urls", "http://w:1", "--decode-policy", "random"}).ok());
  // Router::Create checks the same, and a URL on both sides.
  RouterOptions o;
  o.port = 0;
  o.pd_disaggregation = true;
  o.prefill_urls = {{"http://127.0.0.1:1", std::nullopt}};
  o.decode_urls = {"http://127.0.0.1:1/"};
  auto both = Router::Create(o);
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("both"), std::string::npos) << both.status();
  o.decode_urls = {"http://127.0.0.1:2"};
  o.worker_urls = {"http://127.0.0.1:3"};
  EXPECT_FALSE(Router::Create(o).ok());
}

// kv_aware on one side of P/D: KV-event sources only for that side's workers.
TEST(RouterTest, PdKvEventSourcesFollowTheirSidesPolicy) {
  RouterOptions o;
  o.port = 0;
  o.pd_disaggregation = true;
  o.prefill_urls = {{"http://127.0.0.1:1", std::nullopt}};
  o.decode_urls = {"http://127.0.0.1:2"};
  o.policy = "round_robin";
  o.prefill_policy = "kv_aware";
  o.model_path = std::string(VLLM_SOURCE_DIR) + "/models/kjv-llama-tiny";
  o.kv_event_sources = {"http://127.0.0.1:2=tcp://127.0.0.1:9"};
  auto decode_side = Router::Create(o);
  ASSERT_FALSE(decode_side.ok());
  EXPECT_NE(decode_side.status().message().find("decode"), std::string::npos)
      << decode_side.status();
  o.kv_event_sources = {"http://127.0.0.1:1=tcp://127.0.0.1:9"};
  EXPECT_TRUE(Router::Create(o).ok());
}

TEST(RouterTest, CreateRejectsBadWorkerUrl) {
  RouterOptions o;
  o.port = 0;
  o.worker_urls = {"ftp://x"};
  EXPECT_FALSE(Router::Create(o).ok());
  o.worker_urls = {"http://127.0.0.1:1"};
  o.host = "not-an-ip";
  EXPECT_FALSE(Router::Create(o).ok());
}

// One blocking request to 127.0.0.1:port; status and body (status 0 on a connection error).
std::pair<int, std::string> Fetch(int port, boost::beast::http::verb method,
                                  const std::string& target, const std::string& body = "") {
  namespace beast = boost::beast;
  namespace http = beast::http;
  boost::asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  stream.expires_after(std::chrono::seconds(10));
  stream.connect(boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"),
                                                static_cast<uint16_t>(port)),
                 ec);
  if (ec) return {0, ec.message()};
  http::request<http::string_body> req{method, target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.body() = body;
  req.prepare_payload();
  http::write(stream, req, ec);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  if (!ec) http::read(stream, buffer, res, ec);
  if (ec) return {0, ec.message()};
  return {res.result_int(), res.body()};
}

// A router whose only worker refuses connections: it runs, says it is unhealthy, and answers
// requests with the OpenAI error shape instead of failing in any other way.
TEST(RouterTest, NoHealthyWorker) {
  RouterOptions o;
  o.port = 0;
  o.worker_urls = {"http://127.0.0.1:1"};
  o.health_check_interval_secs = 0.05;
  auto router = Router::Create(o);
  ASSERT_TRUE(router.ok()) << router.status();
  Router& r = **router;
  std::thread serving([&r] { EXPECT_TRUE(r.Run(nullptr).ok()); });  // the router's I/O thread

  using boost::beast::http::verb;
  EXPECT_EQ(Fetch(r.port(), verb::get, "/health").first, 503);
  const auto [status, body] = Fetch(r.port(), verb::post, "/v1/completions", R"({"prompt": "x"})");
  EXPECT_EQ(status, 503);
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << body;
  EXPECT_TRUE(j["error"].contains("message")) << body;
  EXPECT_EQ(j["error"]["code"], 503) << body;
  EXPECT_EQ(Fetch(r.port(), verb::get, "/v1/models").first, 503);
  EXPECT_EQ(Fetch(r.port(), verb::put, "/v1/completions").first, 405);
  const auto [wstatus, workers] = Fetch(r.port(), verb::get, "/workers");
  EXPECT_EQ(wstatus, 200);
  EXPECT_NE(workers.find("\"healthy\":false"), std::string::npos) << workers;
  EXPECT_EQ(Fetch(r.port(), verb::delete_, "/workers?url=http%3A%2F%2F127.0.0.1%3A1").first, 200);
  EXPECT_EQ(Fetch(r.port(), verb::get, "/workers").second,
            R"({"policy":"cache_aware","workers":[]})");
  r.Stop();
  serving.join();
}

}  // namespace
}  // namespace vllm::router

namespace vllm::router {
namespace {

// A minimal HTTP/1.1 upstream on 127.0.0.1: GET /health → 200; anything else → `status`
// with a small JSON body; keep-alive; one thread per connection. Destroy it after the router
// (the router closing its connections ends the connection threads).
class FakeUpstream {
 public:
  explicit FakeUpstream(int status)
      : status_(status),
        acceptor_(ioc_,
                  boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0)) {
    accepting_ = std::thread([this] { Accept(); });
  }
  ~FakeUpstream() {
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);  // unblocks accept()
    accepting_.join();
    for (std::thread& t : connections_) t.join();
  }
  int port() const { return acceptor_.local_endpoint().port(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port()); }

 private:
  void Accept() {
    while (true) {
      boost::asio::ip::tcp::socket socket(ioc_);
      boost::beast::error_code ec;
      acceptor_.accept(socket, ec);
      if (ec) return;
      connections_.emplace_back([this, s = std::move(socket)]() mutable { Serve(std::move(s)); });
    }
  }
  void Serve(boost::asio::ip::tcp::socket socket) {
    namespace http = boost::beast::http;
    boost::beast::flat_buffer buffer;
    while (true) {
      http::request<http::string_body> req;
      boost::beast::error_code ec;
      http::read(socket, buffer, req, ec);
      if (ec) return;
      const bool health = req.target() == "/health";
      http::response<http::string_body> res{static_cast<http::status>(health ? 200 : status_), 11};
      res.set(http::field::content_type, "application/json");
      res.body() = health ? "{}" : R"({"object": "text_completion"})";
      res.keep_alive(req.keep_alive());
      res.prepare_payload();
      http::write(socket, res, ec);
      if (ec || !req.keep_alive()) return;
    }
  }

  int status_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::thread accepting_;
  std::vector<std::thread> connections_;
};

// A worker that answers every request with 500 while its /health says OK: health checks keep
// it in the pool, its circuit breaker takes it out.
TEST(RouterTest, CircuitBreakerKeepsRequestsAwayFromAFailingWorker) {
  FakeUpstream bad(500);
  FakeUpstream good(200);
  RouterOptions o;
  o.port = 0;
  o.worker_urls = {bad.url(), good.url()};
  o.policy = "round_robin";
  o.max_retries = 0;  // a 500 is passed through: the test sees every attempt
  o.circuit_breaker.failure_threshold = 2;
  o.circuit_breaker.timeout = std::chrono::seconds(60);
  auto router = Router::Create(o);
  ASSERT_TRUE(router.ok()) << router.status();
  Router& r = **router;
  std::thread serving([&r] { EXPECT_TRUE(r.Run(nullptr).ok()); });

  using boost::beast::http::verb;
  // Wait (deadline) for the first round of health checks: both workers admitted.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (Fetch(r.port(), verb::get, "/health").first != 200 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling with a deadline
  }
  std::vector<int> statuses;
  for (int i = 0; i < 8; ++i) {
    statuses.push_back(Fetch(r.port(), verb::post, "/v1/completions", R"({"prompt": "x"})").first);
  }
  // Round robin: bad, good, bad (the 2nd failure opens its circuit), then only good.
  EXPECT_EQ(statuses, (std::vector<int>{500, 200, 500, 200, 200, 200, 200, 200}));
  const auto [wstatus, workers] = Fetch(r.port(), verb::get, "/workers");
  EXPECT_EQ(wstatus, 200);
  const nlohmann::json j = nlohmann::json::parse(workers, nullptr, false);
  ASSERT_TRUE(j.is_object()) << workers;
  EXPECT_EQ(j["workers"][0]["circuit"], "open") << workers;
  EXPECT_EQ(j["workers"][0]["healthy"], true) << workers;
  EXPECT_EQ(j["workers"][1]["circuit"], "closed") << workers;
  const std::string metrics = Fetch(r.port(), verb::get, "/metrics").second;
  EXPECT_NE(metrics.find("vllm_router_worker_circuit_open{worker=\"" + bad.url() + "\"} 1"),
            std::string::npos)
      << metrics;
  r.Stop();
  serving.join();
  router->reset();  // closes its connections to the fakes
}

}  // namespace
}  // namespace vllm::router
