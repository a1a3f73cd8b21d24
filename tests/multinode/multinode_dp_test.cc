// Data parallelism across two "nodes" (network namespaces joined by a veth link,
// tests/support/netns.h), as an operator runs it:
//
//   node A: vllm-launch -dp 4 -dpl 2 -dpa <A> -dpp P --cluster-key-file K            (head)
//   node B: vllm-launch -dp 4 -dpl 2 -dpr 2 -dpa <A> -dpp P --cluster-key-file K --headless
//
// Greedy answers equal one engine's and every engine serves; kill -9 of one engine core of
// node B, then of node B's whole process tree, fails only those engines' requests (the head
// stays up, /health says which ranks are dead), and node B's engines join again and serve; a
// restarted head is joined again by node B's engines; TP 2 replicas across the nodes
// (-dp 2 -tp 2), where kill -9 of one TP worker fails only its engine's streams; a head with
// -asc 2 whose two API servers both see node B's engine, lose it and get it back; start-up
// mistakes on node B (wrong address, wrong port, wrong -dp, no key) fail within the deadline
// naming the flag; the Slurm and LeaderWorkerSet recipes of docs/MULTINODE.md bring up a head
// and a headless node that serve. Skips, saying why, when not root (namespaces need it).
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

namespace vllm {
namespace {

using nlohmann::json;

constexpr int kRpcPort = 13345;

std::string Series(const std::string& name, int engine, const std::string& extra = "") {
  return absl::StrCat(name, "{model_name=\"kjv-llama-tiny\",engine=\"", engine, "\"", extra, "}");
}

const std::vector<std::string> kPrompts = {
    "In the beginning", "And God said",   "Let there be light", "And the earth was",
    "The LORD is my",   "Blessed is the", "For God so loved",   "And it came to pass"};

class MultinodeDpTest : public testing::ServeTest {
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

  // env for every node: short deadlines, so a dead or missing node shows within seconds.
  std::vector<std::string> Env(const std::vector<std::string>& in_node) {
    std::vector<std::string> argv = in_node;
    argv.insert(argv.end(), {"/usr/bin/env", "VLLM_ENGINE_READY_TIMEOUT_S=60",
                             "VLLM_ENGINE_HEARTBEAT_TIMEOUT_S=5"});
    return argv;
  }

  // Starts node B (--headless) with `args`; returns once it printed its line.
  void StartNodeB(const std::vector<std::string>& args) {
    std::vector<std::string> argv = Env(nodes_->InB({}));
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

  std::unique_ptr<testing::NetnsPair> nodes_;
  std::vector<testing::Subprocess> headless_;
  std::string key_file_;
};

TEST_F(MultinodeDpTest, FourReplicasOnTwoNodesServeFailAndRejoin) {
  const std::vector<std::string> reference = OneEngineAnswers();

  std::vector<std::string> b = Common("4");
  b.insert(b.end(), {"-dpl", "2", "-dpr", "2", "--headless", "--cluster-key-file", key_file_,
                     "--restart-dead-engines"});
  ASSERT_NO_FATAL_FAILURE(StartNodeB(b));
  std::vector<std::string> a = Common("4");
  a.insert(a.end(), {"-dpl", "2", "--cluster-key-file", key_file_});
  const std::string head_log = absl::StrCat(::testing::TempDir(), "/vllm-head-log-", getpid());
  unlink(head_log.c_str());
  absl::Cleanup remove_log = [&] { unlink(head_log.c_str()); };
  ASSERT_NO_FATAL_FAILURE(StartHead(a, head_log));
  // Two engine cores under each node's launcher.
  EXPECT_EQ(testing::ChildrenRunning(server_->pid(), "engine-core").size(), 2u);
  EXPECT_EQ(testing::ChildrenOf(headless_[0].pid()).size(), 2u);
  // The head runs the DP coordinator; its engines and node B's report to it over TCP.
  EXPECT_EQ(testing::ChildrenRunning(server_->pid(), "dp-coordinator").size(), 1u);

  // Greedy answers as one engine gives them; all four engines served.
  const std::vector<std::string> answers = Complete(port_);
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    EXPECT_EQ(answers[i], reference[i]) << "prompt '" << kPrompts[i] << "'";
  }
  testing::MetricSamples m = Metrics();
  for (int e = 0; e < 4; ++e) EXPECT_GT(Served(m, e), 0) << "engine " << e << " served nothing";

