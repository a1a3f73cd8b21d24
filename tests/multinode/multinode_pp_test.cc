// One engine across two "nodes" (network namespaces joined by a veth link), as vLLM 0.33 runs
// it without Ray:
//
//   node A: vllm-launch -pp 2 --nnodes 2 --node-rank 0 --master-addr <A> --master-port P  (head)
//   node B: vllm-launch -pp 2 --nnodes 2 --node-rank 1 --master-addr <A> --master-port P --headless
//
// Pipeline stage 2 on node B (hidden states over TCP, CURVE with the cluster key) and -tp 2
// with one TP rank per node (gloo over TCP, its rendezvous on the head) answer greedily exactly
// as one engine on one node; kill -9 of node B's launcher ends the -tp 2 engine's streams with an
// error; kill -9 of node B's stage-2 worker during load ends the streams
// with an error naming it, the head stays up and reports the engine dead, node B stops what is
// left and joins the next head; start-up mistakes on node B (sizes, --nnodes, address, key)
// fail naming the flag while the head keeps waiting for the right node. Skips, saying why,
// when not root (namespaces need it).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/multinode/multinode_fixture.h"

namespace vllm {
namespace {

using testing_multinode::kPrompts;
using testing_multinode::MultinodeTest;

constexpr int kMasterPort = 29501;

class MultinodePpTest : public MultinodeTest {
 protected:
  void SetUp() override {
    // The head outlives its one engine's death here (answering 503), as with vLLM's
    // VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1; every process the test starts inherits it.
    setenv("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "1", 1);
    MultinodeTest::SetUp();
  }
  // The flags every node of one engine gives, plus `extra`.
  std::vector<std::string> Engine(const std::vector<std::string>& extra, int node_rank) {
    std::vector<std::string> args = {"--nnodes",          "2",
                                     "--node-rank",       absl::StrCat(node_rank),
                                     "--master-addr",     nodes_->address_a(),
                                     "--master-port",     absl::StrCat(kMasterPort),
                                     "--kv-cache-memory", "64MiB"};
    args.insert(args.end(), extra.begin(), extra.end());
    if (node_rank > 0) args.push_back("--headless");
    return args;
  }

  void ExpectReferenceAnswers(const std::vector<std::string>& reference) {
    const std::vector<std::string> answers = Complete(port_);
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      EXPECT_EQ(answers[i], reference[i]) << "prompt '" << kPrompts[i] << "'";
    }
  }
};

TEST_F(MultinodePpTest, PipelineStageOnTheOtherNodeAnswersAsOneEngineAndFailsCleanly) {
  const std::vector<std::string> reference = OneEngineAnswers();
  const std::vector<std::string> pp = {"-pp", "2", "--cluster-key-file", key_file_};
  ASSERT_NO_FATAL_FAILURE(StartNodeB(Engine(pp, 1)));
  ASSERT_NO_FATAL_FAILURE(StartHead(Engine(pp, 0)));
  // Stage 1 on the head (under its engine core), stage 2 under node B's launcher.
  const std::vector<pid_t> engines = testing::ChildrenRunning(server_->pid(), "engine-core");
  ASSERT_EQ(engines.size(), 1u);
  EXPECT_EQ(testing::ChildrenOf(engines[0]).size(), 1u);
  const std::vector<pid_t> b_workers = testing::ChildrenOf(headless_[0].pid());
  ASSERT_EQ(b_workers.size(), 1u);
  ExpectReferenceAnswers(reference);

  // kill -9 of the stage-2 worker mid-load: every stream ends with an error naming it, within
  // the heartbeat timeout; the head stays up and says the engine is dead.
  const std::vector<std::string> messages = KillDuringLoad(1, b_workers);
  EXPECT_EQ(messages.size(), 2u);
  for (const std::string& message : messages) {
    EXPECT_TRUE(absl::StrContains(message, "worker rank 1")) << message;
  }
  InNodeA([&] {
    auto h = testing::Http(port_, "GET", "/health");
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->status, 503) << h->body;
  });
  EXPECT_TRUE(WaitNoChildren(headless_[0].pid(), absl::Now() + absl::Seconds(30)));
  EXPECT_TRUE(headless_[0].running()) << "node B waits for the next head";
  ASSERT_NO_FATAL_FAILURE(StopHead());

