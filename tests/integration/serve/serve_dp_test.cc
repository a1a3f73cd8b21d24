// Data parallelism on one node (`--data-parallel-size 2`): two engine-core processes behind
// one API server. Greedy answers are those of `-dp 1` (with EAGLE-3 drafts too), every engine
// serves requests (per-engine /metrics series), and kill -9 of engine 1 with two streams on each
// engine fails exactly its two (503 naming it): engine 0's finish, new requests go to the live
// engine, /health answers 200 "degraded" with the dead rank, nothing is orphaned or left in
// /dev/shm. With `-asc 2` both API server processes get requests on fresh connections and each sees
// both engines serve, an engine's death degrades both, SIGTERM drains streams on both, and kill -9
// of an API server stops the launcher (exit 1, nothing left). A hybrid node
// (`-dp 4 -dpl 2 -dpr 2`) names ranks 2-3 in /metrics and /health.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"

namespace vllm {
namespace {

using nlohmann::json;

std::string Series(const std::string& name, int engine, const std::string& extra = "") {
  return absl::StrCat(name, "{model_name=\"kjv-llama-tiny\",engine=\"", engine, "\"", extra, "}");
}

class ServeDpTest : public testing::ServeTest {
 protected:
  // Greedy completions of `prompts`, sent all at once.
  std::vector<std::string> Complete(const std::vector<std::string>& prompts) {
    std::vector<std::string> texts(prompts.size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < prompts.size(); ++i) {
      clients.emplace_back([&, i] {
        const json body = {{"prompt", prompts[i]}, {"max_tokens", 12}, {"temperature", 0}};
        auto r = testing::Http(port_, "POST", "/v1/completions", body.dump());
        if (r.ok() && r->status == 200) {
          texts[i] = r->Json()["choices"][0].value("text", "");
        } else {
          texts[i] = absl::StrCat("<failed: ", r.ok() ? r->body : r.status().ToString(), ">");
        }
      });
    }
    for (std::thread& t : clients) t.join();
    return texts;
  }

  void StopServer() {
    server_->Kill(SIGINT);
    auto status = server_->Wait(absl::Seconds(10));
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
        << testing::DescribeWaitStatus(*status);
    server_.reset();
  }
};

TEST_F(ServeDpTest, TwoEnginesAnswerAsOneAndBothServe) {
  const std::vector<std::string> prompts = {
      "In the beginning", "And God said",   "Let there be light", "And the earth was",
      "The LORD is my",   "Blessed is the", "For God so loved",   "And it came to pass"};
  ASSERT_NO_FATAL_FAILURE(StartServer({"--data-parallel-size", "2"}));
  EXPECT_EQ(testing::ChildrenRunning(server_->pid(), "engine-core").size(), 2u);
  // The head of -dp 2 runs the DP coordinator too (vLLM's launch_core_engines does).
  EXPECT_EQ(testing::ChildrenRunning(server_->pid(), "dp-coordinator").size(), 1u);
  const std::vector<std::string> dp2 = Complete(prompts);
  const auto served = [](const testing::MetricSamples& m, int engine) {
    const std::string series =
        Series("vllm:request_success_total", engine, ",finished_reason=\"length\"");
    return m.count(series) > 0 ? m.at(series) : -1.0;
  };
  // One round of 8 short requests may all go to one engine (engine loads published between
  // them reset the balancer's in-flight counts, as vLLM's do): rounds repeat, 30 s at most,
  // until both engines have served one.
  testing::MetricSamples m = testing::ScrapeMetrics(port_);
  int rounds = 1;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while ((served(m, 0) <= 0 || served(m, 1) <= 0) && absl::Now() < deadline) {
    for (const std::string& text : Complete(prompts)) {
      EXPECT_FALSE(absl::StartsWith(text, "<failed")) << text;
    }
    ++rounds;
    m = testing::ScrapeMetrics(port_);
  }
  double total = 0;
  for (int engine : {0, 1}) {
    EXPECT_GT(served(m, engine), 0) << "engine " << engine << " served nothing";
    total += served(m, engine);
    EXPECT_EQ(m.count(Series("vllm:kv_cache_usage_perc", engine)), 1u) << "engine " << engine;
  }
  EXPECT_EQ(total, static_cast<double>(rounds * prompts.size()));
  ASSERT_NO_FATAL_FAILURE(StopServer());

  ASSERT_NO_FATAL_FAILURE(StartServer({}));
  const std::vector<std::string> dp1 = Complete(prompts);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_FALSE(absl::StartsWith(dp1[i], "<failed")) << dp1[i];
    EXPECT_EQ(dp2[i], dp1[i]) << "prompt '" << prompts[i] << "'";
  }
  ASSERT_NO_FATAL_FAILURE(StopServer());