  // kill -9 of one engine core of node B (rank 2) while every engine runs two long streams:
  // only its two fail; node B (--restart-dead-engines) starts it again and it joins again.
  const std::vector<pid_t> node_b_engines = testing::ChildrenOf(headless_[0].pid());
  ASSERT_EQ(node_b_engines.size(), 2u);
  const pid_t rank2 = std::min(node_b_engines[0], node_b_engines[1]);  // spawned in rank order
  std::vector<std::string> messages = KillDuringLoad(4, {rank2});
  EXPECT_EQ(messages.size(), 2u);
  for (const std::string& message : messages) {
    EXPECT_TRUE(absl::StrContains(message, "engine 2")) << message;
  }
  ASSERT_TRUE(WaitUntilAllHealthy()) << "rank 2 did not join again";

  // kill -9 of node B's whole process tree: only the requests of engines 2 and 3 fail.
  std::vector<pid_t> tree = testing::ChildrenOf(headless_[0].pid());
  tree.push_back(headless_[0].pid());
  messages = KillDuringLoad(4, tree);
  (void)headless_[0].Wait(absl::Seconds(5));
  EXPECT_EQ(messages.size(), 4u);
  for (const std::string& message : messages) {
    EXPECT_TRUE(absl::StrContains(message, "engine 2") || absl::StrContains(message, "engine 3"))
        << message;
  }
  json health;
  InNodeA([&] {
    auto h = testing::Http(port_, "GET", "/health");
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->status, 200) << h->body;
    health = h->Json();
  });
  EXPECT_EQ(health.value("status", ""), "degraded") << health.dump();
  EXPECT_EQ(health["live_engines"], json::array({0, 1})) << health.dump();
  EXPECT_EQ(health["dead_engines"].size(), 2u) << health.dump();
  // The head's own engines go on serving meanwhile.
  for (const std::string& text : Complete(port_)) {
    EXPECT_FALSE(absl::StartsWith(text, "<failed")) << text;
  }

  // Node B comes back: its engines join the running head and take traffic again.
  headless_.clear();
  ASSERT_NO_FATAL_FAILURE(StartNodeB(b));
  ASSERT_TRUE(WaitUntilAllHealthy()) << "node B's engines did not join again";
  const testing::MetricSamples before = Metrics();
  const std::vector<std::string> again = Complete(port_);
  for (size_t i = 0; i < kPrompts.size(); ++i) EXPECT_EQ(again[i], reference[i]);
  const testing::MetricSamples after = Metrics();
  for (int e : {2, 3}) {
    EXPECT_GT(Served(after, e), Served(before, e)) << "engine " << e << " took no traffic";
  }

  ASSERT_NO_FATAL_FAILURE(StopNodeB());
  ASSERT_NO_FATAL_FAILURE(StopHead());
  // Every engine's load reports reached the coordinator as sealed datagrams, none refused:
  // its summary line at exit is "DP coordinator: N reports (0 dropped), ...".
  std::ifstream in(head_log);
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::smatch summary;
  ASSERT_TRUE(std::regex_search(log, summary,
                                std::regex(R"(DP coordinator: (\d+) reports \((\d+) dropped\))")))
      << log;
  EXPECT_GE(std::stoll(summary[1].str()), 4) << summary[0];
  EXPECT_EQ(summary[2].str(), "0") << summary[0];
  EXPECT_TRUE(absl::StrContains(log, "reports at udp://")) << "reports not sent as datagrams";
}

// The head node dies (kill -9 of its launcher: its own engines follow it) and comes back:
// node B's engines notice the silence (heartbeats), end, are started again by their launcher
// (--restart-dead-engines) and join the new head, which then serves with both replicas.
TEST_F(MultinodeDpTest, HeadlessEnginesJoinARestartedHead) {
  std::vector<std::string> b = Common("2");
  b.insert(b.end(), {"-dpl", "1", "-dpr", "1", "--headless", "--restart-dead-engines"});
  ASSERT_NO_FATAL_FAILURE(StartNodeB(b));
  std::vector<std::string> a = Common("2");
  a.insert(a.end(), {"-dpl", "1"});
  ASSERT_NO_FATAL_FAILURE(StartHead(a));
  for (const std::string& text : Complete(port_)) {
    EXPECT_FALSE(absl::StartsWith(text, "<failed")) << text;
  }
  const pid_t old_engine = testing::ChildrenOf(headless_[0].pid()).at(0);
  server_->Kill(SIGKILL);
  ASSERT_TRUE(server_->Wait(absl::Seconds(5)).ok());
  server_.reset();
  // Node B's engine gives up on the silent head and is replaced by a fresh process.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::vector<pid_t> now = testing::ChildrenOf(headless_[0].pid());
  while ((now.size() != 1 || now[0] == old_engine) && absl::Now() < deadline) {
    now = testing::ChildrenOf(headless_[0].pid());
  }
  ASSERT_EQ(now.size(), 1u);
  EXPECT_NE(now[0], old_engine) << "node B's engine was not restarted";
  // The head comes back with the same command: both replicas serve again.
  ASSERT_NO_FATAL_FAILURE(StartHead(a));
  ExpectEveryEngineServes(2);
  ASSERT_NO_FATAL_FAILURE(StopNodeB());
  ASSERT_NO_FATAL_FAILURE(StopHead());
}

TEST_F(MultinodeDpTest, TensorParallelReplicasOnTwoNodes) {
  const std::vector<std::string> reference = OneEngineAnswers();
  std::vector<std::string> b = Common("2");
  b.insert(b.end(), {"-tp", "2", "-dpl", "1", "-dpr", "1", "--headless"});
  ASSERT_NO_FATAL_FAILURE(StartNodeB(b));
  std::vector<std::string> a = Common("2");
  a.insert(a.end(), {"-tp", "2", "-dpl", "1"});
  ASSERT_NO_FATAL_FAILURE(StartHead(a));
  // Each engine core runs its two workers.
  const std::vector<pid_t> head_engines = testing::ChildrenRunning(server_->pid(), "engine-core");
  ASSERT_EQ(head_engines.size(), 1u);
  EXPECT_EQ(testing::ChildrenOf(head_engines[0]).size(), 2u);
  const std::vector<std::string> answers = Complete(port_);
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    EXPECT_EQ(answers[i], reference[i]) << "prompt '" << kPrompts[i] << "'";
  }
  const testing::MetricSamples m = Metrics();
  for (int e = 0; e < 2; ++e) EXPECT_GT(Served(m, e), 0) << "engine " << e << " served nothing";

