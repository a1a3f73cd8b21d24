// prompt_logprobs end to end in one process (LLMEngine: scheduler, in-process worker, CPU
// model) on a fixture checkpoint: every prompt position's logprob, rank and top-k equal the
// log_softmax of the model's own logits for that prefix, and of Hugging Face's where
// reference.json has them; a chunked prefill gives the same values; such requests never take
// prefix-cache hits.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "frontend/engine/llm_engine.h"
#include "gtest/gtest.h"
#include "tests/support/fixtures.h"
#include "worker/llama_model.h"
#include "worker/weights.h"

namespace vllm::frontend {
namespace {

constexpr int32_t kTopK = 5;

const std::filesystem::path kModelDir =
    std::filesystem::path(VLLM_SOURCE_DIR) / "tests" / "fixtures" / "models" / "llama_gqa";

// log_softmax(logits)[id], in double.
double LogSoftmaxAt(const std::vector<float>& logits, int32_t id) {
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float v : logits) sum += std::exp(v - max);
  return logits[id] - max - std::log(sum);
}

std::unique_ptr<LLMEngine> MakeEngine(int32_t max_num_batched_tokens,
                                      int32_t long_prefill_token_threshold) {
  config::EngineArgs args;
  args.config.model.model = kModelDir;
  args.config.cache.enable_prefix_caching = true;
  args.config.scheduler.max_num_batched_tokens = max_num_batched_tokens;
  args.config.scheduler.long_prefill_token_threshold = long_prefill_token_threshold;
  args.config.cache.kv_cache_memory_bytes = 64 << 20;
  auto engine = LLMEngine::Create(args);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

core::EngineCoreRequest Request(const std::string& id, const std::vector<int32_t>& prompt,
                                std::optional<int32_t> prompt_logprobs) {
  core::EngineCoreRequest r;
  r.request_id = id;
  r.prompt_token_ids = prompt;
  r.sampling_params.temperature = 0.0;
  r.sampling_params.max_tokens = 2;
  r.sampling_params.ignore_eos = true;
  r.sampling_params.prompt_logprobs = prompt_logprobs;
  return r;
}

// Prompts 4..7 of the reference: 17 to 64 tokens, all starting with prompt 3 (16 tokens).
std::vector<RequestOutput> RunLongPrompts(LLMEngine& engine, const testing::Reference& ref,
                                          const std::string& tag) {
  std::vector<core::EngineCoreRequest> requests;
  for (size_t i = 4; i < ref.prompts.size(); ++i) {
    requests.push_back(Request(absl::StrCat(tag, i), ref.prompts[i], kTopK));
  }
  auto results = engine.Generate(std::move(requests));
  EXPECT_TRUE(results.ok()) << results.status();
  return results.ok() ? std::move(*results) : std::vector<RequestOutput>{};
}

class PromptLogprobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ref_ = testing::LoadReference(kModelDir);
    ASSERT_EQ(ref_.prompts.size(), 8u);
    ASSERT_EQ(ref_.prompts[3].size(), 16u);
  }
  testing::Reference ref_;
};