  // Speculative decoding with drafts from the workers (the bundled EAGLE-3 head) on both
  // engines: the same greedy answers.
  const std::string head = std::string(VLLM_SOURCE_DIR) + "/models/kjv-llama-tiny-eagle3";
  ASSERT_NO_FATAL_FAILURE(StartServer(
      {"--data-parallel-size", "2", "--speculative-config",
       json{{"method", "eagle3"}, {"model", head}, {"num_speculative_tokens", 3}}.dump()}));
  const std::vector<std::string> drafted = Complete(prompts);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(drafted[i], dp1[i]) << "prompt '" << prompts[i] << "' with EAGLE-3 drafts";
  }
  EXPECT_GT(testing::SumOf(testing::ScrapeMetrics(port_), "vllm:spec_decode_num_drafts_total"), 0)
      << "no draft was verified";
  ASSERT_NO_FATAL_FAILURE(StopServer());
}

// 200 requests of mixed lengths (one in ten a long generation) from 16 closed-loop clients at
// DP 4: no engine holds more than 1.5x the mean number of requests (waiting + running, as the
// engines report them on /metrics), sampled every 20 ms (which samples count: below).
// Measured on 2 cores: worst 1.33-1.45x, mean 1.09x with the outstanding-requests rule; with
// vLLM 0.33's rule (picks since the engine's last figures) the worst was 2.0x and the mean
// 1.35x, and the run took twice as long.
TEST_F(ServeDpTest, LoadStaysBalancedUnderAMixedLoad) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"--data-parallel-size", "4"}));
  constexpr int kRequests = 200, kClients = 16, kEngines = 4;
  std::atomic<int> next{0}, ok{0};
  absl::Notification done;
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&] {
      for (int i = next.fetch_add(1); i < kRequests; i = next.fetch_add(1)) {
        const bool long_one = i % 10 == 3;
        const json body = {{"prompt", absl::StrCat("And it came to pass ", i)},
                           {"max_tokens", long_one ? 200 : 8 + (i * 7) % 25},
                           {"ignore_eos", true}};
        auto r = testing::Http(port_, "POST", "/v1/completions", body.dump(), "application/json",
                               absl::Seconds(120));
        if (r.ok() && r->status == 200) ok.fetch_add(1);
      }
    });
  }
  double worst = 0, sum_ratio = 0;
  std::string worst_sample;
  int samples = 0;
  std::thread sampler([&] {
    while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(20))) {
      const testing::MetricSamples m = testing::ScrapeMetrics(port_);
      double total = 0, most = 0;
      for (int e = 0; e < kEngines; ++e) {
        const double load = m.count(Series("vllm:num_requests_running", e)) > 0
                                ? m.at(Series("vllm:num_requests_running", e)) +
                                      m.at(Series("vllm:num_requests_waiting", e))
                                : 0;
        total += load;
        most = std::max(most, load);
      }
      // Counted: moments when the engines report at least 3/4 of the 16 requests in flight,
      // while requests are still being sent. Left out: the drain at the end (the last long
      // generations finish where they run; nothing new arrives to balance with) and moments
      // when many requests are between the client and an engine (the engines' figures lag
      // the API server's, unevenly: 4 of 8 reported on one engine happens then).
      if (total < 3 * kEngines || next.load() >= kRequests) continue;
      const double ratio = most / (total / kEngines);
      if (ratio > worst) worst_sample = absl::StrCat(most, " of ", total);
      worst = std::max(worst, ratio);
      sum_ratio += ratio;
      ++samples;
    }
  });
  for (std::thread& t : clients) t.join();
  done.Notify();
  sampler.join();
  EXPECT_EQ(ok.load(), kRequests);
  ASSERT_GT(samples, 10) << "too few samples with load";
  std::printf("max/mean requests per engine over %d samples: worst %.2f (%s), mean %.2f\n", samples,
              worst, worst_sample.c_str(), sum_ratio / samples);
  EXPECT_LE(worst, 1.5);
  ASSERT_NO_FATAL_FAILURE(StopServer());
}

