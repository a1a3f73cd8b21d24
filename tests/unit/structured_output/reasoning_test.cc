// structured_output/reasoning.h and stats.h: the think tokens a reasoning parser finds in a
// tokenizer (and the refusal when it lacks them; qwen3's implicit end <tool_call>), whether a
// prompt already ended the reasoning (vLLM's is_reasoning_end for deepseek_r1 and qwen3), the
// manager's reasoning gate (an implicit end taken into the grammar, or masked in the reasoning
// row when the grammar cannot start with it; enable_in_reasoning), and the compile-time
// histogram of StructuredOutputStats.
#include "structured_output/reasoning.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
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

// The qwen2 fixture tokenizer (<|im_start|> = 1, <|im_end|> = 2, <tool_call> = 2000, unless
// `tool_call` is false) plus <think> = 2002 and </think> = 2003 as added tokens, as Qwen3's
// tokenizer has them.
std::unique_ptr<frontend::Tokenizer> ThinkingTokenizer(bool tool_call = true) {
  nlohmann::json j = nlohmann::json::parse(
      ReadText(kSource / "tests/fixtures/tokenizer/qwen2_bpe/tokenizer.json"));
  for (auto [id, text] : {std::pair<int, const char*>{2002, "<think>"}, {2003, "</think>"}}) {
    j["added_tokens"].push_back(testing::AddedTokenJson(id, text));
  }
  if (!tool_call) {
    nlohmann::json& added = j["added_tokens"];
    for (auto it = added.begin(); it != added.end();) {
      it = (*it)["content"] == "<tool_call>" ? added.erase(it) : it + 1;
    }
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
  // Without a <tool_call> token: no implicit end.
  auto without = ThinkingTokenizer(/*tool_call=*/false);
  ASSERT_NE(without, nullptr);
  auto plain = FindReasoningTokens("qwen3", *without);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(plain->implicit_end_ids.empty());
}

TEST(ReasoningTokensTest, Qwen3EndsImplicitlyAtAToolCallToken) {
  auto tokenizer = ThinkingTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  auto qwen3 = FindReasoningTokens("qwen3", *tokenizer);
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  EXPECT_EQ(qwen3->implicit_end_ids, (std::vector<int32_t>{2000}));
  EXPECT_TRUE(qwen3->IsEnd(2003));
  EXPECT_TRUE(qwen3->IsEnd(2000));
  EXPECT_TRUE(qwen3->IsImplicitEnd(2000));
  EXPECT_FALSE(qwen3->IsImplicitEnd(2003));
  EXPECT_FALSE(qwen3->IsEnd(2002));
  // deepseek_r1 has no tool-call transition (vLLM 0.33's is unchanged).
  auto r1 = FindReasoningTokens("deepseek_r1", *tokenizer);
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_TRUE(r1->implicit_end_ids.empty());
  EXPECT_FALSE(r1->IsEnd(2000));
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
  const ReasoningTokens r1{/*start_id=*/7, /*end_id=*/8, {}, {}};
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
  const ReasoningTokens qwen3{/*start_id=*/7, /*end_id=*/8, /*boundary_ids=*/{1, 2}, {}};
  using Ids = std::vector<int32_t>;
  EXPECT_FALSE(PromptEndsReasoning(qwen3, Ids{1, 7, 5, 8, 5, 2, 1, 5}));
  EXPECT_TRUE(PromptEndsReasoning(qwen3, Ids{1, 7, 5, 8, 5, 2, 1, 5, 7, 10, 8, 10}));
  // Without the boundary (deepseek_r1), the old </think> counts.
  const ReasoningTokens r1{7, 8, {}, {}};
  EXPECT_TRUE(PromptEndsReasoning(r1, Ids{1, 7, 5, 8, 5, 2, 1, 5}));
}

TEST(PromptEndsReasoningTest, Qwen3sToolCallEndsItToo) {
  const ReasoningTokens qwen3{/*start_id=*/7, /*end_id=*/8, /*boundary_ids=*/{1, 2},
                              /*implicit_end_ids=*/{9}};
  using Ids = std::vector<int32_t>;
  EXPECT_TRUE(PromptEndsReasoning(qwen3, Ids{1, 7, 5, 9}));        // reasoning, then <tool_call>
  EXPECT_TRUE(PromptEndsReasoning(qwen3, Ids{1, 7, 5, 9, 5, 5}));  // inside the call
  EXPECT_FALSE(PromptEndsReasoning(qwen3, Ids{1, 9, 5, 7, 5}));    // a <think> opened after it
  EXPECT_FALSE(PromptEndsReasoning(qwen3, Ids{9, 2, 1, 5}));       // an earlier turn's
}

// Polls `state` until its grammar compiled (deadline 30 s).
StructuredOutputManager::PollResult WaitReady(StructuredOutputManager& manager,
                                              RequestState& state) {
  std::string error;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    const auto r = manager.Poll(state, &error);
    if (r != StructuredOutputManager::PollResult::kCompiling) {
      EXPECT_EQ(r, StructuredOutputManager::PollResult::kReady) << error;
      return r;
    }
    manager.WaitForCompiles(absl::Milliseconds(5));
  }
  return StructuredOutputManager::PollResult::kCompiling;
}

