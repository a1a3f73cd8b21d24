// Tool calling and reasoning in chat requests (frontend/openai/chat_tools.h, chat_output.h):
// the request checks against the server's parsers, the grammar of forced tool choices, the
// messages and variables the template renders, and each choice's text parsed into reasoning,
// content and tool calls, whole and streamed (every split of the text gives the whole answer).
#include "frontend/openai/chat_tools.h"

#include <memory>
#include <string>
#include <vector>

#include "frontend/engine/engine_client.h"
#include "frontend/openai/chat_output.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

const json kWeather = json::parse(R"({
  "type": "function",
  "function": {"name": "get_weather", "description": "Weather in a city",
               "parameters": {"type": "object",
                              "properties": {"city": {"type": "string"},
                                             "unit": {"enum": ["c", "f"]}},
                              "required": ["city"]}}})");
const json kTime = json::parse(R"({"type": "function", "function": {"name": "get_time"}})");

class ChatToolsTest : public ::testing::Test {
 protected:
  ChatToolsTest() {
    hermes_ = *parsers::MakeToolParser("hermes");
    qwen3_ = *parsers::MakeReasoningParser("qwen3");
    with_parser_.tool_parser = hermes_.get();
  }
  static json Body(json tool_choice = nullptr) {
    json body{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"tools", {kWeather, kTime}}};
    if (!tool_choice.is_null()) body["tool_choice"] = tool_choice;
    return body;
  }
  std::unique_ptr<parsers::ToolParser> hermes_;
  std::unique_ptr<parsers::ReasoningParser> qwen3_;
  ChatParsers none_;
  ChatParsers with_parser_;
};

std::string ParamOf(const absl::Status& s) { return ErrorParam(s).value_or(""); }

TEST_F(ChatToolsTest, ToolChoiceDefaultsAndServerChecks) {
  auto r = ParseToolRequest(Body(), with_parser_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->choice, ToolChoice::kAuto);  // tools without tool_choice: "auto"
  EXPECT_TRUE(r->parallel_tool_calls);
  EXPECT_EQ(r->tools.size(), 2u);

  json no_tools{{"messages", json::array()}};
  EXPECT_EQ(ParseToolRequest(no_tools, none_)->choice, ToolChoice::kNone);

  auto s = ParseToolRequest(Body(), none_).status();
  EXPECT_EQ(ParamOf(s), "tool_choice");
  EXPECT_NE(s.message().find("--enable-auto-tool-choice and --tool-call-parser"), std::string::npos)
      << s;
  // An explicit null falls back to plain text without a parser.
  json null_choice = Body();
  null_choice["tool_choice"] = nullptr;
  EXPECT_EQ(ParseToolRequest(null_choice, none_)->choice, ToolChoice::kNone);
  s = ParseToolRequest(Body("required"), none_).status();
  EXPECT_NE(s.message().find("tool_choice=\"required\" requires --tool-call-parser"),
            std::string::npos)
      << s;
  EXPECT_TRUE(ParseToolRequest(Body("none"), none_).ok());
}

TEST_F(ChatToolsTest, BadToolsAndChoicesNameTheField) {
  struct Case {
    json body;
    std::string param;
    std::string message;
  };
  json empty_tools = Body();
  empty_tools["tools"] = json::array();
  json choice_without_tools{{"tool_choice", "required"}};
  json bad_tool = Body();
  bad_tool["tools"][0]["function"].erase("name");
  json bad_params = Body();
  bad_params["tools"][0]["function"]["parameters"] = "object";
  json parallel = Body();
  parallel["parallel_tool_calls"] = "no";
  const Case cases[] = {
      {empty_tools, "tools", "must not be an empty array"},
      {choice_without_tools, "tool_choice", "`tools` must be set"},
      {Body("sometimes"), "tool_choice", "Invalid value for `tool_choice`"},
      {Body(json{{"type", "function"}}), "tool_choice.function", "Correct usage"},
      {Body(json{{"type", "function"}, {"function", json::object()}}), "tool_choice.function.name",
       "Expected field `name`"},
      {Body(json{{"type", "function"}, {"function", {{"name", "nope"}}}}), "tool_choice",
       "does not match any of the specified `tools`"},
      {bad_tool, "tools", "needs a string \"name\""},
      {bad_params, "tools[0].function.parameters", "a JSON schema"},
      {parallel, "parallel_tool_calls", "a boolean"},
      {json{{"functions", json::array({1})}}, "functions", "deprecated"},
  };
  for (const Case& c : cases) {
    auto r = ParseToolRequest(c.body, with_parser_);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(ParamOf(r.status()), c.param) << r.status();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status();
  }
}