TEST_F(ServeDpTest, OneDeadEngineFailsOnlyItsRequests) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"--data-parallel-size", "2"}));
  std::vector<pid_t> engines = testing::ChildrenRunning(server_->pid(), "engine-core");
  ASSERT_EQ(engines.size(), 2u);  // spawned in rank order
  const pid_t rank1 = engines[1];

  // Four long streams: the balancer puts two on each idle engine.
  const json body = {
      {"prompt", "In the beginning"}, {"max_tokens", 300}, {"ignore_eos", true}, {"stream", true}};
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  testing::StreamResult streams[4];
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back(
        [&, i] { streams[i] = testing::RunStream(port_, "/v1/completions", body, deadline); });
  }
  testing::MetricSamples m;
  do {
    m = testing::ScrapeMetrics(port_);
  } while ((m[Series("vllm:num_requests_running", 0)] != 2 ||
            m[Series("vllm:num_requests_running", 1)] != 2) &&
           absl::Now() < deadline);
  ASSERT_EQ(m[Series("vllm:num_requests_running", 0)], 2);
  ASSERT_EQ(m[Series("vllm:num_requests_running", 1)], 2);
  ASSERT_EQ(kill(rank1, SIGKILL), 0);
  for (std::thread& t : clients) t.join();

  int failed = 0, finished = 0;
  for (const testing::StreamResult& s : streams) {
    ASSERT_EQ(s.status, 200) << s.error;
    ASSERT_FALSE(s.events.empty()) << s.error;
    const json& last = s.events.back();
    if (last.contains("error")) {
      ++failed;
      EXPECT_EQ(last["error"].value("code", 0), 503) << last.dump();
      EXPECT_TRUE(absl::StrContains(last["error"].value("message", ""), "engine 1")) << last.dump();
    } else {
      ++finished;
      EXPECT_TRUE(s.done);
    }
  }
  EXPECT_EQ(failed, 2);
  EXPECT_EQ(finished, 2);

  // Degraded, not down: /health is 200 and names the dead rank; new requests are served.
  auto health = testing::Http(port_, "GET", "/health");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->status, 200) << health->body;
  const json h = health->Json();
  EXPECT_EQ(h.value("status", ""), "degraded") << health->body;
  EXPECT_EQ(h["live_engines"], json::array({0})) << health->body;
  ASSERT_EQ(h["dead_engines"].size(), 1u) << health->body;
  EXPECT_EQ(h["dead_engines"][0].value("engine", -1), 1) << health->body;
  for (const std::string& text : Complete({"a", "b", "c", "d"})) {
    EXPECT_FALSE(absl::StartsWith(text, "<failed")) << text;
  }
  // The dead engine's gauges read zero; its series are still there.
  m = testing::ScrapeMetrics(port_);
  EXPECT_EQ(m.count(Series("vllm:num_requests_running", 1)), 1u);
  EXPECT_EQ(m[Series("vllm:num_requests_running", 1)], 0);

  // Nothing of the dead engine is left; the live one is still there.
  EXPECT_EQ(testing::ChildrenRunning(server_->pid(), "engine-core"),
            std::vector<pid_t>{engines[0]});
  ASSERT_NO_FATAL_FAILURE(StopServer());
  for (pid_t pid : Descendants()) EXPECT_FALSE(true) << "orphaned process " << pid;
}

