// Disaggregated prefill/decode against Hugging Face transformers: every fixture of
// tests/fixtures/models/ through a prefill engine (NixlConnector, kv_producer, chunked prefill
// with a small token budget) and a decode engine (kv_consumer) in this process, TP 1 and TP 2
// (worker processes), the KV moved over TCP on loopback. Each prompt is prefilled (max_tokens 1,
// do_remote_decode), then decoded with the kv_transfer_params the prefill answered: the greedy
// tokens must be transformers' exactly, twice over (the second round hits both prefix caches),
// and the prefill engine must hold no block afterwards. A model whose every layer slides
// (mistral_swa) is refused with a message naming the connector.
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "frontend/engine/llm_engine.h"
#include "gtest/gtest.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"

namespace vllm::frontend {
namespace {

using testing::LoadReference;
using testing::Reference;

const std::filesystem::path kFixtures =
    std::filesystem::path(VLLM_SOURCE_DIR) / "tests" / "fixtures" / "models";

struct Case {
  const char* model;
  int32_t tp;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.model << "_tp" << c.tp; }

config::EngineArgs PdArgs(const std::filesystem::path& dir, int32_t tp, const std::string& role) {
  config::EngineArgs args;
  args.config.model.model = dir;
  args.config.parallel.tensor_parallel_size = tp;
  if (tp > 1) {
    args.config.parallel.distributed_executor_backend = config::ExecutorBackend::kMp;
    args.worker_binary = testing::BinDir() + "/vllm-launch";
  }
  args.config.cache.enable_prefix_caching = true;
  args.config.cache.kv_cache_memory_bytes = 64 << 20;
  args.config.model.max_model_len = 256;
  // The prefill side computes each prompt in chunks of 8 tokens.
  args.config.scheduler.max_num_batched_tokens = role == "kv_producer" ? 8 : 256;
  args.config.scheduler.max_num_seqs = 8;
  args.config.kv_transfer.kv_connector = "NixlConnector";
  args.config.kv_transfer.kv_role = role;
  return args;
}

// Creates an engine whose KV side channel is on a free port (and the next ones, per TP rank).
absl::StatusOr<std::unique_ptr<LLMEngine>> CreateOnFreePort(const config::EngineArgs& args) {
  setenv("VLLM_NIXL_SIDE_CHANNEL_HOST", "127.0.0.1", 1);
  setenv("VLLM_NIXL_SIDE_CHANNEL_PORT", absl::StrCat(testing::FreePort()).c_str(), 1);
  return LLMEngine::Create(args);
}

class ReferencePdTest : public ::testing::TestWithParam<Case> {
 protected:
  std::filesystem::path dir() const { return kFixtures / GetParam().model; }
};

TEST_P(ReferencePdTest, GreedyTokensThroughPrefillThenDecodeMatch) {
  const Reference ref = LoadReference(dir());
  ASSERT_EQ(ref.prompts.size(), ref.greedy.size());
  const int32_t tp = GetParam().tp;
  auto prefill = CreateOnFreePort(PdArgs(dir(), tp, "kv_producer"));
  if (std::string(GetParam().model) == "mistral_swa") {
    ASSERT_FALSE(prefill.ok());
    EXPECT_TRUE(absl::StrContains(prefill.status().message(), "NixlConnector")) << prefill.status();
    EXPECT_TRUE(absl::StrContains(prefill.status().message(), "sliding window"))
        << prefill.status();
    return;
  }
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  auto decode = CreateOnFreePort(PdArgs(dir(), tp, "kv_consumer"));
  ASSERT_TRUE(decode.ok()) << decode.status();
  LLMEngine& p = **prefill;
  LLMEngine& d = **decode;
  for (int round = 0; round < 2; ++round) {
    std::vector<core::EngineCoreRequest> prefills;
    for (size_t i = 0; i < ref.prompts.size(); ++i) {
      core::EngineCoreRequest r =
          testing::GreedyRequest(absl::StrCat("p-", round, "-", i), ref.prompts[i], 1);
      r.kv_transfer_params.emplace().do_remote_decode = true;
      prefills.push_back(std::move(r));
    }
    auto answered = p.Generate(std::move(prefills));
    ASSERT_TRUE(answered.ok()) << answered.status();
    std::vector<core::EngineCoreRequest> decodes;
    for (size_t i = 0; i < ref.prompts.size(); ++i) {
      const RequestOutput& out = (*answered)[i];
      ASSERT_TRUE(out.kv_transfer_params.has_value()) << "prompt " << i;
      EXPECT_TRUE(out.kv_transfer_params->do_remote_prefill);
      core::EngineCoreRequest r = testing::GreedyRequest(absl::StrCat("d-", round, "-", i),
                                                         ref.prompts[i], ref.max_new_tokens);
      r.kv_transfer_params = out.kv_transfer_params;
      decodes.push_back(std::move(r));
    }
    // The prefill engine keeps stepping (its workers start serving the held blocks in its next
    // step, and learn when they were read) while the decode engine generates.
    std::atomic<bool> stop{false};
    absl::Status prefill_status;
    std::thread stepper([&] {
      while (!stop.load() && prefill_status.ok()) prefill_status = p.Step().status();
    });
    auto generated = d.Generate(std::move(decodes));
    stop.store(true);
    stepper.join();
    ASSERT_TRUE(prefill_status.ok()) << prefill_status;
    // Every held block was read: the prefill side frees them all (within 10 s of steps).
    core::Scheduler& ps = p.engine_core().scheduler();
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (ps.num_held_requests() > 0 && absl::Now() < deadline) {
      ASSERT_TRUE(p.Step().ok());
    }
    ASSERT_TRUE(generated.ok()) << generated.status();
    for (size_t i = 0; i < ref.prompts.size(); ++i) {
      EXPECT_EQ((*generated)[i].output_token_ids, ref.greedy[i])
          << "round " << round << ", prompt " << i;
    }
    EXPECT_EQ(ps.num_held_requests(), 0u) << "round " << round;
    // The decode side loaded every prompt token it did not have (none computed twice), the
    // prefill side loaded nothing; the second round also hit the prefill side's prefix cache.
    EXPECT_GT(d.totals().connector_prefix_cache_hits, 0);
    EXPECT_EQ(d.totals().connector_prefix_cache_hits, d.totals().connector_prefix_cache_queries);
    EXPECT_EQ(p.totals().connector_prefix_cache_hits, 0);
    if (round == 1) {
      EXPECT_GT(p.totals().prefix_cache_hits, 0);
    }
    EXPECT_EQ(ps.kv_cache_manager().GetUsage(), 0.0) << "round " << round;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, ReferencePdTest,
    ::testing::Values(Case{"llama_mha", 1}, Case{"llama_gqa", 1}, Case{"llama_gqa", 2},
                      Case{"qwen2", 1}, Case{"qwen2", 2}, Case{"qwen3", 1}, Case{"qwen3", 2},
                      Case{"phi3", 1}, Case{"phi3", 2}, Case{"llama_mqa", 1}, Case{"llama_mqa", 2},
                      Case{"mistral_swa", 1}, Case{"qwen2_swa", 1}, Case{"qwen2_swa", 2},
                      Case{"qwen3_moe", 1}, Case{"qwen3_moe", 2}, Case{"mixtral", 1},
                      Case{"qwen2_moe", 2}, Case{"gemma2", 1}, Case{"gemma2", 2}, Case{"gemma3", 1},
                      Case{"gemma3", 2}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrCat(info.param.model, "_tp", info.param.tp);
    });

}  // namespace
}  // namespace vllm::frontend
