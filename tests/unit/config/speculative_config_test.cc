// --speculative-config: vLLM's keys and defaults, every refusal naming the key, and the rules
// across fields (a draft method needs its model; draft_tensor_parallel_size is 1 or the
// target's; the suffix settings hold no NaN whatever the method).
#include "config/speculative_config.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "config/vllm_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vllm::config {
namespace {

using ::testing::HasSubstr;

std::string Refusal(std::string_view json) {
  absl::StatusOr<SpeculativeConfig> c = ParseSpeculativeConfig(json);
  EXPECT_FALSE(c.ok()) << json;
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(SpeculativeConfigTest, VllmsDefaultsAreFilledIn) {
  auto ngram = ParseSpeculativeConfig(R"({"method": "ngram", "num_speculative_tokens": 3})");
  ASSERT_TRUE(ngram.ok()) << ngram.status();
  EXPECT_EQ(ngram->prompt_lookup_min, 5);
  EXPECT_EQ(ngram->prompt_lookup_max, 5);
  EXPECT_FALSE(ngram->DraftsInWorker());
  EXPECT_EQ(ngram->NumLookaheadTokens(), 0);
  auto suffix = ParseSpeculativeConfig(R"({"method": "suffix"})");
  ASSERT_TRUE(suffix.ok()) << suffix.status();
  EXPECT_EQ(suffix->num_speculative_tokens, 16);
  auto off = ParseSpeculativeConfig("{}");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->enabled());
}

TEST(SpeculativeConfigTest, DraftMethodsNeedTheirModelAndGetLookaheadSlots) {
  auto eagle = ParseSpeculativeConfig(
      R"({"method": "eagle", "model": "models/kjv-llama-tiny-eagle", "num_speculative_tokens": 3})");
  ASSERT_TRUE(eagle.ok()) << eagle.status();
  EXPECT_TRUE(eagle->DraftsInWorker());
  EXPECT_EQ(eagle->NumLookaheadTokens(), 3);
  auto medusa =
      ParseSpeculativeConfig(R"({"method": "medusa", "model": "m", "num_speculative_tokens": 2})");
  ASSERT_TRUE(medusa.ok()) << medusa.status();
  EXPECT_EQ(medusa->NumLookaheadTokens(), 0) << "Medusa keeps no KV cache";
  EXPECT_THAT(Refusal(R"({"method": "draft_model", "num_speculative_tokens": 2})"),
              HasSubstr("model"));
  EXPECT_THAT(Refusal(R"({"method": "eagle", "model": "m"})"), HasSubstr("num_speculative_tokens"));
  auto eagle3 =
      ParseSpeculativeConfig(R"({"method": "eagle3", "model": "m", "num_speculative_tokens": 2})");
  ASSERT_TRUE(eagle3.ok()) << eagle3.status();
  EXPECT_TRUE(eagle3->DraftsInWorker());
  EXPECT_EQ(eagle3->NumLookaheadTokens(), 2);
  EXPECT_THAT(Refusal(R"({"method": "eagle3", "num_speculative_tokens": 2})"), HasSubstr("model"));
  // No served architecture has multi-token-prediction layers: the refusal says so.
  EXPECT_THAT(Refusal(R"({"method": "mtp", "num_speculative_tokens": 1})"),
              HasSubstr("multi-token-prediction layers"));
}

TEST(SpeculativeConfigTest, BadValuesAreRefusedNamingTheKey) {
  EXPECT_THAT(Refusal(R"({"method": "lookahead", "num_speculative_tokens": 2})"),
              HasSubstr("lookahead"));
  EXPECT_THAT(Refusal(R"({"method": "ngram", "num_speculative_tokens": 0})"),
              HasSubstr("num_speculative_tokens"));
  EXPECT_THAT(Refusal(R"({"method": "ngram", "num_speculative_tokens": 17})"),
              HasSubstr("num_speculative_tokens"));
  EXPECT_THAT(Refusal(R"({"method": "ngram", "num_speculative_tokens": 2, "colour": 1})"),
              HasSubstr("colour"));
  EXPECT_THAT(Refusal(R"({"method": "suffix", "suffix_decoding_min_token_prob": 2})"),
              HasSubstr("suffix_decoding_min_token_prob"));
  EXPECT_THAT(Refusal(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4,
                          "prompt_lookup_max": 2})"),
              HasSubstr("prompt_lookup_min"));
}

