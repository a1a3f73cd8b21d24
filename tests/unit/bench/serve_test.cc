// Tests of `vllm-launch bench serve`: dataset, percentile math, SSE parsing, the result table
// and JSON, and whole runs against a fake OpenAI streaming server that lives in this file.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/serve/bench_serve.h"
#include "bench/serve/client.h"
#include "bench/serve/dataset.h"
#include "bench/serve/metrics.h"
#include "bench/serve/protocol.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace vllm::bench_serve {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------------------
// Fake OpenAI server: thread per connection, blocking I/O, sleeps to simulate model latency.

enum class FakeMode { kStream, kHttp500, kMalformed };

struct FakeServerConfig {
  FakeMode mode = FakeMode::kStream;
  int num_chunks = 4;
  std::chrono::milliseconds first_chunk_delay{0};
  std::chrono::milliseconds chunk_delay{0};
  bool send_usage = true;
  int prompt_tokens_in_usage = 7;
  // When set, chunk i carries texts[i % size] instead of the request's tag and "x"s.
  std::vector<std::string> texts;
  // When set, the last token chunk carries this finish_reason.
  std::string finish_reason;
};

// Serves POST /v1/completions and /v1/chat/completions as a stream of `num_chunks` token
// chunks (the first after `first_chunk_delay`, the others `chunk_delay` apart), a usage chunk
// and [DONE]; GET /v1/models lists "fake-model". Records every request body and the largest
// number of requests in flight at once.
class FakeOpenAIServer {
 public:
  explicit FakeOpenAIServer(FakeServerConfig config)
      : config_(config), acceptor_(ioc_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    port_ = acceptor_.local_endpoint().port();
    // Thread "fake-accept": accepts connections, one handler thread each.
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  ~FakeOpenAIServer() {
    stopping_ = true;
    {
      // Wake accept() with a connection of our own.
      asio::io_context ioc;
      tcp::socket wake(ioc);
      beast::error_code ec;
      wake.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_), ec);
    }
    accept_thread_.join();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& thread : connection_threads_) thread.join();
  }

  int port() const { return port_; }
  int max_in_flight() const { return max_in_flight_; }
  int connections() const { return connections_; }
  std::vector<nlohmann::json> bodies() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return bodies_;
  }
  std::vector<std::string> targets() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return targets_;
  }
  // "x-request-id|x-bench-test" headers of every POST, in arrival order.
  std::vector<std::string> headers() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return headers_;
  }

 private:
  void AcceptLoop() {
    while (true) {
      auto socket = std::make_shared<tcp::socket>(ioc_);
      beast::error_code ec;
      acceptor_.accept(*socket, ec);
      if (ec || stopping_) return;
      ++connections_;
      std::lock_guard<std::mutex> lock(mutex_);
      open_fds_.push_back(socket->native_handle());
      // Thread "fake-conn": serves the requests of one keep-alive connection.
      connection_threads_.emplace_back([this, socket] { Serve(*socket); });
    }
  }

  void Serve(tcp::socket& socket) {
    beast::flat_buffer buffer;
    while (true) {
      http::request<http::string_body> request;
      beast::error_code ec;
      http::read(socket, buffer, request, ec);
      if (ec) return;
      if (request.method() == http::verb::get) {
        WriteRaw(socket, Response("200 OK", R"({"object":"list","data":[{"id":"fake-model"}]})"));
        continue;
      }
      const int now = ++in_flight_;
      for (int seen = max_in_flight_;
           now > seen && !max_in_flight_.compare_exchange_weak(seen, now);) {
      }
      nlohmann::json body = nlohmann::json::parse(request.body(), nullptr, false);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        bodies_.push_back(body);
        targets_.emplace_back(request.target());
        headers_.push_back(absl::StrCat(std::string(request["x-request-id"]), "|",
                                        std::string(request["x-bench-test"])));
      }
      if (config_.mode == FakeMode::kHttp500) {
        --in_flight_;
        WriteRaw(socket, Response("500 Internal Server Error", R"({"error":"boom"})"));
        continue;
      }
      if (!Stream(socket, body, std::string(request.target()))) return;
    }
  }

  // Streams one response; false when the connection broke.
  bool Stream(tcp::socket& socket, const nlohmann::json& body, const std::string& target) {
    const bool chat = target == "/v1/chat/completions";
    if (!WriteRaw(socket,
                  "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n")) {
      --in_flight_;
      return false;
    }
    if (config_.mode == FakeMode::kMalformed) {
      --in_flight_;
      return WriteChunk(socket, "data: {\"choices\": [{\"text\": \n\n") &&
             WriteRaw(socket, "0\r\n\r\n");
    }
    // The first chunk names the request: its first token id or its first word.
    std::string tag = "?";
    if (body.contains("prompt") && body["prompt"].is_array() && !body["prompt"].empty()) {
      tag = std::to_string(body["prompt"][0].get<int>());
    } else if (chat) {
      tag = body["messages"][0]["content"].get<std::string>();
    } else if (body.contains("prompt") && body["prompt"].is_string()) {
      tag = body["prompt"].get<std::string>();
    }
    std::this_thread::sleep_for(config_.first_chunk_delay);
    for (int i = 0; i < config_.num_chunks; ++i) {
      if (i > 0) std::this_thread::sleep_for(config_.chunk_delay);
      const std::string text = !config_.texts.empty() ? config_.texts[i % config_.texts.size()]
                               : i == 0               ? tag + ":"
                                                      : "x";
      nlohmann::json chunk;
      chunk["choices"] = chat ? nlohmann::json::array({{{"delta", {{"content", text}}}}})
                              : nlohmann::json::array({{{"text", text}, {"index", 0}}});
      if (i == config_.num_chunks - 1 && !config_.finish_reason.empty()) {
        chunk["choices"][0]["finish_reason"] = config_.finish_reason;
      }
      if (!WriteChunk(socket, "data: " + chunk.dump() + "\n\n")) {
        --in_flight_;
        return false;
      }
    }
    if (config_.send_usage) {
      nlohmann::json usage;
      usage["choices"] = nlohmann::json::array();
      usage["usage"] = {{"prompt_tokens", config_.prompt_tokens_in_usage},
                        {"completion_tokens", config_.num_chunks}};
      if (!WriteChunk(socket, "data: " + usage.dump() + "\n\n")) {
        --in_flight_;
        return false;
      }
    }
    const bool ok = WriteChunk(socket, "data: [DONE]\n\n");
    // Leave the in-flight count before the last bytes: the client may start its next request
    // as soon as it has them.
    --in_flight_;
    return ok && WriteRaw(socket, "0\r\n\r\n");
  }

  static std::string Response(const std::string& status, const std::string& body) {
    return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: application/json\r\n",
                        "Content-Length: ", body.size(), "\r\n\r\n", body);
  }
  static bool WriteChunk(tcp::socket& socket, const std::string& data) {
    char size[16];
    std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
    return WriteRaw(socket, size + data + "\r\n");
  }
  static bool WriteRaw(tcp::socket& socket, const std::string& data) {
    beast::error_code ec;
    asio::write(socket, asio::buffer(data), ec);
    return !ec;
  }

  FakeServerConfig config_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> in_flight_{0};
  std::atomic<int> max_in_flight_{0};
  std::atomic<int> connections_{0};
  mutable std::mutex mutex_;
  std::vector<nlohmann::json> bodies_;
  std::vector<std::string> targets_;
  std::vector<std::string> headers_;
  std::vector<int> open_fds_;
  std::thread accept_thread_;
  std::vector<std::thread> connection_threads_;
};

