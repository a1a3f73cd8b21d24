// The model against Hugging Face transformers: tests/fixtures/models/<name>/ holds a tiny
// seeded checkpoint and reference.json (greedy tokens and logits recorded by
// tools/fixtures/make_reference.py). Greedy tokens must match exactly in every engine mode — batch
// 1 and 8, prefix caching on and off, chunked prefill forced, preemption forced — at
// tensor-parallel sizes 1 (in-process worker) and 2 or 4 (vllm-launch worker processes, the
// shared-memory all-reduce), and with speculative decoding (n-gram, suffix, EAGLE, EAGLE-3,
// Medusa and draft-model drafts verified in every one of those modes) — and the logits within
// tolerance.
// The worker processes are `vllm-launch worker-proc` from the same bin/ as this test (vllm-launch
// is a build dependency of it).
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "config/speculative_config.h"
#include "frontend/engine/llm_engine.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/draft_heads.h"
#include "tests/support/engine_greedy.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/reference_modes.h"
#include "worker/llama_model.h"
#include "worker/weights.h"

namespace vllm::frontend {
namespace {

const std::filesystem::path kFixtures =
    std::filesystem::path(VLLM_SOURCE_DIR) / "tests" / "fixtures" / "models";

using testing::LastLogits;
using testing::LoadReference;
using testing::Reference;

// Speculative decoding: every mode runs again with each method's drafts, and the greedy tokens
// must not change. "%s" stands for the draft's directory: a seeded EAGLE, EAGLE-3 or Medusa
// head written for the fixture (tests/support/draft_heads.h), or, for draft_model, the fixture
// itself (its drafts are the target's greedy tokens: nearly all accepted, which checks the
// draft's KV cache and positions).
struct Method {
  const char* name;
  const char* speculative;
  const char* head;  // the head's directory under the test's heads; null: the fixture
};

const Method kMethods[] = {
    {"ngram", testing::kNgramSpec, nullptr},
    {"suffix", testing::kSuffixSpec, nullptr},
    {"eagle", R"({"method": "eagle", "model": "%s", "num_speculative_tokens": 3})", "eagle"},
    {"eagle3", R"({"method": "eagle3", "model": "%s", "num_speculative_tokens": 3})", "eagle3"},
    {"medusa", R"({"method": "medusa", "model": "%s", "num_speculative_tokens": 3})", "medusa"},
    {"draft_model", R"({"method": "draft_model", "model": "%s", "num_speculative_tokens": 3})",
     nullptr},
};

// Sanitizer builds run each mode with two of the methods, a different pair per mode, so that
// every method still meets two modes (and check the logprobs of two methods per fixture).
using testing::kEveryPair;
using testing::kModes;
using testing::Mode;

// The method's --speculative-config JSON for the fixture at `fixture`, its heads in `heads`.
std::string SpecFor(const Method& method, const std::filesystem::path& fixture,
                    const std::filesystem::path& heads) {
  const std::string draft =
      method.head != nullptr ? (heads / method.head).string() : fixture.string();
  return absl::StrReplaceAll(method.speculative, {{"%s", draft}});
}

config::EngineArgs ModeArgs(const Mode& mode, const std::filesystem::path& dir, int32_t tp,
                            const std::string& spec) {
  return testing::ModeArgs(mode, dir, tp, /*pp=*/1, spec);
}

struct Case {
  const char* model;
  int32_t tp;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.model << "_tp" << c.tp; }

class ReferenceTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    heads_ = std::filesystem::temp_directory_path() /
             absl::StrCat("vllm-reference-heads-", getpid(), "-", GetParam().model);
    testing::WriteEagleHead(dir(), heads_ / "eagle", /*seed=*/7);
    testing::WriteEagle3Head(dir(), heads_ / "eagle3", /*seed=*/13);
    testing::WriteMedusaHead(dir(), heads_ / "medusa", /*num_heads=*/3, /*seed=*/11);
  }
  void TearDown() override { std::filesystem::remove_all(heads_); }
  std::filesystem::path dir() const { return kFixtures / GetParam().model; }
  std::filesystem::path heads_;
};

