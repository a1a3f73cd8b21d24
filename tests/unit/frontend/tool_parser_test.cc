// The tool-call parsers' factory and ids, and the JSON parsers hermes and llama3_json: Extract
// against vLLM's results (json.dumps text of the arguments), streaming over every split of
// each sample against Extract, malformed and hostile outputs.
#include "frontend/parsers/tool_parser.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/frontend/tool_parser_test_util.h"

namespace vllm::frontend::parsers {
namespace {

using testing::ExpectStreamingMatchesExtract;
using testing::Parser;
using testing::StreamPieces;

TEST(MakeToolParserTest, KnowsVllmNamesAndRefusesOthers) {
  for (const std::string& name : ToolParserNames()) {
    auto parser = MakeToolParser(name);
    ASSERT_TRUE(parser.ok()) << name;
    EXPECT_EQ((*parser)->name(), name);
  }
  auto unknown = MakeToolParser("hermes2");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.status().message(),
            "unknown tool call parser 'hermes2'; valid parsers: hermes, llama3_json, mistral, "
            "pythonic");
}

TEST(MakeToolParserTest, IdsLookLikeVllms) {
  const std::string text = R"(<tool_call>{"name": "f", "arguments": {}}</tool_call>)";
  auto parser = MakeToolParser("hermes");  // the default random source
  ASSERT_TRUE(parser.ok());
  const std::string a = (*parser)->Extract(text).tool_calls.at(0).id;
  const std::string b = (*parser)->Extract(text).tool_calls.at(0).id;
  ASSERT_EQ(a.size(), std::string("chatcmpl-tool-").size() + 32);
  EXPECT_TRUE(a.starts_with("chatcmpl-tool-"));
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef", 14), std::string::npos) << a;
  EXPECT_NE(a, b);
  // An injected source makes them reproducible.
  EXPECT_EQ(Parser("hermes")->Extract(text).tool_calls[0].id,
            Parser("hermes")->Extract(text).tool_calls[0].id);
}

struct Case {
  std::string text;
  std::vector<ToolCall> calls;  // ids ignored
  std::optional<std::string> content;
};

void ExpectExtract(const ToolParser& parser, const Case& c) {
  const ExtractedToolCalls got = parser.Extract(c.text);
  EXPECT_EQ(got.tools_called, !c.calls.empty()) << c.text;
  EXPECT_EQ(got.content, c.content) << c.text;
  ASSERT_EQ(got.tool_calls.size(), c.calls.size()) << c.text;
  for (size_t i = 0; i < c.calls.size(); ++i) {
    EXPECT_EQ(got.tool_calls[i].name, c.calls[i].name) << c.text;
    EXPECT_EQ(got.tool_calls[i].arguments, c.calls[i].arguments) << c.text;
  }
}

TEST(HermesToolParserTest, ExtractsLikeVllm) {
  const auto parser = Parser("hermes");
  const Case cases[] = {
      {"Hello there", {}, "Hello there"},
      {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": "
       "3}}\n</tool_call>",
       {{"", "get_weather", R"({"city": "Paris", "days": 3})"}},
       std::nullopt},
      // Compact JSON comes back as json.dumps writes it; content is the text before the first
      // call; text between and after calls is dropped; keys may come in any order.
      {"Let me check.\n<tool_call>{\"name\":\"a\",\"arguments\":{\"x\":[1,2.50,1e2,-0]}}"
       "</tool_call>\nand <tool_call>{\"arguments\":{\"y\":\"\\u00e9\\n\\ud83d\\ude00\"},"
       "\"name\":\"b\"}</tool_call> bye",
       {{"", "a", R"({"x": [1, 2.5, 100.0, 0]})"},
        {"", "b", "{\"y\": \"\xC3\xA9\\n\xF0\x9F\x98\x80\"}"}},
       "Let me check.\n"},
      // The last call's closing tag may be missing.
      {R"(<tool_call>{"name": "f", "arguments": {}})", {{"", "f", "{}"}}, std::nullopt},
      // Arguments of any JSON type are written back as JSON.
      {R"(<tool_call>{"name": "f", "arguments": "{\"a\": 1}", "x": [null]}</tool_call>)",
       {{"", "f", R"("{\"a\": 1}")"}},
       std::nullopt},
      {"a < b <tool_c", {}, "a < b <tool_c"},
  };
  for (const Case& c : cases) {
    ExpectExtract(*parser, c);
    ExpectStreamingMatchesExtract(*parser, c.text);
  }
}

TEST(HermesToolParserTest, StreamsNameThenArgumentsAsTheyArrive) {
  const auto parser = Parser("hermes");
  auto stream = parser->NewStream();
  DeltaMessage d = stream->Feed("I'll look. <tool_");
  EXPECT_EQ(d.content, "I'll look. ");  // "<tool_" is held back
  EXPECT_TRUE(d.tool_calls.empty());
  d = stream->Feed("call>\n{\"name\": \"sea");
  EXPECT_TRUE(d.empty());  // the name is sent whole
  d = stream->Feed("rch\", \"arguments\": {\"q\": \"long te");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "search");
  EXPECT_TRUE(d.tool_calls[0].id.has_value());
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"q\": \"long te");
  d = stream->Feed("xt\", \"n\": 1");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, "xt\", \"n\": ");  // 1 may go on: 10, 1.5
  EXPECT_FALSE(d.tool_calls[0].id.has_value());
  d = stream->Feed("}}\n</tool_call>");
  EXPECT_EQ(d.tool_calls.at(0).arguments, "1}");
  EXPECT_TRUE(stream->Finish().empty());
  EXPECT_TRUE(stream->tools_called());
}