  // kill -9 of one worker of node B's engine: that engine fails (only its two streams), and
  // node B, left without engines (no --restart-dead-engines), exits; nothing is orphaned.
  const std::vector<pid_t> b_engines = testing::ChildrenOf(headless_[0].pid());
  ASSERT_EQ(b_engines.size(), 1u);
  const std::vector<pid_t> workers = testing::ChildrenOf(b_engines[0]);
  ASSERT_EQ(workers.size(), 2u);
  const std::vector<std::string> messages = KillDuringLoad(2, {workers[1]});
  EXPECT_EQ(messages.size(), 2u);
  for (const std::string& message : messages) {
    EXPECT_TRUE(absl::StrContains(message, "engine 1")) << message;
  }
  auto status = headless_[0].Wait(absl::Seconds(15));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1)
      << testing::DescribeWaitStatus(*status);
  headless_.clear();
  ASSERT_NO_FATAL_FAILURE(StopHead());
}

// --api-server-count 2 on the head: API server 0 (at -dpp) names API server 1 (at -dpp + 1)
// in its CONFIG, so node B's engine, which knows only -dpa:-dpp, joins both. Both API server
// processes answer on the one port and each sees both engines serve; when node B dies, both
// say "degraded"; node B restarted joins both again.
TEST_F(MultinodeDpTest, TwoApiServersOnTheHeadSeeEveryEngine) {
  std::vector<std::string> b = Common("2");
  b.insert(b.end(), {"-dpl", "1", "-dpr", "1", "--headless", "--cluster-key-file", key_file_});
  ASSERT_NO_FATAL_FAILURE(StartNodeB(b));
  std::vector<std::string> a = Common("2");
  a.insert(a.end(), {"-dpl", "1", "-asc", "2", "--cluster-key-file", key_file_});
  ASSERT_NO_FATAL_FAILURE(StartHead(a));
  // 2 API servers, engine 0 and the DP coordinator (which both API servers subscribe to).
  EXPECT_EQ(testing::ChildrenOf(server_->pid()).size(), 4u);
  EXPECT_EQ(testing::ChildrenRunning(server_->pid(), "dp-coordinator").size(), 1u);

  // Health of each API server process (by its Server header) until both answered `want`.
  auto both_say = [&](const std::function<bool(const testing::HttpResponse&)>& want) {
    std::set<std::string> said;
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (said.size() < 2 && absl::Now() < deadline) {
      InNodeA([&] {
        auto h = testing::Http(port_, "GET", "/health", "", "");
        if (h.ok() && want(*h)) said.insert(h->server);
      });
    }
    return said.size() == 2;
  };
  for (const std::string& text : Complete(port_)) {
    EXPECT_FALSE(absl::StartsWith(text, "<failed")) << text;
  }
  std::map<std::string, testing::MetricSamples> views;  // Server header → its /metrics
  const json body = {{"prompt", "In the beginning"}, {"max_tokens", 4}};
  InNodeA([&] {
    for (int i = 0; i < 40 && views.size() < 2; ++i) {
      for (int j = 0; j < 4; ++j)
        (void)testing::Http(port_, "POST", "/v1/completions", body.dump());
      auto r = testing::Http(port_, "GET", "/metrics", "", "");
      if (r.ok()) views[r->server] = testing::ParseMetrics(r->body);
    }
  });
  ASSERT_EQ(views.size(), 2u);
  for (const auto& [server, m] : views) {
    for (int e = 0; e < 2; ++e) EXPECT_GT(Served(m, e), 0) << server << ", engine " << e;
  }

  headless_[0].Kill(SIGKILL);  // node B's launcher; its engine follows (parent-death signal)
  (void)headless_[0].Wait(absl::Seconds(10));
  headless_.clear();
  EXPECT_TRUE(both_say([](const testing::HttpResponse& h) {
    return h.status == 200 && absl::StrContains(h.body, "degraded");
  }));
  ASSERT_NO_FATAL_FAILURE(StartNodeB(b));
  EXPECT_TRUE(
      both_say([](const testing::HttpResponse& h) { return h.status == 200 && h.body.empty(); }));
  ASSERT_NO_FATAL_FAILURE(StopNodeB());
  ASSERT_NO_FATAL_FAILURE(StopHead());
}

