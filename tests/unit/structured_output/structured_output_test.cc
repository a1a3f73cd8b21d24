// structured_output/: the params' checks, the spec validation the frontend runs, and grammars
// compiled against the bundled model's real tokenizer driven token by token: every token the
// bitmask allows is accepted by the matcher, and a walk that always takes an allowed token ends
// in text the constraint's own independent check accepts.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "frontend/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "structured_output/manager.h"
#include "structured_output/params.h"
#include "structured_output/xgrammar_backend.h"

namespace vllm::structured_output {
namespace {

std::filesystem::path ModelDir() {
  return std::filesystem::path(VLLM_SOURCE_DIR) / "models" / "kjv-llama-tiny";
}
constexpr int32_t kEos = 1;  // the bundled model's <|end_of_text|>

TEST(ParamsTest, ExactlyOneConstraint) {
  StructuredOutputsParams p;
  EXPECT_FALSE(ValidateStructuredOutputsParams(p).ok());
  p.regex = "a+";
  EXPECT_TRUE(ValidateStructuredOutputsParams(p).ok());
  p.json_object = true;
  absl::Status s = ValidateStructuredOutputsParams(p);
  EXPECT_NE(s.message().find("only use one kind"), std::string_view::npos) << s;
}

TEST(ParamsTest, RefusesWhatXgrammarCannotHonour) {
  StructuredOutputsParams p;
  p.json = R"({"type": "object"})";
  p.whitespace_pattern = "[ ]*";
  absl::Status s = ValidateStructuredOutputsParams(p);
  EXPECT_NE(s.message().find("whitespace_pattern"), std::string_view::npos) << s;
  p.whitespace_pattern.reset();
  p.choice = std::vector<std::string>{};
  p.json.reset();
  EXPECT_NE(ValidateStructuredOutputsParams(p).message().find("empty"), std::string_view::npos);
  p.choice.reset();
  p.grammar = std::string(kMaxSpecBytes + 1, 'a');
  EXPECT_NE(ValidateStructuredOutputsParams(p).message().find("bytes"), std::string_view::npos);
}

TEST(ParamsTest, ChoiceAsGrammarEscapes) {
  EXPECT_EQ(ChoiceAsGrammar({"yes", "a\"b\\c"}), R"(root ::= "yes" | "a\"b\\c")");
}

// A spec seen again is answered from the cache, with the same answer.
TEST(ValidateGrammarSpecTest, RemembersAnswers) {
  const GrammarSpec good{ConstraintKind::kRegex, "[a-z]{1,7} cached", true};
  const GrammarSpec bad{ConstraintKind::kRegex, "(unclosed cached", true};
  const absl::Status first_good = ValidateGrammarSpec(good);
  const absl::Status first_bad = ValidateGrammarSpec(bad);
  ASSERT_TRUE(first_good.ok()) << first_good;
  ASSERT_FALSE(first_bad.ok());
  const int64_t hits = ValidationCacheHits();
  EXPECT_EQ(ValidateGrammarSpec(good), first_good);
  EXPECT_EQ(ValidateGrammarSpec(bad), first_bad);
  EXPECT_EQ(ValidationCacheHits(), hits + 2);
  // any_whitespace is part of the spec.
  EXPECT_TRUE(ValidateGrammarSpec({ConstraintKind::kRegex, "[a-z]{1,7} cached", false}).ok());
  EXPECT_EQ(ValidationCacheHits(), hits + 2);
}

TEST(ValidateGrammarSpecTest, AcceptsAndRefuses) {
  auto json = [](std::string text) { return GrammarSpec{ConstraintKind::kJson, text, true}; };
  EXPECT_TRUE(
      ValidateGrammarSpec(json(R"({"type":"object","properties":{"a":{"type":"integer"}}})")).ok());
  EXPECT_FALSE(ValidateGrammarSpec(json("{not json")).ok());
  EXPECT_FALSE(ValidateGrammarSpec(json("[1, 2]")).ok());
  // Parses, but admits no value: refused before the engine (where no token could be sampled).
  absl::Status cycle = ValidateGrammarSpec(json(R"({"$ref": "#"})"));
  EXPECT_NE(cycle.message().find("admits no output"), std::string_view::npos) << cycle;
  absl::Status s = ValidateGrammarSpec(json(R"({"type":"array","uniqueItems":true})"));
  EXPECT_NE(s.message().find("uniqueItems"), std::string_view::npos) << s;
  // A property named like a keyword is not the keyword.
  EXPECT_TRUE(
      ValidateGrammarSpec(json(R"({"type":"object","properties":{"not":{"type":"string"}}})"))
          .ok());
  std::string deep;
  for (int i = 0; i < 10000; ++i) deep += R"({"type":"array","items":)";
  deep += "true";
  for (int i = 0; i < 10000; ++i) deep += "}";
  s = ValidateGrammarSpec(json(deep));
  EXPECT_NE(s.message().find("deeper"), std::string_view::npos) << s;
  EXPECT_TRUE(ValidateGrammarSpec({ConstraintKind::kRegex, "[a-z]+@[a-z]+\\.com", true}).ok());
  EXPECT_FALSE(ValidateGrammarSpec({ConstraintKind::kRegex, "(a", true}).ok());
  EXPECT_TRUE(
      ValidateGrammarSpec({ConstraintKind::kGrammar, R"(root ::= "a" root | "b")", true}).ok());
  EXPECT_FALSE(
      ValidateGrammarSpec({ConstraintKind::kGrammar, "root ::= undefined_rule", true}).ok());
}

// Walks the grammar: each step takes a random allowed token (the EOS when it is the only one),
// checks that every allowed token is accepted by a fork of the matcher, and returns the text.
std::string Walk(XgrammarBackend& backend, const frontend::Tokenizer& tokenizer,
                 const GrammarSpec& spec, uint32_t seed, bool* ended) {
  auto compiled = backend.Compile(spec);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return "";
  auto grammar = backend.MakeGrammar(**compiled, kEos);
  std::vector<int32_t> row(static_cast<size_t>(BitmaskWords(backend.vocab_size())));
  std::vector<int32_t> tokens;
  std::mt19937 rng(seed);
  *ended = false;
  for (int step = 0; step < 200; ++step) {
    grammar->FillBitmask(row);
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < backend.vocab_size(); ++t) {
      if ((row[static_cast<size_t>(t / 32)] >> (t % 32)) & 1) allowed.push_back(t);
    }
    EXPECT_FALSE(allowed.empty());
    if (allowed.empty()) break;
    // Prefer ending when possible after a few tokens, so walks terminate.
    const bool can_end = std::find(allowed.begin(), allowed.end(), kEos) != allowed.end();
    const int32_t token =
        can_end && (step > 8 || allowed.size() == 1) ? kEos : allowed[rng() % allowed.size()];
    EXPECT_TRUE(grammar->AcceptTokens(std::span<const int32_t>(&token, 1))) << token;
    if (token == kEos) {
      *ended = true;
      EXPECT_TRUE(grammar->IsTerminated());
      break;
    }
    tokens.push_back(token);
  }
  return tokenizer.Decode(tokens, /*skip_special_tokens=*/true);
}

class BackendTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto backend = XgrammarBackend::Create(ModelDir(), 4096, {kEos});
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend).release();
    auto tokenizer = frontend::Tokenizer::Load(ModelDir());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(*tokenizer).release();
  }
  static void TearDownTestSuite() {
    delete backend_;
    delete tokenizer_;
  }
  static XgrammarBackend* backend_;
  static frontend::Tokenizer* tokenizer_;
};
XgrammarBackend* BackendTest::backend_ = nullptr;
frontend::Tokenizer* BackendTest::tokenizer_ = nullptr;

