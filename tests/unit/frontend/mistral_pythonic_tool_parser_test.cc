// The mistral and pythonic tool-call parsers: Extract against vLLM's results, streaming over
// every split of each sample against Extract, and what is not a call.
#include <string>
#include <vector>

#include "frontend/parsers/tool_parser.h"
#include "gtest/gtest.h"
#include "tests/unit/frontend/tool_parser_test_util.h"

namespace vllm::frontend::parsers {
namespace {

using testing::ExpectStreamingMatchesExtract;
using testing::Parser;
using testing::StreamPieces;

struct Case {
  std::string text;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  std::optional<std::string> content;
};

void Check(const ToolParser& parser, const Case& c) {
  const ExtractedToolCalls got = parser.Extract(c.text);
  EXPECT_EQ(got.tools_called, !c.calls.empty()) << c.text;
  EXPECT_EQ(got.content, c.content) << c.text;
  ASSERT_EQ(got.tool_calls.size(), c.calls.size()) << c.text;
  for (size_t i = 0; i < c.calls.size(); ++i) {
    EXPECT_EQ(got.tool_calls[i].name, c.calls[i].first) << c.text;
    EXPECT_EQ(got.tool_calls[i].arguments, c.calls[i].second) << c.text;
  }
  ExpectStreamingMatchesExtract(parser, c.text);
}

TEST(MistralToolParserTest, ArrayForm) {
  const auto parser = Parser("mistral");
  Check(*parser, {R"([TOOL_CALLS] [{"name": "add", "arguments": {"a": 3.5, "b": 4}}])",
                  {{"add", R"({"a": 3.5, "b": 4})"}},
                  std::nullopt});
  Check(*parser,
        {"Sure.[TOOL_CALLS][{\"name\":\"a\",\"arguments\":{}},{\"name\":\"b\",\"arguments\":"
         "{\"x\":\"y\"}}] trailing text",
         {{"a", "{}"}, {"b", R"({"x": "y"})"}},
         "Sure."});
  Check(*parser, {"No calls here.", {}, "No calls here."});
}

TEST(MistralToolParserTest, NameForms) {
  const auto parser = Parser("mistral");
  // v11: the arguments are the model's text, as vLLM sends them.
  Check(*parser,
        {R"([TOOL_CALLS]add{"a": 3.5, "b": 4})", {{"add", R"({"a": 3.5, "b": 4})"}}, std::nullopt});
  Check(*parser, {"Let me add.[TOOL_CALLS]a{\"x\":1}[TOOL_CALLS]b{}",
                  {{"a", "{\"x\":1}"}, {"b", "{}"}},
                  "Let me add."});
  // A segment without arguments is no call.
  Check(*parser,
        {"[TOOL_CALLS]skipped[TOOL_CALLS]b{\"q\": [1]}", {{"b", "{\"q\": [1]}"}}, std::nullopt});
  // v13's [ARGS], with the model's [CALL_ID].
  Check(*parser, {R"([TOOL_CALLS]get_weather[ARGS]{"city": "Paris"})",
                  {{"get_weather", R"({"city": "Paris"})"}},
                  std::nullopt});
  const ExtractedToolCalls with_id =
      parser->Extract("[TOOL_CALLS]f[CALL_ID]abc123XYZ[ARGS]{}[TOOL_CALLS]g[ARGS]{\"a\":[TOOL");
  ASSERT_EQ(with_id.tool_calls.size(), 2u);
  EXPECT_EQ(with_id.tool_calls[0].id, "abc123XYZ");
  EXPECT_EQ(with_id.tool_calls[1].arguments, "{\"a\":[TOOL");
  ExpectStreamingMatchesExtract(
      *parser, "[TOOL_CALLS]f[CALL_ID]abc123XYZ[ARGS]{}[TOOL_CALLS]g[ARGS]{\"a\":[TOOL");
}

TEST(MistralToolParserTest, IdsAreNineAlphanumerics) {
  const ExtractedToolCalls r =
      Parser("mistral")->Extract(R"([TOOL_CALLS] [{"name": "f", "arguments": {}}])");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  const std::string& id = r.tool_calls[0].id;
  EXPECT_EQ(id.size(), 9u);
  for (char c : id) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << id;
}

TEST(MistralToolParserTest, MalformedArrayIsTheTextAfterTheToken) {
  const auto parser = Parser("mistral");
  // vLLM answers with the stripped text after [TOOL_CALLS] (its content before is lost).
  const ExtractedToolCalls r = parser->Extract("Hi [TOOL_CALLS] [{\"name\": \"a\", \"x\": 1}] ");
  EXPECT_FALSE(r.tools_called);
  EXPECT_EQ(r.content, "[{\"name\": \"a\", \"x\": 1}]");
  EXPECT_FALSE(parser->Extract("[TOOL_CALLS] []").tools_called);
  // vLLM's second try: from the first "[{" to the last "}]".
  const ExtractedToolCalls retried =
      parser->Extract("Hi[TOOL_CALLS] [ [{\"name\": \"a\", \"arguments\": {\"x\": 1}}] ]");
  ASSERT_EQ(retried.tool_calls.size(), 1u);
  EXPECT_EQ(retried.tool_calls[0].arguments, R"({"x": 1})");
  EXPECT_EQ(retried.content, "Hi");
  EXPECT_FALSE(parser->Extract("[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {]").tools_called);
  // A stream that fails before sending a call gives the whole text as content.
  const testing::Streamed s = StreamPieces(*parser, "Hi [TOOL_CALLS] [oops]", {4, 10});
  EXPECT_FALSE(s.tools_called);
  EXPECT_EQ(s.content, "Hi [TOOL_CALLS] [oops]");
}

TEST(PythonicToolParserTest, ExtractsLikeVllm) {
  const auto parser = Parser("pythonic");
  Check(*parser, {R"([get_weather(city="Paris", days=3)])",
                  {{"get_weather", R"({"city": "Paris", "days": 3})"}},
                  std::nullopt});
  Check(*parser,
        {"[f(a=[1, 2.5, True, None], b={'k': 'v', 1: False, 2.5: None, None: 1}), g()]\n",
         {{"f",
           R"({"a": [1, 2.5, true, null], "b": {"k": "v", "1": false, "2.5": null, "null": 1}})"},
          {"g", "{}"}},
         std::nullopt});
  Check(*parser,
        {R"([f(s='it\'s', t="a\nb", u='''x"y''', r=r'\d', c="a" "b", x='\x41\u00e9\101\0', )"
         R"(e='\q', big=12345678901234567890, tq="""a""b"c""")])",
         {{"f", R"({"s": "it's", "t": "a\nb", "u": "x\"y", "r": "\\d", "c": "ab", )"
                "\"x\": \"A\xC3\xA9"
                R"(A\u0000", "e": "\\q", "big": 12345678901234567890, )"
                R"("tq": "a\"\"b\"c"})"}},
         std::nullopt});
  Check(*parser, {"[f(x=-1, y=-2.5, z=-0, w=-0.0, e=1e5, d=.5, p=1., h=0x1F, o=0o17, b=0b101, "
                  "u=1_000, fe=1_0.5e-3)]",
                  {{"f", R"({"x": -1, "y": -2.5, "z": 0, "w": -0.0, "e": 100000.0, "d": 0.5, )"
                         R"("p": 1.0, "h": 31, "o": 15, "b": 5, "u": 1000, "fe": 0.0105})"}},
                  std::nullopt});
  // Python's whitespace, except where vLLM's regex gate wants none (see the next test).
  Check(*parser, {"[search(query='a b',\n    limit = 5 ,\n  ),\n  now ( ),\n]",
                  {{"search", R"({"query": "a b", "limit": 5})"}, {"now", "{}"}},
                  std::nullopt});
}

TEST(PythonicToolParserTest, WhatIsNotACallIsContent) {
  const auto parser = Parser("pythonic");
  for (const char* text : {
           "Hello",
           "[1, 2]",
           " [f()]",
           "[]",
           "[f(1)]",
           "[f(a=x)]",
           "[f(a=1)] and more",
           "[f(a = 1)]",
           "[f (a=1)]",
           "[f( a=1)]",
           "[\n  f(a=1)]",
           "[f(_a=1)]",
           "[_f()]",
           "[f(a=1, a=2)]",
           "[f(a=(1, 2))]",
           "[f(a=g())]",
           "[f(a=1)",
           "[mod.f()]",
           "[f(a={1, 2})]",
           "[Note] see below",
           "[f(a=b'x')]",
       }) {
    const ExtractedToolCalls r = parser->Extract(text);
    EXPECT_FALSE(r.tools_called) << text;
    EXPECT_EQ(r.content, text);
    for (size_t cut = 0; cut <= std::string_view(text).size(); ++cut) {
      const testing::Streamed s = StreamPieces(*parser, text, {cut});
      if (!s.tools_called) {
        EXPECT_EQ(s.content, text) << cut;
      }
    }
  }
}

}  // namespace
}  // namespace vllm::frontend::parsers