TEST_F(MultinodeDpTest, StartupMistakesOnTheHeadlessNodeNameTheFlag) {
  // Nothing answers at a wrong address or port: node B gives up after its deadline (3 s),
  // naming the flags to check.
  for (const auto& [address, port] :
       std::vector<std::pair<std::string, int>>{{"10.213.254.9", kRpcPort}, {"", kRpcPort + 1}}) {
    const std::string dpa = address.empty() ? nodes_->address_a() : address;
    const Failure f =
        RunNodeBToFailure({"-dp", "2", "-dpl", "1", "-dpr", "1", "-dpa", dpa, "-dpp",
                           absl::StrCat(port), "--headless", "--kv-cache-memory", "64MiB"},
                          "3");
    EXPECT_NE(f.exit_code, 0) << f.output;
    EXPECT_TRUE(absl::StrContains(f.output, "--data-parallel-address") &&
                absl::StrContains(f.output, "--data-parallel-rpc-port"))
        << f.output;
    EXPECT_LT(f.took, absl::Seconds(20)) << f.output;
  }

  // A head that waits for 2 engines: a node B that says -dp 4, or has no key, is refused or
  // unheard, and says so; the head keeps waiting for the right one.
  std::vector<std::string> a = Common("2");
  a.insert(a.end(), {"-dpl", "1", "--cluster-key-file", key_file_});
  std::vector<std::string> argv = Env(nodes_->InA({}));
  argv.push_back(testing::BinDir() + "/vllm-launch");
  argv.insert(argv.end(), {"--port", "0"});
  argv.insert(argv.end(), a.begin(), a.end());
  auto head = testing::Subprocess::Spawn(argv);
  ASSERT_TRUE(head.ok()) << head.status();
  server_.emplace(std::move(*head));

  const Failure wrong_dp =
      RunNodeBToFailure({"-dp", "4", "-dpl", "1", "-dpr", "1", "-dpa", nodes_->address_a(), "-dpp",
                         absl::StrCat(kRpcPort), "--headless", "--cluster-key-file", key_file_,
                         "--kv-cache-memory", "64MiB"},
                        "20");
  EXPECT_NE(wrong_dp.exit_code, 0) << wrong_dp.output;
  EXPECT_TRUE(absl::StrContains(wrong_dp.output, "--data-parallel-size 4")) << wrong_dp.output;
  EXPECT_LT(wrong_dp.took, absl::Seconds(15)) << wrong_dp.output;

  const Failure no_key =
      RunNodeBToFailure({"-dp", "2", "-dpl", "1", "-dpr", "1", "-dpa", nodes_->address_a(), "-dpp",
                         absl::StrCat(kRpcPort), "--headless", "--kv-cache-memory", "64MiB"},
                        "3");
  EXPECT_NE(no_key.exit_code, 0) << no_key.output;
  EXPECT_TRUE(absl::StrContains(no_key.output, "--cluster-key-file")) << no_key.output;

  // The right node B still joins; the head then serves.
  std::vector<std::string> b = Common("2");
  b.insert(b.end(), {"-dpl", "1", "-dpr", "1", "--headless", "--cluster-key-file", key_file_});
  ASSERT_NO_FATAL_FAILURE(StartNodeB(b));
  auto ready = server_->ReadLine(absl::Seconds(30));
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_TRUE(absl::StrContains(*ready, "ready at")) << *ready;
  ASSERT_NO_FATAL_FAILURE(StopNodeB());
  ASSERT_NO_FATAL_FAILURE(StopHead());
}

