// Speculative decoding keeps the model's distribution through the whole engine (issue 31): the
// bundled model, one fixed prompt, 20,000 seeded samples (4,000 under sanitizers) of the next 3
// tokens (temperature 1, top-k 4), from an engine without speculation and from one with n-gram
// drafts; the two joint distributions must agree under a chi-square test of homogeneity at p >
// 0.001. The drafts come from the prompt's repeated phrase, so many are verified and both accepted
// and rejected ones occur (checked). The test's power, and a sampler that skips the residual
// failing it, are shown on a toy model by kernels_rejection_sampler_distribution_test.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/speculative_config.h"
#include "frontend/engine/llm_engine.h"
#include "frontend/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/support/chi_square.h"

namespace vllm::frontend {
namespace {

// Sanitizer builds (~10x slower; they look for memory errors, not statistics) draw 4,000.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kSamples = 4000;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr int kSamples = 4000;
#else
constexpr int kSamples = 20000;
#endif
#else
constexpr int kSamples = 20000;
#endif

std::filesystem::path ModelDir() {
  return std::filesystem::path(VLLM_SOURCE_DIR) / "models" / "kjv-llama-tiny";
}

// Joint counts of the 3 sampled tokens, and the engine's speculative counters.
struct Sampled {
  std::map<std::vector<int32_t>, int64_t> counts;
  spec_decode::SpecDecodingStats spec;
};

// `seed_base`: the requests' seeds are seed_base + i, so that the two engines' samples are
// independent (equal seeds would correlate them and weaken the test).
Sampled SampleMany(const std::vector<int32_t>& prompt, const char* speculative, int64_t seed_base) {
  Sampled out;
  config::EngineArgs args;
  args.config.model.model = ModelDir();
  args.config.cache.kv_cache_memory_bytes = int64_t{512} << 20;
  args.config.scheduler.max_num_seqs = 1024;  // fewer, larger steps
  args.config.scheduler.max_num_batched_tokens = 8192;
  if (speculative != nullptr) {
    auto spec = config::ParseSpeculativeConfig(speculative);
    EXPECT_TRUE(spec.ok()) << spec.status();
    if (!spec.ok()) return out;
    args.config.speculative = *spec;
  }
  auto engine = LLMEngine::Create(args);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return out;
  std::vector<core::EngineCoreRequest> requests;
  requests.reserve(kSamples);
  for (int i = 0; i < kSamples; ++i) {
    core::EngineCoreRequest r;
    r.request_id = absl::StrCat("s", i);
    r.prompt_token_ids = prompt;
    r.sampling_params.temperature = 1.0;
    r.sampling_params.top_k = 4;
    r.sampling_params.seed = seed_base + i;
    r.sampling_params.max_tokens = 3;
    r.sampling_params.ignore_eos = true;
    requests.push_back(std::move(r));
  }
  auto outputs = (*engine)->Generate(std::move(requests));
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  if (!outputs.ok()) return out;
  for (const RequestOutput& o : *outputs) {
    EXPECT_EQ(o.output_token_ids.size(), 3u) << o.request_id;
    ++out.counts[o.output_token_ids];
  }
  out.spec = (*engine)->totals().spec_decoding;
  return out;
}

TEST(SpecDecodeDistributionTest, NgramDraftsKeepTheJointDistributionOfThreeTokens) {
  auto tokenizer = Tokenizer::Load(ModelDir());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto encoded =
      (*tokenizer)
          ->Encode("And he said unto him, And he said unto him, And he said unto him, And he",
                   /*add_special_tokens=*/true);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  // Its last 17 tokens: one full block that the prefix cache serves to every request after the
  // first, and one token to compute (the test's cost is the model's tokens).
  ASSERT_GE(encoded->size(), 17u);
  const std::vector<int32_t> prompt(encoded->end() - 17, encoded->end());
  const Sampled plain = SampleMany(prompt, nullptr, 0);
  const Sampled spec = SampleMany(
      prompt,
      R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3})",
      1000000);
  ASSERT_FALSE(plain.counts.empty());
  ASSERT_FALSE(spec.counts.empty());
  // Both outcomes of verification happened many times.
  EXPECT_GT(spec.spec.num_drafts, kSamples / 2);
  EXPECT_GT(spec.spec.num_accepted_tokens, kSamples / 20);
  EXPECT_GT(spec.spec.num_draft_tokens - spec.spec.num_accepted_tokens, kSamples / 20);
  // Homogeneity of two equal-size samples: sum over cells of (a - b)^2 / (a + b), cells with
  // fewer than 10 samples in both pooled into one.
  std::map<std::vector<int32_t>, std::pair<int64_t, int64_t>> cells;
  for (const auto& [k, n] : plain.counts) cells[k].first = n;
  for (const auto& [k, n] : spec.counts) cells[k].second = n;
  double chi2 = 0.0;
  int dof = -1;
  int64_t pooled_a = 0, pooled_b = 0;
  for (const auto& [k, ab] : cells) {
    const auto [a, b] = ab;
    if (a + b < 10) {
      pooled_a += a;
      pooled_b += b;
      continue;
    }
    chi2 += static_cast<double>((a - b) * (a - b)) / static_cast<double>(a + b);
    ++dof;
  }
  if (pooled_a + pooled_b > 0) {
    chi2 += static_cast<double>((pooled_a - pooled_b) * (pooled_a - pooled_b)) /
            static_cast<double>(pooled_a + pooled_b);
    ++dof;
  }
  ASSERT_GT(dof, 4) << "too few outcomes for a meaningful test";
  const double p = testing::ChiSquarePValue(chi2, dof);
  ::testing::Test::RecordProperty(
      "chi_square",
      absl::StrFormat("%.1f on %d degrees of freedom, p %.3g; %d of %d draft "
                      "tokens accepted",
                      chi2, dof, p, spec.spec.num_accepted_tokens, spec.spec.num_draft_tokens));
  EXPECT_GT(p, 0.001) << "chi2 " << chi2 << " on " << dof << " degrees of freedom";
}

}  // namespace
}  // namespace vllm::frontend