// A port nothing listens on: bound once, then released.
int UnusedPort() {
  asio::io_context ioc;
  tcp::acceptor acceptor(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  return acceptor.local_endpoint().port();
}

class BenchServeRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("bench_serve_test_", ::getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs `bench serve` against `port` with `extra` flags, saving the result JSON.
  int Run(int port, std::vector<std::string> extra) {
    std::vector<std::string> args = {"--port",
                                     std::to_string(port),
                                     "--disable-tqdm",
                                     "--save-result",
                                     "--result-dir",
                                     dir_.string(),
                                     "--result-filename",
                                     "result.json",
                                     "--request-timeout",
                                     "20",
                                     "--save-detailed"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunBenchServe(args);
  }

  nlohmann::json Result() const {
    std::ifstream in(dir_ / "result.json");
    return nlohmann::json::parse(in, nullptr, false);
  }

  std::filesystem::path dir_;
};

TEST_F(BenchServeRunTest, EveryRequestCompletesAndTheNumbersAddUp) {
  FakeServerConfig config;
  config.num_chunks = 4;
  config.first_chunk_delay = std::chrono::milliseconds(30);
  config.chunk_delay = std::chrono::milliseconds(2);
  FakeOpenAIServer server(config);
  ASSERT_EQ(Run(server.port(), {"--model", "m", "--num-prompts", "12", "--random-input-len", "16",
                                "--random-output-len", "8", "--random-range-ratio", "0.5",
                                "--ignore-eos", "--seed", "3", "--percentile-metrics",
                                "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99"}),
            0);
  const nlohmann::json result = Result();
  ASSERT_FALSE(result.is_discarded());
  for (const char* key : {"date",
                          "backend",
                          "model_id",
                          "num_prompts",
                          "request_rate",
                          "burstiness",
                          "max_concurrency",
                          "duration",
                          "completed",
                          "total_input_tokens",
                          "total_output_tokens",
                          "request_throughput",
                          "request_goodput",
                          "output_throughput",
                          "total_token_throughput",
                          "input_lens",
                          "output_lens",
                          "ttfts",
                          "itls",
                          "generated_texts",
                          "errors",
                          "mean_ttft_ms",
                          "median_ttft_ms",
                          "std_ttft_ms",
                          "p99_ttft_ms",
                          "p50_ttft_ms",
                          "mean_tpot_ms",
                          "median_tpot_ms",
                          "std_tpot_ms",
                          "p99_tpot_ms",
                          "mean_itl_ms",
                          "median_itl_ms",
                          "std_itl_ms",
                          "p99_itl_ms",
                          "mean_e2el_ms",
                          "median_e2el_ms",
                          "std_e2el_ms",
                          "p99_e2el_ms"}) {
    EXPECT_TRUE(result.contains(key)) << key;
  }
  EXPECT_EQ(result["backend"], "openai");
  EXPECT_EQ(result["model_id"], "m");
  EXPECT_EQ(result["request_rate"], "inf");
  EXPECT_TRUE(result["max_concurrency"].is_null());
  EXPECT_TRUE(result["request_goodput"].is_null());
  EXPECT_EQ(result["completed"], 12);
  EXPECT_EQ(result["total_output_tokens"], 12 * 4);

  RandomDatasetOptions dataset;
  dataset.num_prompts = 12;
  dataset.input_len = 16;
  dataset.output_len = 8;
  dataset.range_ratio = 0.5;
  dataset.seed = 3;
  const auto requests = SampleRandomRequests(dataset);
  ASSERT_TRUE(requests.ok());
  int64_t total_input = 0;
  for (size_t i = 0; i < requests->size(); ++i) {
    total_input += (*requests)[i].prompt_len;
    EXPECT_EQ(result["input_lens"][i], (*requests)[i].prompt_len);
    EXPECT_EQ(result["output_lens"][i], 4);
    EXPECT_GE(result["ttfts"][i].get<double>(), 0.030);
    EXPECT_EQ(result["itls"][i].size(), 3u);
    EXPECT_EQ(result["errors"][i], "");
    // Outputs stay in dataset order: the fake server tags each with its first token id.
    EXPECT_EQ(result["generated_texts"][i],
              absl::StrCat((*requests)[i].prompt_token_ids[0], ":xxx"));
  }
  EXPECT_EQ(result["total_input_tokens"], total_input);
  EXPECT_GE(result["mean_ttft_ms"].get<double>(), 30.0);
  EXPECT_GE(result["mean_e2el_ms"].get<double>(), result["mean_ttft_ms"].get<double>());
  const double duration = result["duration"].get<double>();
  EXPECT_NEAR(result["request_throughput"].get<double>(), 12 / duration, 1e-6);
  EXPECT_NEAR(result["total_token_throughput"].get<double>(), (total_input + 48) / duration, 1e-6);

  // What the server saw: vLLM's request fields.
  const std::vector<nlohmann::json> bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 12u);
  for (const nlohmann::json& body : bodies) {
    EXPECT_EQ(body["model"], "m");
    EXPECT_EQ(body["stream"], true);
    EXPECT_EQ(body["stream_options"]["include_usage"], true);
    EXPECT_EQ(body["ignore_eos"], true);
    EXPECT_FALSE(body.contains("temperature"));  // vLLM: sent only when given
    EXPECT_TRUE(body["prompt"].is_array());
    EXPECT_GE(body["max_tokens"].get<int>(), 4);
    EXPECT_LE(body["max_tokens"].get<int>(), 12);
  }
  for (const std::string& target : server.targets()) EXPECT_EQ(target, "/v1/completions");
}

TEST_F(BenchServeRunTest, RespectsMaxConcurrencyAndReusesConnections) {
  FakeServerConfig config;
  config.first_chunk_delay = std::chrono::milliseconds(10);
  config.chunk_delay = std::chrono::milliseconds(1);
  FakeOpenAIServer server(config);
  ASSERT_EQ(Run(server.port(), {"--model", "m", "--num-prompts", "12", "--random-input-len", "4",
                                "--max-concurrency", "3"}),
            0);
  EXPECT_GE(server.max_in_flight(), 1);
  EXPECT_LE(server.max_in_flight(), 3);
  EXPECT_LE(server.connections(), 3);  // keep-alive: connections are reused
  const nlohmann::json result = Result();
  EXPECT_EQ(result["completed"], 12);
  EXPECT_EQ(result["max_concurrency"], 3);
}

TEST_F(BenchServeRunTest, HonoursTheRequestRate) {
  FakeOpenAIServer server(FakeServerConfig{});
  ASSERT_EQ(Run(server.port(), {"--model", "m", "--num-prompts", "20", "--random-input-len", "4",
                                "--request-rate", "50"}),
            0);
  // The arrival times are a deterministic function of the seed; the run cannot end before the
  // last request was sent.
  const std::vector<double> offsets = ArrivalOffsets(20, 50.0, 1.0, 0);
  ASSERT_GT(offsets.back(), 0.2);
  const nlohmann::json result = Result();
  EXPECT_EQ(result["completed"], 20);
  EXPECT_EQ(result["request_rate"], 50.0);
  EXPECT_GE(result["duration"].get<double>(), offsets.back());
  EXPECT_EQ(server.bodies().size(), 20u);
}

TEST_F(BenchServeRunTest, Http500CountsFailedRequestsAndStillReports) {
  FakeServerConfig config;
  config.mode = FakeMode::kHttp500;
  FakeOpenAIServer server(config);
  EXPECT_EQ(Run(server.port(), {"--model", "m", "--num-prompts", "5", "--random-input-len", "4"}),
            1);
  const nlohmann::json result = Result();
  ASSERT_FALSE(result.is_discarded());
  EXPECT_EQ(result["completed"], 0);
  EXPECT_EQ(result["failed"], 5);
  EXPECT_EQ(result["total_output_tokens"], 0);
  for (const auto& error : result["errors"]) {
    EXPECT_THAT(error.get<std::string>(), HasSubstr("HTTP 500"));
    EXPECT_THAT(error.get<std::string>(), HasSubstr("boom"));
  }
}

TEST_F(BenchServeRunTest, ConnectionRefusedCountsFailedRequests) {
  ::testing::internal::CaptureStdout();
  const int code =
      Run(UnusedPort(), {"--model", "m", "--num-prompts", "3", "--random-input-len", "4"});
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("============ Serving Benchmark Result ============"));
  EXPECT_THAT(out, HasSubstr("Successful requests:                     0"));
  EXPECT_THAT(out, HasSubstr("Failed requests:                         3"));
  const nlohmann::json result = Result();
  EXPECT_EQ(result["completed"], 0);
  ASSERT_EQ(result["errors"].size(), 3u);
  for (const auto& error : result["errors"]) {
    EXPECT_THAT(error.get<std::string>(), HasSubstr("connect"));
  }
}

