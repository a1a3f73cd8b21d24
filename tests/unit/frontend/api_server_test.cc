// ApiServer end to end over loopback: a scripted EngineClient, a Beast HTTP client.
#include "frontend/openai/api_server.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "frontend/openai/openai_protocol.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using nlohmann::json;

constexpr char kModel[] = "fake-model";

// Streams " t0", " t1", ... (max_tokens deltas, default 3) from its own thread. A text
// prompt "hang" yields one delta and then waits for Abort() or FinishHanging(); "fail" yields
// one delta and then an error; "block" makes Generate itself wait for Unblock() (a slow
// tokenizer); "reject" fails Generate.
class FakeEngine : public EngineClient {
 public:
  FakeEngine() : worker_([this] { Run(); }) {}
  ~FakeEngine() override {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    worker_.join();
  }

  absl::Status Generate(GenerateRequest request, OutputCallback on_output) override {
    if (request.prompt_text == "reject") {
      return absl::InvalidArgumentError("prompt is too long for max_model_len 64");
    }
    absl::MutexLock lock(&mu_);
    if (request.prompt_text == "block") {
      ++blocked_;
      mu_.Await(absl::Condition(&unblocked_));
      --blocked_;
    }
    requests_.push_back(request);
    int32_t prompt_len = request.prompt_text.has_value()
                             ? static_cast<int32_t>(request.prompt_text->size())
                             : static_cast<int32_t>(request.prompt_token_ids.size());
    bool hang = request.prompt_text == "hang";
    bool fail = request.prompt_text == "fail";
    int32_t n = hang || fail ? 1 : request.params.max_tokens.value_or(3);
    for (int32_t i = 0; i < n; ++i) {
      GenerateOutput out;
      out.text_delta = absl::StrCat(" t", i);
      out.token_ids_delta = {i};
      out.num_prompt_tokens = prompt_len;
      out.num_output_tokens = i + 1;
      if (request.params.logprobs.has_value()) {
        out.logprobs.push_back({{i, absl::StrCat(" t", i), -0.5f}, {{i, " t", -0.5f}}});
      }
      if (!hang && !fail && i == n - 1) out.finish_reason = core::FinishReason::kLength;
      tasks_.push_back([on_output, out] { on_output(out); });
    }
    if (hang) hanging_[request.request_id] = on_output;
    if (fail) {
      tasks_.push_back([on_output] { on_output(absl::InternalError("the engine exploded")); });
    }
    return absl::OkStatus();
  }

  // Lets every Generate blocked on a "block" prompt go on.
  void Unblock() {
    absl::MutexLock lock(&mu_);
    unblocked_ = true;
  }
  bool WaitForBlocked() {
    absl::MutexLock lock(&mu_);
    auto blocked = [&] {
      mu_.AssertHeld();
      return blocked_ > 0;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&blocked), absl::Seconds(10));
  }
  // Ends every hanging request normally (one more delta, finish_reason length).
  void FinishHanging() {
    absl::MutexLock lock(&mu_);
    for (auto& [id, cb] : hanging_) {
      GenerateOutput out;
      out.text_delta = " end";
      out.token_ids_delta = {1};
      out.num_output_tokens = 2;
      out.finish_reason = core::FinishReason::kLength;
      tasks_.push_back([cb = cb, out] { cb(out); });
    }
    hanging_.clear();
  }

  void Abort(const std::string& request_id) override {
    absl::MutexLock lock(&mu_);
    aborted_.push_back(request_id);
    if (auto it = hanging_.find(request_id); it != hanging_.end()) {
      GenerateOutput out;
      out.finish_reason = core::FinishReason::kAbort;
      tasks_.push_back([cb = it->second, out] { cb(out); });
      hanging_.erase(it);
    }
  }

  absl::Status Health() const override {
    return healthy_ ? absl::OkStatus() : absl::UnavailableError("engine core died");
  }
  std::string ModelName() const override { return kModel; }
  int32_t MaxModelLen() const override { return 64; }
  // A chat renders "role: content\n" per message; its ids are the bytes (BOS 1 first when
  // add_special_tokens).
  absl::StatusOr<std::vector<int32_t>> TokenizeChat(const ChatTemplateInput& input) const override {
    std::string out;
    for (const auto& m : input.messages) {
      absl::StrAppend(&out, m["role"].get<std::string>(), ": ", m["content"].get<std::string>(),
                      "\n");
    }
    return Tokenize(out, input.add_special_tokens);
  }
  // Ids are the text's bytes (BOS 1 first when add_special_tokens); "oops" fails.
  absl::StatusOr<std::vector<int32_t>> Tokenize(std::string_view text,
                                                bool add_special_tokens) const override {
    if (text == "oops") return absl::InternalError("the tokenizer broke");
    std::vector<int32_t> ids;
    if (add_special_tokens) ids.push_back(1);
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  // The vocabulary is [0, 256): id 1 is "<s>", others their byte.
  absl::StatusOr<std::string> Detokenize(std::span<const int32_t> ids) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id < 0 || id >= 256) return absl::InvalidArgumentError(absl::StrCat("bad id ", id));
      out += id == 1 ? std::string("<s>") : std::string(1, static_cast<char>(id));
    }
    return out;
  }
  absl::StatusOr<std::vector<std::string>> TokenStrings(
      std::span<const int32_t> ids) const override {
    std::vector<std::string> out;
    for (int32_t id : ids) {
      const int32_t one[1] = {id};
      absl::StatusOr<std::string> s = Detokenize(one);
      if (!s.ok()) return s.status();
      out.push_back(absl::StrCat("T", *s));
    }
    return out;
  }
  EngineStats Stats() const override {
    EngineStats stats;
    stats.num_requests_running = 3;
    stats.num_requests_waiting = 2;
    stats.kv_cache_usage = 0.25;
    stats.prefix_cache_queries = 100;
    stats.prefix_cache_hits = 40;
    stats.structured_output.cache_hits = 6;
    stats.structured_output.cache_misses = 3;
    stats.structured_output.compile_failures = 2;
    stats.structured_output.compile_timeouts = 1;
    stats.structured_output.ObserveCompileSeconds(0.02);
    stats.structured_output.ObserveCompileSeconds(0.5);
    // Exported only when NumSpeculativeTokens() says speculative decoding is configured.
    stats.spec_decoding.num_spec_tokens = 3;
    stats.spec_decoding.num_drafts = 8;
    stats.spec_decoding.num_draft_tokens = 24;
    stats.spec_decoding.num_accepted_tokens = 9;
    stats.spec_decoding.num_accepted_tokens_per_pos = {6, 3};  // shorter than k: position 2 is 0
    return stats;
  }
  int32_t NumSpeculativeTokens() const override { return num_spec_tokens_.load(); }

  // Waits until `id` was aborted; false after the deadline.
  bool WaitForAbort(const std::string& id) {
    absl::MutexLock lock(&mu_);
    auto aborted = [&] {
      mu_.AssertHeld();
      for (const std::string& a : aborted_) {
        if (a == id) return true;
      }
      return false;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&aborted), absl::Seconds(10));
  }
  bool WaitForRequests(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&] {
      mu_.AssertHeld();
      return requests_.size() >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
  }
  std::vector<GenerateRequest> requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }

  std::atomic<bool> healthy_{true};
  std::atomic<int32_t> num_spec_tokens_{0};

 private:
  void Run() {
    while (true) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](FakeEngine* e)
                 ABSL_NO_THREAD_SAFETY_ANALYSIS { return e->done_ || !e->tasks_.empty(); },
            this));
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  std::vector<GenerateRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> aborted_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, OutputCallback> hanging_ ABSL_GUARDED_BY(mu_);
  bool unblocked_ ABSL_GUARDED_BY(mu_) = false;
  int32_t blocked_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread worker_;
};

