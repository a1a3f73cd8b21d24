// The reasoning parsers deepseek_r1 and qwen3: Extract against vLLM 0.33's extract_reasoning
// (qwen3: its parser transitions: <tool_call> ends the reasoning implicitly, <think> in the
// reasoning and a stray </think> in the content are dropped), streaming over every split (a tag
// cut between deltas included) against Extract, and IsReasoningEnd on text and on token ids.
#include "frontend/parsers/reasoning_parser.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace vllm::frontend::parsers {
namespace {

std::unique_ptr<ReasoningParser> Parser(std::string_view name,
                                        ReasoningParserOptions options = {}) {
  auto parser = MakeReasoningParser(name, options);
  EXPECT_TRUE(parser.ok()) << parser.status();
  return *std::move(parser);
}

struct Streamed {
  std::string reasoning;
  std::string content;
};

Streamed Stream(const ReasoningParser& parser, std::string_view text,
                const std::vector<size_t>& cuts, const ReasoningRequestOptions& request = {}) {
  auto stream = parser.NewStream(request);
  ReasoningDelta all;
  size_t from = 0;
  for (size_t cut : cuts) {
    all.Append(stream->Feed(text.substr(from, cut - from)));
    from = cut;
  }
  all.Append(stream->Feed(text.substr(from)));
  all.Append(stream->Finish());
  EXPECT_EQ(stream->reasoning_ended(), all.content.has_value() || stream->reasoning_ended());
  return {all.reasoning_content.value_or(""), all.content.value_or("")};
}

// Every two-piece split and byte-by-byte streaming give Extract's texts.
void ExpectStreamingMatchesExtract(const ReasoningParser& parser, std::string_view text,
                                   const ReasoningRequestOptions& request = {}) {
  const ReasoningResult want = parser.Extract(text, request);
  std::vector<std::vector<size_t>> splits;
  for (size_t cut = 0; cut <= text.size(); ++cut) splits.push_back({cut});
  splits.emplace_back();
  for (size_t i = 1; i < text.size(); ++i) splits.back().push_back(i);
  for (const auto& cuts : splits) {
    const Streamed got = Stream(parser, text, cuts, request);
    EXPECT_EQ(got.reasoning, want.reasoning_content.value_or("")) << text << " / " << cuts.size();
    EXPECT_EQ(got.content, want.content.value_or("")) << text << " / " << cuts.size();
  }
}

TEST(MakeReasoningParserTest, KnowsVllmNamesAndRefusesOthers) {
  for (const std::string& name : ReasoningParserNames()) {
    EXPECT_EQ(Parser(name)->name(), name);
  }
  auto unknown = MakeReasoningParser("qwen");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(),
            "unknown reasoning parser 'qwen'; valid parsers: deepseek_r1, qwen3");
}

using R = ReasoningResult;

TEST(ReasoningParserTest, BothSplitAtTheEndOfThinking) {
  const std::optional<std::string> none;
  const struct {
    std::string text;
    R want;
  } kCases[] = {
      {"<think>abc</think>xyz", {"abc", "xyz"}},
      {"abc</think>xyz", {"abc", "xyz"}},  // <think> was in the prompt
      {"<think>\nplan\n</think>\n\nanswer", {"\nplan\n", "\n\nanswer"}},
      {"abc</think>", {"abc", none}},
  };
  for (const std::string name : {"deepseek_r1", "qwen3"}) {
    const auto parser = Parser(name);
    for (const auto& c : kCases) {
      EXPECT_EQ(parser->Extract(c.text), c.want) << name << ": " << c.text;
      ExpectStreamingMatchesExtract(*parser, c.text);
    }
  }
}

TEST(ReasoningParserTest, TheyDifferOnRepeatedTagsAndEmptySides) {
  const std::optional<std::string> none;
  const struct {
    std::string text;
    R deepseek_r1;
    R qwen3;
  } kCases[] = {
      // vLLM 0.33's qwen3 returns None for an empty reasoning; deepseek_r1 "".
      {"</think>xyz", {"", "xyz"}, {none, "xyz"}},
      {"", {"", none}, {none, none}},
      // qwen3 drops a stray </think> in the content (the model may repeat it).
      {"a</think>b</think>c", {"a", "b</think>c"}, {"a", "bc"}},
      // qwen3 drops every <think> in the reasoning; deepseek_r1 only the first.
      {"<think>a<think>b</think>c", {"a<think>b", "c"}, {"ab", "c"}},
      // Text before a first <think>: deepseek_r1 drops it, qwen3 reads it as reasoning.
      {"pre<think>a</think>c", {"a", "c"}, {"prea", "c"}},
      // After the reasoning, <think> is content for both.
      // (deepseek_r1 drops everything before the first <think>, wherever it is.)
      {"a</think>b<think>c", {"c", none}, {"a", "b<think>c"}},
  };
  for (const auto& c : kCases) {
    EXPECT_EQ(Parser("deepseek_r1")->Extract(c.text), c.deepseek_r1) << c.text;
    EXPECT_EQ(Parser("qwen3")->Extract(c.text), c.qwen3) << c.text;
    // deepseek_r1's stream cannot drop text before a <think> still to come.
    if (c.text.find("<think>", 1) == std::string::npos) {
      ExpectStreamingMatchesExtract(*Parser("deepseek_r1"), c.text);
    }
    ExpectStreamingMatchesExtract(*Parser("qwen3"), c.text);
  }
}