// --api-server-count 2: two API server processes share the port (SO_REUSEPORT) and each is
// a client of both engines. Requests on fresh connections reach both (the Server header
// names the process), each process's /metrics shows requests served by both engines, an
// engine's death reaches both (/health degraded on each), and SIGINT stops all cleanly.
TEST_F(ServeDpTest, TwoApiServersShareThePortAndSeeEveryEngine) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"--data-parallel-size", "2", "--api-server-count", "2"}));
  // Two API servers, then two engine cores (and the DP coordinator, started first).
  std::vector<pid_t> children = testing::ChildrenNotRunning(server_->pid(), "dp-coordinator");
  ASSERT_EQ(children.size(), 4u);
  const json body = {{"prompt", "In the beginning"}, {"max_tokens", 4}, {"temperature", 0}};
  std::map<std::string, int> answered;  // Server header → requests
  std::set<std::string> texts;
  for (int i = 0; i < 32; ++i) {
    auto r = testing::Http(port_, "POST", "/v1/completions", body.dump());
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->status, 200) << r->body;
    ++answered[r->server];
    texts.insert(r->Json()["choices"][0].value("text", ""));
  }
  EXPECT_EQ(texts.size(), 1u) << "greedy answers differ between processes or engines";
  ASSERT_EQ(answered.size(), 2u);
  EXPECT_GT(answered["vllm-launch api-server/0"], 0);
  EXPECT_GT(answered["vllm-launch api-server/1"], 0);

  // Each process's own /metrics: both engines served its requests.
  std::set<std::string> scraped;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (scraped.size() < 2 && absl::Now() < deadline) {
    auto r = testing::Http(port_, "GET", "/metrics", "", "");
    ASSERT_TRUE(r.ok()) << r.status();
    if (!scraped.insert(r->server).second) continue;
    const testing::MetricSamples m = testing::ParseMetrics(r->body);
    for (int engine : {0, 1}) {
      const std::string series =
          Series("vllm:request_success_total", engine, ",finished_reason=\"length\"");
      EXPECT_GT(m.count(series) ? m.at(series) : 0.0, 0) << r->server << ", engine " << engine;
    }
  }
  EXPECT_EQ(scraped.size(), 2u);

  // kill -9 of engine 1: the launcher tells both API servers; each says "degraded".
  ASSERT_EQ(kill(children[3], SIGKILL), 0);
  std::set<std::string> degraded;
  while (degraded.size() < 2 && absl::Now() < deadline + absl::Seconds(10)) {
    auto health = testing::Http(port_, "GET", "/health", "", "");
    ASSERT_TRUE(health.ok()) << health.status();
    const json h = health->Json();  // a healthy server answers 200 with no body
    if (health->status == 200 && h.is_object() && h.value("status", "") == "degraded") {
      EXPECT_EQ(h["live_engines"], json::array({0})) << health->body;
      degraded.insert(health->server);
    }
  }
  EXPECT_EQ(degraded.size(), 2u);
  for (int i = 0; i < 8; ++i) {
    auto r = testing::Http(port_, "POST", "/v1/completions", body.dump());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200) << r->server << ": " << r->body;
  }
  ASSERT_NO_FATAL_FAILURE(StopServer());
  for (pid_t pid : Descendants()) EXPECT_FALSE(true) << "orphaned process " << pid;
}

