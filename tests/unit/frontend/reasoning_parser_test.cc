// The reasoning parsers deepseek_r1 and qwen3: Extract against vLLM's extract_reasoning,
// streaming over every split (a tag cut between deltas included) against Extract, and
// IsReasoningEnd on text and on token ids.
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
      {"</think>xyz", {"", "xyz"}},
      {"a</think>b</think>c", {"a", "b</think>c"}},
      {"<think>a<think>b</think>c", {"a<think>b", "c"}},
  };
  for (const std::string name : {"deepseek_r1", "qwen3"}) {
    const auto parser = Parser(name);
    for (const auto& c : kCases) {
      EXPECT_EQ(parser->Extract(c.text), c.want) << name << ": " << c.text;
      ExpectStreamingMatchesExtract(*parser, c.text);
    }
  }
}

TEST(ReasoningParserTest, OutputCutShortInsideReasoning) {
  for (const std::string name : {"deepseek_r1", "qwen3"}) {
    const auto parser = Parser(name);
    EXPECT_EQ(parser->Extract("still thinking"), (R{"still thinking", std::nullopt})) << name;
    EXPECT_EQ(parser->Extract("<think>still"), (R{"still", std::nullopt})) << name;
    EXPECT_EQ(parser->Extract(""), (R{"", std::nullopt})) << name;
    ExpectStreamingMatchesExtract(*parser, "still thinking <thin");
    ExpectStreamingMatchesExtract(*parser, "<think>still </thi");
  }
}

TEST(ReasoningParserTest, Qwen3WithThinkingDisabledIsContent) {
  const auto parser = Parser("qwen3");
  const ReasoningRequestOptions off{.enable_thinking = false};
  EXPECT_EQ(parser->Extract("just answer", off), (R{std::nullopt, "just answer"}));
  EXPECT_EQ(parser->Extract("a</think>b", off), (R{"a", "b"}));
  ExpectStreamingMatchesExtract(*parser, "just answer", off);
  // deepseek_r1 has no such switch.
  EXPECT_EQ(Parser("deepseek_r1")->Extract("just answer", off), (R{"just answer", std::nullopt}));
}

TEST(ReasoningParserTest, Qwen3ToolCallEndsReasoning) {
  const auto parser = Parser("qwen3");
  const std::string call = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis";
  EXPECT_EQ(parser->Extract("I should look it up.\n" + call), (R{"I should look it up.\n", call}));
  EXPECT_EQ(parser->Extract(call), (R{std::nullopt, call}));
  ExpectStreamingMatchesExtract(*parser, "I should look it up.\n" + call);
  // A <tool_call> not followed by <function…> is reasoning text; only the first one counts.
  const std::string mention = "the <tool_call> tag, then <tool_call>\n<function=f>";
  EXPECT_EQ(parser->Extract(mention), (R{mention, std::nullopt}));
  ExpectStreamingMatchesExtract(*parser, mention);
  ExpectStreamingMatchesExtract(*parser, "think <tool_call>  <functio");
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
  EXPECT_FALSE(qwen3->IsReasoningEnd("<think>x<tool_call>\n<function=f></tool_call>"));
  EXPECT_FALSE(qwen3->IsReasoningEnd("<think>x<tool_call> maybe"));
  EXPECT_FALSE(Parser("deepseek_r1")->IsReasoningEnd("<think>x<tool_call>\n<function=f>"));
}

TEST(ReasoningParserTest, IsReasoningEndOnTokenIds) {
  const auto parser = Parser("deepseek_r1", {.think_start_token_id = 1, .think_end_token_id = 2});
  const std::vector<int32_t> ended = {5, 1, 6, 2, 7};
  const std::vector<int32_t> open = {2, 5, 1, 6};
  EXPECT_TRUE(parser->IsReasoningEndIds(ended));
  EXPECT_FALSE(parser->IsReasoningEndIds(open));
  EXPECT_FALSE(parser->IsReasoningEndIds(std::vector<int32_t>{}));
  EXPECT_FALSE(Parser("deepseek_r1")->IsReasoningEndIds(ended));  // no ids configured
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
      // Without <think> (and, for qwen3, <tool_call>: a stream ends the reasoning at a call
      // that Extract reads as reasoning when a </think> follows), they agree exactly.
      if (text.find("<think>") == std::string::npos) {
        const ReasoningResult want = parser->Extract(text);
        if (name == "deepseek_r1" || text.find("<tool_call>") == std::string::npos) {
          EXPECT_EQ(s.reasoning, want.reasoning_content.value_or("")) << name << ": " << text;
          EXPECT_EQ(s.content, want.content.value_or("")) << name << ": " << text;
        }
      }
    }
  }
}

}  // namespace
}  // namespace vllm::frontend::parsers