TEST_F(BenchServeRunTest, MalformedStreamIsAFailedRequest) {
  FakeServerConfig config;
  config.mode = FakeMode::kMalformed;
  FakeOpenAIServer server(config);
  EXPECT_EQ(Run(server.port(), {"--model", "m", "--num-prompts", "4", "--random-input-len", "4"}),
            1);
  const nlohmann::json result = Result();
  EXPECT_EQ(result["completed"], 0);
  for (const auto& error : result["errors"]) {
    EXPECT_THAT(error.get<std::string>(), HasSubstr("malformed"));
  }
}

TEST_F(BenchServeRunTest, AsksTheServerForTheModel) {
  FakeOpenAIServer server(FakeServerConfig{});
  ASSERT_EQ(Run(server.port(), {"--num-prompts", "2", "--random-input-len", "4"}), 0);
  EXPECT_EQ(Result()["model_id"], "fake-model");
  for (const nlohmann::json& body : server.bodies()) EXPECT_EQ(body["model"], "fake-model");
}

TEST_F(BenchServeRunTest, ChatBackendWithPromptsFileAndNoUsage) {
  FakeServerConfig config;
  config.num_chunks = 3;
  config.send_usage = false;
  FakeOpenAIServer server(config);
  std::filesystem::create_directories(dir_);
  const std::string path = (dir_ / "prompts.jsonl").string();
  {
    std::ofstream out(path);
    out << R"({"prompt": "hello", "output_len": 5})"
        << "\n\n"
        << "plain text line\n";
  }
  ASSERT_EQ(Run(server.port(), {"--model", "m", "--backend", "openai-chat", "--dataset-name",
                                "prompts", "--dataset-path", path, "--num-prompts", "3"}),
            0);
  const nlohmann::json result = Result();
  EXPECT_EQ(result["backend"], "openai-chat");
  EXPECT_EQ(result["completed"], 3);
  // No usage chunk: output tokens are the token chunks, input tokens unknown.
  EXPECT_EQ(result["total_output_tokens"], 9);
  EXPECT_EQ(result["total_input_tokens"], 0);
  EXPECT_EQ(result["generated_texts"][0], "hello:xx");
  EXPECT_EQ(result["generated_texts"][1], "plain text line:xx");
  EXPECT_EQ(result["generated_texts"][2], "hello:xx");
  const std::vector<nlohmann::json> bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 3u);
  for (const nlohmann::json& body : bodies) {
    EXPECT_TRUE(body.contains("messages"));
    EXPECT_TRUE(body.contains("max_completion_tokens"));
  }
  for (const std::string& target : server.targets()) EXPECT_EQ(target, "/v1/chat/completions");
}

