// `vllm-launch` as a user runs it, on the bundled model: it prints its ready line, answers
// /v1/completions (the greedy text transformers produced for the model), /v1/chat/completions
// and /health; Ctrl-C (SIGINT) stops everything within 5 s, also mid-generation at TP 2; kill -9
// of the server mid-generation takes the engine core (and at TP 2 its workers) down within 2 s.
// Nothing is left in /dev/shm.
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"
#include "tests/support/process.h"

namespace vllm {
namespace {

const std::filesystem::path kModel =
    std::filesystem::path(VLLM_SOURCE_DIR) / "models" / "kjv-llama-tiny";

using testing::Http;

class ServeProcessTest : public testing::ServeTest {};

TEST_F(ServeProcessTest, AnswersLikeTheModelAndStopsOnCtrlC) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto health = Http(port_, "GET", "/health");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->status, 200);

  // The bundled model's first greedy sample, as transformers generated it.
  std::ifstream in(kModel / "training_log.json");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json sample = nlohmann::json::parse(text.str()).at("samples").at(0);
  nlohmann::json req = {{"model", "kjv-llama-tiny"},
                        {"prompt", sample.at("prompt")},
                        {"max_tokens", sample.at("greedy_ids").size()},
                        {"temperature", 0}};
  auto completion = Http(port_, "POST", "/v1/completions", req.dump());
  ASSERT_TRUE(completion.ok()) << completion.status();
  ASSERT_EQ(completion->status, 200) << completion->body;
  const nlohmann::json c = nlohmann::json::parse(completion->body);
  EXPECT_EQ(c.at("choices").at(0).at("text").get<std::string>(),
            sample.at("text").get<std::string>());
  EXPECT_EQ(c.at("usage").at("completion_tokens").get<size_t>(), sample.at("greedy_ids").size());

  nlohmann::json chat = {{"model", "kjv-llama-tiny"},
                         {"messages", {{{"role", "user"}, {"content", "Blessed are the meek"}}}},
                         {"max_tokens", 16}};
  auto chat_response = Http(port_, "POST", "/v1/chat/completions", chat.dump());
  ASSERT_TRUE(chat_response.ok()) << chat_response.status();
  EXPECT_EQ(chat_response->status, 200) << chat_response->body;

  auto bad = Http(port_, "POST", "/v1/completions", R"({"model": "x", "prompt": "a"})");
  ASSERT_TRUE(bad.ok()) << bad.status();
  EXPECT_EQ(bad->status, 404) << bad->body;

  const absl::Time start = absl::Now();
  server_->Kill(SIGINT);
  auto status = server_->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << testing::DescribeWaitStatus(*status);
}

// A streamed request that decodes for seconds, opened and read up to its first token.
absl::StatusOr<testing::SseStream> StartLongStream(int port) {
  const nlohmann::json body = {
      {"prompt", "In the beginning"}, {"max_tokens", 1000}, {"ignore_eos", true}, {"stream", true}};
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  absl::StatusOr<testing::SseStream> stream =
      testing::SseStream::Open(port, "/v1/completions", body, deadline);
  if (!stream.ok()) return stream.status();
  if (stream->status() != 200) return absl::InternalError(stream->error_body());
  auto first = stream->Next(deadline);
  if (!first.ok()) return first.status();
  if (!first->has_value()) return absl::InternalError("the stream ended at once");
  return stream;
}

// kill -9 of the server while it generates: the engine core (and, with TP 2, its workers)
// exit within 2 s.
void ExpectKilledServerTakesEverythingDown(testing::Subprocess& server, int port,
                                           size_t num_workers) {
  absl::StatusOr<testing::SseStream> stream = StartLongStream(port);
  ASSERT_TRUE(stream.ok()) << stream.status();
  const std::vector<pid_t> engines = testing::ChildrenOf(server.pid());
  ASSERT_EQ(engines.size(), 1u);
  EXPECT_EQ(testing::ChildrenOf(engines[0]).size(), num_workers);
  server.Kill(SIGKILL);
  ASSERT_TRUE(server.Wait(absl::Seconds(5)).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  while (!testing::ServeTest::Descendants().empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // polling a condition with a deadline
  }
  EXPECT_TRUE(testing::ServeTest::Descendants().empty())
      << "the engine core or a worker outlived the killed server";
}

TEST_F(ServeProcessTest, KilledServerTakesTheEngineDownWithinTwoSeconds) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  ExpectKilledServerTakesEverythingDown(*server_, port_, 0);
}

TEST_F(ServeProcessTest, KilledServerTakesTheEngineAndWorkersDownWithinTwoSeconds) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"-tp", "2"}));
  ExpectKilledServerTakesEverythingDown(*server_, port_, 2);
}

// Ctrl-C while a TP 2 server generates: the stream ends (no hang), everything exits within
// 5 s with status 0.
TEST_F(ServeProcessTest, CtrlCDuringGenerationStopsEverything) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"-tp", "2"}));
  absl::StatusOr<testing::SseStream> stream = StartLongStream(port_);
  ASSERT_TRUE(stream.ok()) << stream.status();
  const absl::Time start = absl::Now();
  server_->Kill(SIGINT);
  // The client sees its stream end (closed, or an error event) well before it would finish.
  while (true) {
    auto data = stream->Next(start + absl::Seconds(5));
    if (!data.ok() || !data->has_value()) {
      EXPECT_TRUE(data.ok()) << data.status();
      break;
    }
  }
  auto status = server_->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << testing::DescribeWaitStatus(*status);
}

}  // namespace
}  // namespace vllm