TEST(ReasoningParserTest, OutputCutShortInsideReasoning) {
  for (const std::string name : {"deepseek_r1", "qwen3"}) {
    const auto parser = Parser(name);
    EXPECT_EQ(parser->Extract("still thinking"), (R{"still thinking", std::nullopt})) << name;
    EXPECT_EQ(parser->Extract("<think>still"), (R{"still", std::nullopt})) << name;
    ExpectStreamingMatchesExtract(*parser, "still thinking <thin");
    ExpectStreamingMatchesExtract(*parser, "<think>still </thi");
    ExpectStreamingMatchesExtract(*parser, "<think>still <tool_ca");
  }
}

TEST(ReasoningParserTest, Qwen3WithThinkingDisabledIsContent) {
  const auto parser = Parser("qwen3");
  const ReasoningRequestOptions off{.enable_thinking = false};
  EXPECT_EQ(parser->Extract("just answer", off), (R{std::nullopt, "just answer"}));
  // All content; a stray </think> dropped, <think> and <tool_call> kept.
  EXPECT_EQ(parser->Extract("a</think>b", off), (R{std::nullopt, "ab"}));
  EXPECT_EQ(parser->Extract("<think>a<tool_call>b", off),
            (R{std::nullopt, "<think>a<tool_call>b"}));
  ExpectStreamingMatchesExtract(*parser, "just answer", off);
  ExpectStreamingMatchesExtract(*parser, "a</think>b</thi", off);
  auto stream = parser->NewStream(off);
  EXPECT_TRUE(stream->reasoning_ended());
  // deepseek_r1 has no such switch.
  EXPECT_EQ(Parser("deepseek_r1")->Extract("just answer", off), (R{"just answer", std::nullopt}));
}

TEST(ReasoningParserTest, Qwen3ToolCallEndsReasoning) {
  const auto parser = Parser("qwen3");
  const std::string call = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis";
  EXPECT_EQ(parser->Extract("I should look it up.\n" + call), (R{"I should look it up.\n", call}));
  EXPECT_EQ(parser->Extract(call), (R{std::nullopt, call}));
  ExpectStreamingMatchesExtract(*parser, "I should look it up.\n" + call);
  // Any <tool_call> ends it (vLLM 0.33: a grammar transition, no lookahead): hermes' JSON
  // call too, and a mere mention; what follows is content, for the tool parser.
  const std::string hermes = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  EXPECT_EQ(parser->Extract("plan" + hermes), (R{"plan", hermes}));
  const std::string mention = "the <tool_call> tag, then </think>done";
  EXPECT_EQ(parser->Extract(mention), (R{"the ", "<tool_call> tag, then done"}));
  ExpectStreamingMatchesExtract(*parser, mention);
  ExpectStreamingMatchesExtract(*parser, "plan" + hermes);
  ExpectStreamingMatchesExtract(*parser, "think <tool_call>  <functio");
  auto stream = parser->NewStream();
  EXPECT_EQ(stream->Feed("plan <tool_").reasoning_content, "plan ");
  EXPECT_FALSE(stream->reasoning_ended());
  const ReasoningDelta d = stream->Feed("call>{");
  EXPECT_FALSE(d.reasoning_content.has_value());
  EXPECT_EQ(d.content, "<tool_call>{");
  EXPECT_TRUE(stream->reasoning_ended());
  // deepseek_r1 knows no such rule.
  EXPECT_EQ(Parser("deepseek_r1")->Extract(call), (R{call, std::nullopt}));
}

TEST(ReasoningParserTest, StreamHoldsBackAPartialEndTag) {
  const auto parser = Parser("deepseek_r1");
  auto stream = parser->NewStream();
  ReasoningDelta d = stream->Feed("step one</th");
  EXPECT_EQ(d.reasoning_content, "step one");
  EXPECT_FALSE(d.content.has_value());
  EXPECT_FALSE(stream->reasoning_ended());
  d = stream->Feed("ink>The answer");
  EXPECT_FALSE(d.reasoning_content.has_value());
  EXPECT_EQ(d.content, "The answer");
  EXPECT_TRUE(stream->reasoning_ended());
  d = stream->Feed(" is 4.");
  EXPECT_EQ(d.content, " is 4.");
  EXPECT_TRUE(stream->Finish().empty());
  // A held-back prefix that never became a tag is reasoning at the end.
  auto cut = parser->NewStream();
  EXPECT_EQ(cut->Feed("x </thi").reasoning_content, "x ");
  EXPECT_EQ(cut->Finish().reasoning_content, "</thi");
}