struct Reply {
  int status = 0;
  std::string body;
  std::string content_type;
  json Json() const { return json::parse(body); }
};

// A blocking HTTP/1.1 client on one keep-alive connection.
class Client {
 public:
  // Every read fails (throws, failing the test) after 10 s without data: no test waits forever.
  explicit Client(uint16_t port) : socket_(ioc_) {
    socket_.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
    timeval timeout{10, 0};
    setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  }

  Reply Send(http::verb method, const std::string& target, const std::string& body = "",
             const std::string& bearer = "") {
    http::request<http::string_body> req(method, target, 11);
    req.set(http::field::host, "127.0.0.1");
    if (!bearer.empty()) req.set(http::field::authorization, "Bearer " + bearer);
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    http::write(socket_, req);
    return Read();
  }

  Reply Post(const std::string& target, const json& body, const std::string& bearer = "") {
    return Send(http::verb::post, target, body.dump(), bearer);
  }

  void WriteRaw(const std::string& bytes) { net::write(socket_, net::buffer(bytes)); }

  Reply Read() {
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    http::read(socket_, buffer_, parser);
    Reply r;
    r.status = parser.get().result_int();
    r.body = parser.get().body();
    r.content_type = std::string(parser.get()[http::field::content_type]);
    return r;
  }

  // Reads raw bytes until `needle` appears.
  std::string ReadUntil(const std::string& needle) {
    std::string seen;
    char chunk[512];
    while (seen.find(needle) == std::string::npos) {
      size_t n = socket_.read_some(net::buffer(chunk));
      seen.append(chunk, n);
    }
    return seen;
  }

  // Reads raw bytes until the server closes the connection.
  std::string ReadToEof() {
    std::string seen;
    char chunk[512];
    beast::error_code ec;
    while (!ec) {
      size_t n = socket_.read_some(net::buffer(chunk), ec);
      seen.append(chunk, n);
    }
    if (ec != net::error::eof && ec != net::error::connection_reset) {
      throw beast::system_error(ec);
    }
    return seen;
  }

  void Close() { socket_.close(); }

 private:
  net::io_context ioc_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
};

// The JSON payloads of an SSE body, [DONE] excluded; `done` says whether it ended with it.
std::vector<json> SseEvents(const std::string& body, bool* done) {
  std::vector<json> events;
  *done = false;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    size_t end = body.find("\n\n", pos);
    std::string data = body.substr(pos + 6, end - pos - 6);
    if (data == "[DONE]") {
      *done = true;
    } else {
      events.push_back(json::parse(data));
    }
    pos = end;
  }
  return events;
}

