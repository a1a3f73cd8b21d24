// Engine failures seen from the HTTP side: kill -9 of the engine core (TP 1) or of worker rank
// 0 or rank 1 (TP 2; PP 2's second stage) while four requests (two streamed, two plain) are
// generating. Every in-flight request gets an error within 5 s, never a hang: an SSE error event
// with code 503 on a stream, a 503 JSON body otherwise; then /health and new requests answer 503,
// every child of the server exits, and Ctrl-C stops the server (VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1
// keeps it up). A worker killed while idle turns /health 503 at once, without waiting for a
// request to fail.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"

namespace vllm {
namespace {

using nlohmann::json;

// The server stays up once its engine is dead (vLLM's default 0 stops it: serve_env_test).
const std::vector<std::string> kKeepAlive = {"/usr/bin/env", "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1"};

class ServeFailureTest : public testing::ServeTest {
 protected:
  // Starts long requests (two streamed, two not), waits until the engine runs all four,
  // kill -9s the engine core (worker_rank < 0) or the worker of that rank (pids ascend with
  // ranks: they are spawned in order), then checks what the clients and the server do.
  void KillDuringRequests(const std::vector<std::string>& server_args, int worker_rank);
};

// An error as the server sends it (a body, or an SSE event):
// {"error": {"message", "type", "param", "code"}}.
bool IsError(const json& j) {
  return j.is_object() && j.contains("error") && j["error"].is_object() &&
         j["error"].contains("message") && j["error"].contains("code");
}

void ServeFailureTest::KillDuringRequests(const std::vector<std::string>& server_args,
                                          int worker_rank) {
  ASSERT_NO_FATAL_FAILURE(StartServer(server_args, kKeepAlive));
  const std::vector<pid_t> engines = testing::ChildrenOf(server_->pid());
  ASSERT_EQ(engines.size(), 1u);
  pid_t victim = engines[0];
  if (worker_rank >= 0) {
    std::vector<pid_t> workers = testing::ChildrenOf(engines[0]);
    ASSERT_EQ(workers.size(), 2u);
    std::sort(workers.begin(), workers.end());
    victim = workers[worker_rank];
  }

  // Each request alone decodes for over a second; four together for several.
  const json completion = {
      {"prompt", "In the beginning"}, {"max_tokens", 1000}, {"ignore_eos", true}};
  const json chat = {{"messages", {{{"role", "user"}, {"content", "And God said"}}}},
                     {"max_tokens", 1000},
                     {"ignore_eos", true}};
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  testing::StreamResult streams[2];
  absl::StatusOr<testing::HttpResponse> plain[2] = {absl::UnknownError("not run"),
                                                    absl::UnknownError("not run")};
  absl::Time answered[4];
  std::vector<std::thread> clients;
  for (int i = 0; i < 2; ++i) {
    clients.emplace_back([&, i] {
      json body = i == 0 ? completion : chat;
      body["stream"] = true;
      streams[i] = testing::RunStream(port_, i == 0 ? "/v1/completions" : "/v1/chat/completions",
                                      body, deadline);
      answered[i] = absl::Now();
    });
    clients.emplace_back([&, i] {
      plain[i] =
          testing::Http(port_, "POST", i == 0 ? "/v1/completions" : "/v1/chat/completions",
                        (i == 0 ? completion : chat).dump(), "application/json", absl::Seconds(30));
      answered[2 + i] = absl::Now();
    });
  }
  // Kill once the engine runs all four (its stats ride on every step's outputs).
  const std::string running =
      "vllm:num_requests_running{model_name=\"kjv-llama-tiny\",engine=\"0\"}";
  testing::MetricSamples m;
  do {
    m = testing::ScrapeMetrics(port_);
  } while (m[running] != 4 && absl::Now() < deadline);
  EXPECT_EQ(m[running], 4);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const absl::Time killed = absl::Now();
  for (std::thread& t : clients) t.join();

  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(absl::StrCat(i == 0 ? "completion" : "chat", " stream"));
    const testing::StreamResult& s = streams[i];
    ASSERT_EQ(s.status, 200) << s.error;
    ASSERT_FALSE(s.events.empty()) << s.error;
    EXPECT_TRUE(IsError(s.events.back())) << s.events.back().dump();
    EXPECT_EQ(s.events.back()["error"].value("code", 0), 503) << s.events.back().dump();
    for (size_t e = 0; e + 1 < s.events.size(); ++e) {
      EXPECT_TRUE(s.events[e]["choices"][0]["finish_reason"].is_null()) << s.events[e].dump();
    }
    EXPECT_LT(answered[i] - killed, absl::Seconds(5));
  }
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i == 0 ? "completion" : "chat");
    ASSERT_TRUE(plain[i].ok()) << plain[i].status();
    EXPECT_GE(plain[i]->status, 500) << plain[i]->body;
    EXPECT_TRUE(IsError(plain[i]->Json())) << plain[i]->body;
    EXPECT_LT(answered[2 + i] - killed, absl::Seconds(5));
  }
  std::printf(
      "in-flight requests failed %s after the kill\n",
      absl::FormatDuration(std::max({answered[0], answered[1], answered[2], answered[3]}) - killed)
          .c_str());

  // The server stays up, says it is unhealthy, and refuses new work at once.
  auto health = testing::Http(port_, "GET", "/health");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->status, 503) << health->body;
  EXPECT_TRUE(IsError(health->Json())) << health->body;
  auto refused = testing::Http(port_, "POST", "/v1/completions",
                               json{{"prompt", "x"}, {"max_tokens", 2}}.dump(), "application/json",
                               absl::Seconds(5));
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->status, 503) << refused->body;

  // Every child of the server (engine core, workers) is gone.
  EXPECT_TRUE(WaitNoChildren(server_->pid(), absl::Now() + absl::Seconds(5)))
      << "a child of the server is still running";
  for (pid_t pid : Descendants()) {
    EXPECT_EQ(pid, server_->pid()) << "orphaned process " << pid;
  }

  server_->Kill(SIGINT);
  auto status = server_->Wait(absl::Seconds(5));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status)) << testing::DescribeWaitStatus(*status);
}