  // Node B joins the next head with the same flags and serves again.
  ASSERT_NO_FATAL_FAILURE(StartHead(Engine(pp, 0)));
  ExpectReferenceAnswers(reference);
  ASSERT_NO_FATAL_FAILURE(StopHead());
  ASSERT_NO_FATAL_FAILURE(StopNodeB());
}

TEST_F(MultinodePpTest, TensorParallelRanksOnTwoNodesAnswerAsOneEngine) {
  const std::vector<std::string> reference = OneEngineAnswers();
  const std::vector<std::string> tp = {"-tp", "2", "--cluster-key-file", key_file_};
  ASSERT_NO_FATAL_FAILURE(StartNodeB(Engine(tp, 1)));
  ASSERT_NO_FATAL_FAILURE(StartHead(Engine(tp, 0)));
  const std::vector<pid_t> b_workers = testing::ChildrenOf(headless_[0].pid());
  ASSERT_EQ(b_workers.size(), 1u);
  ExpectReferenceAnswers(reference);

  // kill -9 of node B's whole launcher mid-load: its rank dies with it (nobody reports it); the
  // engine's streams still end with an error (the all-reduce's broken connection, or node B's
  // silence past the heartbeat timeout) and the head stays up.
  const std::vector<std::string> messages = KillDuringLoad(1, {headless_[0].pid()});
  EXPECT_EQ(messages.size(), 2u);
  auto status = headless_[0].Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFSIGNALED(*status)) << testing::DescribeWaitStatus(*status);
  headless_.clear();
  // Its rank (now an orphan of this test, a subreaper) must be gone too: TearDown checks.
  InNodeA([&] {
    auto h = testing::Http(port_, "GET", "/health");
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->status, 503) << h->body;
  });
  ASSERT_NO_FATAL_FAILURE(StopHead());
}

TEST_F(MultinodePpTest, StartupMistakesOnTheWorkerNodeNameTheFlag) {
  // Nothing answers at a wrong address: node B gives up after its deadline (3 s).
  const Failure wrong_address =
      RunNodeBToFailure({"-pp", "2", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                         "10.213.254.9", "--master-port", absl::StrCat(kMasterPort), "--headless"},
                        "3");
  EXPECT_NE(wrong_address.exit_code, 0) << wrong_address.output;
  EXPECT_TRUE(absl::StrContains(wrong_address.output, "--master-addr") &&
              absl::StrContains(wrong_address.output, "--master-port"))
      << wrong_address.output;
  EXPECT_LT(wrong_address.took, absl::Seconds(20)) << wrong_address.output;

  // A head that waits for node 1: a node B with other sizes or --nnodes is refused by flag, one
  // without the key is unheard; the head keeps waiting for the right one.
  ASSERT_NO_FATAL_FAILURE(SpawnHead(Engine({"-pp", "2", "--cluster-key-file", key_file_}, 0)));

  const Failure wrong_tp =
      RunNodeBToFailure(Engine({"-pp", "2", "-tp", "2", "--cluster-key-file", key_file_}, 1), "20");
  EXPECT_NE(wrong_tp.exit_code, 0) << wrong_tp.output;
  EXPECT_TRUE(absl::StrContains(wrong_tp.output, "--tensor-parallel-size 2")) << wrong_tp.output;
  EXPECT_LT(wrong_tp.took, absl::Seconds(15)) << wrong_tp.output;

  std::vector<std::string> four = {"-pp", "4", "--cluster-key-file", key_file_};
  std::vector<std::string> wrong_nnodes_args = Engine(four, 1);
  wrong_nnodes_args[1] = "4";  // --nnodes 4
  const Failure wrong_nnodes = RunNodeBToFailure(wrong_nnodes_args, "20");
  EXPECT_NE(wrong_nnodes.exit_code, 0) << wrong_nnodes.output;
  EXPECT_TRUE(absl::StrContains(wrong_nnodes.output, "--nnodes 4")) << wrong_nnodes.output;

  const Failure no_key = RunNodeBToFailure(Engine({"-pp", "2"}, 1), "3");
  EXPECT_NE(no_key.exit_code, 0) << no_key.output;
  EXPECT_TRUE(absl::StrContains(no_key.output, "--cluster-key-file")) << no_key.output;

  ASSERT_NO_FATAL_FAILURE(StartNodeB(Engine({"-pp", "2", "--cluster-key-file", key_file_}, 1)));
  auto ready = server_->ReadLine(absl::Seconds(60));
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_TRUE(absl::StrContains(*ready, "ready at")) << *ready;
  ASSERT_NO_FATAL_FAILURE(StopNodeB());
  ASSERT_NO_FATAL_FAILURE(StopHead());
}