TEST_F(BackendTest, RegexWalksMatchTheRegex) {
  const std::string re = "[a-z]{3,8}@(kjv|bible)\\.org";
  for (uint32_t seed = 0; seed < 8; ++seed) {
    bool ended = false;
    std::string text =
        Walk(*backend_, *tokenizer_, {ConstraintKind::kRegex, re, true}, seed, &ended);
    EXPECT_TRUE(ended);
    EXPECT_TRUE(std::regex_match(text, std::regex(re))) << text;
  }
}

TEST_F(BackendTest, ChoiceWalksPickAChoice) {
  const std::vector<std::string> choices = {"positive", "negative", "neutral \"quoted\""};
  for (uint32_t seed = 0; seed < 8; ++seed) {
    bool ended = false;
    std::string text =
        Walk(*backend_, *tokenizer_, {ConstraintKind::kChoice, ChoiceAsGrammar(choices), true},
             seed, &ended);
    EXPECT_TRUE(ended);
    EXPECT_NE(std::find(choices.begin(), choices.end(), text), choices.end()) << text;
  }
}

TEST_F(BackendTest, JsonSchemaWalksGiveValidJson) {
  const std::string schema = R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":150},
      "tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3}},
      "required":["name","age","tags"]})";
  for (uint32_t seed = 0; seed < 16; ++seed) {
    bool ended = false;
    std::string text =
        Walk(*backend_, *tokenizer_, {ConstraintKind::kJson, schema, false}, seed, &ended);
    if (!ended) continue;  // the 200-token walk ran out inside a string; not a verdict
    auto doc = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << nlohmann::json(text).dump(-1, ' ', true);
    EXPECT_TRUE(doc["name"].is_string()) << text;
    EXPECT_TRUE(doc["age"].is_number_integer()) << text;
    EXPECT_LE(doc["tags"].size(), 3u) << text;
  }
}