TEST_F(BenchServeRunTest, ChatBackendSendsRandomPromptsAsTextWithATokenizer) {
  FakeOpenAIServer server(FakeServerConfig{});
  const std::string model = (std::filesystem::path(VLLM_SOURCE_DIR) / "models/kjv-llama-tiny");
  // The model is a local directory: its tokenizer is used, as vLLM defaults --tokenizer to it.
  ASSERT_EQ(RunBenchServe({"--port",
                           std::to_string(server.port()),
                           "--disable-tqdm",
                           "--save-result",
                           "--result-dir",
                           dir_.string(),
                           "--result-filename",
                           "result.json",
                           "--backend",
                           "openai-chat",
                           "--model",
                           model,
                           "--served-model-name",
                           "served",
                           "--num-prompts",
                           "3",
                           "--random-input-len",
                           "12",
                           "--random-output-len",
                           "2",
                           "--label",
                           "x",
                           "--goodput",
                           "e2el:60000"}),
            0);
  const nlohmann::json result = Result();
  EXPECT_EQ(result["tokenizer_id"], model);
  EXPECT_EQ(result["label"], "x");
  EXPECT_EQ(result["completed"], 3);
  EXPECT_GT(result["request_goodput"].get<double>(), 0.0);
  EXPECT_FALSE(result.contains("ttfts"));  // per-request lists only with --save-detailed
  EXPECT_EQ(result["latencies"].size(), 3u);
  const std::vector<nlohmann::json> bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 3u);
  for (const nlohmann::json& body : bodies) {
    EXPECT_EQ(body["model"], "served");
    ASSERT_TRUE(body["messages"][0]["content"].is_string());
    EXPECT_FALSE(body["messages"][0]["content"].get<std::string>().empty());
    EXPECT_EQ(body["ignore_eos"], true);
  }
}

// vLLM's --ready-check-timeout-sec (one test request), --num-warmups (copies of it) and the
// headers: --header on every request, x-request-id = --request-id-prefix + index on the
// measured ones only.
TEST_F(BenchServeRunTest, SendsTheTestRequestWarmupsAndHeadersAsVllm) {
  FakeOpenAIServer server(FakeServerConfig{});
  ASSERT_EQ(Run(server.port(),
                {"--model", "m", "--num-prompts", "3", "--random-input-len", "4",
                 "--random-output-len", "2", "--ready-check-timeout-sec", "5", "--num-warmups", "2",
                 "--header", "x-bench-test=yes", "--request-id-prefix", "r-"}),
            0);
  const std::vector<std::string> headers = server.headers();
  ASSERT_EQ(headers.size(), 6u);
  EXPECT_EQ(headers[0], "|yes");  // the test request
  EXPECT_EQ(headers[1], "|yes");  // the warm-ups
  EXPECT_EQ(headers[2], "|yes");
  EXPECT_EQ(std::set<std::string>(headers.begin() + 3, headers.end()),
            (std::set<std::string>{"r-0|yes", "r-1|yes", "r-2|yes"}));
  EXPECT_EQ(Result()["completed"], 3);  // the test and warm-up requests are not measured
  // All three are copies of the dataset's first request.
  const std::vector<nlohmann::json> bodies = server.bodies();
  EXPECT_EQ(bodies[1], bodies[0]);
  EXPECT_EQ(bodies[2], bodies[0]);
  EXPECT_NE(std::find(bodies.begin() + 3, bodies.end(), bodies[0]), bodies.end());
  // A ready check that never succeeds: exit 1, nothing measured.
  FakeServerConfig failing;
  failing.mode = FakeMode::kHttp500;
  FakeOpenAIServer broken(failing);
  EXPECT_EQ(Run(broken.port(), {"--model", "m", "--num-prompts", "2", "--random-input-len", "4",
                                "--ready-check-timeout-sec", "1"}),
            1);
  EXPECT_EQ(broken.bodies().size(), 1u);
}

TEST_F(BenchServeRunTest, UsesThePromptTokensTheServerReports) {
  FakeServerConfig config;
  config.prompt_tokens_in_usage = 11;
  FakeOpenAIServer server(config);
  std::filesystem::create_directories(dir_);
  const std::string path = (dir_ / "prompts.txt").string();
  std::ofstream(path) << "one\ntwo\n";
  ASSERT_EQ(Run(server.port(), {"--model", "m", "--dataset-name", "prompts", "--dataset-path", path,
                                "--num-prompts", "2"}),
            0);
  EXPECT_EQ(Result()["total_input_tokens"], 22);
}

TEST_F(BenchServeRunTest, DrawsAProgressBarOnStderr) {
  FakeOpenAIServer server(FakeServerConfig{});
  ::testing::internal::CaptureStderr();
  const int code =
      RunBenchServe({"--port", std::to_string(server.port()), "--model", "m", "--num-prompts", "3",
                     "--random-input-len", "4", "--request-timeout", "20"});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 0);
  EXPECT_THAT(err, HasSubstr("100%|"));
  EXPECT_THAT(err, HasSubstr("3/3"));
}