TEST_F(ChatToolsTest, RequiredGrammarIsAnArrayOfTheToolsCalls) {
  json body = Body("required");
  body["parallel_tool_calls"] = false;
  auto tools = ParseToolRequest(body, with_parser_);
  ASSERT_TRUE(tools.ok());
  core::SamplingParams params;
  params.structured_outputs.emplace();
  params.structured_outputs->regex = "a+";  // replaced, as vLLM's adjust_request does
  ASSERT_TRUE(ApplyToolChoiceGrammar(body, *tools, &params).ok());
  ASSERT_TRUE(params.structured_outputs.has_value());
  EXPECT_FALSE(params.structured_outputs->regex.has_value());
  const json schema = json::parse(*params.structured_outputs->json);
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  EXPECT_EQ(schema["maxItems"], 1);  // parallel_tool_calls false
  const json& any_of = schema["items"]["anyOf"];
  ASSERT_EQ(any_of.size(), 2u);
  EXPECT_EQ(any_of[0]["properties"]["name"]["enum"], json({"get_weather"}));
  EXPECT_EQ(any_of[0]["properties"]["parameters"], kWeather["function"]["parameters"]);
  // No parameters: still an object.
  EXPECT_EQ(any_of[1]["properties"]["parameters"],
            json({{"type", "object"}, {"properties", json::object()}}));
  EXPECT_EQ(any_of[1]["required"], json({"name", "parameters"}));
}

TEST_F(ChatToolsTest, RequiredGrammarMergesDefs) {
  json body = Body("required");
  json defs{{"Unit", {{"enum", {"c", "f"}}}}};
  body["tools"][0]["function"]["parameters"]["$defs"] = defs;
  body["tools"][1]["function"]["parameters"] = {{"type", "object"}, {"$defs", defs}};
  auto tools = ParseToolRequest(body, with_parser_);
  core::SamplingParams params;
  ASSERT_TRUE(ApplyToolChoiceGrammar(body, *tools, &params).ok());
  const json schema = json::parse(*params.structured_outputs->json);
  EXPECT_EQ(schema["$defs"], defs);
  EXPECT_FALSE(schema["items"]["anyOf"][0]["properties"]["parameters"].contains("$defs"));

  body["tools"][1]["function"]["parameters"]["$defs"]["Unit"] = {{"type", "string"}};
  tools = ParseToolRequest(body, with_parser_);
  auto s = ApplyToolChoiceGrammar(body, *tools, &params);
  EXPECT_EQ(ParamOf(s), "tools");
  EXPECT_NE(s.message().find("'Unit' has multiple schemas"), std::string::npos) << s;
}

TEST_F(ChatToolsTest, NamedGrammarIsTheFunctionsParameters) {
  json body = Body(json{{"type", "function"}, {"function", {{"name", "get_weather"}}}});
  auto tools = ParseToolRequest(body, with_parser_);
  ASSERT_TRUE(tools.ok()) << tools.status();
  EXPECT_EQ(tools->choice, ToolChoice::kNamed);
  core::SamplingParams params;
  ASSERT_TRUE(ApplyToolChoiceGrammar(body, *tools, &params).ok());
  EXPECT_EQ(json::parse(*params.structured_outputs->json), kWeather["function"]["parameters"]);

  body["structured_outputs"] = {{"regex", "a+"}};
  auto s = ApplyToolChoiceGrammar(body, *tools, &params);
  EXPECT_NE(s.message().find("either use constraints for structured outputs or tools"),
            std::string::npos)
      << s;

  // A schema XGrammar refuses is a 400 naming tools.
  json bad = Body(json{{"type", "function"}, {"function", {{"name", "get_weather"}}}});
  bad["tools"][0]["function"]["parameters"] = {{"type", "string"}, {"pattern", "(("}};
  tools = ParseToolRequest(bad, with_parser_);
  s = ApplyToolChoiceGrammar(bad, *tools, &params);
  EXPECT_EQ(ParamOf(s), "tools") << s;
}

