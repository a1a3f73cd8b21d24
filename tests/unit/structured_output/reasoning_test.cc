// structured_output/reasoning.h and stats.h: the think tokens a reasoning parser finds in a
// tokenizer (and the refusal when it lacks them), whether a prompt already ended the reasoning
// (vLLM's is_reasoning_end for deepseek_r1 and qwen3), the manager's reasoning gate, and the
// compile-time histogram of StructuredOutputStats.
#include "structured_output/reasoning.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "frontend/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "structured_output/manager.h"
#include "structured_output/stats.h"
#include "tests/support/tokenizer_json.h"

namespace vllm::structured_output {
namespace {

const std::filesystem::path kSource(VLLM_SOURCE_DIR);

std::string ReadText(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The qwen2 fixture tokenizer (<|im_start|> = 1, <|im_end|> = 2) plus <think> = 2002 and
// </think> = 2003 as added tokens, as Qwen3's tokenizer has them.
std::unique_ptr<frontend::Tokenizer> ThinkingTokenizer() {
  nlohmann::json j = nlohmann::json::parse(
      ReadText(kSource / "tests/fixtures/tokenizer/qwen2_bpe/tokenizer.json"));
  for (auto [id, text] : {std::pair<int, const char*>{2002, "<think>"}, {2003, "</think>"}}) {
    j["added_tokens"].push_back(testing::AddedTokenJson(id, text));
  }
  auto tokenizer = frontend::Tokenizer::FromJson(j.dump(), "");
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

TEST(ReasoningTokensTest, FindsTheThinkTokensAndQwen3sTurnBoundaries) {
  auto tokenizer = ThinkingTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  auto qwen3 = FindReasoningTokens("qwen3", *tokenizer);
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  EXPECT_EQ(qwen3->start_id, 2002);
  EXPECT_EQ(qwen3->end_id, 2003);
  EXPECT_EQ(qwen3->boundary_ids, (std::vector<int32_t>{1, 2}));
  auto r1 = FindReasoningTokens("deepseek_r1", *tokenizer);
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_EQ(r1->start_id, 2002);
  EXPECT_EQ(r1->end_id, 2003);
  EXPECT_TRUE(r1->boundary_ids.empty());
}

TEST(ReasoningTokensTest, ATokenizerWithoutThinkTokensIsRefusedByName) {
  // The bundled Llama model has neither <think> nor </think>.
  auto missing = LoadReasoningTokens("qwen3", kSource / "models" / "kjv-llama-tiny");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(missing.status())) << missing.status();
  const std::string message(missing.status().message());
  EXPECT_NE(message.find("--reasoning-parser qwen3"), std::string::npos) << message;
  EXPECT_NE(message.find("<think>"), std::string::npos) << message;
  EXPECT_NE(message.find("could not locate think start/end tokens"), std::string::npos);

  // Only the end token missing: named.
  nlohmann::json j = nlohmann::json::parse(
      ReadText(kSource / "tests/fixtures/tokenizer/qwen2_bpe/tokenizer.json"));
  j["added_tokens"].push_back(testing::AddedTokenJson(2002, "<think>"));
  auto tokenizer = frontend::Tokenizer::FromJson(j.dump(), "");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto no_end = FindReasoningTokens("deepseek_r1", **tokenizer);
  ASSERT_FALSE(no_end.ok());
  EXPECT_NE(no_end.status().message().find("</think>"), std::string::npos) << no_end.status();

  EXPECT_FALSE(LoadReasoningTokens("qwen3", kSource / "no-such-model").ok());
  auto thinking = ThinkingTokenizer();
  ASSERT_NE(thinking, nullptr);
  EXPECT_FALSE(FindReasoningTokens("granite", *thinking).ok());
}

TEST(PromptEndsReasoningTest, TheLastThinkTokenDecides) {
  const ReasoningTokens r1{/*start_id=*/7, /*end_id=*/8, {}};
  using Ids = std::vector<int32_t>;
  EXPECT_FALSE(PromptEndsReasoning(r1, Ids{}));
  EXPECT_FALSE(PromptEndsReasoning(r1, Ids{1, 2, 3}));  // neither: the model reasons first
  EXPECT_FALSE(PromptEndsReasoning(r1, Ids{1, 7}));     // <think> opened
  EXPECT_TRUE(PromptEndsReasoning(r1, Ids{1, 7, 10, 10, 8, 10}));  // <think>\n\n</think>\n\n
  EXPECT_TRUE(PromptEndsReasoning(r1, Ids{8}));
  EXPECT_FALSE(PromptEndsReasoning(r1, Ids{7, 8, 7, 5}));  // a second <think> opened
}

TEST(PromptEndsReasoningTest, Qwen3StopsAtTheTurnBoundary) {
  // A previous turn's </think>, then a new assistant turn: the model reasons again.
  const ReasoningTokens qwen3{/*start_id=*/7, /*end_id=*/8, /*boundary_ids=*/{1, 2}};
  using Ids = std::vector<int32_t>;
  EXPECT_FALSE(PromptEndsReasoning(qwen3, Ids{1, 7, 5, 8, 5, 2, 1, 5}));
  EXPECT_TRUE(PromptEndsReasoning(qwen3, Ids{1, 7, 5, 8, 5, 2, 1, 5, 7, 10, 8, 10}));
  // Without the boundary (deepseek_r1), the old </think> counts.
  const ReasoningTokens r1{7, 8, {}};
  EXPECT_TRUE(PromptEndsReasoning(r1, Ids{1, 7, 5, 8, 5, 2, 1, 5}));
}

TEST(ManagerReasoningTest, GateOpensOnTheTokenAfterTheEnd) {
  StructuredOutputManager::Options options;
  options.model_dir = kSource / "models" / "kjv-llama-tiny";
  options.vocab_size = 4096;
  options.reasoning = ReasoningTokens{/*start_id=*/3000, /*end_id=*/3001, {}};
  StructuredOutputManager manager(options);
  StructuredOutputsParams p;
  p.regex = "[a-z]+";
  const std::vector<int32_t> open = {5, 3000, 9};
  auto state = manager.Submit(p, std::nullopt, open);
  EXPECT_FALSE(state->reasoning_ended());
  EXPECT_FALSE(manager.ShouldFillBitmask(*state));
  EXPECT_FALSE(manager.ShouldAdvance(*state, 42));
  EXPECT_FALSE(manager.ShouldAdvance(*state, 3000));
  EXPECT_FALSE(manager.ShouldFillBitmask(*state));
  EXPECT_FALSE(manager.ShouldAdvance(*state, 3001));  // the end token is the reasoning's
  EXPECT_TRUE(state->reasoning_ended());
  EXPECT_TRUE(manager.ShouldFillBitmask(*state));
  EXPECT_TRUE(manager.ShouldAdvance(*state, 42));
  EXPECT_TRUE(manager.ShouldAdvance(*state, 3000));  // ended for good

  const std::vector<int32_t> closed = {5, 3000, 9, 3001, 9};
  auto ended = manager.Submit(p, std::nullopt, closed);
  EXPECT_TRUE(ended->reasoning_ended());
  EXPECT_TRUE(manager.ShouldAdvance(*ended, 3001));

  options.reasoning.reset();  // no parser: constrained from the first token
  StructuredOutputManager plain(options);
  auto free = plain.Submit(p, std::nullopt, open);
  EXPECT_TRUE(plain.ShouldFillBitmask(*free));
  EXPECT_TRUE(plain.ShouldAdvance(*free, 3001));
}

TEST(StructuredOutputStatsTest, CompileSecondsFallInPrometheusBuckets) {
  StructuredOutputStats s;
  s.ObserveCompileSeconds(0.001);  // le="0.001": a bound is inclusive
  s.ObserveCompileSeconds(0.003);
  s.ObserveCompileSeconds(1000.0);  // above every bound: +Inf
  EXPECT_EQ(s.compile_seconds_counts[0], 1);
  EXPECT_EQ(s.compile_seconds_counts[2], 1);
  EXPECT_EQ(s.compile_seconds_counts.back(), 1);
  EXPECT_EQ(s.num_compiles(), 3);
  EXPECT_DOUBLE_EQ(s.compile_seconds_sum, 1000.004);
  StructuredOutputStats total;
  total.cache_hits = 2;
  total += s;
  total += s;
  EXPECT_EQ(total.cache_hits, 2);
  EXPECT_EQ(total.num_compiles(), 6);
  EXPECT_EQ(total.compile_seconds_counts[2], 2);
  EXPECT_NE(total, StructuredOutputStats{});
}

}  // namespace
}  // namespace vllm::structured_output
