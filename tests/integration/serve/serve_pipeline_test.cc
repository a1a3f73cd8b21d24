// Pipeline parallelism through the server: with `-pp 2` at concurrency 16, the engine keeps
// both stages busy (the batch queue holds two micro-batches, each half the running requests).
// Each worker measures its busy fraction — the time it computes over the time from its first
// step to its last, waiting for the other stage or for the next step excluded — and logs it
// at shutdown; the test reads both lines. The figure the issue aims at is 70 %; on the 2-core
// CI machine the two stages share the cores with the engine core and the API server, so the
// test asserts 40 % and records what it measured (docs/BENCHMARKS.md has the figures).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"

namespace vllm {
namespace {

using nlohmann::json;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class ServePipelineTest : public testing::ServeTest {};

TEST_F(ServePipelineTest, BothStagesStayBusyAtConcurrency16) {
  const std::string log_path =
      absl::StrCat(::testing::TempDir(), "/serve_pipeline_", getpid(), ".log");
  std::remove(log_path.c_str());
  ASSERT_NO_FATAL_FAILURE(StartServer(
      {"-pp", "2"}, {"/bin/sh", "-c", absl::StrCat("exec \"$0\" \"$@\" 2>>", log_path)}));
  // 16 clients, each two requests of 96 tokens after the same prompt: the batch stays at 16
  // requests nearly all the time.
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  std::vector<std::thread> clients;
  std::vector<int> ok(16, 0);
  for (int c = 0; c < 16; ++c) {
    clients.emplace_back([&, c] {
      for (int r = 0; r < 2 && absl::Now() < deadline; ++r) {
        const json body = {{"prompt", "In the beginning God created the heaven"},
                           {"max_tokens", 96},
                           {"ignore_eos", true},
                           {"temperature", 0}};
        auto reply = testing::Http(port_, "POST", "/v1/completions", body.dump(),
                                   "application/json", absl::Seconds(60));
        if (reply.ok() && reply->status == 200) ++ok[c];
      }
    });
  }
  for (std::thread& t : clients) t.join();
  for (int c = 0; c < 16; ++c) EXPECT_EQ(ok[c], 2) << "client " << c;
  server_->Kill(SIGTERM);
  auto status = server_->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.ok()) << status.status();
  const std::string log = ReadFile(log_path);
  std::remove(log_path.c_str());
  const std::regex line(
      R"(worker rank (\d) \(pipeline stage (\d)\): (\d+) steps, busy ([0-9.]+) %)");
  int stages = 0;
  for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it) {
    const int stage = std::stoi((*it)[2].str());
    const double busy = std::stod((*it)[4].str());
    ::testing::Test::RecordProperty(absl::StrCat("busy_percent_stage_", stage), absl::StrCat(busy));
    std::printf("stage %d: %s steps, busy %.1f %%\n", stage, (*it)[3].str().c_str(), busy);
    EXPECT_GE(busy, 40.0) << "stage " << stage << " idled too much:\n" << (*it)[0].str();
    ++stages;
  }
  EXPECT_EQ(stages, 2) << log;
}

}  // namespace
}  // namespace vllm
