// The fixture of the multi-node tests: two "nodes" (network namespaces joined by a veth link,
// tests/support/netns.h), a head on node A started through ServeTest, commands on node B, a
// cluster key, and the clients and checks those tests share. Skips, saying why, when not root.
#ifndef VLLM_TESTS_MULTINODE_MULTINODE_FIXTURE_H_
#define VLLM_TESTS_MULTINODE_MULTINODE_FIXTURE_H_

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "ipc/curve.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"
#include "tests/support/netns.h"
#include "tests/support/process.h"

namespace vllm::testing_multinode {

using nlohmann::json;

constexpr int kRpcPort = 13345;

inline std::string Series(const std::string& name, int engine, const std::string& extra = "") {
  return absl::StrCat(name, "{model_name=\"kjv-llama-tiny\",engine=\"", engine, "\"", extra, "}");
}

inline const std::vector<std::string> kPrompts = {
    "In the beginning", "And God said",   "Let there be light", "And the earth was",
    "The LORD is my",   "Blessed is the", "For God so loved",   "And it came to pass"};

class MultinodeTest : public testing::ServeTest {
 protected:
  void SetUp() override {
    ServeTest::SetUp();
    auto pair = testing::NetnsPair::Create();
    if (absl::IsFailedPrecondition(pair.status())) GTEST_SKIP() << pair.status().message();
    ASSERT_TRUE(pair.ok()) << pair.status();
    nodes_ = std::move(*pair);
    key_file_ = absl::StrCat(::testing::TempDir(), "/vllm-cluster-key-", getpid());
    unlink(key_file_.c_str());
    auto keys = ipc::CreateCurveKeyFile(key_file_);
    ASSERT_TRUE(keys.ok()) << keys.status();
  }

  void TearDown() override {
    for (auto& node : headless_) {
      if (node.running()) {
        node.Kill(SIGKILL);
        (void)node.Wait(absl::Seconds(5));
      }
    }
    headless_.clear();
    ServeTest::TearDown();
    nodes_.reset();  // after every process in the namespaces is gone
    if (!key_file_.empty()) unlink(key_file_.c_str());
    if (!fake_slurm_.empty()) std::filesystem::remove_all(fake_slurm_);
  }

  // Runs `fn` on a thread inside node A's network namespace (where the head's API server
  // listens on 127.0.0.1); threads it starts are in that namespace too.
  void InNodeA(const std::function<void()>& fn) {
    std::thread t([&] {
      const int fd = open(absl::StrCat("/var/run/netns/", nodes_->name_a()).c_str(), O_RDONLY);
      ASSERT_GE(fd, 0);
      ASSERT_EQ(setns(fd, CLONE_NEWNET), 0);
      close(fd);
      fn();
    });
    t.join();
  }

  std::vector<std::string> Common(const std::string& dp) {
    return {"-dp",
            dp,
            "-dpa",
            nodes_->address_a(),
            "-dpp",
            absl::StrCat(kRpcPort),
            "--kv-cache-memory",
            "64MiB"};
  }

  // env for every node: short deadlines, so a dead or missing node shows within seconds
  // (heartbeat_timeout_s_: how long silence takes a node or an engine as gone).
  std::vector<std::string> Env(const std::vector<std::string>& in_node) {
    std::vector<std::string> argv = in_node;
    argv.insert(argv.end(),
                {"/usr/bin/env", "VLLM_ENGINE_READY_TIMEOUT_S=60",
                 absl::StrCat("VLLM_ENGINE_HEARTBEAT_TIMEOUT_S=", heartbeat_timeout_s_)});
    return argv;
  }

  // Starts node B (--headless) with `args`; returns once it printed its line. With
  // `stderr_file`, its stderr (its processes' logs) goes there.
  void StartNodeB(const std::vector<std::string>& args, const std::string& stderr_file = "") {
    std::vector<std::string> argv = Env(nodes_->InB({}));
    if (!stderr_file.empty()) {
      argv.insert(argv.end(), {"/bin/sh", "-c", "exec \"$@\" 2>>\"$0\"", stderr_file});
    }
    argv.push_back(testing::BinDir() + "/vllm-launch");
    argv.insert(argv.end(), args.begin(), args.end());
    auto p = testing::Subprocess::Spawn(argv);
    ASSERT_TRUE(p.ok()) << p.status();
    headless_.push_back(std::move(*p));
    auto line = headless_.back().ReadLine(absl::Seconds(30));
    ASSERT_TRUE(line.ok()) << line.status();
    EXPECT_TRUE(absl::StrContains(*line, "headless")) << *line;
  }