TEST(HermesToolParserTest, MalformedCallsAreContent) {
  const auto parser = Parser("hermes");
  const std::string bad[] = {
      "<tool_call>not json</tool_call>",
      R"(<tool_call>{"name": "f", "arguments": {"x": }}</tool_call>)",
      R"(<tool_call>{"name": "f"}</tool_call>)",                         // no arguments
      R"(<tool_call>{"arguments": {}}</tool_call>)",                     // no name
      R"(<tool_call>{"name": 3, "arguments": {}}</tool_call>)",          // not a string
      R"(<tool_call>{"name": "f", "arguments": {}} extra</tool_call>)",  // text in the tags
      R"(<tool_call>{"name": "f", "arguments": {}, "name": "g"}</tool_call>)",
      R"(<tool_call>{"name": "f", "arguments": {"a": 1})",  // cut short
      R"(<tool_call>{"name": "f", "arguments": {}}</tool_)",
      "x <tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"raw\nnewline\"}}</tool_call>",
      "<tool_call></tool_call>",
      R"(<tool_call>{"name": "f", "arguments": [1,]}</tool_call>)",
      R"(<tool_call>{"name": "f", "arguments": {"a": 01}}</tool_call>)",
      R"(<tool_call>{"name": "f", "arguments": {"a": tru}}</tool_call>)",
      R"(<tool_call>{"name": "f", "arguments": {"a": "\x"}}</tool_call>)",
  };
  for (const std::string& text : bad) {
    const ExtractedToolCalls got = parser->Extract(text);
    EXPECT_FALSE(got.tools_called) << text;
    EXPECT_TRUE(got.tool_calls.empty()) << text;
    EXPECT_EQ(got.content, text);
    // A stream cannot take back a call it has begun; before that, all of it is content.
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      const testing::Streamed s = StreamPieces(*parser, text, {cut});
      if (!s.tools_called) {
        EXPECT_EQ(s.content, text) << text << " split at " << cut;
      }
    }
  }
  // Failing before any call was sent, the stream's content is the whole output.
  const testing::Streamed s = StreamPieces(*parser, "Hi <tool_call>[1, 2]</tool_call>", {5, 9});
  EXPECT_FALSE(s.tools_called);
  EXPECT_EQ(s.content, "Hi <tool_call>[1, 2]</tool_call>");
  // After a call was sent, the malformed rest streams as content.
  const testing::Streamed t = StreamPieces(
      *parser, R"(<tool_call>{"name": "f", "arguments": {}}</tool_call><tool_call>oops)", {});
  EXPECT_TRUE(t.tools_called);
  ASSERT_EQ(t.calls.size(), 1u);
  EXPECT_EQ(t.calls[0].name, "f");
  EXPECT_EQ(t.content, "<tool_call>oops");
}

TEST(HermesToolParserTest, HostileOutputIsBounded) {
  const auto parser = Parser("hermes");
  const std::string deep =
      "<tool_call>{\"name\": \"f\", \"arguments\": " + std::string(100000, '[') + "</tool_call>";
  EXPECT_FALSE(parser->Extract(deep).tools_called);
  std::string huge = R"(<tool_call>{"name": "f", "arguments": {"s": ")";
  huge += std::string(kMaxToolParseBytes, 'x') + "\"}}</tool_call>";
  EXPECT_FALSE(parser->Extract(huge).tools_called);
  // A stream stops parsing past the bound: the rest is content.
  const testing::Streamed s = StreamPieces(*parser, huge, {100, 1000, 1 << 20});
  EXPECT_TRUE(s.tools_called);
  EXPECT_LE(s.calls.at(0).arguments.size(), kMaxToolParseBytes);
  EXPECT_TRUE(s.content.ends_with("\"}}</tool_call>"));
}