TEST_P(ReferenceTest, GreedyTokensMatchInEveryMode) {
  const Reference ref = LoadReference(dir());
  ASSERT_EQ(ref.prompts.size(), ref.greedy.size());
  int64_t accepted = 0, rejected = 0;  // draft tokens, over the speculative runs
  for (size_t mode_index = 0; mode_index < std::size(kModes); ++mode_index) {
    const Mode& mode = kModes[mode_index];
    // Plain (method -1), then each method's drafts.
    for (int m = -1; m < static_cast<int>(std::size(kMethods)); ++m) {
      if (m >= 0 && !kEveryPair && (mode_index + static_cast<size_t>(m)) % 3 != 0) continue;
      const Method* method = m < 0 ? nullptr : &kMethods[m];
      const std::string name = method ? absl::StrCat(mode.name, "_", method->name) : mode.name;
      SCOPED_TRACE(name);
      const std::string spec = method ? SpecFor(*method, dir(), heads_) : "";
      auto engine = LLMEngine::Create(ModeArgs(mode, dir(), GetParam().tp, spec));
      ASSERT_TRUE(engine.ok()) << engine.status();
      testing::ExpectGreedyMatchesReference(**engine, ref, name, mode.repeats, mode.batch);
      const LLMEngine::Totals& totals = (*engine)->totals();
      testing::ExpectModeExercised(mode, totals);
      if (method == nullptr) continue;
      const spec_decode::SpecDecodingStats& stats = totals.spec_decoding;
      EXPECT_GT(stats.num_drafts, 0) << "no draft was verified";
      ::testing::Test::RecordProperty(
          absl::StrCat("acceptance_", name),
          absl::StrFormat("%d of %d draft tokens", stats.num_accepted_tokens,
                          stats.num_draft_tokens));
      accepted += stats.num_accepted_tokens;
      rejected += stats.num_draft_tokens - stats.num_accepted_tokens;
      if (std::string_view(method->name) == "draft_model") {
        // The target drafting for itself agrees with itself (float ties aside).
        EXPECT_GE(stats.num_accepted_tokens * 10, stats.num_draft_tokens * 9)
            << stats.num_accepted_tokens << " of " << stats.num_draft_tokens << " accepted";
      }
    }
  }
  // Both verification outcomes were exercised.
  EXPECT_GT(accepted, 0);
  EXPECT_GT(rejected, 0);
}

// Logprobs of the tokens a request emits are the target's whether they came from accepted
// drafts or were sampled: the same as without drafts, within the reference tolerance, with
// every method's drafts.
TEST_P(ReferenceTest, SpeculativeLogprobsMatchPlain) {
  if (GetParam().tp != 1) GTEST_SKIP() << "one tensor-parallel size is enough for logprobs";
  const Reference ref = LoadReference(dir());
  std::vector<std::vector<core::TokenLogprobs>> plain;
  // Plain (method -1) first, then each method's drafts.
  // Sanitizer builds: two of the methods per fixture, by the fixture's name.
  const size_t pick = std::string_view(GetParam().model).size() % 3;
  for (int m = -1; m < static_cast<int>(std::size(kMethods)); ++m) {
    if (m >= 0 && !kEveryPair && (pick + static_cast<size_t>(m)) % 3 != 0) continue;
    const Method* method = m < 0 ? nullptr : &kMethods[m];
    SCOPED_TRACE(method == nullptr ? "plain" : method->name);
    const std::string spec = method ? SpecFor(*method, dir(), heads_) : "";
    auto engine = LLMEngine::Create(ModeArgs(kModes[1], dir(), 1, spec));
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::vector<core::EngineCoreRequest> requests;
    for (size_t i = 0; i < ref.prompts.size(); ++i) {
      core::EngineCoreRequest r =
          testing::GreedyRequest(absl::StrCat("lp-", i), ref.prompts[i], ref.max_new_tokens);
      r.sampling_params.logprobs = 2;
      requests.push_back(std::move(r));
    }
    auto outputs = (*engine)->Generate(std::move(requests));
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    for (size_t i = 0; i < outputs->size(); ++i) {
      const std::vector<core::TokenLogprobs>& got = (*outputs)[i].logprobs;
      ASSERT_EQ(got.size(), (*outputs)[i].output_token_ids.size());
      if (method == nullptr) {
        plain.push_back(got);
        continue;
      }
      ASSERT_EQ(got.size(), plain[i].size()) << "prompt " << i;
      for (size_t t = 0; t < got.size(); ++t) {
        ASSERT_EQ(got[t].token_ids, plain[i][t].token_ids) << "prompt " << i << " token " << t;
        for (size_t j = 0; j < got[t].logprobs.size(); ++j) {
          EXPECT_NEAR(got[t].logprobs[j], plain[i][t].logprobs[j], 1e-4f)
              << "prompt " << i << " token " << t;
        }
      }
    }
    if (method != nullptr) {
      EXPECT_GT((*engine)->totals().spec_decoding.num_drafts, 0);
    }
  }
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, size_t prompt) {
  ASSERT_EQ(got.size(), want.size());
  float scale = 1.0f, max_diff = 0.0f;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::abs(want[i]));
    max_diff = std::max(max_diff, std::abs(got[i] - want[i]));
  }
  // The reference is float32 rounded to 6 significant digits.
  EXPECT_LE(max_diff, 1e-4f * scale) << "prompt " << prompt << ": logits differ by " << max_diff;
  ::testing::Test::RecordProperty(absl::StrCat("max_logit_diff_", prompt),
                                  absl::StrFormat("%.3g of scale %.3g", max_diff, scale));
}

class LogitsTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::filesystem::path dir() const { return kFixtures / GetParam(); }
};

