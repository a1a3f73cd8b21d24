// A hung worker (SIGSTOP) bounded by VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (vLLM's variable, 2 s
// here): the engine fails its in-flight requests within the timeout + 1 s with an error that
// names the stopped worker rank and the timeout, /health reports it (503 with one engine;
// 200 "degraded" naming the engine with data parallelism, where the other engine's streams
// finish and --restart-dead-engines brings the failed one back), and the stopped worker, like
// every process and /dev/shm entry of the failed engine, is gone (ServeTest's tear-down).
#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"

namespace vllm {
namespace {

using nlohmann::json;

// VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1: the one-engine server stays up to answer 503.
const std::vector<std::string> kTimeoutEnv = {
    "/usr/bin/env", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=2", "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1"};

std::string Series(const std::string& name, int engine) {
  return absl::StrCat(name, "{model_name=\"kjv-llama-tiny\",engine=\"", engine, "\"}");
}

// The error names the stopped rank (by pid too) and the timeout, as the engine saw it.
void ExpectNamesTheHang(const std::string& message, pid_t stopped) {
  EXPECT_TRUE(absl::StrContains(message, absl::StrCat("worker rank 1 (pid ", stopped, ")")))
      << message;
  EXPECT_TRUE(absl::StrContains(message, "is stopped")) << message;
  EXPECT_TRUE(absl::StrContains(message, "timed out after 2s")) << message;
  EXPECT_TRUE(absl::StrContains(message, "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS")) << message;
}

class ServeHungWorkerTest : public testing::ServeTest {
 protected:
  // Worker rank 1 of `engine` (pids ascend with ranks: spawned in order).
  static pid_t Rank1Of(pid_t engine) {
    std::vector<pid_t> workers = testing::ChildrenOf(engine);
    if (workers.size() != 2) return -1;
    std::sort(workers.begin(), workers.end());
    return workers[1];
  }
  // True once `pid` is no longer among the living descendants (reaped or gone).
  static bool GoneBy(pid_t pid, absl::Time deadline) {
    while (absl::Now() < deadline) {
      const std::vector<pid_t> d = Descendants();
      if (std::find(d.begin(), d.end(), pid) == d.end()) return true;
    }
    return false;
  }
};

// One engine (TP 2): a worker stopped while idle; the next request fails within 3 s naming it,
// and /health turns 503 with the same reason.
TEST_F(ServeHungWorkerTest, StoppedWorkerFailsTheEngineAfterTheTimeout) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"-tp", "2"}, kTimeoutEnv));
  const std::vector<pid_t> engines = testing::ChildrenOf(server_->pid());
  ASSERT_EQ(engines.size(), 1u);
  const pid_t stopped = Rank1Of(engines[0]);
  ASSERT_GT(stopped, 0);
  ASSERT_EQ(kill(stopped, SIGSTOP), 0);
  absl::Cleanup resume = [stopped] {  // whatever happens, nothing stays stopped
    kill(stopped, SIGCONT);
    kill(stopped, SIGKILL);
  };
  const absl::Time start = absl::Now();
  const json body = {{"prompt", "In the beginning"}, {"max_tokens", 8}};
  auto r = testing::Http(port_, "POST", "/v1/completions", body.dump());
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 503) << r->body;
  ExpectNamesTheHang(r->Json()["error"].value("message", ""), stopped);
  EXPECT_LE(took, absl::Seconds(3)) << "the timeout is 2 s";
  auto health = testing::Http(port_, "GET", "/health");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->status, 503) << health->body;
  EXPECT_TRUE(absl::StrContains(health->body, "timed out after 2s")) << health->body;
  EXPECT_TRUE(GoneBy(stopped, absl::Now() + absl::Seconds(10))) << "the stopped worker lives on";
}