  // Starts the head on node A (returns once every engine joined and it serves). With
  // `stderr_file`, the head's stderr (its processes' logs) goes there instead.
  void StartHead(const std::vector<std::string>& args, const std::string& stderr_file = "") {
    std::vector<std::string> prefix = Env(nodes_->InA({}));
    if (!stderr_file.empty()) {
      prefix.insert(prefix.end(), {"/bin/sh", "-c", "exec \"$@\" 2>>\"$0\"", stderr_file});
    }
    ASSERT_NO_FATAL_FAILURE(StartServer(args, prefix));
  }

  // Spawns the head on node A (`vllm-launch --port 0 ARGS`) without waiting for it to serve:
  // for a head that waits for engines a case starts later.
  void SpawnHead(const std::vector<std::string>& args) {
    std::vector<std::string> argv = Env(nodes_->InA({}));
    argv.push_back(testing::BinDir() + "/vllm-launch");
    argv.insert(argv.end(), {"--port", "0"});
    argv.insert(argv.end(), args.begin(), args.end());
    auto head = testing::Subprocess::Spawn(argv);
    ASSERT_TRUE(head.ok()) << head.status();
    server_.emplace(std::move(*head));
  }

  // Greedy completions of kPrompts, all at once, from inside node A.
  std::vector<std::string> Complete(int port) {
    std::vector<std::string> texts(kPrompts.size());
    InNodeA([&] {
      std::vector<std::thread> clients;
      for (size_t i = 0; i < kPrompts.size(); ++i) {
        clients.emplace_back([&, i] {
          const json body = {{"prompt", kPrompts[i]}, {"max_tokens", 12}, {"temperature", 0}};
          auto r = testing::Http(port, "POST", "/v1/completions", body.dump());
          texts[i] = r.ok() && r->status == 200
                         ? r->Json()["choices"][0].value("text", "")
                         : absl::StrCat("<failed: ", r.ok() ? r->body : r.status().ToString(), ">");
        });
      }
      for (std::thread& t : clients) t.join();
    });
    return texts;
  }

  // The answers of one engine on this machine (no data parallelism), for comparison.
  std::vector<std::string> OneEngineAnswers() {
    ServeTest::StartServer({});
    std::vector<std::string> texts(kPrompts.size());
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      const json body = {{"prompt", kPrompts[i]}, {"max_tokens", 12}, {"temperature", 0}};
      auto r = testing::Http(port_, "POST", "/v1/completions", body.dump());
      texts[i] =
          r.ok() && r->status == 200 ? r->Json()["choices"][0].value("text", "") : "<failed>";
    }
    StopHead();
    return texts;
  }

  testing::MetricSamples Metrics() {
    testing::MetricSamples m;
    InNodeA([&] { m = testing::ScrapeMetrics(port_); });
    return m;
  }

  double Served(const testing::MetricSamples& m, int engine) {
    auto it = m.find(Series("vllm:request_success_total", engine, ",finished_reason=\"length\""));
    return it == m.end() ? -1 : it->second;
  }

  void StopHead() {
    server_->Kill(SIGINT);
    auto status = server_->Wait(absl::Seconds(15));
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
        << testing::DescribeWaitStatus(*status);
    server_.reset();
  }

  void StopNodeB() {
    for (auto& node : headless_) {
      if (!node.running()) continue;
      node.Kill(SIGINT);
      auto status = node.Wait(absl::Seconds(15));
      ASSERT_TRUE(status.ok()) << status.status();
      EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
          << testing::DescribeWaitStatus(*status);
    }
    headless_.clear();
  }

  // Every output line of a node-B command that must fail, and how long it took.
  struct Failure {
    int exit_code = -1;
    std::string output;
    absl::Duration took;
  };
  Failure RunNodeBToFailure(const std::vector<std::string>& args, const std::string& ready_s) {
    std::string cmd = absl::StrCat("exec /usr/bin/env VLLM_ENGINE_READY_TIMEOUT_S=", ready_s, " ",
                                   testing::BinDir(), "/vllm-launch");
    for (const std::string& a : args) absl::StrAppend(&cmd, " '", a, "'");
    absl::StrAppend(&cmd, " 2>&1");
    Failure f;
    const absl::Time start = absl::Now();
    auto p = testing::Subprocess::Spawn(nodes_->InB({"/bin/sh", "-c", cmd}));
    if (!p.ok()) {
      f.output = p.status().ToString();
      return f;
    }
    while (true) {
      auto line = p->ReadLine(absl::Seconds(60));
      if (!line.ok()) break;
      absl::StrAppend(&f.output, *line, "\n");
    }
    auto status = p->Wait(absl::Seconds(30));
    f.took = absl::Now() - start;
    if (status.ok() && WIFEXITED(*status)) f.exit_code = WEXITSTATUS(*status);
    return f;
  }