bool Allowed(std::span<const int32_t> row, int32_t token) {
  return ((row[static_cast<size_t>(token / 32)] >> (token % 32)) & 1) != 0;
}

// The bundled model's tokenizer, with two of its tokens standing in for qwen3's implicit end:
// " the" (a regex of spaces and lowercase letters may start with it) and "," (it may not).
class ImplicitEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tokenizer = frontend::Tokenizer::Load(kSource / "models" / "kjv-llama-tiny");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    const std::optional<int32_t> the = (*tokenizer)->TokenToId("\u0120the");
    const std::optional<int32_t> comma = (*tokenizer)->TokenToId(",");
    ASSERT_TRUE(the.has_value() && comma.has_value());
    the_ = *the;
    comma_ = *comma;
    options_.model_dir = kSource / "models" / "kjv-llama-tiny";
    options_.vocab_size = 4096;
    options_.reasoning = ReasoningTokens{/*start_id=*/3000,
                                         /*end_id=*/3001,
                                         {},
                                         /*implicit_end_ids=*/{comma_, the_}};
    params_.regex = "[ a-z]+";
  }

  int32_t the_ = -1;
  int32_t comma_ = -1;
  StructuredOutputManager::Options options_;
  StructuredOutputsParams params_;
  const std::vector<int32_t> open_ = {5, 3000, 9};
};

TEST_F(ImplicitEndTest, TheGrammarTakesTheImplicitEndAsItsFirstToken) {
  StructuredOutputManager manager(options_);
  auto state = manager.Submit(params_, std::nullopt, open_);
  ASSERT_EQ(WaitReady(manager, *state), StructuredOutputManager::PollResult::kReady);
  EXPECT_FALSE(state->reasoning_ended());
  // Trying " the" on the grammar left no trace.
  EXPECT_EQ(state->grammar()->num_accepted_tokens(), 0);
  EXPECT_EQ(state->masked_reasoning_ends(), (std::vector<int32_t>{comma_}));
  EXPECT_FALSE(manager.ShouldAdvance(*state, 42));
  // " the" ends the reasoning and is content: the grammar takes it.
  EXPECT_TRUE(manager.ShouldAdvance(*state, the_));
  EXPECT_TRUE(state->reasoning_ended());
  EXPECT_TRUE(manager.ShouldFillBitmask(*state));
  EXPECT_FALSE(manager.NeedsReasoningRow(*state));
  ASSERT_TRUE(state->grammar()->AcceptTokens(std::vector<int32_t>{the_}));
  std::vector<int32_t> row(static_cast<size_t>(manager.bitmask_words()));
  state->grammar()->FillBitmask(row);
  EXPECT_FALSE(Allowed(row, comma_));  // the grammar constrains now
  EXPECT_TRUE(Allowed(row, the_));
}