// Hybrid load balancing (vLLM infers it from a start rank on a node that is not headless):
// this instance serves ranks 2-3 of -dp 4 alone, names them so in /metrics and /health, and
// an engine's death fails only that rank.
TEST_F(ServeDpTest, AHybridNodeServesItsOwnRanks) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"-dp", "4", "-dpl", "2", "-dpr", "2"}));
  std::vector<pid_t> engines = testing::ChildrenOf(server_->pid());
  ASSERT_EQ(engines.size(), 2u);
  std::sort(engines.begin(), engines.end());  // ranks 2, 3
  const std::vector<std::string> texts = Complete({"a", "b", "c", "d", "e", "f"});
  for (const std::string& text : texts) EXPECT_FALSE(absl::StartsWith(text, "<failed")) << text;
  testing::MetricSamples m = testing::ScrapeMetrics(port_);
  for (int rank : {2, 3}) {
    EXPECT_EQ(m.count(Series("vllm:num_requests_running", rank)), 1u) << "rank " << rank;
  }
  EXPECT_EQ(m.count(Series("vllm:num_requests_running", 0)), 0u);
  EXPECT_EQ(testing::SumOf(m, "vllm:request_success_total"), 6.0);

  ASSERT_EQ(kill(engines[1], SIGKILL), 0);
  json h;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    auto health = testing::Http(port_, "GET", "/health");
    ASSERT_TRUE(health.ok()) << health.status();
    h = health->Json();
  } while (!(h.is_object() && h.value("status", "") == "degraded") && absl::Now() < deadline);
  ASSERT_TRUE(h.is_object()) << h.dump();
  EXPECT_EQ(h["live_engines"], json::array({2})) << h.dump();
  ASSERT_EQ(h["dead_engines"].size(), 1u) << h.dump();
  EXPECT_EQ(h["dead_engines"][0].value("engine", -1), 3) << h.dump();
  EXPECT_TRUE(absl::StrContains(h["dead_engines"][0].value("error", ""), "engine 3")) << h.dump();
  for (const std::string& text : Complete({"a", "b"})) {
    EXPECT_FALSE(absl::StartsWith(text, "<failed")) << text;
  }
  ASSERT_NO_FATAL_FAILURE(StopServer());
  for (pid_t pid : Descendants()) EXPECT_FALSE(true) << "orphaned process " << pid;
}

// SIGTERM to the launcher of two API servers: both drain (streams in flight on either finish
// with [DONE]), then everything stops and the launcher exits 0.
TEST_F(ServeDpTest, SigtermDrainsEveryApiServer) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"--api-server-count", "2"}));
  const json body = {
      {"prompt", "In the beginning"}, {"max_tokens", 150}, {"ignore_eos", true}, {"stream", true}};
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  testing::StreamResult streams[6];
  std::vector<std::thread> clients;
  for (int i = 0; i < 6; ++i) {
    clients.emplace_back(
        [&, i] { streams[i] = testing::RunStream(port_, "/v1/completions", body, deadline); });
  }
  testing::MetricSamples m;
  do {  // until one API server has a stream running (each process shows its own)
    m = testing::ScrapeMetrics(port_);
  } while (testing::SumOf(m, "vllm:num_requests_running") == 0 && absl::Now() < deadline);
  server_->Kill(SIGTERM);
  for (std::thread& t : clients) t.join();
  for (const testing::StreamResult& s : streams) {
    EXPECT_EQ(s.status, 200) << s.error;
    EXPECT_TRUE(s.done) << s.error;
  }
  auto status = server_->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << testing::DescribeWaitStatus(*status);
  server_.reset();
  for (pid_t pid : Descendants()) EXPECT_FALSE(true) << "orphaned process " << pid;
}

// An API server process that dies takes the whole server down (as vLLM): the launcher stops
// the other API server and the engines and exits with an error naming it.
TEST_F(ServeDpTest, ADeadApiServerStopsTheServer) {
  ASSERT_NO_FATAL_FAILURE(StartServer({"--data-parallel-size", "2", "--api-server-count", "2"}));
  std::vector<pid_t> children = testing::ChildrenRunning(server_->pid(), "api-server");
  ASSERT_EQ(children.size(), 2u);
  ASSERT_EQ(kill(children[0], SIGKILL), 0);  // API server 0
  auto status = server_->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1)
      << testing::DescribeWaitStatus(*status);
  server_.reset();
  for (pid_t pid : Descendants()) EXPECT_FALSE(true) << "orphaned process " << pid;
}

}  // namespace
}  // namespace vllm
