// Request parsing, validation and response building of the OpenAI protocol, without a server.
#include "frontend/openai_protocol.h"

#include <string>
#include <vector>

#include "frontend/api_server_response.h"
#include "gtest/gtest.h"

namespace vllm::frontend {
namespace {

using nlohmann::json;

constexpr char kModel[] = "m";

TEST(OpenAiProtocolTest, CompletionDefaultsAndFields) {
  json body = json::parse(R"({"model": "m", "prompt": "hi", "max_tokens": 7, "temperature": 0,
      "top_p": 0.5, "top_k": 3, "min_p": 0.1, "n": 2, "seed": 9, "stop": "x",
      "stop_token_ids": [5], "ignore_eos": true, "logprobs": 2, "priority": -1,
      "min_tokens": 1, "repetition_penalty": 1.1, "presence_penalty": 0.5,
      "frequency_penalty": -0.5, "include_stop_str_in_output": true,
      "skip_special_tokens": false, "user": "u", "stream": true,
      "stream_options": {"include_usage": true}, "unknown_field": 1})");
  absl::StatusOr<CompletionRequest> r = ParseCompletionRequest(body, kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(*r->prompts[0].text, "hi");
  const GenerationOptions& o = r->options;
  EXPECT_EQ(o.n, 2);
  EXPECT_EQ(o.params.n, 1);
  EXPECT_EQ(*o.params.max_tokens, 7);
  EXPECT_EQ(o.params.temperature, 0.0);
  EXPECT_EQ(o.params.top_k, 3);
  EXPECT_EQ(*o.params.seed, 9);
  EXPECT_EQ(*o.params.logprobs, 2);
  EXPECT_EQ(o.params.stop_token_ids, std::vector<int32_t>{5});
  EXPECT_TRUE(o.params.ignore_eos);
  EXPECT_EQ(o.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(o.priority, -1);
  EXPECT_TRUE(o.stream && o.include_usage && o.include_stop_str_in_output);
  EXPECT_FALSE(o.skip_special_tokens);
  EXPECT_EQ(*o.user, "u");
}

TEST(OpenAiProtocolTest, PromptForms) {
  auto parse = [](const char* prompt) {
    return ParseCompletionRequest(json::parse(std::string(R"({"prompt": )") + prompt + "}"),
                                  kModel);
  };
  auto a = parse(R"(["a", "b"])");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->prompts.size(), 2u);
  auto b = parse("[1, 2, 3]");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->prompts[0].token_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(b->prompts[0].text.has_value());
  auto c = parse("[[1], [2, 3]]");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->prompts.size(), 2u);
  EXPECT_EQ(c->model, kModel);  // missing model means the served one
  for (const char* bad : {"\"\"", "[]", "[[]]", "[-1]", "[1.5]", "{}", "3", "[\"a\", 1]"}) {
    absl::StatusOr<CompletionRequest> r = parse(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(ErrorParam(r.status()), "prompt") << bad;
  }
}

TEST(OpenAiProtocolTest, RangeErrorsNameTheField) {
  struct Case {
    const char* body;
    const char* param;
    const char* message_part;
  };
  const Case cases[] = {
      {R"({"prompt": "a", "temperature": -1})", "temperature", "temperature must be >= 0"},
      {R"({"prompt": "a", "top_p": 0})", "top_p", "(0, 1]"},
      {R"({"prompt": "a", "top_k": -2})", "top_k", "top_k"},
      {R"({"prompt": "a", "min_p": 2})", "min_p", "[0, 1]"},
      {R"({"prompt": "a", "max_tokens": 0})", "max_tokens", "at least 1"},
      {R"({"prompt": "a", "n": 0})", "n", "n must be in [1, 128]"},
      {R"({"prompt": "a", "logprobs": 21})", "logprobs", "[0, 20]"},
      {R"({"prompt": "a", "presence_penalty": 3})", "presence_penalty", "[-2, 2]"},
      {R"({"prompt": "a", "temperature": "hot"})", "temperature", "must be a number"},
      {R"({"prompt": "a", "max_tokens": 1.5})", "max_tokens", "an integer"},
      {R"({"prompt": "a", "stream": 1})", "stream", "a boolean"},
      {R"({"prompt": "a", "echo": true})", "echo", "not supported"},
      {R"({"prompt": "a", "stream_options": {"include_usage": true}})", "stream_options",
       "stream=True"},
      {R"({"prompt": "a", "min_tokens": 5, "max_tokens": 2})", "min_tokens", "min_tokens"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<CompletionRequest> r = ParseCompletionRequest(json::parse(c.body), kModel);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(HttpStatusFor(r.status()), 400) << c.body;
    EXPECT_EQ(ErrorParam(r.status()), c.param) << c.body << ": " << r.status();
    EXPECT_NE(r.status().message().find(c.message_part), std::string::npos) << r.status();
  }
}

TEST(OpenAiProtocolTest, UnknownModelIsNotFound) {
  absl::StatusOr<CompletionRequest> r =
      ParseCompletionRequest(json::parse(R"({"model": "x", "prompt": "a"})"), kModel);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  json body = ErrorBody(r.status())["error"];
  EXPECT_EQ(body["message"], "The model `x` does not exist.");
  EXPECT_EQ(body["type"], "NotFoundError");
  EXPECT_EQ(body["code"], 404);
  EXPECT_EQ(body["param"], "model");
}

TEST(OpenAiProtocolTest, ChatParsing) {
  json body = json::parse(R"({"messages": [{"role": "system", "content": "s"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null}],
      "max_completion_tokens": 4, "max_tokens": 99, "logprobs": true, "top_logprobs": 3,
      "chat_template_kwargs": {"add_generation_prompt": false}})");
  absl::StatusOr<ChatCompletionRequest> r = ParseChatCompletionRequest(body, kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[1].content, "a\nb");
  EXPECT_EQ(r->messages[2].content, "");
  EXPECT_EQ(*r->options.params.max_tokens, 4);
  EXPECT_EQ(*r->options.params.logprobs, 3);
  EXPECT_FALSE(r->add_generation_prompt);

  auto error = [](const char* text) {
    return ParseChatCompletionRequest(json::parse(text), kModel).status();
  };
  EXPECT_EQ(ErrorParam(error(R"({"messages": []})")), "messages");
  EXPECT_EQ(ErrorParam(error(R"({"messages": [{"role": "bot", "content": "x"}]})")), "messages");
  EXPECT_EQ(ErrorParam(error(R"({"messages": [{"role": "user", "content": "x"}],
      "top_logprobs": 2})")),
            "top_logprobs");
  EXPECT_EQ(ErrorParam(error(R"({"messages": [{"role": "user", "content": "x"}],
      "logprobs": true, "top_logprobs": 50})")),
            "top_logprobs");
  EXPECT_EQ(ErrorParam(error(R"({"messages": [{"role": "user", "content": "x"}],
      "max_completion_tokens": 0})")),
            "max_completion_tokens");
}

TEST(OpenAiProtocolTest, ErrorBodyShape) {
  json body = ErrorBody(InvalidParam("top_p", "top_p must be in (0, 1], got 2"));
  // vLLM's ErrorResponse: the error object nested under "error" (OpenAI's shape), the HTTP
  // status as the code.
  EXPECT_EQ(body, json::parse(R"({"error": {"message": "top_p must be in (0, 1], got 2",
      "type": "BadRequestError", "param": "top_p", "code": 400}})"));
  EXPECT_TRUE(ErrorBody(absl::InvalidArgumentError("x"))["error"]["param"].is_null());
  EXPECT_FALSE(ParseJsonObject("{").ok());
  EXPECT_FALSE(ParseJsonObject("[1]").ok());
}

// Regression (hardening issue, defect 1): a number out of double range made the parser throw
// nlohmann's out_of_range, which nothing caught: the whole process tree went down. It must
// be a 400, also in a field the server ignores.
TEST(OpenAiProtocolTest, NumbersOutOfRangeAre400) {
  for (const char* body :
       {R"({"prompt": "a", "temperature": 1e309})", R"({"prompt": "a", "ignored": -1e400})",
        R"({"prompt": "a", "max_tokens": 1e999999})", R"([1e309])"}) {
    absl::StatusOr<json> parsed = ParseJsonObject(body);
    ASSERT_FALSE(parsed.ok()) << body;
    EXPECT_EQ(HttpStatusFor(parsed.status()), 400) << parsed.status();
    EXPECT_NE(parsed.status().message().find("Invalid JSON"), std::string::npos) << parsed.status();
  }
  // Huge integers stay fine (nlohmann stores them as doubles, in range).
  EXPECT_TRUE(ParseJsonObject(R"({"prompt": "a", "seed": 123456789012345678901234567890})").ok());
}

// Regression (defect 2): 100,000 nested arrays overflowed the stack (a recursive dump while
// building the error message). Depth is bounded while parsing, through every field.
TEST(OpenAiProtocolTest, DeepNestingIs400) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string& body :
       {R"({"model": )" + deep + R"(, "prompt": "a"})", R"({"prompt": )" + deep + "}",
        R"({"prompt": "a", "stop": )" + deep + "}",
        R"({"messages": [{"role": "user", "content": )" + deep + "}]}", std::string(100000, '{')}) {
    absl::StatusOr<json> parsed = ParseJsonObject(body);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(HttpStatusFor(parsed.status()), 400);
    EXPECT_NE(parsed.status().message().find("nest deeper than"), std::string::npos)
        << parsed.status();
    // The error body renders without recursing into the input.
    EXPECT_LT(DumpJson(ErrorBody(parsed.status())).size(), 1000u);
  }
  // Brackets inside strings do not count; the limit itself is accepted.
  EXPECT_TRUE(ParseJsonObject(R"({"prompt": ")" + std::string(5000, '[') + R"("})").ok());
  EXPECT_TRUE(ParseJsonObject(R"({"prompt": "a\\", "x": )" + std::string(127, '[') +
                              std::string(127, ']') + "}")
                  .ok());
  EXPECT_FALSE(
      ParseJsonObject(R"({"x": )" + std::string(128, '[') + std::string(128, ']') + "}").ok());
}