TEST_F(ServeFailureTest, EngineCoreKilledFailsInFlightRequests) {
  KillDuringRequests({}, /*worker_rank=*/-1);
}

TEST_F(ServeFailureTest, WorkerRank1KilledFailsInFlightRequests) {
  KillDuringRequests({"-tp", "2"}, /*worker_rank=*/1);
}

// Pipeline parallelism: the second stage's worker (rank 1 of -pp 2) dies while the first
// stage feeds it; the same end, whichever stage was waiting on the other.
TEST_F(ServeFailureTest, PipelineStage2WorkerKilledFailsInFlightRequests) {
  KillDuringRequests({"-pp", "2"}, /*worker_rank=*/1);
}

TEST_F(ServeFailureTest, WorkerRank0KilledFailsInFlightRequests) {
  KillDuringRequests({"-tp", "2"}, /*worker_rank=*/0);
}

// A worker that dies while nothing runs takes the engine down at once: /health turns 503
// without waiting for a request to fail, and no process is left.
TEST_F(ServeFailureTest, IdleWorkerKilledTurnsHealthUnavailable) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"-tp", "2"}, kKeepAlive));
  const std::vector<pid_t> engines = testing::ChildrenOf(server_->pid());
  ASSERT_EQ(engines.size(), 1u);
  std::vector<pid_t> workers = testing::ChildrenOf(engines[0]);
  ASSERT_EQ(workers.size(), 2u);
  auto health = testing::Http(port_, "GET", "/health");
  ASSERT_TRUE(health.ok()) << health.status();
  ASSERT_EQ(health->status, 200);

  ASSERT_EQ(kill(workers[0], SIGKILL), 0);
  const absl::Time killed = absl::Now();
  do {
    health = testing::Http(port_, "GET", "/health");
    ASSERT_TRUE(health.ok()) << health.status();
  } while (health->status == 200 && absl::Now() < killed + absl::Seconds(5));
  std::printf("/health answered %d %s after the kill\n", health->status,
              absl::FormatDuration(absl::Now() - killed).c_str());
  EXPECT_EQ(health->status, 503) << health->body;
  EXPECT_TRUE(absl::StrContains(health->Json()["error"].value("message", ""), "killed by signal 9"))
      << health->body;
  EXPECT_TRUE(WaitNoChildren(server_->pid(), absl::Now() + absl::Seconds(5)));
  server_->Kill(SIGINT);
  auto status = server_->Wait(absl::Seconds(5));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status)) << testing::DescribeWaitStatus(*status);
}

}  // namespace
}  // namespace vllm