// Writes `text` to `path`.
void WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

TEST_F(BenchServeRunTest, JsonSchemasConstrainRequestsAndOutputsAreCounted) {
  FakeServerConfig config;
  config.num_chunks = 3;
  config.texts = {"{\"a\":", " 1", "}"};
  config.finish_reason = "stop";
  FakeOpenAIServer server(config);
  std::filesystem::create_directories(dir_);
  const std::filesystem::path schemas = dir_ / "schemas.jsonl";
  WriteFile(schemas, "{\"type\": \"object\"}\n\n{\"type\": \"array\"}\n");
  ASSERT_EQ(Run(server.port(), {"--model", "m", "--num-prompts", "8", "--random-input-len", "4",
                                "--random-output-len", "3", "--json-schema-path", schemas.string(),
                                "--structured-output-ratio", "0.5", "--seed", "5"}),
            0);
  int with_object = 0, with_array = 0;
  for (const nlohmann::json& body : server.bodies()) {
    if (!body.contains("structured_outputs")) continue;
    const nlohmann::json& schema = body["structured_outputs"]["json"];
    with_object += schema == nlohmann::json{{"type", "object"}};
    with_array += schema == nlohmann::json{{"type", "array"}};
  }
  EXPECT_EQ(with_object + with_array, 4);  // int(8 * 0.5)
  EXPECT_GT(with_object, 0);
  EXPECT_GT(with_array, 0);
  const nlohmann::json result = Result();
  EXPECT_EQ(result["structured_output_requests"], 4);
  EXPECT_EQ(result["valid_json_outputs"], 4);
  EXPECT_EQ(result["cut_at_max_tokens"], 0);
  EXPECT_EQ(result["correct_rate(%)"], 100.0);
}

TEST_F(BenchServeRunTest, CountsOutputsThatAreNotJsonOrCutAtMaxTokens) {
  FakeServerConfig config;
  config.num_chunks = 2;
  config.texts = {"{\"a\":", " 1"};
  config.finish_reason = "length";
  FakeOpenAIServer server(config);
  std::filesystem::create_directories(dir_);
  WriteFile(dir_ / "b.json", "{\"type\": \"string\"}");
  WriteFile(dir_ / "a.json", "{\"type\": \"object\"}");
  ASSERT_EQ(Run(server.port(), {"--model", "m", "--num-prompts", "4", "--random-input-len", "4",
                                "--random-output-len", "2", "--json-schema-path", dir_.string()}),
            0);
  ASSERT_EQ(server.bodies().size(), 4u);
  for (const nlohmann::json& body : server.bodies()) {
    EXPECT_TRUE(body.contains("structured_outputs")) << body.dump();
  }
  const nlohmann::json result = Result();
  EXPECT_EQ(result["structured_output_requests"], 4);
  EXPECT_EQ(result["valid_json_outputs"], 0);
  EXPECT_EQ(result["cut_at_max_tokens"], 4);
}

TEST(BenchServeFlagsTest, ParsesVllmFlags) {
  auto flags =
      ParseBenchServeFlags({"--base-url", "http://localhost:9000/prefix", "--backend", "openai",
                            "--request-rate", "12.5", "--burstiness", "0.5", "--max-concurrency",
                            "7", "--temperature", "0.7", "--metric-percentiles", "90,99.9"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->load.host, "localhost");
  EXPECT_EQ(flags->load.port, "9000");
  EXPECT_EQ(flags->load.path, "/prefix/v1/completions");
  EXPECT_EQ(flags->load.request_rate, 12.5);
  EXPECT_EQ(flags->load.burstiness, 0.5);
  EXPECT_EQ(flags->load.max_concurrency, 7);
  EXPECT_EQ(flags->load.settings.temperature, 0.7);
  EXPECT_THAT(flags->metric_percentiles, ::testing::ElementsAre(90.0, 99.9));
  EXPECT_EQ(flags->random.num_prompts, 1000);
  EXPECT_EQ(flags->random.input_len, 1024);
  EXPECT_EQ(flags->random.output_len, 128);
  EXPECT_TRUE(std::isinf(ParseBenchServeFlags({})->load.request_rate));
}

TEST(BenchServeFlagsTest, RejectsBadFlags) {
  EXPECT_FALSE(ParseBenchServeFlags({"--no-such-flag"}).ok());
  EXPECT_FALSE(ParseBenchServeFlags({"--backend", "tgi"}).ok());
  EXPECT_FALSE(ParseBenchServeFlags({"--request-rate", "fast"}).ok());
  EXPECT_FALSE(ParseBenchServeFlags({"--percentile-metrics", "ttft,foo"}).ok());
  EXPECT_FALSE(ParseBenchServeFlags({"--dataset-name", "prompts"}).ok());
  EXPECT_FALSE(ParseBenchServeFlags({"--structured-output-ratio", "0.5"}).ok());  // no schemas
  EXPECT_FALSE(
      ParseBenchServeFlags({"--json-schema-path", "x", "--structured-output-ratio", "1.5"}).ok());
  EXPECT_EQ(RunBenchServe({"--json-schema-path", "/nonexistent/schema.json"}), 2);
  EXPECT_EQ(RunBenchServe({"--max-concurrency", "0"}), 2);
  EXPECT_EQ(RunBenchServe({"--dataset-name", "prompts", "--dataset-path", "/nonexistent/x"}), 2);
}

// ---------------------------------------------------------------------------------------------
// Dataset.

TEST(BenchServeDatasetTest, RandomLengthsStayWithinTheRangeRatio) {
  RandomDatasetOptions options;
  options.num_prompts = 200;
  options.input_len = 100;
  options.output_len = 20;
  options.range_ratio = 0.25;
  options.vocab_min = 10;
  options.vocab_max = 50;
  auto requests = SampleRandomRequests(options);
  ASSERT_TRUE(requests.ok());
  ASSERT_EQ(requests->size(), 200u);
  int min_len = 1 << 30, max_len = 0;
  for (const SampleRequest& request : *requests) {
    EXPECT_EQ(request.prompt_len, static_cast<int>(request.prompt_token_ids.size()));
    EXPECT_GE(request.prompt_len, 75);
    EXPECT_LE(request.prompt_len, 125);
    EXPECT_GE(request.expected_output_len, 15);
    EXPECT_LE(request.expected_output_len, 25);
    for (int32_t id : request.prompt_token_ids) {
      EXPECT_GE(id, 10);
      EXPECT_LT(id, 50);
    }
    min_len = std::min(min_len, request.prompt_len);
    max_len = std::max(max_len, request.prompt_len);
  }
  EXPECT_LT(min_len, max_len);  // lengths do vary
}

TEST(BenchServeDatasetTest, RangeRatioZeroGivesExactLengths) {
  RandomDatasetOptions options;
  options.num_prompts = 5;
  options.input_len = 33;
  options.output_len = 7;
  auto requests = SampleRandomRequests(options);
  ASSERT_TRUE(requests.ok());
  for (const SampleRequest& request : *requests) {
    EXPECT_EQ(request.prompt_len, 33);
    EXPECT_EQ(request.expected_output_len, 7);
  }
}

TEST(BenchServeDatasetTest, SameSeedSamePrompts) {
  RandomDatasetOptions options;
  options.num_prompts = 10;
  options.input_len = 20;
  options.range_ratio = 0.5;
  auto a = SampleRandomRequests(options);
  auto b = SampleRandomRequests(options);
  options.seed = 1;
  auto c = SampleRandomRequests(options);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  bool differs = false;
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].prompt_token_ids, (*b)[i].prompt_token_ids);
    EXPECT_EQ((*a)[i].expected_output_len, (*b)[i].expected_output_len);
    differs |= (*a)[i].prompt_token_ids != (*c)[i].prompt_token_ids;
  }
  EXPECT_TRUE(differs);
}