TEST_F(PromptLogprobsTest, MatchTheModelsLogitsAtEveryPosition) {
  auto engine = MakeEngine(0, 0);
  ASSERT_NE(engine, nullptr);
  const std::vector<RequestOutput> results = RunLongPrompts(*engine, ref_, "a");
  ASSERT_EQ(results.size(), 4u);

  auto config = worker::LoadHfConfig(kModelDir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto weights = worker::OpenSafetensors(kModelDir);
  ASSERT_TRUE(weights.ok()) << weights.status();
  kernels::SingleRankCommunicator comm;
  auto model = worker::LlamaModel::Load(*config, **weights, &comm);
  ASSERT_TRUE(model.ok()) << model.status();

  for (size_t r = 0; r < results.size(); ++r) {
    const std::vector<int32_t>& prompt = ref_.prompts[r + 4];
    const std::vector<core::TokenLogprobs>& got = results[r].prompt_logprobs;
    ASSERT_EQ(got.size(), prompt.size() - 1) << "prompt " << r + 4;
    EXPECT_TRUE(results[r].logprobs.empty());
    EXPECT_EQ(results[r].output_token_ids.front(), ref_.greedy[r + 4].front());
    // Hugging Face's logits after prompt 3 predict token 16 of every longer prompt.
    EXPECT_NEAR(got[15].logprobs[0], LogSoftmaxAt(ref_.prompt_logits[3], prompt[16]), 2e-4)
        << "prompt " << r + 4;
  }

  // Every position of the longest prompt against the model's own forward over its prefix.
  const std::vector<int32_t>& prompt = ref_.prompts[7];
  const std::vector<core::TokenLogprobs>& got = results[3].prompt_logprobs;
  for (size_t p = 0; p + 1 < prompt.size(); ++p) {
    SCOPED_TRACE(p);
    const std::vector<float> logits =
        testing::LastLogits(**model, std::vector<int32_t>(prompt.begin(), prompt.begin() + p + 1));
    ASSERT_EQ(logits.size(), static_cast<size_t>(config->vocab_size));
    const int32_t target = prompt[p + 1];
    const core::TokenLogprobs& lp = got[p];
    ASSERT_EQ(lp.token_ids.size(), static_cast<size_t>(kTopK + 1));
    EXPECT_EQ(lp.token_ids[0], target);
    EXPECT_NEAR(lp.logprobs[0], LogSoftmaxAt(logits, target), 1e-4);
    const auto rank = 1 + std::count_if(logits.begin(), logits.end(),
                                        [&](float v) { return v > logits[target]; });
    EXPECT_EQ(lp.sampled_token_rank, rank);
    std::vector<int32_t> order(logits.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    for (int32_t k = 0; k < kTopK; ++k) {
      EXPECT_EQ(lp.token_ids[k + 1], order[k]) << "top " << k;
      EXPECT_NEAR(lp.logprobs[k + 1], LogSoftmaxAt(logits, order[k]), 1e-4) << "top " << k;
    }
  }
}

TEST_F(PromptLogprobsTest, ChunkedPrefillAndCachedPrefixesGiveTheSameValues) {
  auto whole = MakeEngine(0, 0);
  auto chunked = MakeEngine(16, 5);  // chunks of at most 5 tokens, 16 per step
  ASSERT_NE(whole, nullptr);
  ASSERT_NE(chunked, nullptr);
  const std::vector<RequestOutput> expected = RunLongPrompts(*whole, ref_, "w");
  // Twice on the chunked engine: the second pass finds every prompt cached, and must not use
  // the cache for these requests.
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE(absl::StrCat("pass ", pass));
    const std::vector<RequestOutput> got =
        RunLongPrompts(*chunked, ref_, absl::StrCat("c", pass, "-"));
    ASSERT_EQ(got.size(), expected.size());
    for (size_t r = 0; r < got.size(); ++r) {
      SCOPED_TRACE(absl::StrCat("prompt ", r + 4));
      EXPECT_EQ(got[r].num_cached_tokens, 0);
      EXPECT_EQ(got[r].output_token_ids, expected[r].output_token_ids);
      ASSERT_EQ(got[r].prompt_logprobs.size(), expected[r].prompt_logprobs.size());
      for (size_t p = 0; p < got[r].prompt_logprobs.size(); ++p) {
        const core::TokenLogprobs& a = got[r].prompt_logprobs[p];
        const core::TokenLogprobs& b = expected[r].prompt_logprobs[p];
        EXPECT_EQ(a.token_ids, b.token_ids) << "position " << p + 1;
        EXPECT_EQ(a.sampled_token_rank, b.sampled_token_rank) << "position " << p + 1;
        ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
        for (size_t i = 0; i < a.logprobs.size(); ++i) {
          EXPECT_NEAR(a.logprobs[i], b.logprobs[i], 1e-4) << "position " << p + 1;
        }
      }
    }
  }
  // The same prompt without prompt_logprobs does use the cache.
  auto plain = chunked->Generate({Request("plain", ref_.prompts[7], std::nullopt)});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_GT((*plain)[0].num_cached_tokens, 0);
  EXPECT_TRUE((*plain)[0].prompt_logprobs.empty());
}

}  // namespace
}  // namespace vllm::frontend