TEST_F(BackendTest, PropertiesComeInTheSchemasOrder) {
  // "zeta" before "alpha", and a length-bounded string (compiled through the pattern rewrite).
  const std::string schema = R"({"type":"object","properties":{
      "zeta":{"type":"string","maxLength":3},"alpha":{"type":"integer"}},
      "required":["zeta","alpha"]})";
  for (uint32_t seed = 0; seed < 4; ++seed) {
    bool ended = false;
    std::string text =
        Walk(*backend_, *tokenizer_, {ConstraintKind::kJson, schema, false}, seed, &ended);
    EXPECT_EQ(text.rfind("{\"zeta\"", 0), 0u) << text;
  }
}

TEST_F(BackendTest, OnlyStopAllowedOnceComplete) {
  auto compiled = backend_->Compile({ConstraintKind::kChoice, ChoiceAsGrammar({"yes"}), true});
  ASSERT_TRUE(compiled.ok());
  auto grammar = backend_->MakeGrammar(**compiled, kEos);
  std::vector<int32_t> row(static_cast<size_t>(BitmaskWords(backend_->vocab_size())));
  EXPECT_FALSE(grammar->OnlyStopAllowed(row));
  auto ids = tokenizer_->Encode("yes", false);
  ASSERT_TRUE(ids.ok());
  ASSERT_TRUE(grammar->AcceptTokens(*ids));
  EXPECT_TRUE(grammar->OnlyStopAllowed(row));
  // Rollback undoes tokens.
  grammar->Rollback(static_cast<int32_t>(ids->size()));
  EXPECT_FALSE(grammar->OnlyStopAllowed(row));
  EXPECT_EQ(grammar->num_accepted_tokens(), 0);
  // A token outside the grammar is refused.
  const int32_t bad = *tokenizer_->TokenToId("Ġthe");
  EXPECT_FALSE(grammar->AcceptTokens(std::span<const int32_t>(&bad, 1)));
}

StructuredOutputManager::PollResult WaitReady(StructuredOutputManager& m, RequestState& s,
                                              std::string* error) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = m.Poll(s, error);
    if (r != StructuredOutputManager::PollResult::kCompiling) return r;
    std::this_thread::yield();
  }
  return StructuredOutputManager::PollResult::kCompiling;
}

TEST(ManagerTest, CompilesOffThreadCachesAndFailsCleanly) {
  StructuredOutputManager::Options options;
  options.model_dir = ModelDir();
  options.vocab_size = 4096;
  options.stop_token_ids = {kEos};
  StructuredOutputManager manager(options);
  StructuredOutputsParams p;
  p.regex = "(yes|no)";
  auto a = manager.Submit(p, kEos);
  auto b = manager.Submit(p, kEos);
  std::string error;
  ASSERT_EQ(WaitReady(manager, *a, &error), StructuredOutputManager::PollResult::kReady) << error;
  ASSERT_EQ(WaitReady(manager, *b, &error), StructuredOutputManager::PollResult::kReady) << error;
  ASSERT_NE(a->grammar(), nullptr);
  EXPECT_NE(a->grammar(), b->grammar());  // one matcher per request
  StructuredOutputStats stats = manager.TakeStats();
  EXPECT_EQ(stats.cache_misses, 1);
  EXPECT_EQ(stats.cache_hits, 1);
  EXPECT_EQ(stats.num_compiles(), 1);  // the second request waited for the first's compile
  EXPECT_GT(stats.compile_seconds_sum, 0.0);

  // Rows for 8 requests, filled in parallel, equal rows filled one by one.
  std::vector<std::unique_ptr<RequestState>> states;
  std::vector<Grammar*> grammars;
  for (int i = 0; i < 8; ++i) {
    states.push_back(manager.Submit(p, kEos));
    ASSERT_EQ(WaitReady(manager, *states.back(), &error),
              StructuredOutputManager::PollResult::kReady);
    grammars.push_back(states.back()->grammar());
  }
  const size_t words = static_cast<size_t>(manager.bitmask_words());
  std::vector<int32_t> rows(words * grammars.size());
  manager.FillBitmasks(grammars, rows);
  std::vector<int32_t> one(words);
  grammars[0]->FillBitmask(one);
  for (size_t i = 0; i < grammars.size(); ++i) {
    EXPECT_TRUE(std::equal(one.begin(), one.end(), rows.begin() + i * words));
  }

  StructuredOutputsParams bad;
  bad.grammar = "root ::= nowhere";
  auto c = manager.Submit(bad, kEos);
  EXPECT_EQ(WaitReady(manager, *c, &error), StructuredOutputManager::PollResult::kFailed);
  EXPECT_FALSE(error.empty());
}

TEST(ManagerTest, MissingTokenizerFailsRequestsNotTheProcess) {
  StructuredOutputManager::Options options;
  options.model_dir = "/nonexistent/model";
  options.vocab_size = 100;
  StructuredOutputManager manager(options);
  StructuredOutputsParams p;
  p.json_object = true;
  auto s = manager.Submit(p, std::nullopt);
  std::string error;
  EXPECT_EQ(WaitReady(manager, *s, &error), StructuredOutputManager::PollResult::kFailed);
  EXPECT_NE(error.find("unavailable"), std::string::npos) << error;
}

}  // namespace
}  // namespace vllm::structured_output
