// Pipeline parallelism against Hugging Face transformers: every fixture of
// tests/fixtures/models/ (2 to 4 layers) through engines of `-pp 2`, `-pp 2 -tp 2` and `-pp 4`
// (vllm-launch worker processes, the stages linked by shared-memory queues) must give
// transformers' greedy tokens exactly in every engine mode (tests/support/reference_modes.h) —
// plain, and with n-gram and suffix drafts verified on the last stage. Uneven splits are
// included: 3 layers over 2 stages, 2 or 3 layers over 4 (stages without layers, at both
// ends), and VLLM_PP_LAYER_PARTITION. The engine keeps up to PP steps in flight (the batch
// queue), so these runs also check that it never schedules a request twice at once.
// Across nodes (--nnodes 2, both "nodes" on loopback here; tests/multinode/ runs them in two
// network namespaces): `-pp 2` with the second stage, and `-tp 2` with the second TP rank, in a
// `vllm-launch --headless --node-rank 1` process that joins each engine of the case in turn.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "frontend/engine/llm_engine.h"
#include "gtest/gtest.h"
#include "tests/support/engine_greedy.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/reference_modes.h"

namespace vllm::frontend {
namespace {

const std::filesystem::path kFixtures =
    std::filesystem::path(VLLM_SOURCE_DIR) / "tests" / "fixtures" / "models";

struct Case {
  const char* model;
  int32_t tp;
  int32_t pp;
  const char* partition;  // VLLM_PP_LAYER_PARTITION; null: unset (vLLM's default split)
  int32_t nnodes = 1;     // 2: the second half of the ranks in a worker node process
};

std::string CaseName(const Case& c) {
  std::string name = absl::StrCat(c.model, "_tp", c.tp, "_pp", c.pp);
  if (c.partition != nullptr) {
    std::string p = c.partition;
    for (char& ch : p) {
      if (ch == ',') ch = '_';
    }
    absl::StrAppend(&name, "_partition_", p);
  }
  if (c.nnodes > 1) absl::StrAppend(&name, "_nnodes", c.nnodes);
  return name;
}

void PrintTo(const Case& c, std::ostream* os) { *os << CaseName(c); }

struct SpecMethod {
  const char* name;
  const char* spec;  // empty: plain
};

const SpecMethod kSpecMethods[] = {
    {"plain", ""}, {"ngram", testing::kNgramSpec}, {"suffix", testing::kSuffixSpec}};

class ReferencePpTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (GetParam().partition != nullptr) {
      // The worker processes inherit it.
      ASSERT_EQ(setenv("VLLM_PP_LAYER_PARTITION", GetParam().partition, 1), 0);
    }
  }
  void TearDown() override {
    unsetenv("VLLM_PP_LAYER_PARTITION");
    if (node_.has_value()) {
      node_->Kill(SIGINT);
      auto status = node_->Wait(absl::Seconds(20));
      ASSERT_TRUE(status.ok()) << status.status();
      EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
          << testing::DescribeWaitStatus(*status);
    }
  }

  // nnodes 2: starts node rank 1 (it joins every engine of this case in turn); returns the
  // master port the engines listen on.
  int StartWorkerNode(const std::filesystem::path& dir) {
    const Case& c = GetParam();
    const int port = testing::FreePort();
    auto node = testing::Subprocess::Spawn(
        {testing::BinDir() + "/vllm-launch", dir.string(), "-tp", absl::StrCat(c.tp), "-pp",
         absl::StrCat(c.pp), "--nnodes", absl::StrCat(c.nnodes), "--node-rank", "1",
         "--master-addr", "127.0.0.1", "--master-port", absl::StrCat(port), "--headless"});
    EXPECT_TRUE(node.ok()) << node.status();
    if (node.ok()) node_.emplace(std::move(*node));
    return port;
  }

  std::optional<testing::Subprocess> node_;
};

TEST_P(ReferencePpTest, GreedyTokensMatchInEveryMode) {
  const Case& c = GetParam();
  const std::filesystem::path dir = kFixtures / c.model;
  const testing::Reference ref = testing::LoadReference(dir);
  ASSERT_EQ(ref.prompts.size(), ref.greedy.size());
  const int master_port = c.nnodes > 1 ? StartWorkerNode(dir) : 0;
  ASSERT_FALSE(HasFailure());
  for (size_t mode_index = 0; mode_index < std::size(testing::kModes); ++mode_index) {
    const testing::Mode& mode = testing::kModes[mode_index];
    for (size_t m = 0; m < std::size(kSpecMethods); ++m) {
      // Plain in every mode; the drafts (verified on the last stage) in two modes each, a
      // different pair per case. Sanitizer builds: plain in one mode and one draft in another.
      const size_t turn = (mode_index + c.tp + c.pp) % std::size(testing::kModes);
      const bool run = testing::kEveryPair ? (m == 0 || turn == m || turn == m + 2)
                                           : (m == 0 ? turn == 0 : turn == m);
      if (!run) continue;
      const SpecMethod& method = kSpecMethods[m];
      const std::string name = absl::StrCat(mode.name, "_", method.name);
      SCOPED_TRACE(name);
      config::EngineArgs args = testing::ModeArgs(mode, dir, c.tp, c.pp, method.spec);
      args.config.cache.kv_cache_memory_bytes = 8 << 20;  // plenty for the fixtures, quick to map
      if (c.nnodes > 1) {
        args.config.parallel.nnodes = c.nnodes;
        args.config.parallel.master_addr = "127.0.0.1";
        args.config.parallel.master_port = master_port;
      }
      auto engine = LLMEngine::Create(args);
      ASSERT_TRUE(engine.ok()) << engine.status();
      testing::ExpectGreedyMatchesReference(**engine, ref, name, mode.repeats, mode.batch);
      const LLMEngine::Totals& totals = (*engine)->totals();
      testing::ExpectModeExercised(mode, totals);
      if (*method.spec != '\0') {
        EXPECT_GT(totals.spec_decoding.num_drafts, 0) << "no draft was verified";
      }
    }
  }
}

// Every fixture at -pp 2, -pp 2 -tp 2, -pp 4, and -pp 2 / -tp 2 over two nodes (llama_gqa and
// qwen3_moe have 3 layers: 2 + 1 over two stages, 1 + 1 + 1 + 0 over four; the 2-layer fixtures 0 +
// 1 + 1 + 0), and explicit partitions: the first stage without layers, the last without.
constexpr const char* kFixtureNames[] = {
    "llama_mha", "llama_gqa", "qwen2",   "qwen3",     "phi3",   "llama_mqa", "mistral_swa",
    "qwen2_swa", "qwen3_moe", "mixtral", "qwen2_moe", "gemma2", "gemma3"};

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (const auto& [tp, pp] : {std::pair{1, 2}, std::pair{2, 2}, std::pair{1, 4}}) {
    for (const char* model : kFixtureNames) cases.push_back({model, tp, pp, nullptr});
  }
  cases.push_back({"llama_gqa", 1, 2, "0,3"});
  cases.push_back({"gemma2", 1, 2, "4,0"});
  // One engine over two nodes: a stage on each, or a TP rank on each.
  for (const auto& [tp, pp] : {std::pair{1, 2}, std::pair{2, 1}}) {
    for (const char* model : kFixtureNames) cases.push_back({model, tp, pp, nullptr, 2});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ReferencePpTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return CaseName(info.param);
                         });

}  // namespace
}  // namespace vllm::frontend