TEST(BenchServeDatasetTest, RejectsBadRandomOptions) {
  RandomDatasetOptions options;
  options.range_ratio = 1.0;
  EXPECT_FALSE(SampleRandomRequests(options).ok());
  options.range_ratio = 0.0;
  options.vocab_max = options.vocab_min;
  EXPECT_FALSE(SampleRandomRequests(options).ok());
}

TEST(BenchServeDatasetTest, PromptsFileJsonAndTextLinesCycle) {
  const std::string path = ::testing::TempDir() + "/bench_serve_prompts.jsonl";
  std::ofstream(path) << R"({"prompt": "a b", "output_len": 3})"
                      << "\n"
                      << "\n"
                      << "  just text  \n"
                      << R"({"prompt": "c"})"
                      << "\n";
  auto requests = LoadPromptsFile(path, 5, 64);
  ASSERT_TRUE(requests.ok()) << requests.status();
  ASSERT_EQ(requests->size(), 5u);
  EXPECT_EQ((*requests)[0].prompt, "a b");
  EXPECT_EQ((*requests)[0].expected_output_len, 3);
  EXPECT_EQ((*requests)[1].prompt, "just text");
  EXPECT_EQ((*requests)[1].expected_output_len, 64);
  EXPECT_EQ((*requests)[2].prompt, "c");
  EXPECT_EQ((*requests)[3].prompt, "a b");
  EXPECT_EQ((*requests)[0].prompt_len, 0);
  EXPECT_TRUE((*requests)[0].prompt_token_ids.empty());

  std::ofstream(path) << R"({"text": "no prompt key"})"
                      << "\n";
  EXPECT_EQ(LoadPromptsFile(path, 1, 8).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadPromptsFile("/nonexistent/prompts", 1, 8).status().code(),
            absl::StatusCode::kNotFound);
  std::filesystem::remove(path);
}

