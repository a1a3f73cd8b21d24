#include "core/sampling_params.h"

#include <cmath>
#include <string>

#include "core/engine_core_types.h"
#include "gtest/gtest.h"

namespace vllm::core {
namespace {

class SamplingParamsTest : public ::testing::Test {
 protected:
  // Expects InvalidArgument whose message names `field`.
  static void ExpectRejected(const SamplingParams& p, const std::string& field) {
    absl::Status s = ValidateSamplingParams(p);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << field << ": " << s;
    EXPECT_NE(s.message().find(field), std::string_view::npos) << s;
  }
};

TEST_F(SamplingParamsTest, DefaultsAreValid) {
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
  SamplingParams p;
  p.temperature = 0;
  p.top_k = -1;
  p.top_p = 1.0;
  p.min_p = 1.0;
  p.max_tokens = 1;
  p.min_tokens = 1;
  EXPECT_TRUE(ValidateSamplingParams(p).ok());
}

TEST_F(SamplingParamsTest, EachFieldIsRangeChecked) {
  SamplingParams p;
  p.max_tokens = 0;
  ExpectRejected(p, "max_tokens");
  p = {};
  p.top_p = 0.0;
  ExpectRejected(p, "top_p");
  p.top_p = 1.5;
  ExpectRejected(p, "top_p");
  p = {};
  p.temperature = -0.1;
  ExpectRejected(p, "temperature");
  p.temperature = std::nan("");
  ExpectRejected(p, "temperature");
  p = {};
  p.top_k = -2;
  ExpectRejected(p, "top_k");
  p = {};
  p.min_p = 1.5;
  ExpectRejected(p, "min_p");
  p.min_p = -0.1;
  ExpectRejected(p, "min_p");
  p = {};
  p.max_tokens = 4;
  p.min_tokens = 5;
  ExpectRejected(p, "min_tokens");
  p = {};
  p.min_tokens = -1;
  ExpectRejected(p, "min_tokens");
  p = {};
  p.n = 2;
  ExpectRejected(p, "n must be 1");
  p = {};
  p.presence_penalty = 3;
  ExpectRejected(p, "presence_penalty");
  p = {};
  p.frequency_penalty = -3;
  ExpectRejected(p, "frequency_penalty");
  p = {};
  p.repetition_penalty = 0;
  ExpectRejected(p, "repetition_penalty");
  p = {};
  p.stop_token_ids = {-1};
  ExpectRejected(p, "stop_token_ids");
  p = {};
  p.logprobs = kMaxLogprobs + 1;
  ExpectRejected(p, "logprobs");
  p = {};
  p.prompt_logprobs = kMaxLogprobs + 1;
  ExpectRejected(p, "prompt_logprobs");
  p.prompt_logprobs = -1;  // vLLM's "whole vocabulary" is over max_logprobs too
  ExpectRejected(p, "prompt_logprobs");
  p.prompt_logprobs = kMaxLogprobs;
  EXPECT_TRUE(ValidateSamplingParams(p).ok());
}

TEST_F(SamplingParamsTest, RequestValidationNamesTheField) {
  EngineCoreRequest r;
  r.request_id = "r";
  r.prompt_token_ids = {1, 2, 3};
  EXPECT_TRUE(ValidateEngineCoreRequest(r, 8).ok());

  EngineCoreRequest empty_prompt = r;
  empty_prompt.prompt_token_ids.clear();
  EXPECT_NE(ValidateEngineCoreRequest(empty_prompt, 8).message().find("prompt_token_ids"),
            std::string_view::npos);
  EngineCoreRequest long_prompt = r;
  long_prompt.prompt_token_ids.assign(8, 1);
  EXPECT_NE(ValidateEngineCoreRequest(long_prompt, 8).message().find("max_model_len"),
            std::string_view::npos);
  EngineCoreRequest too_many = r;
  too_many.sampling_params.max_tokens = 6;
  absl::Status s = ValidateEngineCoreRequest(too_many, 8);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("max_tokens"), std::string_view::npos) << s;
  EngineCoreRequest bad_params = r;
  bad_params.sampling_params.top_p = 2;
  EXPECT_NE(ValidateEngineCoreRequest(bad_params, 8).message().find("top_p"),
            std::string_view::npos);
  EngineCoreRequest no_id = r;
  no_id.request_id.clear();
  EXPECT_NE(ValidateEngineCoreRequest(no_id, 8).message().find("request_id"),
            std::string_view::npos);
  EngineCoreRequest negative_token = r;
  negative_token.prompt_token_ids[1] = -5;
  EXPECT_TRUE(absl::IsInvalidArgument(ValidateEngineCoreRequest(negative_token, 8)));
  EngineCoreRequest big_salt = r;
  big_salt.cache_salt = std::string(kMaxCacheSaltBytes + 1, 's');
  EXPECT_NE(ValidateEngineCoreRequest(big_salt, 8).message().find("cache_salt"),
            std::string_view::npos);
}

}  // namespace
}  // namespace vllm::core