  // Runs two long streams per engine (`engines` engines) from node A, and once every engine
  // runs its two, kill -9s `victims`. Expects every stream to end: with [DONE], or with an
  // error event whose message is returned (one per failed stream).
  std::vector<std::string> KillDuringLoad(int engines, const std::vector<pid_t>& victims) {
    const json body = {{"prompt", "In the beginning"},
                       {"max_tokens", 400},
                       {"ignore_eos", true},
                       {"stream", true}};
    std::vector<testing::StreamResult> streams(2 * engines);
    std::thread load([&] {
      InNodeA([&] {
        std::vector<std::thread> clients;
        for (size_t i = 0; i < streams.size(); ++i) {
          clients.emplace_back([&, i] {
            streams[i] =
                testing::RunStream(port_, "/v1/completions", body, absl::Now() + absl::Seconds(90));
          });
        }
        for (std::thread& t : clients) t.join();
      });
    });
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    auto all_running = [&] {
      const testing::MetricSamples m = Metrics();
      for (int e = 0; e < engines; ++e) {
        auto it = m.find(Series("vllm:num_requests_running", e));
        if (it == m.end() || it->second != 2) return false;
      }
      return true;
    };
    bool running = all_running();
    while (!running && absl::Now() < deadline) running = all_running();
    EXPECT_TRUE(running) << "not two streams on every engine";
    for (pid_t pid : victims) kill(pid, SIGKILL);
    load.join();
    std::vector<std::string> errors;
    for (const testing::StreamResult& s : streams) {
      EXPECT_EQ(s.status, 200) << s.error;
      if (s.events.empty()) {
        errors.push_back(absl::StrCat("<no events: ", s.error, ">"));
      } else if (s.events.back().contains("error")) {
        errors.push_back(s.events.back()["error"].value("message", ""));
      } else {
        EXPECT_TRUE(s.done) << s.error;
      }
    }
    return errors;
  }

  // Every completion of kPrompts succeeds, and each of the `engines` engines served some.
  // The balancer may send one round of 8 short requests all to one engine (engine loads
  // published between them reset its in-flight counts, as vLLM's do), so rounds repeat
  // until every engine has served one, for 30 s at most.
  void ExpectEveryEngineServes(int engines) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    testing::MetricSamples m;
    bool all_served = false;
    while (!all_served && absl::Now() < deadline) {
      for (const std::string& text : Complete(port_)) {
        ASSERT_FALSE(absl::StartsWith(text, "<failed")) << text;
      }
      m = Metrics();
      all_served = true;
      for (int e = 0; e < engines; ++e) all_served = all_served && Served(m, e) > 0;
    }
    for (int e = 0; e < engines; ++e) {
      EXPECT_GT(Served(m, e), 0) << "engine " << e << " served nothing";
    }
  }

  // Waits (30 s at most) until /health says every engine serves (200, empty body).
  bool WaitUntilAllHealthy() {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    bool healthy = false;
    while (!healthy && absl::Now() < deadline) {
      InNodeA([&] {
        auto h = testing::Http(port_, "GET", "/health");
        healthy = h.ok() && h->status == 200 && h->body.empty();
      });
    }
    return healthy;
  }

  // A directory holding a stand-in for Slurm's scontrol that prints the two nodes' addresses
  // (for the docs/recipes scripts); removed by TearDown.
  std::string FakeSlurmBin() {
    fake_slurm_ = absl::StrCat(::testing::TempDir(), "/vllm-fake-slurm-", getpid());
    std::filesystem::create_directories(fake_slurm_);
    {
      std::ofstream scontrol(fake_slurm_ + "/scontrol");
      scontrol << "#!/bin/sh\n[ \"$1 $2\" = \"show hostnames\" ] || exit 2\necho "
               << nodes_->address_a() << "\necho " << nodes_->address_b() << "\n";
    }
    std::filesystem::permissions(fake_slurm_ + "/scontrol", std::filesystem::perms::owner_all);
    return fake_slurm_;
  }

  // Reads the head's "vllm-launch: ready at http://127.0.0.1:PORT/v1" line into port_.
  void ReadReadyPort() {
    auto ready = server_->ReadLine(absl::Seconds(60));
    ASSERT_TRUE(ready.ok()) << ready.status();
    const size_t colon = ready->rfind(':');
    ASSERT_NE(colon, std::string::npos) << *ready;
    ASSERT_TRUE(absl::SimpleAtoi(ready->substr(colon + 1, ready->rfind("/v1") - colon - 1), &port_))
        << *ready;
  }

  int heartbeat_timeout_s_ = 5;
  std::unique_ptr<testing::NetnsPair> nodes_;
  std::vector<testing::Subprocess> headless_;
  std::string key_file_;
  std::string fake_slurm_;
};

}  // namespace vllm::testing_multinode

#endif  // VLLM_TESTS_MULTINODE_MULTINODE_FIXTURE_H_