// docs/MULTINODE.md: the Slurm and LeaderWorkerSet scripts, run on both nodes with the
// environment the scheduler would set, bring up a head and a headless node that serve.
TEST_F(MultinodeDpTest, SchedulerRecipes) {
  // A stand-in for Slurm's scontrol: the job's nodes, by address.
  const std::string bin_dir = absl::StrCat(::testing::TempDir(), "/vllm-fake-slurm-", getpid());
  std::filesystem::create_directories(bin_dir);
  {
    std::ofstream scontrol(bin_dir + "/scontrol");
    scontrol << "#!/bin/sh\n[ \"$1 $2\" = \"show hostnames\" ] || exit 2\necho "
             << nodes_->address_a() << "\necho " << nodes_->address_b() << "\n";
  }
  std::filesystem::permissions(bin_dir + "/scontrol", std::filesystem::perms::owner_all);
  const std::string recipes = absl::StrCat(VLLM_SOURCE_DIR, "/docs/recipes/");
  const std::string path = absl::StrCat("PATH=", bin_dir, ":", std::getenv("PATH"));
  const std::string launch = absl::StrCat("VLLM_LAUNCH=", testing::BinDir(), "/vllm-launch");
  struct Recipe {
    std::string script;
    std::vector<std::string> env_a, env_b;
  };
  const std::vector<Recipe> recipes_to_run = {
      {"slurm_dp_node.sh",
       {"SLURM_NODEID=0", "SLURM_NNODES=2", "SLURM_JOB_NODELIST=node[0-1]"},
       {"SLURM_NODEID=1", "SLURM_NNODES=2", "SLURM_JOB_NODELIST=node[0-1]"}},
      {"lws_dp_node.sh",
       {"LWS_LEADER_ADDRESS=" + nodes_->address_a(), "LWS_GROUP_SIZE=2", "LWS_WORKER_INDEX=0"},
       {"LWS_LEADER_ADDRESS=" + nodes_->address_a(), "LWS_GROUP_SIZE=2", "LWS_WORKER_INDEX=1"}},
  };
  for (const Recipe& r : recipes_to_run) {
    SCOPED_TRACE(r.script);
    // Node B first (it waits for the head), then the head, both through the script.
    std::vector<std::string> b = Env(nodes_->InB({}));
    b.insert(b.end(), {path, launch});
    b.insert(b.end(), r.env_b.begin(), r.env_b.end());
    b.insert(b.end(), {"/bin/bash", recipes + r.script, "--kv-cache-memory", "64MiB"});
    auto node_b = testing::Subprocess::Spawn(b);
    ASSERT_TRUE(node_b.ok()) << node_b.status();
    headless_.push_back(std::move(*node_b));
    auto line = headless_.back().ReadLine(absl::Seconds(30));
    ASSERT_TRUE(line.ok()) << line.status();
    EXPECT_TRUE(
        absl::StrContains(*line, "engines 1..1 joining the head at tcp://" + nodes_->address_a()))
        << *line;
    std::vector<std::string> a = Env(nodes_->InA({}));
    a.insert(a.end(), {path, launch});
    a.insert(a.end(), r.env_a.begin(), r.env_a.end());
    a.insert(a.end(),
             {"/bin/bash", recipes + r.script, "--port", "0", "--kv-cache-memory", "64MiB"});
    auto head = testing::Subprocess::Spawn(a);
    ASSERT_TRUE(head.ok()) << head.status();
    server_.emplace(std::move(*head));
    // "vllm-launch: ready at http://127.0.0.1:PORT/v1"
    auto ready = server_->ReadLine(absl::Seconds(60));
    ASSERT_TRUE(ready.ok()) << ready.status();
    const size_t colon = ready->rfind(':');
    ASSERT_NE(colon, std::string::npos) << *ready;
    ASSERT_TRUE(absl::SimpleAtoi(ready->substr(colon + 1, ready->rfind("/v1") - colon - 1), &port_))
        << *ready;
    ExpectEveryEngineServes(2);
    ASSERT_NO_FATAL_FAILURE(StopNodeB());
    ASSERT_NO_FATAL_FAILURE(StopHead());
  }
  std::filesystem::remove_all(bin_dir);
}

}  // namespace
}  // namespace vllm