TEST(OpenAiProtocolTest, InvalidUtf8IsReplacedNotThrown) {
  EXPECT_EQ(DumpJson(json("a\xff")), "\"a\xEF\xBF\xBD\"");
}

TEST(ResponseAssemblerTest, NonStreamingCompletionMergesChoices) {
  ResponseAssembler a(ApiKind::kCompletion, {"cmpl-1", 5, "m"}, 2, 2, false, false, false);
  GenerateOutput o;
  o.text_delta = "x";
  o.num_prompt_tokens = 3;
  o.num_output_tokens = 1;
  EXPECT_EQ(a.OnOutput(1, o), "");
  o.finish_reason = core::FinishReason::kStop;
  o.stop_token_id = 7;
  a.OnOutput(0, o);
  o.stop_token_id.reset();
  o.finish_reason = core::FinishReason::kLength;
  o.num_output_tokens = 2;
  a.OnOutput(1, o);
  ASSERT_TRUE(a.AllFinished());
  json body = json::parse(a.Finish());
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["choices"][1]["text"], "xx");
  EXPECT_EQ(body["choices"][0]["stop_reason"], 7);
  EXPECT_EQ(body["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(body["usage"], json::parse(R"({"prompt_tokens": 3, "completion_tokens": 3,
      "total_tokens": 6})"));
}

TEST(ResponseAssemblerTest, StreamingChatHasRoleChunkAndUsage) {
  ResponseAssembler a(ApiKind::kChat, {"chatcmpl-1", 5, "m"}, 1, 1, true, true, false);
  std::string start = a.Start();
  EXPECT_NE(start.find(R"("role":"assistant")"), std::string::npos);
  GenerateOutput o;
  o.text_delta = "hi";
  o.num_prompt_tokens = 2;
  o.num_output_tokens = 1;
  o.finish_reason = core::FinishReason::kStop;
  std::string event = a.OnOutput(0, o);
  EXPECT_EQ(event.rfind("data: ", 0), 0u);
  json chunk = json::parse(event.substr(6));
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["delta"]["content"], "hi");
  EXPECT_EQ(chunk["choices"][0]["finish_reason"], "stop");
  std::string tail = a.Finish();
  EXPECT_NE(tail.find(R"("total_tokens":3)"), std::string::npos);
  EXPECT_EQ(tail.substr(tail.size() - kSseDone.size()), kSseDone);
}

TEST(FanOutTest, SeedsAndIds) {
  GenerationOptions options;
  options.n = 2;
  options.params.seed = 10;
  std::vector<Prompt> prompts = {{std::string("a"), {}}, {std::nullopt, {1, 2}}};
  std::vector<GenerateRequest> r = FanOut(prompts, options, "cmpl-x", 1.0);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[3].request_id, "cmpl-x-3");
  EXPECT_EQ(*r[1].params.seed, 11);
  EXPECT_EQ(*r[2].params.seed, 10);
  EXPECT_EQ(r[2].prompt_token_ids, (std::vector<int32_t>{1, 2}));
}

}  // namespace
}  // namespace vllm::frontend
