// The router's request parsing: worker URLs, routing keys, flags.
#include "frontend/router/router.h"

#include <string>
#include <thread>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it

#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "frontend/router/router_main.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

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