TEST_F(ChatToolsTest, TemplateMessagesAsVllmPassesThem) {
  const json body = json::parse(R"({"messages": [
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    {"role": "assistant", "content": null, "reasoning_content": "hmm",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "f", "arguments": "{\"x\": 1}"}},
                    {"id": "c2", "type": "function",
                     "function": {"name": "g", "arguments": "not json"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "42", "name": "f"},
    {"role": "assistant", "content": "ok", "tool_calls": []}]})");
  auto m = TemplateMessages(body);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 4u);
  EXPECT_EQ((*m)[0]["content"], "a\nb");
  EXPECT_EQ((*m)[1]["content"], "");
  EXPECT_EQ((*m)[1]["tool_calls"][0]["function"]["arguments"], ordered_json({{"x", 1}}));
  EXPECT_EQ((*m)[1]["tool_calls"][1]["function"]["arguments"], ordered_json::object());
  EXPECT_EQ((*m)[1]["reasoning"], "hmm");
  EXPECT_EQ((*m)[1]["reasoning_content"], "hmm");
  EXPECT_EQ((*m)[2]["tool_call_id"], "c1");
  EXPECT_EQ((*m)[2]["name"], "f");
  EXPECT_FALSE((*m)[3].contains("tool_calls"));  // empty: dropped

  // Arguments given as text keep their key order (json.loads), as the template renders them.
  ordered_json ordered = ordered_json::parse(
      R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function",
          "function": {"name": "f", "arguments": "{\"z\": 1, \"a\": 2}"}}]}]})");
  EXPECT_EQ((*TemplateMessages(ordered))[0]["tool_calls"][0]["function"]["arguments"].dump(),
            R"({"z":1,"a":2})");

  json bad = body;
  bad["messages"][1]["tool_calls"][0]["type"] = "custom";
  EXPECT_EQ(ParamOf(TemplateMessages(bad).status()), "tool_calls");
}

TEST_F(ChatToolsTest, TemplateKwargsAndReasoningEffort) {
  json body{{"chat_template_kwargs", {{"date_string", "today"}}}, {"reasoning_effort", "none"}};
  auto k = TemplateKwargs(body);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ((*k)["date_string"], "today");
  EXPECT_EQ((*k)["reasoning_effort"], "none");
  EXPECT_EQ((*k)["enable_thinking"], false);
  body["chat_template_kwargs"]["enable_thinking"] = true;  // the user's wins
  EXPECT_EQ((*TemplateKwargs(body))["enable_thinking"], true);
  body["reasoning_effort"] = "extreme";
  EXPECT_EQ(ParamOf(TemplateKwargs(body).status()), "reasoning_effort");
}

// The stream of `text` cut at every byte (pairs of pieces), merged, equals ParseChatOutput's
// message (calls by name and arguments; ids are random).
void ExpectStreamMatchesWhole(const ChatOutputOptions& options, const std::string& text) {
  const ChatMessageParts whole = ParseChatOutput(options, text);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    ChatOutputStream stream(options);
    ChatMessageParts all = stream.Feed(text.substr(0, cut));
    all.Append(stream.Feed(text.substr(cut)));
    all.Append(stream.Finish());
    EXPECT_EQ(all.reasoning, whole.reasoning) << cut;
    if (options.forced) {
      EXPECT_FALSE(all.content.has_value()) << cut;  // forced streams send calls only
    } else {
      EXPECT_EQ(all.content, whole.content) << cut;
    }
    std::vector<parsers::ToolCall> calls;
    for (const parsers::ToolCallDelta& d : all.tool_call_deltas) {
      if (d.index >= static_cast<int>(calls.size())) calls.resize(d.index + 1);
      if (d.name.has_value()) calls[d.index].name = *d.name;
      calls[d.index].arguments += d.arguments;
    }
    ASSERT_EQ(calls.size(), whole.tool_calls.size()) << cut;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(calls[i].name, whole.tool_calls[i].name);
      EXPECT_EQ(calls[i].arguments, whole.tool_calls[i].arguments);
    }
    EXPECT_EQ(stream.tools_called(), !whole.tool_calls.empty()) << cut;
  }
}