// The config travels to worker and API server processes field by field: a NaN in a double
// (which no ordered comparison refuses) must fail validation whatever the method, or a decoded
// config would not equal itself.
TEST(SpeculativeConfigTest, NanSettingsAreRefusedWhateverTheMethod) {
  SpeculativeConfig c;
  EXPECT_TRUE(c.Validate().ok());
  c.suffix_decoding_max_spec_factor = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(std::string(c.Validate().message()), HasSubstr("suffix_decoding_max_spec_factor"));
  c.suffix_decoding_max_spec_factor = 1.0;
  c.suffix_decoding_min_token_prob = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(std::string(c.Validate().message()), HasSubstr("suffix_decoding_min_token_prob"));
  c.suffix_decoding_min_token_prob = 0.1;
  c.suffix_decoding_max_spec_factor = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(c.Validate().ok());
}

// vLLM's num_speculative_tokens_per_batch_size: inclusive ranges from batch size 1, sorted
// into a canonical text; a gap takes the k of the range before it, as does the tail; k is
// capped by num_speculative_tokens.
TEST(SpeculativeConfigTest, DynamicScheduleFollowsVllmsRules) {
  auto c = ParseSpeculativeConfig(
      R"({"method": "ngram", "num_speculative_tokens": 4,
          "num_speculative_tokens_per_batch_size": [[32, 128, 2], [1, 16, 5]]})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_speculative_tokens_per_batch_size, "[[1,16,5],[32,128,2]]");
  const std::vector<int32_t> k = c->DynamicSchedule(200);
  ASSERT_EQ(k.size(), 201u);
  EXPECT_EQ(k[1], 4) << "capped by num_speculative_tokens";
  EXPECT_EQ(k[16], 4);
  EXPECT_EQ(k[17], 4) << "a gap takes the k of the range before";
  EXPECT_EQ(k[32], 2);
  EXPECT_EQ(k[128], 2);
  EXPECT_EQ(k[200], 2) << "the tail takes the last range's k";
  EXPECT_TRUE(c->Validate().ok());
  EXPECT_TRUE(ParseSpeculativeConfig(R"({"method": "ngram", "num_speculative_tokens": 4})")
                  ->DynamicSchedule(8)
                  .empty());

  const char* const bad[] = {
      R"([])",                      // empty
      R"([[2, 8, 3]])",             // does not start at 1
      R"([[1, 8, 3], [8, 9, 1]])",  // overlap
      R"([[1, 0, 3]])",             // start > end
      R"([[1, 8]])",                // not three
      R"([[1, 8, -1]])",            // negative k
      R"([[1, 8, 2.5]])",           // not an integer
      R"("1-8:3")",
  };
  for (const char* schedule : bad) {
    SCOPED_TRACE(schedule);
    EXPECT_THAT(Refusal(std::string(R"({"method": "ngram", "num_speculative_tokens": 4,
                                        "num_speculative_tokens_per_batch_size": )") +
                        schedule + "}"),
                HasSubstr("num_speculative_tokens_per_batch_size"));
  }
  // From the wire: only the canonical text of a valid schedule.
  SpeculativeConfig wire = *c;
  wire.num_speculative_tokens_per_batch_size = "[[1, 16, 5]]";
  EXPECT_FALSE(wire.Validate().ok());
  wire.num_speculative_tokens_per_batch_size = "not json";
  EXPECT_FALSE(wire.Validate().ok());
}

TEST(SpeculativeConfigTest, DraftTensorParallelSizeIsOneOrTheTargets) {
  VllmConfig c;
  c.model.model = "/models/m";
  c.parallel.tensor_parallel_size = 2;
  auto spec = ParseSpeculativeConfig(
      R"({"method": "draft_model", "model": "d", "num_speculative_tokens": 2,
          "draft_tensor_parallel_size": 1})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  c.speculative = *spec;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  c.speculative.draft_tensor_parallel_size = 2;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  c.speculative.draft_tensor_parallel_size = 0;  // as the target's
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  c.speculative.draft_tensor_parallel_size = 4;
  EXPECT_THAT(std::string(c.Validate().message()), HasSubstr("draft_tensor_parallel_size"));
}

}  // namespace
}  // namespace vllm::config