TEST(ReasoningParserTest, IsReasoningEndOnText) {
  for (const std::string name : {"deepseek_r1", "qwen3"}) {
    const auto parser = Parser(name);
    EXPECT_TRUE(parser->IsReasoningEnd("<think>a</think>b")) << name;
    EXPECT_TRUE(parser->IsReasoningEnd("prompt<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    EXPECT_TRUE(parser->IsReasoningEnd("a</think>"));
    EXPECT_FALSE(parser->IsReasoningEnd("<think>a")) << name;
    EXPECT_FALSE(parser->IsReasoningEnd("a</think>b<think>c")) << name;
    EXPECT_FALSE(parser->IsReasoningEnd("")) << name;
  }
  const auto qwen3 = Parser("qwen3");
  EXPECT_TRUE(qwen3->IsReasoningEnd("<think>x<tool_call>\n<function=f>"));
  EXPECT_TRUE(qwen3->IsReasoningEnd("<think>x<tool_call>\n<function=f></tool_call>"));
  EXPECT_TRUE(qwen3->IsReasoningEnd("<think>x<tool_call> maybe"));
  EXPECT_FALSE(qwen3->IsReasoningEnd("<tool_call>x</tool_call><think>y"));
  EXPECT_FALSE(Parser("deepseek_r1")->IsReasoningEnd("<think>x<tool_call>\n<function=f>"));
}

TEST(ReasoningParserTest, IsReasoningEndOnTokenIds) {
  const auto parser =
      Parser("deepseek_r1",
             {.think_start_token_id = 1, .think_end_token_id = 2, .tool_call_token_id = {}});
  const std::vector<int32_t> ended = {5, 1, 6, 2, 7};
  const std::vector<int32_t> open = {2, 5, 1, 6};
  EXPECT_TRUE(parser->IsReasoningEndIds(ended));
  EXPECT_FALSE(parser->IsReasoningEndIds(open));
  EXPECT_FALSE(parser->IsReasoningEndIds(std::vector<int32_t>{}));
  EXPECT_FALSE(Parser("deepseek_r1")->IsReasoningEndIds(ended));  // no ids configured
  // qwen3's <tool_call> id ends it too; deepseek_r1 ignores it.
  const ReasoningParserOptions ids{
      .think_start_token_id = 1, .think_end_token_id = 2, .tool_call_token_id = 3};
  const std::vector<int32_t> call = {5, 1, 6, 3, 7};
  EXPECT_TRUE(Parser("qwen3", ids)->IsReasoningEndIds(call));
  EXPECT_FALSE(Parser("qwen3", ids)->IsReasoningEndIds(std::vector<int32_t>{3, 1, 6}));
  EXPECT_FALSE(Parser("deepseek_r1", ids)->IsReasoningEndIds(call));
}

TEST(ReasoningParserTest, RandomTextNeverBreaksTheStream) {
  const std::string pieces[] = {
      "<think>", "</think>", "<tool_call>", "<function=", "\n",       " ", "a",
      "<",       "/",        "think",       ">",          "<functio", "x"};
  std::mt19937 rng(5);
  for (const std::string name : {"deepseek_r1", "qwen3"}) {
    const auto parser = Parser(name);
    for (int iter = 0; iter < 300; ++iter) {
      std::string text;
      for (int i = 0; i < 12; ++i) text += pieces[rng() % std::size(pieces)];
      // Streaming loses nothing and adds nothing: reasoning + content is the text less the
      // tags it consumed.
      std::vector<size_t> cuts;
      for (size_t i = 1; i < text.size(); ++i) {
        if (rng() % 3 == 0) cuts.push_back(i);
      }
      const Streamed s = Stream(*parser, text, cuts);
      EXPECT_LE(s.reasoning.size() + s.content.size(), text.size()) << text;
      // They agree exactly: qwen3 always; deepseek_r1 without <think> (its Extract drops the
      // text before the first one, its stream cannot know it comes).
      if (name == "qwen3" || text.find("<think>") == std::string::npos) {
        const ReasoningResult want = parser->Extract(text);
        EXPECT_EQ(s.reasoning, want.reasoning_content.value_or("")) << name << ": " << text;
        EXPECT_EQ(s.content, want.content.value_or("")) << name << ": " << text;
      }
    }
  }
}

}  // namespace
}  // namespace vllm::frontend::parsers