TEST(Llama3JsonToolParserTest, ExtractsLikeVllm) {
  const auto parser = Parser("llama3_json");
  const Case cases[] = {
      {R"({"name": "get_weather", "parameters": {"city": "Paris"}})",
       {{"", "get_weather", R"({"city": "Paris"})"}},
       std::nullopt},
      {R"(<|python_tag|>{"name": "a", "arguments": {}}; {"name": "b", "parameters": {"q": 1}})",
       {{"", "a", "{}"}, {"", "b", R"({"q": 1})"}},
       std::nullopt},
      {"  {\"name\":\"f\",\"parameters\":{\"k\":[true,false,null]}}\n",
       {{"", "f", R"({"k": [true, false, null]})"}},
       std::nullopt},
      {"Hello, no calls.", {}, "Hello, no calls."},
      {"<|python_tag", {}, "<|python_tag"},
  };
  for (const Case& c : cases) {
    ExpectExtract(*parser, c);
    ExpectStreamingMatchesExtract(*parser, c.text);
  }
}

TEST(Llama3JsonToolParserTest, ModesDifferWhereVllmsDo) {
  const auto parser = Parser("llama3_json");
  // Extract finds JSON calls anywhere and drops the text around them; a stream that does not
  // begin with a call is content.
  const std::string text = R"(Sure: {"name": "f", "parameters": {"x": 1}} done)";
  ExpectExtract(*parser, {text, {{"", "f", R"({"x": 1})"}}, std::nullopt});
  const testing::Streamed s = StreamPieces(*parser, text, {3});
  EXPECT_FALSE(s.tools_called);
  EXPECT_EQ(s.content, text);
  // Any JSON object that is not a call makes the whole output content.
  ExpectExtract(*parser, {R"({"name": "f", "parameters": {}} {"other": 1})",
                          {},
                          R"({"name": "f", "parameters": {}} {"other": 1})"});
  ExpectExtract(*parser, {"Use {braces} here", {}, "Use {braces} here"});
  ExpectExtract(*parser, {R"({"name": "f", "arguments": {}, "parameters": {}})",
                          {},
                          R"({"name": "f", "arguments": {}, "parameters": {}})"});
}

TEST(ToolParserTest, RandomEditsNeverCrash) {
  const std::string samples[] = {
      "Hi <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, {\"b\": \"c\\u00e9\"}]}}"
      "</tool_call><tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>",
      R"(<|python_tag|>{"name": "a", "parameters": {"x": 1.5e3}}; {"name": "b", "arguments": {}})",
      R"(x [TOOL_CALLS] [{"name": "a", "arguments": {"q": [null]}}, {"name": "b", "arguments": {}}])",
      R"([TOOL_CALLS]a{"x": 1}[TOOL_CALLS]b[CALL_ID]abcdefghi[ARGS]{"y": 2})",
      R"([f(a=[1, 2.5, True, None], b={'k': "v\n", 2: -3}), g(s='''x"y''')])",
  };
  const std::string alphabet = "{}[]\"'\\:,;<>/=()_ abtnu0123456789.-+eE\n";
  std::mt19937 rng(3);
  for (const std::string& name : ToolParserNames()) {
    const auto parser = Parser(name);
    for (int iter = 0; iter < 400; ++iter) {
      std::string text = samples[rng() % std::size(samples)];
      for (int e = 0; e < 3; ++e) {
        const size_t at = rng() % text.size();
        if (rng() % 2 == 0) {
          text.erase(at, 1 + rng() % 3);
        } else {
          text.insert(at, 1, alphabet[rng() % alphabet.size()]);
        }
      }
      const ExtractedToolCalls whole = parser->Extract(text);
      // (mistral answers a malformed array with the text after [TOOL_CALLS], as vLLM.)
      if (!whole.tools_called && name != "mistral") {
        EXPECT_EQ(whole.content, text);
      }
      std::vector<size_t> cuts;
      for (size_t i = 1; i < text.size(); ++i) {
        if (rng() % 3 == 0) cuts.push_back(i);
      }
      const testing::Streamed s = StreamPieces(*parser, text, cuts);
      if (!s.tools_called) {
        EXPECT_EQ(s.content, text) << name << ": " << text;
      }
    }
  }
}

}  // namespace
}  // namespace vllm::frontend::parsers