TEST_P(LogitsTest, LogitsMatchWithinTolerance) {
  const Reference ref = LoadReference(dir());
  auto config = worker::LoadHfConfig(dir());
  ASSERT_TRUE(config.ok()) << config.status();
  auto weights = worker::OpenSafetensors(dir());
  ASSERT_TRUE(weights.ok()) << weights.status();
  kernels::SingleRankCommunicator comm;
  auto model = worker::LlamaModel::Load(*config, **weights, &comm);
  ASSERT_TRUE(model.ok()) << model.status();
  for (size_t i = 0; i < ref.prompts.size(); ++i) {
    ExpectClose(LastLogits(**model, ref.prompts[i]), ref.prompt_logits[i], i);
    std::vector<int32_t> tokens = ref.prompts[i];
    tokens.insert(tokens.end(), ref.greedy[i].begin(), ref.greedy[i].end() - 1);
    ExpectClose(LastLogits(**model, tokens), ref.final_logits[i], i);
  }
}

// The bundled model: the greedy samples transformers produced when it was trained
// (models/kjv-llama-tiny/training_log.json), EOS handling included (the chat sample ends with
// <|eot_id|>, generation_config's second EOS).
TEST(BundledModelTest, GreedySamplesMatchTransformers) {
  const std::filesystem::path dir =
      std::filesystem::path(VLLM_SOURCE_DIR) / "models" / "kjv-llama-tiny";
  std::ifstream in(dir / "training_log.json");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json log = nlohmann::json::parse(text.str());
  config::EngineArgs args;
  args.config.model.model = dir;
  args.config.cache.kv_cache_memory_bytes = 64 << 20;
  auto engine = LLMEngine::Create(args);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<core::EngineCoreRequest> requests;
  std::vector<std::vector<int32_t>> want;
  for (const nlohmann::json& sample : log.at("samples")) {
    core::EngineCoreRequest r;
    r.request_id = absl::StrCat("sample", requests.size());
    r.prompt_token_ids = sample.at("prompt_ids").get<std::vector<int32_t>>();
    want.push_back(sample.at("greedy_ids").get<std::vector<int32_t>>());
    r.sampling_params.temperature = 0.0;
    r.sampling_params.max_tokens = static_cast<int32_t>(want.back().size());
    requests.push_back(std::move(r));
  }
  ASSERT_FALSE(requests.empty());
  auto outputs = (*engine)->Generate(std::move(requests));
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*outputs)[i].output_token_ids, want[i]) << "sample " << i;
  }
}

// qwen3: per-head q/k norm; phi3: fused qkv_proj / gate_up_proj cut per rank; llama_mqa: one
// KV head, replicated on every rank at TP 2 and 4; mistral_swa: a 20-token sliding window on
// every layer; qwen2_swa: a 12-token window on layer 1 only (layer 0 sees everything);
// qwen3_moe: 8 experts top-2 unnormalised, layer 1 dense; mixtral: 4 experts top-2
// renormalised (each rank holds every expert, its columns cut per rank); qwen2_moe: a shared
// expert beside 4 routed ones, sparse on layers 1 and 3 only (decoder_sparse_step 2);
// gemma2: (1 + w) sandwich norms, GeGLU, window 16 on even layers, attention and final soft
// caps; gemma3: per-head q/k norms, window 20 on layers 0-1 with their own RoPE base,
// linear-scaled RoPE on the global layers.
INSTANTIATE_TEST_SUITE_P(
    Fixtures, ReferenceTest,
    ::testing::Values(Case{"llama_mha", 1}, Case{"llama_gqa", 1}, Case{"llama_gqa", 2},
                      Case{"qwen2", 1}, Case{"qwen2", 2}, Case{"qwen3", 1}, Case{"qwen3", 2},
                      Case{"phi3", 1}, Case{"phi3", 2}, Case{"llama_mqa", 1}, Case{"llama_mqa", 2},
                      Case{"llama_mqa", 4}, Case{"mistral_swa", 1}, Case{"mistral_swa", 2},
                      Case{"qwen2_swa", 1}, Case{"qwen2_swa", 2}, Case{"qwen3_moe", 1},
                      Case{"qwen3_moe", 2}, Case{"mixtral", 1}, Case{"mixtral", 2},
                      Case{"qwen2_moe", 1}, Case{"qwen2_moe", 2}, Case{"gemma2", 1},
                      Case{"gemma2", 2}, Case{"gemma3", 1}, Case{"gemma3", 2}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrCat(info.param.model, "_tp", info.param.tp);
    });

INSTANTIATE_TEST_SUITE_P(Fixtures, LogitsTest,
                         ::testing::Values("llama_mha", "llama_gqa", "qwen2", "qwen3", "phi3",
                                           "llama_mqa", "mistral_swa", "qwen2_swa", "qwen3_moe",
                                           "mixtral", "qwen2_moe", "gemma2", "gemma3"));

}  // namespace
}  // namespace vllm::frontend