TEST_F(ChatToolsTest, RequiredOutputBecomesCalls) {
  ChatOutputOptions o;
  o.tools = parsers::MakeRequiredToolParser();
  o.forced = true;
  const std::string text = R"([{"name": "get_weather", "parameters": {"city":"Ur","unit":"c"}}, )"
                           R"({"name": "get_time", "parameters": {}}])";
  ChatMessageParts m = ParseChatOutput(o, text);
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.tool_calls[0].name, "get_weather");
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"city": "Ur", "unit": "c"})");  // json.dumps
  EXPECT_EQ(m.tool_calls[1].arguments, "{}");
  EXPECT_EQ(m.content, "");  // vLLM: forced choices answer content ""
  EXPECT_NE(m.tool_calls[0].id, m.tool_calls[1].id);
  EXPECT_EQ(m.tool_calls[0].id.rfind("chatcmpl-tool-", 0), 0u);
  ExpectStreamMatchesWhole(o, text);

  o.parallel_tool_calls = false;
  EXPECT_EQ(ParseChatOutput(o, text).tool_calls.size(), 1u);
  o.parallel_tool_calls = true;
  // Cut short (finish_reason length): no calls, content "".
  m = ParseChatOutput(o, text.substr(0, 30));
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.content, "");
}

TEST_F(ChatToolsTest, NamedOutputIsTheArguments) {
  ChatOutputOptions o;
  o.tools = parsers::MakeNamedToolParser("get_weather");
  o.forced = o.named = true;
  const std::string text = R"({"city":  "Ur"})";
  ChatMessageParts m = ParseChatOutput(o, text);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "get_weather");
  EXPECT_EQ(m.tool_calls[0].arguments, text);  // as generated
  ExpectStreamMatchesWhole(o, text);
  EXPECT_TRUE(ParseChatOutput(o, "  ").tool_calls.empty());
}

TEST_F(ChatToolsTest, ReasoningThenAutoToolCalls) {
  ChatOutputOptions o;
  o.reasoning = qwen3_.get();
  o.tools = std::shared_ptr<const parsers::ToolParser>(std::shared_ptr<void>(), hermes_.get());
  const std::string text =
      "<think>the user wants weather</think>Let me look.\n<tool_call>\n"
      R"({"name": "get_weather", "arguments": {"city": "Ur"}})"
      "\n</tool_call>";
  ChatMessageParts m = ParseChatOutput(o, text);
  EXPECT_EQ(m.reasoning, "the user wants weather");
  EXPECT_EQ(m.content, "Let me look.\n");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"city": "Ur"})");
  ExpectStreamMatchesWhole(o, text);

  // No call: the text after the reasoning is the content; include_reasoning false drops it.
  o.include_reasoning = false;
  m = ParseChatOutput(o, "<think>x</think>plain answer");
  EXPECT_FALSE(m.reasoning.has_value());
  EXPECT_EQ(m.content, "plain answer");
  EXPECT_TRUE(m.tool_calls.empty());
  ExpectStreamMatchesWhole(o, "<think>x</think>plain answer");

  // enable_thinking false (qwen3): all content.
  o.include_reasoning = true;
  o.reasoning_options.enable_thinking = false;
  o.tools = nullptr;
  m = ParseChatOutput(o, "no think tags here");
  EXPECT_EQ(m.content, "no think tags here");
  EXPECT_FALSE(m.reasoning.has_value());
}

}  // namespace
}  // namespace vllm::frontend