TEST_F(ImplicitEndTest, AnImplicitEndTheGrammarRefusesIsMaskedWhileReasoning) {
  StructuredOutputManager manager(options_);
  auto state = manager.Submit(params_, std::nullopt, open_);
  ASSERT_EQ(WaitReady(manager, *state), StructuredOutputManager::PollResult::kReady);
  EXPECT_FALSE(manager.ShouldFillBitmask(*state));
  EXPECT_TRUE(manager.NeedsReasoningRow(*state));
  // The reasoning row: everything but "," (even what the grammar refuses, like "1" or "{").
  std::vector<int32_t> row(static_cast<size_t>(manager.bitmask_words()), 0);
  manager.FillReasoningRow(*state, row);
  int32_t allowed = 0;
  for (int32_t t = 0; t < 4096; ++t) allowed += Allowed(row, t) ? 1 : 0;
  EXPECT_EQ(allowed, 4095);
  EXPECT_FALSE(Allowed(row, comma_));
  EXPECT_TRUE(Allowed(row, the_));
  EXPECT_TRUE(Allowed(row, 3001));  // the explicit end stays open
  // After the explicit end the grammar rules, and no reasoning row is needed.
  EXPECT_FALSE(manager.ShouldAdvance(*state, 3001));
  EXPECT_FALSE(manager.NeedsReasoningRow(*state));
  EXPECT_TRUE(manager.ShouldFillBitmask(*state));

  // A grammar that can start with both: nothing masked, no row while reasoning.
  StructuredOutputsParams both;
  both.regex = "( the|,)[a-z]*";
  auto free = manager.Submit(both, std::nullopt, open_);
  ASSERT_EQ(WaitReady(manager, *free), StructuredOutputManager::PollResult::kReady);
  EXPECT_TRUE(free->masked_reasoning_ends().empty());
  EXPECT_FALSE(manager.NeedsReasoningRow(*free));
  EXPECT_FALSE(manager.ShouldFillBitmask(*free));

  // A prompt that ends with the implicit end: constrained from the first token, nothing masked.
  auto ended = manager.Submit(params_, std::nullopt, std::vector<int32_t>{5, 3000, 9, the_});
  ASSERT_EQ(WaitReady(manager, *ended), StructuredOutputManager::PollResult::kReady);
  EXPECT_TRUE(ended->reasoning_ended());
  EXPECT_TRUE(ended->masked_reasoning_ends().empty());
  EXPECT_TRUE(manager.ShouldFillBitmask(*ended));
}

TEST_F(ImplicitEndTest, EnableInReasoningConstrainsFromTheFirstToken) {
  options_.enable_in_reasoning = true;
  StructuredOutputManager manager(options_);
  auto state = manager.Submit(params_, std::nullopt, open_);
  EXPECT_TRUE(state->reasoning_ended());
  EXPECT_TRUE(manager.ShouldFillBitmask(*state));
  EXPECT_TRUE(manager.ShouldAdvance(*state, 3000));  // the think tokens go to the grammar too
  ASSERT_EQ(WaitReady(manager, *state), StructuredOutputManager::PollResult::kReady);
  EXPECT_TRUE(state->masked_reasoning_ends().empty());
  EXPECT_FALSE(manager.NeedsReasoningRow(*state));
}

TEST(ManagerReasoningTest, GateOpensOnTheTokenAfterTheEnd) {
  StructuredOutputManager::Options options;
  options.model_dir = kSource / "models" / "kjv-llama-tiny";
  options.vocab_size = 4096;
  options.reasoning = ReasoningTokens{/*start_id=*/3000, /*end_id=*/3001, {}, {}};
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