TEST(BenchServeDatasetTest, LoadsSchemasFromAFileJsonLinesOrADirectory) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("bench_serve_schemas_", ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "many");
  WriteFile(dir / "one.json", "{\n  \"type\": \"object\",\n  \"required\": [\"a\"]\n}\n");
  WriteFile(dir / "list.jsonl", "{\"type\": \"string\"}\n\n{\"type\": \"integer\"}\n");
  WriteFile(dir / "many" / "2.json", "{\"title\": \"second\"}");
  WriteFile(dir / "many" / "1.json", "{\"title\": \"first\"}");
  WriteFile(dir / "many" / "notes.txt", "not a schema");
  WriteFile(dir / "bad.jsonl", "{\"type\": \"string\"}\n[1, 2]\n");
  WriteFile(dir / "broken.json", "{\"type\": ");

  auto one = LoadJsonSchemas((dir / "one.json").string());
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one->at(0))["required"][0], "a");
  auto list = LoadJsonSchemas((dir / "list.jsonl").string());
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list->at(1))["type"], "integer");
  auto many = LoadJsonSchemas((dir / "many").string());
  ASSERT_TRUE(many.ok()) << many.status();
  ASSERT_EQ(many->size(), 2u);
  EXPECT_EQ((*many->at(0))["title"], "first");
  EXPECT_EQ((*many->at(1))["title"], "second");

  EXPECT_EQ(LoadJsonSchemas((dir / "missing.json").string()).status().code(),
            absl::StatusCode::kNotFound);
  auto bad = LoadJsonSchemas((dir / "bad.jsonl").string());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("bad.jsonl:2"));
  EXPECT_EQ(LoadJsonSchemas((dir / "broken.json").string()).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::filesystem::create_directories(dir / "empty");
  EXPECT_EQ(LoadJsonSchemas((dir / "empty").string()).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

TEST(BenchServeDatasetTest, SchemasCycleOverTheChosenShareOfRequests) {
  const JsonSchemaList schemas = {std::make_shared<const nlohmann::json>(nlohmann::json{{"n", 0}}),
                                  std::make_shared<const nlohmann::json>(nlohmann::json{{"n", 1}}),
                                  std::make_shared<const nlohmann::json>(nlohmann::json{{"n", 2}})};
  const auto assign = [&](double ratio, uint64_t seed) {
    std::vector<SampleRequest> requests(10);
    EXPECT_TRUE(AssignJsonSchemas(schemas, ratio, seed, requests).ok());
    std::vector<int> picked;  // schema number per request, -1 unconstrained
    for (const SampleRequest& request : requests) {
      picked.push_back(request.json_schema ? (*request.json_schema)["n"].get<int>() : -1);
    }
    return picked;
  };
  EXPECT_THAT(assign(1.0, 0), ::testing::ElementsAre(0, 1, 2, 0, 1, 2, 0, 1, 2, 0));
  EXPECT_THAT(assign(0.0, 0), ::testing::Each(-1));
  const std::vector<int> some = assign(0.35, 7);
  EXPECT_EQ(std::count(some.begin(), some.end(), -1), 7);  // int(10 * 0.35) = 3 constrained
  for (size_t i = 0; i < some.size(); ++i) {
    if (some[i] != -1) {
      EXPECT_EQ(some[i], static_cast<int>(i % 3));
    }
  }
  EXPECT_EQ(assign(0.35, 7), some);  // same seed, same requests
  bool differs = false;
  for (uint64_t seed = 8; seed < 20 && !differs; ++seed) differs = assign(0.35, seed) != some;
  EXPECT_TRUE(differs);
  std::vector<SampleRequest> requests(2);
  EXPECT_FALSE(AssignJsonSchemas(schemas, 1.5, 0, requests).ok());
  EXPECT_FALSE(AssignJsonSchemas({}, 1.0, 0, requests).ok());
}

TEST(BenchServeDatasetTest, ArrivalOffsetsFollowTheRate) {
  EXPECT_THAT(ArrivalOffsets(3, std::numeric_limits<double>::infinity(), 1.0, 0),
              ::testing::ElementsAre(0.0, 0.0, 0.0));
  const std::vector<double> offsets = ArrivalOffsets(2000, 100.0, 1.0, 0);
  EXPECT_GT(offsets[0], 0.0);  // vLLM draws the first interval too
  EXPECT_TRUE(std::is_sorted(offsets.begin(), offsets.end()));
  // vLLM rescales the sum of the intervals to n / rate.
  EXPECT_NEAR(offsets.back(), 20.0, 1e-9);
  EXPECT_EQ(ArrivalOffsets(50, 10.0, 0.3, 5), ArrivalOffsets(50, 10.0, 0.3, 5));
}

// ---------------------------------------------------------------------------------------------
// Metrics.

TEST(BenchServeMetricsTest, PercentilesMatchNumpy) {
  EXPECT_DOUBLE_EQ(Percentile({}, 99), 0.0);
  EXPECT_DOUBLE_EQ(Percentile({5.0}, 99), 5.0);
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 50), 2.5);  // np.median([1,2,3,4])
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_NEAR(Percentile(hundred, 99), 99.01, 1e-9);  // np.percentile(range(1,101), 99)
  EXPECT_NEAR(Percentile(hundred, 25), 25.75, 1e-9);
  EXPECT_DOUBLE_EQ(Percentile(hundred, 100), 100.0);
  EXPECT_DOUBLE_EQ(Mean({1, 2, 3, 4}), 2.5);
  EXPECT_DOUBLE_EQ(StdDev({2, 4, 4, 4, 5, 5, 7, 9}), 2.0);  // population std
  EXPECT_DOUBLE_EQ(StdDev({}), 0.0);
}

