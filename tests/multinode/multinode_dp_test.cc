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
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/multinode/multinode_fixture.h"

namespace vllm {
namespace {
using nlohmann::json;
using testing_multinode::kPrompts;
using testing_multinode::kRpcPort;
using testing_multinode::MultinodeTest;
using testing_multinode::Series;

class MultinodeDpTest : public MultinodeTest {};

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
  ASSERT_NO_FATAL_FAILURE(SpawnHead(a));

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
  const std::string bin_dir = FakeSlurmBin();
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
    ASSERT_NO_FATAL_FAILURE(ReadReadyPort());
    ExpectEveryEngineServes(2);
    ASSERT_NO_FATAL_FAILURE(StopNodeB());
    ASSERT_NO_FATAL_FAILURE(StopHead());
  }
}

}  // namespace
}  // namespace vllm