// -dp 2 -tp 2 with --restart-dead-engines: two streams on each engine, worker rank 1 of
// engine 1 stopped mid-stream. Engine 1's two streams end with an error naming it within 3 s;
// engine 0's finish; /health says "degraded" naming engine 1 until its restart joins again.
TEST_F(ServeHungWorkerTest, OnlyTheEngineOfTheStoppedWorkerFailsAndIsRestarted) {
  ASSERT_NO_FATAL_FAILURE(StartServer(
      {"-dp", "2", "-tp", "2", "-dpa", "127.0.0.1", "--restart-dead-engines"}, kTimeoutEnv));
  const std::vector<pid_t> engines = testing::ChildrenRunning(server_->pid(), "engine-core");
  ASSERT_EQ(engines.size(), 2u);  // spawned in rank order
  const pid_t stopped = Rank1Of(engines[1]);
  ASSERT_GT(stopped, 0);

  const json body = {
      {"prompt", "In the beginning"}, {"max_tokens", 300}, {"ignore_eos", true}, {"stream", true}};
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  testing::StreamResult streams[4];
  absl::Time ended[4];
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([&, i] {
      streams[i] = testing::RunStream(port_, "/v1/completions", body, deadline);
      ended[i] = absl::Now();
    });
  }
  testing::MetricSamples m;
  do {
    m = testing::ScrapeMetrics(port_);
  } while ((m[Series("vllm:num_requests_running", 0)] != 2 ||
            m[Series("vllm:num_requests_running", 1)] != 2) &&
           absl::Now() < deadline);
  ASSERT_EQ(kill(stopped, SIGSTOP), 0);
  const absl::Time start = absl::Now();
  absl::Cleanup resume = [stopped] {
    kill(stopped, SIGCONT);
    kill(stopped, SIGKILL);
  };
  // /health while engine 1 is down (its restart follows a second later).
  json degraded;
  while (absl::Now() < start + absl::Seconds(10)) {
    auto h = testing::Http(port_, "GET", "/health");
    if (h.ok() && h->status == 200 && absl::StrContains(h->body, "degraded")) {
      degraded = h->Json();
      break;
    }
  }
  for (std::thread& t : clients) t.join();
  ASSERT_EQ(m[Series("vllm:num_requests_running", 0)], 2);
  ASSERT_EQ(m[Series("vllm:num_requests_running", 1)], 2);

  int failed = 0, finished = 0;
  for (int i = 0; i < 4; ++i) {
    const testing::StreamResult& s = streams[i];
    ASSERT_EQ(s.status, 200) << s.error;
    ASSERT_FALSE(s.events.empty()) << s.error;
    const json& last = s.events.back();
    if (last.contains("error")) {
      ++failed;
      EXPECT_EQ(last["error"].value("code", 0), 503) << last.dump();
      const std::string message = last["error"].value("message", "");
      EXPECT_TRUE(absl::StrContains(message, "engine 1")) << message;
      ExpectNamesTheHang(message, stopped);
      EXPECT_LE(ended[i] - start, absl::Seconds(3)) << "the timeout is 2 s";
    } else {
      ++finished;
      EXPECT_TRUE(s.done);
    }
  }
  EXPECT_EQ(failed, 2);
  EXPECT_EQ(finished, 2);
  EXPECT_EQ(degraded.value("status", ""), "degraded") << degraded.dump();
  EXPECT_EQ(degraded["live_engines"], json::array({0})) << degraded.dump();
  EXPECT_TRUE(GoneBy(stopped, absl::Now() + absl::Seconds(10))) << "the stopped worker lives on";

  // --restart-dead-engines: engine 1 comes back and /health is whole again.
  bool healthy = false;
  while (!healthy && absl::Now() < deadline) {
    auto h = testing::Http(port_, "GET", "/health");
    healthy = h.ok() && h->status == 200 && h->body.empty();
  }
  EXPECT_TRUE(healthy) << "engine 1 was not restarted";
}

}  // namespace
}  // namespace vllm