class ApiServerTest : public ::testing::Test {
 protected:
  void StartServer(std::optional<std::string> api_key = std::nullopt,
                   const std::function<void(ApiServerOptions&)>& customize = nullptr) {
    ApiServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    if (api_key.has_value()) options.http.api_keys = {*api_key};
    options.max_body_bytes = 1 << 20;
    if (customize) customize(options);
    auto server = ApiServer::Create(&engine_, options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  void SetUp() override { StartServer(); }
  void TearDown() override { server_.reset(); }

  FakeEngine engine_;
  std::unique_ptr<ApiServer> server_;
};

TEST_F(ApiServerTest, CompletionNonStreaming) {
  Client c(server_->port());
  Reply r = c.Post("/v1/completions", {{"model", kModel}, {"prompt", "hello"}, {"max_tokens", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  json body = r.Json();
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(body["model"], kModel);
  EXPECT_EQ(body["choices"][0]["text"], " t0 t1");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(body["usage"]["completion_tokens"], 2);
  EXPECT_EQ(body["usage"]["total_tokens"], 7);
  // Keep-alive: a second request on the same connection.
  Reply again = c.Post("/v1/completions", {{"prompt", {1, 2, 3}}, {"logprobs", 1}});
  ASSERT_EQ(again.status, 200) << again.body;
  json lp = again.Json()["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"].size(), 3u);
  EXPECT_EQ(lp["text_offset"][1], 3);
  std::vector<GenerateRequest> reqs = engine_.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].prompt_token_ids, (std::vector<int32_t>{1, 2, 3}));
}

TEST_F(ApiServerTest, CompletionNFanOutMergesChoices) {
  Client c(server_->port());
  Reply r = c.Post("/v1/completions", {{"prompt", "ab"}, {"n", 2}, {"seed", 5}});
  ASSERT_EQ(r.status, 200) << r.body;
  json body = r.Json();
  ASSERT_EQ(body["choices"].size(), 2u);
  EXPECT_EQ(body["choices"][1]["index"], 1);
  EXPECT_EQ(body["choices"][1]["text"], " t0 t1 t2");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 2);  // the prompt counts once
  EXPECT_EQ(body["usage"]["completion_tokens"], 6);
  std::vector<GenerateRequest> reqs = engine_.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_NE(reqs[0].request_id, reqs[1].request_id);
  EXPECT_EQ(*reqs[1].params.seed, 6);
}

TEST_F(ApiServerTest, CompletionStreamingWithUsage) {
  Client c(server_->port());
  Reply r = c.Post("/v1/completions", {{"prompt", "hey"},
                                       {"n", 2},
                                       {"stream", true},
                                       {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type.rfind("text/event-stream", 0), 0u);
  bool done = false;
  std::vector<json> events = SseEvents(r.body, &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(events.size(), 7u);  // 2 choices x 3 deltas + usage
  std::string text[2];
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_EQ(events[i]["object"], "text_completion");
    text[events[i]["choices"][0]["index"].get<int>()] += events[i]["choices"][0]["text"];
  }
  EXPECT_EQ(text[0], " t0 t1 t2");
  EXPECT_EQ(text[1], " t0 t1 t2");
  EXPECT_TRUE(events.back()["choices"].empty());
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 6);
  // The connection stays usable after a chunked response.
  EXPECT_EQ(c.Send(http::verb::get, "/health").status, 200);
}

TEST_F(ApiServerTest, ChatNonStreamingAndStreaming) {
  Client c(server_->port());
  json messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  Reply r = c.Post("/v1/chat/completions", {{"messages", messages}, {"max_completion_tokens", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  json body = r.Json();
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], " t0 t1");
  // The chat goes to the engine as TokenizeChat's ids (no special tokens by default).
  EXPECT_FALSE(engine_.requests()[0].prompt_text.has_value());
  EXPECT_EQ(engine_.requests()[0].prompt_token_ids,
            (std::vector<int32_t>{'u', 's', 'e', 'r', ':', ' ', 'h', 'i', '\n'}));

  Reply s = c.Post("/v1/chat/completions",
                   {{"messages", messages}, {"stream", true}, {"logprobs", true}});
  ASSERT_EQ(s.status, 200);
  bool done = false;
  std::vector<json> events = SseEvents(s.body, &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events[1]["choices"][0]["delta"]["content"], " t0");
  EXPECT_EQ(events[1]["choices"][0]["logprobs"]["content"][0]["token"], " t0");
  EXPECT_EQ(events[3]["choices"][0]["finish_reason"], "length");
}

TEST_F(ApiServerTest, TokenizeAndDetokenize) {
  Client c(server_->port());
  Reply r = c.Post("/tokenize", {{"model", kModel}, {"prompt", "AB"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json(), json::parse(R"({"count": 3, "max_model_len": 64, "tokens": [1, 65, 66],
      "token_strs": null})"));
  r = c.Post("/tokenize",
             {{"prompt", "AB"}, {"add_special_tokens", false}, {"return_token_strs", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["tokens"], json::parse("[65, 66]"));
  EXPECT_EQ(r.Json()["token_strs"], json::parse(R"(["TA", "TB"])"));
  // The chat form: the ids a chat completion of the same messages sends the engine.
  json messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  r = c.Post("/tokenize", {{"messages", messages}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(c.Post("/v1/chat/completions", {{"messages", messages}}).status, 200);
  EXPECT_EQ(r.Json()["tokens"].get<std::vector<int32_t>>(), engine_.requests()[0].prompt_token_ids);
  EXPECT_EQ(r.Json()["count"], 9);
  r = c.Post("/tokenize", {{"messages", messages}, {"add_special_tokens", true}});
  EXPECT_EQ(r.Json()["count"], 10);

  r = c.Post("/detokenize", {{"model", kModel}, {"tokens", {1, 72, 105}}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json(), json::parse(R"({"prompt": "<s>Hi"})"));
  // GET is the wrong method; an API key is not needed (vLLM guards /v1/* only).
  EXPECT_EQ(c.Send(http::verb::get, "/tokenize").status, 405);
}

TEST_F(ApiServerTest, EchoAndTokensAsTokenIds) {
  Client c(server_->port());
  Reply r = c.Post("/v1/completions",
                   {{"prompt", json::array({"ab", "cd"})}, {"max_tokens", 1}, {"echo", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["choices"][0]["text"], "ab t0");
  EXPECT_EQ(r.Json()["choices"][1]["text"], "cd t0");
  // A token-id prompt echoes its decoded text, special tokens included (as vLLM).
  r = c.Post("/v1/completions", {{"prompt", {1, 72, 105}}, {"max_tokens", 1}, {"echo", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["choices"][0]["text"], "<s>Hi t0");
  Reply s = c.Post("/v1/completions",
                   {{"prompt", "ab"}, {"max_tokens", 2}, {"echo", true}, {"stream", true}});
  ASSERT_EQ(s.status, 200);
  bool done = false;
  std::vector<json> events = SseEvents(s.body, &done);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["choices"][0]["text"], "ab t0");
  EXPECT_EQ(events[1]["choices"][0]["text"], " t1");

  r = c.Post(
      "/v1/completions",
      {{"prompt", "ab"}, {"max_tokens", 1}, {"logprobs", 1}, {"return_tokens_as_token_ids", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  json lp = r.Json()["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json::parse(R"(["token_id:0"])"));
  EXPECT_EQ(lp["top_logprobs"][0], json::parse(R"({"token_id:0": -0.5})"));
}

TEST_F(ApiServerTest, ModelsVersionHealth) {
  Client c(server_->port());
  Reply models = c.Send(http::verb::get, "/v1/models");
  ASSERT_EQ(models.status, 200);
  json m = models.Json();
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], kModel);
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(m["data"][0]["owned_by"], "vllm-launch");
  EXPECT_EQ(m["data"][0]["max_model_len"], 64);
  EXPECT_TRUE(c.Send(http::verb::get, "/version").Json().contains("version"));
  Reply healthy = c.Send(http::verb::get, "/health");
  EXPECT_EQ(healthy.status, 200);
  EXPECT_EQ(healthy.body, "");
  engine_.healthy_ = false;
  EXPECT_EQ(c.Send(http::verb::get, "/health").status, 503);
  engine_.healthy_ = true;
  EXPECT_EQ(c.Send(http::verb::get, "/health").status, 200);
}

TEST_F(ApiServerTest, MetricsAfterRequests) {
  Client c(server_->port());
  ASSERT_EQ(c.Post("/v1/completions", {{"prompt", "abcd"}, {"max_tokens", 4}}).status, 200);
  Reply r = c.Send(http::verb::get, "/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type.rfind("text/plain", 0), 0u);
  for (const char* line : {
           "# TYPE vllm:prompt_tokens_total counter",
           "vllm:prompt_tokens_total{model_name=\"fake-model\",engine=\"0\"} 4\n",
           "vllm:generation_tokens_total{model_name=\"fake-model\",engine=\"0\"} 4\n",
           "vllm:num_requests_running{model_name=\"fake-model\",engine=\"0\"} 3\n",
           "vllm:num_requests_waiting{model_name=\"fake-model\",engine=\"0\"} 2\n",
           "vllm:kv_cache_usage_perc{model_name=\"fake-model\",engine=\"0\"} 0.25\n",
           "vllm:prefix_cache_queries_total{model_name=\"fake-model\",engine=\"0\"} 100\n",
           "vllm:prefix_cache_hits_total{model_name=\"fake-model\",engine=\"0\"} 40\n",
           "vllm:num_preemptions_total{model_name=\"fake-model\",engine=\"0\"} 0\n",
           "vllm:time_to_first_token_seconds_count{model_name=\"fake-model\",engine=\"0\"} 1\n",
           "vllm:inter_token_latency_seconds_count{model_name=\"fake-model\",engine=\"0\"} 3\n",
           "vllm:e2e_request_latency_seconds_count{model_name=\"fake-model\",engine=\"0\"} 1\n",
           "vllm:e2e_request_latency_seconds_bucket{model_name=\"fake-model\",engine=\"0\",le=\"+"
           "Inf\"} 1\n",
           "# TYPE vllm:time_to_first_token_seconds histogram",
           "vllm:request_success_total{model_name=\"fake-model\",engine=\"0\",finished_reason="
           "\"length\"} 1\n",
           "vllm:request_success_total{model_name=\"fake-model\",engine=\"0\",finished_reason="
           "\"abort\"} 0\n",
           "vllm:structured_output_cache_queries_total{model_name=\"fake-model\",engine=\"0\"} "
           "9\n",
           "vllm:structured_output_cache_hits_total{model_name=\"fake-model\",engine=\"0\"} 6\n",
           "# TYPE vllm:structured_output_compile_errors_total counter\n",
           "vllm:structured_output_compile_errors_total{model_name=\"fake-model\",engine=\"0\","
           "reason=\"failed\"} 2\n",
           "vllm:structured_output_compile_errors_total{model_name=\"fake-model\",engine=\"0\","
           "reason=\"timeout\"} 1\n",
           "# TYPE vllm:structured_output_compile_seconds histogram\n",
           "vllm:structured_output_compile_seconds_bucket{model_name=\"fake-model\",engine=\"0\","
           "le=\"0.01\"} 0\n",
           "vllm:structured_output_compile_seconds_bucket{model_name=\"fake-model\",engine=\"0\","
           "le=\"0.025000000000000001\"} 1\n",
           "vllm:structured_output_compile_seconds_bucket{model_name=\"fake-model\",engine=\"0\","
           "le=\"+Inf\"} 2\n",
           "vllm:structured_output_compile_seconds_count{model_name=\"fake-model\",engine=\"0\"} "
           "2\n",
           "vllm:structured_output_compile_seconds_sum{model_name=\"fake-model\",engine=\"0\"} "
           "0.52000000000000002\n",
       }) {
    EXPECT_NE(r.body.find(line), std::string::npos) << line << "\n" << r.body;
  }
  // The finished_reason series form one family: one HELP/TYPE header; so do the reason series
  // of the compile errors.
  for (const char* type_line : {"# TYPE vllm:request_success_total counter\n",
                                "# TYPE vllm:structured_output_compile_errors_total "
                                "counter\n"}) {
    const size_t first = r.body.find(type_line);
    ASSERT_NE(first, std::string::npos) << r.body;
    EXPECT_EQ(r.body.find(type_line, first + 1), std::string::npos) << r.body;
  }
  // Scraped twice, the mirrored histogram does not double.
  Reply again = c.Send(http::verb::get, "/metrics");
  EXPECT_NE(again.body.find("vllm:structured_output_compile_seconds_count{model_name=\"fake-"
                            "model\",engine=\"0\"} 2\n"),
            std::string::npos)
      << again.body;
  // Without speculative decoding, no vllm:spec_decode_* family (as vLLM registers none).
  EXPECT_EQ(r.body.find("spec_decode"), std::string::npos) << r.body;
}

// With speculative decoding configured, vLLM's SpecDecodingProm counters per engine, and one
// per-position series for each of the k positions.
TEST_F(ApiServerTest, SpecDecodeMetricsWhenConfigured) {
  server_.reset();
  engine_.num_spec_tokens_ = 3;
  StartServer();
  Client c(server_->port());
  Reply r = c.Send(http::verb::get, "/metrics");
  ASSERT_EQ(r.status, 200);
  const std::string labels = "{model_name=\"fake-model\",engine=\"0\"";
  for (const std::string& line : {
           std::string("# HELP vllm:spec_decode_num_drafts_total Number of spec decoding "
                       "drafts.\n# TYPE vllm:spec_decode_num_drafts_total counter\n"),
           absl::StrCat("vllm:spec_decode_num_drafts_total", labels, "} 8\n"),
           std::string("# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.\n"),
           absl::StrCat("vllm:spec_decode_num_draft_tokens_total", labels, "} 24\n"),
           std::string("# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted "
                       "tokens.\n"),
           absl::StrCat("vllm:spec_decode_num_accepted_tokens_total", labels, "} 9\n"),
           std::string("# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted "
                       "tokens per draft position.\n# TYPE "
                       "vllm:spec_decode_num_accepted_tokens_per_pos_total counter\n"),
           absl::StrCat("vllm:spec_decode_num_accepted_tokens_per_pos_total", labels,
                        ",position=\"0\"} 6\n"),
           absl::StrCat("vllm:spec_decode_num_accepted_tokens_per_pos_total", labels,
                        ",position=\"1\"} 3\n"),
           absl::StrCat("vllm:spec_decode_num_accepted_tokens_per_pos_total", labels,
                        ",position=\"2\"} 0\n"),
       }) {
    EXPECT_NE(r.body.find(line), std::string::npos) << line << "\n" << r.body;
  }
  // k positions, no more; one header for the family.
  EXPECT_EQ(r.body.find("position=\"3\""), std::string::npos) << r.body;
  const std::string type_line = "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total";
  EXPECT_EQ(r.body.find(type_line, r.body.find(type_line) + 1), std::string::npos) << r.body;
}

TEST_F(ApiServerTest, ApiKey) {
  server_.reset();
  StartServer("sekrit");
  Client c(server_->port());
  json req = {{"prompt", "x"}, {"max_tokens", 1}};
  Reply missing = c.Post("/v1/completions", req);
  EXPECT_EQ(missing.status, 401);
  EXPECT_EQ(missing.Json()["error"]["type"], "AuthenticationError");
  EXPECT_EQ(missing.Json()["error"]["code"], 401);
  EXPECT_EQ(c.Post("/v1/completions", req, "wrong").status, 401);
  EXPECT_EQ(c.Send(http::verb::get, "/v1/models", "", "wrong").status, 401);
  EXPECT_EQ(c.Post("/v1/completions", req, "sekrit").status, 200);
  EXPECT_EQ(c.Send(http::verb::get, "/health").status, 200);  // not under /v1
}

TEST_F(ApiServerTest, BadRequestsGetOpenAiErrors) {
  const std::string chat_user = R"("messages": [{"role": "user", "content": "x"}])";
  const std::string long_stop = [] {
    std::string s = "[";
    for (int i = 0; i < 65; ++i) s += std::string(i ? "," : "") + "\"s\"";
    return s + "]";
  }();
  const std::vector<std::tuple<std::string, std::string, int, std::string>> cases = {
      {"/v1/completions", "{", 400, "Invalid JSON"},
      {"/v1/completions", "", 400, "Invalid JSON"},
      {"/v1/completions", "[1, 2]", 400, "JSON object"},
      {"/v1/completions", R"({"max_tokens": 3})", 400, "prompt is required"},
      {"/v1/completions", R"({"prompt": ""})", 400, "prompt must not be empty"},
      {"/v1/completions", R"({"prompt": []})", 400, "prompt must not be empty"},
      {"/v1/completions", R"({"prompt": 5})", 400, "prompt must be"},
      {"/v1/completions", R"({"prompt": [1, -2]})", 400, "prompt must be in [0, "},
      {"/v1/completions", R"({"prompt": "a", "temperature": -0.5})", 400, "temperature"},
      {"/v1/completions", R"({"prompt": "a", "temperature": "1"})", 400, "must be a number"},
      {"/v1/completions", R"({"prompt": "a", "top_p": 1.5})", 400, "top_p must be in (0, 1]"},
      {"/v1/completions", R"({"prompt": "a", "top_p": 0})", 400, "top_p"},
      {"/v1/completions", R"({"prompt": "a", "top_k": -5})", 400, "top_k"},
      {"/v1/completions", R"({"prompt": "a", "top_k": 1.5})", 400, "top_k must be an integer"},
      {"/v1/completions", R"({"prompt": "a", "min_p": -0.1})", 400, "min_p must be in [0, 1]"},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": 0})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": -1})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": 99999999999})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "a", "n": 0})", 400, "n must be at least 1, got 0."},
      {"/v1/completions", R"({"prompt": "a", "n": 16385})", 400, "n must be at most 16384"},
      {"/v1/completions", R"({"prompt": "a", "logprobs": 2000})", 400,
       "logprobs must be in [0, 1024]"},
      {"/v1/completions", R"({"prompt": "a", "presence_penalty": 2.5})", 400, "presence_penalty"},
      {"/v1/completions", R"({"prompt": "a", "frequency_penalty": -3})", 400, "frequency_penalty"},
      {"/v1/completions", R"({"prompt": "a", "repetition_penalty": 0})", 400, "repetition_penalty"},
      {"/v1/completions", R"({"prompt": "a", "stop": 3})", 400, "stop must be"},
      {"/v1/completions", R"({"prompt": "a", "stop": )" + long_stop + "}", 400,
       "List should have at most 4 items after validation, not 65"},
      {"/v1/completions", R"({"prompt": "a", "stop_token_ids": [-1]})", 400, "stop_token_ids"},
      {"/v1/completions", R"({"prompt": "a", "stream": "yes"})", 400, "stream must be a boolean"},
      {"/v1/completions", R"({"prompt": "a", "prompt_logprobs": 2000})", 400, "prompt_logprobs"},
      {"/v1/completions", R"({"prompt": "a", "stream": true, "prompt_logprobs": 2})", 400,
       "not available when `stream=True`"},
      {"/tokenize", R"({"prompt": 1})", 400, "prompt must be a string"},
      {"/tokenize", R"({"prompt": "oops"})", 500, "the tokenizer broke"},
      {"/tokenize", R"({"model": "x", "prompt": "a"})", 404, "does not exist"},
      {"/tokenize", "{", 400, "Invalid JSON"},
      {"/detokenize", R"({"tokens": [65, 300]})", 400, "bad id 300"},
      {"/detokenize", R"({"tokens": [-1]})", 400, "tokens must be in"},
      {"/detokenize", R"({"prompt": "a"})", 400, "tokens (a list of token ids) is required"},
      {"/v1/completions", R"({"prompt": "a", "min_tokens": 9, "max_tokens": 2})", 400,
       "min_tokens"},
      {"/v1/completions", R"({"prompt": "a", "seed": "x"})", 400, "seed must be an integer"},
      {"/v1/completions", R"({"model": "gpt-4", "prompt": "a"})", 404,
       "The model `gpt-4` does not exist."},
      {"/v1/completions", R"({"prompt": "reject"})", 400, "too long"},
      {"/v1/chat/completions", R"({"messages": []})", 400, "messages must not be empty"},
      {"/v1/chat/completions", R"({"messages": "hi"})", 400, "messages must be"},
      {"/v1/chat/completions", R"({"messages": [{"role": "robot", "content": "x"}]})", 400,
       "unknown message role"},
      {"/v1/chat/completions", R"({"messages": [{"content": "x"}]})", 400, "role"},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400,
       "only content parts of type"},
      {"/v1/chat/completions", "{" + chat_user + R"(, "top_logprobs": 2})", 400,
       "requires logprobs"},
      {"/v1/chat/completions", "{" + chat_user + R"(, "max_completion_tokens": 0})", 400,
       "max_completion_tokens"},
      {"/v1/chat/completions", "{" + chat_user + R"(, "temperature": -1})", 400, "temperature"},
      {"/v1/chat/completions", "{" + chat_user + R"(, "model": "nope"})", 404, "does not exist"},
  };
  Client c(server_->port());
  for (const auto& [target, body, status, message_part] : cases) {
    Reply r = c.Send(http::verb::post, target, body);
    ASSERT_EQ(r.status, status) << target << " " << body << " -> " << r.body;
    ASSERT_TRUE(r.Json().contains("error")) << r.body;
    json error = r.Json()["error"];
    EXPECT_EQ(error["code"], status);
    EXPECT_EQ(error["type"], status == 404   ? "NotFoundError"
                             : status == 500 ? "InternalServerError"
                                             : "BadRequestError");
    EXPECT_NE(error["message"].get<std::string>().find(message_part), std::string::npos)
        << body << " -> " << r.body;
  }
  // Still serving, on the same connection.
  EXPECT_EQ(c.Post("/v1/completions", {{"prompt", "a"}}).status, 200);
}

TEST_F(ApiServerTest, UnknownPathWrongMethodOversizedBody) {
  Client c(server_->port());
  EXPECT_EQ(c.Send(http::verb::get, "/v2/nothing").status, 404);
  Reply wrong = c.Send(http::verb::get, "/v1/completions");
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.Json()["error"]["code"], 405);
  EXPECT_EQ(c.Send(http::verb::post, "/health").status, 405);

  Client big(server_->port());
  big.WriteRaw(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 40000000\r\n\r\n");
  Reply r = big.Read();
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(r.Json()["error"]["code"], 413);

  Client garbage(server_->port());
  garbage.WriteRaw("NOT HTTP AT ALL\r\n\r\n");
  EXPECT_EQ(garbage.Read().status, 400);

  EXPECT_EQ(Client(server_->port()).Post("/v1/completions", {{"prompt", "a"}}).status, 200);
}

TEST_F(ApiServerTest, StreamingClientDisconnectAborts) {
  std::string id;
  {
    Client c(server_->port());
    std::string body = json{{"prompt", "hang"}, {"stream", true}}.dump();
    c.WriteRaw(absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ",
                            body.size(), "\r\n\r\n", body));
    std::string seen = c.ReadUntil(" t0");
    ASSERT_TRUE(engine_.WaitForRequests(1));
    id = engine_.requests()[0].request_id;
    c.Close();
  }
  EXPECT_TRUE(engine_.WaitForAbort(id));
  EXPECT_EQ(Client(server_->port()).Send(http::verb::get, "/health").status, 200);
}

TEST_F(ApiServerTest, NonStreamingClientDisconnectAborts) {
  Client c(server_->port());
  std::string body = json{{"prompt", "hang"}}.dump();
  c.WriteRaw(absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ",
                          body.size(), "\r\n\r\n", body));
  ASSERT_TRUE(engine_.WaitForRequests(1));
  c.Close();
  EXPECT_TRUE(engine_.WaitForAbort(engine_.requests()[0].request_id));
}

// The body of a raw chunked HTTP/1.1 response (status line, headers and framing removed).
std::string Dechunk(const std::string& raw) {
  size_t pos = raw.find("\r\n\r\n");
  if (pos == std::string::npos) return "";
  pos += 4;
  std::string body;
  while (pos < raw.size()) {
    const size_t eol = raw.find("\r\n", pos);
    if (eol == std::string::npos) break;
    const size_t len = std::stoul(raw.substr(pos, eol - pos), nullptr, 16);
    if (len == 0) break;
    body += raw.substr(eol + 2, len);
    pos = eol + 2 + len + 2;
  }
  return body;
}

// The raw request for a completion with `body` on a keep-alive connection.
std::string RawCompletion(const json& body) {
  const std::string text = body.dump();
  return absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ", text.size(),
                      "\r\n\r\n", text);
}

// Regression (hardening issue, defect 4): an error in the middle of a stream is vLLM's
// {"error": {...}} event, which the OpenAI SDKs raise; it used to be the bare error object.
TEST_F(ApiServerTest, ErrorMidStreamIsTheNestedErrorEvent) {
  Client c(server_->port());
  Reply r = c.Post("/v1/completions", {{"prompt", "fail"}, {"stream", true}});
  ASSERT_EQ(r.status, 200);
  bool done = false;
  std::vector<json> events = SseEvents(r.body, &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(events.size(), 2u) << r.body;
  EXPECT_EQ(events[0]["choices"][0]["text"], " t0");
  ASSERT_TRUE(events[1].contains("error")) << events[1].dump();
  EXPECT_EQ(events[1].size(), 1u) << events[1].dump();
  EXPECT_EQ(events[1]["error"]["code"], 500);
  EXPECT_EQ(events[1]["error"]["type"], "InternalServerError");
  EXPECT_EQ(events[1]["error"]["message"], "the engine exploded");
  EXPECT_TRUE(events[1]["error"].contains("param"));
  // Not streaming: the same error as the response body.
  Reply plain = c.Post("/v1/completions", {{"prompt", "fail"}});
  EXPECT_EQ(plain.status, 500);
  EXPECT_EQ(plain.Json()["error"]["message"], "the engine exploded");
}

TEST_F(ApiServerTest, Http11WithoutHostIs400) {
  Client c(server_->port());
  c.WriteRaw("GET /health HTTP/1.1\r\n\r\n");
  Reply r = c.Read();
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.Json()["error"]["message"].get<std::string>().find("Host"), std::string::npos);
  // HTTP/1.0 has no Host requirement.
  Client old(server_->port());
  old.WriteRaw("GET /health HTTP/1.0\r\n\r\n");
  EXPECT_EQ(old.Read().status, 200);
}

TEST_F(ApiServerTest, ApiKeyComparedExactly) {
  server_.reset();
  StartServer("sekrit");
  Client c(server_->port());
  const json req = {{"prompt", "x"}, {"max_tokens", 1}};
  for (const char* key : {"sekri", "sekrit2", "Sekrit", "x", "sekrit+sekrit"}) {
    EXPECT_EQ(c.Post("/v1/completions", req, key).status, 401) << key;
  }
  EXPECT_EQ(c.Post("/v1/completions", req, "sekrit").status, 200);
}

// Regression ("tokenizing a 10 MB prompt on an I/O thread stalls every connection"): with one
// I/O thread, /health is answered while a request's preprocessing (Generate, which tokenizes)
// is still running. Before, the I/O thread ran it and /health waited (the client's 10 s
// read timeout failed the test).
TEST_F(ApiServerTest, PreprocessingDoesNotBlockTheIoThread) {
  server_.reset();
  StartServer(std::nullopt, [](ApiServerOptions& o) { o.num_threads = 1; });
  Client slow(server_->port());
  slow.WriteRaw(RawCompletion({{"prompt", "block"}, {"max_tokens", 2}}));
  ASSERT_TRUE(engine_.WaitForBlocked());
  Client health(server_->port());
  EXPECT_EQ(health.Send(http::verb::get, "/health").status, 200);
  EXPECT_EQ(health.Post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 1}}).status, 200);
  engine_.Unblock();
  Reply r = slow.Read();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["choices"][0]["text"], " t0 t1");
}

// Outputs that reach the server before it has set the generation up (the engine answers
// while the preprocessing thread is still starting the other choices) are kept, not lost.
TEST_F(ApiServerTest, ManyChoicesAllArrive) {
  Client c(server_->port());
  for (int round = 0; round < 20; ++round) {
    Reply r = c.Post("/v1/completions", {{"prompt", "abc"}, {"n", 16}, {"max_tokens", 1}});
    ASSERT_EQ(r.status, 200) << r.body;
    const json body = r.Json();
    ASSERT_EQ(body["choices"].size(), 16u);
    for (const json& choice : body["choices"]) EXPECT_EQ(choice["text"], " t0");
  }
}

// SIGTERM's first half: Drain() stops accepting and closes idle connections, a request in
// flight finishes normally, and new requests on open connections get 503.
TEST_F(ApiServerTest, DrainLetsInFlightRequestsFinish) {
  Client streaming(server_->port());
  streaming.WriteRaw(RawCompletion({{"prompt", "hang"}, {"stream", true}}));
  std::string seen = streaming.ReadUntil(" t0");
  Client idle(server_->port());
  ASSERT_EQ(idle.Send(http::verb::get, "/health").status, 200);
  EXPECT_EQ(server_->num_in_flight(), 1);
  EXPECT_FALSE(server_->WaitForIdle(absl::Now() + absl::Milliseconds(50)));

  server_->Drain();
  EXPECT_EQ(idle.ReadToEof(), "");  // closed by the drain
  bool refused = false;
  for (int attempt = 0; attempt < 200 && !refused; ++attempt) {
    net::io_context ioc;
    tcp::socket probe(ioc);
    beast::error_code ec;
    probe.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), server_->port()), ec);
    refused = ec == net::error::connection_refused;
    if (!refused) absl::SleepFor(absl::Milliseconds(10));  // the listener closes on its strand
  }
  EXPECT_TRUE(refused) << "still accepting after Drain()";

  engine_.FinishHanging();
  seen += streaming.ReadToEof();
  EXPECT_NE(seen.find(" end"), std::string::npos) << seen;
  EXPECT_NE(seen.find("\"finish_reason\":\"length\""), std::string::npos) << seen;
  EXPECT_NE(seen.find("data: [DONE]"), std::string::npos) << seen;
  EXPECT_EQ(seen.find("\"error\""), std::string::npos) << seen;
  EXPECT_TRUE(server_->WaitForIdle(absl::Now() + absl::Seconds(10)));
}

// SIGTERM past --shutdown-timeout (or SIGINT): Stop() ends a stream with the error event and
// [DONE], and a non-streaming request with a 503 body.
TEST_F(ApiServerTest, StopEndsStreamsWithAnErrorEvent) {
  Client streaming(server_->port());
  streaming.WriteRaw(RawCompletion({{"prompt", "hang"}, {"stream", true}}));
  std::string seen = streaming.ReadUntil(" t0");
  Client plain(server_->port());
  plain.WriteRaw(RawCompletion({{"prompt", "hang"}}));
  ASSERT_TRUE(engine_.WaitForRequests(2));
  server_->Stop();
  seen += streaming.ReadToEof();
  bool done = false;
  std::vector<json> events = SseEvents(Dechunk(seen), &done);
  EXPECT_TRUE(done) << seen;
  ASSERT_FALSE(events.empty()) << seen;
  EXPECT_EQ(events.back()["error"]["code"], 503) << seen;
  Reply r = plain.Read();
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.Json()["error"]["message"].get<std::string>().find("shutting down"),
            std::string::npos);
  for (const GenerateRequest& req : engine_.requests()) {
    EXPECT_TRUE(engine_.WaitForAbort(req.request_id));
  }
}

// Regression (defect 5): past --max-connections the server neither spins nor goes deaf. An
// idle connection is closed to make room; with none idle, /health is still answered (and
// anything else gets 503) on up to kOverflowConnections more.
TEST_F(ApiServerTest, ConnectionLimitKeepsHealthAnswering) {
  server_.reset();
  StartServer(std::nullopt, [](ApiServerOptions& o) {
    o.max_connections = 4;
    o.overflow_read_timeout = std::chrono::seconds(60);
  });
  // Four idle keep-alive connections (each answered once, so the server has accepted them).
  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(std::make_unique<Client>(server_->port()));
    ASSERT_EQ(idle.back()->Send(http::verb::get, "/health").status, 200);
  }
  // A fifth and a sixth, back to back: the two longest-idle connections are closed for them
  // (the second accept passes over the one the first chose, even before it is closed), and
  // both are served normally.
  Client fifth(server_->port());
  Client sixth(server_->port());
  EXPECT_EQ(fifth.Send(http::verb::get, "/health").status, 200);
  EXPECT_EQ(fifth.Post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 1}}).status, 200);
  EXPECT_EQ(sixth.Post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 1}}).status, 200);
  EXPECT_EQ(idle[0]->ReadToEof(), "");
  EXPECT_EQ(idle[1]->ReadToEof(), "");
  idle.clear();
  fifth.Close();
  sixth.Close();

  // Four connections busy generating: none can be closed.
  std::vector<std::unique_ptr<Client>> busy;
  for (int i = 0; i < 4; ++i) {
    busy.push_back(std::make_unique<Client>(server_->port()));
    busy.back()->WriteRaw(RawCompletion({{"prompt", "hang"}, {"stream", true}}));
    busy.back()->ReadUntil(" t0");
  }
  Client health(server_->port());
  Reply h = health.Send(http::verb::get, "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(health.ReadToEof(), "");  // overflow connections answer once
  Client refused(server_->port());
  Reply r = refused.Post("/v1/completions", {{"prompt", "a"}});
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.Json()["error"]["message"].get<std::string>().find("connection limit"),
            std::string::npos);
  // Silent connections (slowloris) never lock the server out: each new one closes the one
  // that has been silent longest, and /health keeps being answered.
  std::vector<std::unique_ptr<Client>> silent;
  for (int64_t i = 0; i < 2 * kOverflowConnections; ++i) {
    silent.push_back(std::make_unique<Client>(server_->port()));
  }
  Client after(server_->port());
  EXPECT_EQ(after.Send(http::verb::get, "/health").status, 200);
  EXPECT_EQ(silent.front()->ReadToEof(), "");
  silent.clear();
  engine_.FinishHanging();
  for (auto& b : busy) EXPECT_NE(b->ReadUntil("[DONE]").find("[DONE]"), std::string::npos);
}

TEST_F(ApiServerTest, StopAbortsInFlightRequests) {
  Client c(server_->port());
  std::string body = json{{"prompt", "hang"}, {"stream", true}}.dump();
  c.WriteRaw(absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ",
                          body.size(), "\r\n\r\n", body));
  ASSERT_TRUE(engine_.WaitForRequests(1));
  server_->Stop();
  EXPECT_TRUE(engine_.WaitForAbort(engine_.requests()[0].request_id));
}

}  // namespace
}  // namespace vllm::frontend