// docs/MULTINODE.md: slurm_node.sh and lws_node.sh add vLLM's --nnodes flags on each node; with
// -pp 2 they serve one engine across the two nodes, with -dp 2 -pp 2 one replica (one pipeline)
// per node, both behind the head.
TEST_F(MultinodePpTest, SchedulerRecipes) {
  const std::string bin_dir = FakeSlurmBin();
  const std::string recipes = absl::StrCat(VLLM_SOURCE_DIR, "/docs/recipes/");
  const std::string path = absl::StrCat("PATH=", bin_dir, ":", std::getenv("PATH"));
  const std::string launch = absl::StrCat("VLLM_LAUNCH=", testing::BinDir(), "/vllm-launch");
  struct Recipe {
    std::string script;
    std::vector<std::string> env_a, env_b, sizes;
    int engines;
    std::string node_b_line;
  };
  const std::vector<Recipe> recipes_to_run = {
      {"slurm_node.sh",
       {"SLURM_NODEID=0", "SLURM_NNODES=2", "SLURM_JOB_NODELIST=node[0-1]"},
       {"SLURM_NODEID=1", "SLURM_NNODES=2", "SLURM_JOB_NODELIST=node[0-1]"},
       {"-pp", "2"},
       1,
       "node rank 1 of 2"},
      {"lws_node.sh",
       {"LWS_LEADER_ADDRESS=" + nodes_->address_a(), "LWS_GROUP_SIZE=2", "LWS_WORKER_INDEX=0"},
       {"LWS_LEADER_ADDRESS=" + nodes_->address_a(), "LWS_GROUP_SIZE=2", "LWS_WORKER_INDEX=1"},
       {"-dp", "2", "-pp", "2"},
       2,
       "engines 1..1 joining the head"},
  };
  for (const Recipe& r : recipes_to_run) {
    SCOPED_TRACE(r.script);
    std::vector<std::string> b = Env(nodes_->InB({}));
    b.insert(b.end(), {path, launch});
    b.insert(b.end(), r.env_b.begin(), r.env_b.end());
    b.insert(b.end(), {"/bin/bash", recipes + r.script, "--kv-cache-memory", "64MiB"});
    b.insert(b.end(), r.sizes.begin(), r.sizes.end());
    auto node_b = testing::Subprocess::Spawn(b);
    ASSERT_TRUE(node_b.ok()) << node_b.status();
    headless_.push_back(std::move(*node_b));
    auto line = headless_.back().ReadLine(absl::Seconds(30));
    ASSERT_TRUE(line.ok()) << line.status();
    EXPECT_TRUE(absl::StrContains(*line, r.node_b_line)) << *line;
    std::vector<std::string> a = Env(nodes_->InA({}));
    a.insert(a.end(), {path, launch});
    a.insert(a.end(), r.env_a.begin(), r.env_a.end());
    a.insert(a.end(),
             {"/bin/bash", recipes + r.script, "--port", "0", "--kv-cache-memory", "64MiB"});
    a.insert(a.end(), r.sizes.begin(), r.sizes.end());
    auto head = testing::Subprocess::Spawn(a);
    ASSERT_TRUE(head.ok()) << head.status();
    server_.emplace(std::move(*head));
    ASSERT_NO_FATAL_FAILURE(ReadReadyPort());
    ExpectEveryEngineServes(r.engines);
    ASSERT_NO_FATAL_FAILURE(StopNodeB());
    ASSERT_NO_FATAL_FAILURE(StopHead());
  }
}

}  // namespace
}  // namespace vllm