TEST(BenchServeMetricsTest, CalculateMetricsLikeVllm) {
  RequestOutput a;
  a.success = true;
  a.ttft = 0.1;
  a.latency = 0.5;
  a.itl = {0.2, 0.2};
  a.output_tokens = 5;
  a.prompt_len = 10;
  RequestOutput b;
  b.success = true;
  b.ttft = 0.3;
  b.latency = 0.3;
  b.output_tokens = 1;  // no TPOT
  b.prompt_len = 20;
  RequestOutput failed;
  failed.error = "HTTP 500";
  failed.prompt_len = 99;
  const BenchmarkMetrics metrics = CalculateMetrics({a, b, failed}, 2.0, {99});
  EXPECT_EQ(metrics.completed, 2);
  EXPECT_EQ(metrics.failed, 1);
  EXPECT_EQ(metrics.total_input, 30);  // failed requests do not count
  EXPECT_EQ(metrics.total_output, 6);
  EXPECT_THAT(metrics.output_lens, ::testing::ElementsAre(5, 1, 0));
  EXPECT_DOUBLE_EQ(metrics.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(metrics.output_throughput, 3.0);
  EXPECT_DOUBLE_EQ(metrics.total_token_throughput, 18.0);
  EXPECT_NEAR(metrics.ttft.mean_ms, 200.0, 1e-9);
  EXPECT_NEAR(metrics.tpot.mean_ms, 100.0, 1e-9);  // (0.5 - 0.1) / 4
  EXPECT_NEAR(metrics.itl.median_ms, 200.0, 1e-9);
  EXPECT_NEAR(metrics.e2el.mean_ms, 400.0, 1e-9);
  ASSERT_EQ(metrics.ttft.percentiles_ms.size(), 1u);
  EXPECT_NEAR(metrics.ttft.percentiles_ms[0].second, 298.0, 1e-9);
}

TEST(BenchServeMetricsTest, TableAndFileNameLookLikeVllms) {
  BenchmarkRunInfo info;
  info.backend = "openai";
  info.model_id = "Qwen/Qwen3-0.6B";
  info.date = "20250101-120000";
  info.request_rate = std::numeric_limits<double>::infinity();
  info.duration_s = 2.0;
  info.percentile_metrics = {"ttft", "tpot"};
  const BenchmarkMetrics metrics = CalculateMetrics({}, 2.0, {99});
  const std::string table = FormatResultTable(info, metrics);
  EXPECT_EQ(table.substr(0, 51), "============ Serving Benchmark Result ============\n");
  EXPECT_THAT(table, HasSubstr("Benchmark duration (s):                  2.00      \n"));
  EXPECT_THAT(table, HasSubstr("---------------Time to First Token----------------\n"));
  EXPECT_THAT(table, HasSubstr("P99 TPOT (ms):"));
  EXPECT_THAT(table, ::testing::Not(HasSubstr("ITL")));
  EXPECT_THAT(table, ::testing::Not(HasSubstr("Request rate configured")));
  EXPECT_EQ(DefaultResultFilename(info), "openai-infqps-Qwen3-0.6B-20250101-120000.json");
  info.request_rate = 50;
  info.max_concurrency = 4;
  EXPECT_EQ(DefaultResultFilename(info),
            "openai-50.0qps-concurrency4-Qwen3-0.6B-20250101-120000.json");
  EXPECT_THAT(FormatResultTable(info, metrics),
              HasSubstr("Request rate configured (RPS):           50.00     \n"));
}

// ---------------------------------------------------------------------------------------------
// Protocol.

TEST(BenchServeProtocolTest, ParsesAStreamSplitAnywhere) {
  const std::string stream =
      "data: {\"choices\":[{\"text\":\"Hel\"}]}\n\n"
      ": keep-alive comment\n\n"
      "data: {\"choices\":[{\"text\":\"lo\"}]}\n\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n"
      "data: [DONE]\n\n";
  for (size_t split = 1; split < stream.size(); split += 7) {
    SseResponseParser parser(BenchBackend::kOpenAICompletions, 0);
    parser.Feed(absl::string_view(stream).substr(0, split), 0.1);
    parser.Feed(absl::string_view(stream).substr(split), 0.3);
    const RequestOutput output = parser.Finish(0.4);
    ASSERT_TRUE(output.success) << output.error;
    EXPECT_EQ(output.generated_text, "Hello");
    EXPECT_EQ(output.output_tokens, 2);
    EXPECT_EQ(output.prompt_len, 3);
    EXPECT_EQ(output.itl.size(), 1u);
    EXPECT_LE(output.ttft, output.latency);
  }
}

TEST(BenchServeProtocolTest, MalformedAndEmptyStreamsFail) {
  SseResponseParser bad(BenchBackend::kOpenAICompletions, 4);
  bad.Feed("data: {oops\n", 0.1);
  EXPECT_TRUE(bad.failed());
  EXPECT_THAT(bad.Finish(0.2).error, HasSubstr("malformed"));

  SseResponseParser no_data(BenchBackend::kOpenAICompletions, 4);
  no_data.Feed("hello\n", 0.1);
  EXPECT_FALSE(no_data.Finish(0.2).success);

  SseResponseParser empty(BenchBackend::kOpenAICompletions, 4);
  empty.Feed("data: [DONE]\n\n", 0.1);
  const RequestOutput output = empty.Finish(0.2);
  EXPECT_FALSE(output.success);
  EXPECT_THAT(output.error, HasSubstr("Never received a valid chunk"));

  SseResponseParser error(BenchBackend::kOpenAIChat, 4);
  error.Feed("data: {\"error\": {\"message\": \"too long\"}}\n\n", 0.1);
  EXPECT_THAT(error.Finish(0.2).error, HasSubstr("too long"));
}

TEST(BenchServeProtocolTest, RequestBodiesCarryVllmFields) {
  SampleRequest tokens;
  tokens.prompt_token_ids = {5, 6};
  tokens.expected_output_len = 9;
  RequestSettings settings{"m", 0.5, false};
  const auto completion =
      nlohmann::json::parse(BuildRequestBody(BenchBackend::kOpenAICompletions, settings, tokens));
  EXPECT_EQ(completion["prompt"], nlohmann::json::array({5, 6}));
  EXPECT_EQ(completion["max_tokens"], 9);
  EXPECT_EQ(completion["temperature"], 0.5);
  EXPECT_FALSE(completion.contains("ignore_eos"));
  SampleRequest text;
  text.prompt = "hi";
  text.expected_output_len = 2;
  const auto chat =
      nlohmann::json::parse(BuildRequestBody(BenchBackend::kOpenAIChat, settings, text));
  EXPECT_EQ(chat["messages"][0]["role"], "user");
  EXPECT_EQ(chat["messages"][0]["content"], "hi");
  EXPECT_EQ(chat["max_completion_tokens"], 2);
  EXPECT_EQ(chat["stream"], true);
  EXPECT_FALSE(completion.contains("structured_outputs"));
  EXPECT_FALSE(chat.contains("structured_outputs"));
}

TEST(BenchServeProtocolTest, RequestWithASchemaSendsStructuredOutputsJson) {
  const nlohmann::json schema = {
      {"type", "object"}, {"properties", {{"name", {{"type", "string"}}}}}, {"required", {"name"}}};
  SampleRequest request;
  request.prompt_token_ids = {5, 6};
  request.expected_output_len = 9;
  request.json_schema = std::make_shared<const nlohmann::json>(schema);
  RequestSettings settings{"m", 0.0, true};
  const auto body =
      nlohmann::json::parse(BuildRequestBody(BenchBackend::kOpenAICompletions, settings, request));
  ASSERT_TRUE(body.contains("structured_outputs")) << body.dump();
  EXPECT_EQ(body["structured_outputs"], nlohmann::json({{"json", schema}}));
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["max_tokens"], 9);
  request.prompt = "hi";
  const auto chat =
      nlohmann::json::parse(BuildRequestBody(BenchBackend::kOpenAIChat, settings, request));
  EXPECT_EQ(chat["structured_outputs"]["json"], schema);
}

TEST(BenchServeProtocolTest, KeepsTheFinishReason) {
  SseResponseParser parser(BenchBackend::kOpenAICompletions, 1);
  parser.Feed("data: {\"choices\":[{\"text\":\"{}\",\"finish_reason\":null}]}\n\n", 0.1);
  parser.Feed("data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"stop\"}]}\n\n", 0.2);
  const RequestOutput output = parser.Finish(0.3);
  ASSERT_TRUE(output.success) << output.error;
  EXPECT_EQ(output.finish_reason, "stop");
  EXPECT_EQ(output.generated_text, "{}");
}

}  // namespace
}  // namespace vllm::bench_serve
