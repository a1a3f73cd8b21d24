// Request parsing, validation and response building of the OpenAI protocol, without a server.
#include "frontend/openai/openai_protocol.h"

#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "frontend/openai/api_server_response.h"
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
      {R"({"prompt": "a", "n": 0})", "n", "n must be at least 1, got 0."},
      {R"({"prompt": "a", "n": 16385})", "n",
       "n must be at most 16384, got 16385. To increase this limit, set the "
       "VLLM_MAX_N_SEQUENCES environment variable."},
      {R"({"prompt": "a", "logprobs": 1025})", "logprobs", "[0, 1024]"},
      {R"({"prompt": "a", "presence_penalty": 3})", "presence_penalty", "[-2, 2]"},
      {R"({"prompt": "a", "temperature": "hot"})", "temperature", "must be a number"},
      {R"({"prompt": "a", "max_tokens": 1.5})", "max_tokens", "an integer"},
      {R"({"prompt": "a", "stream": 1})", "stream", "a boolean"},
      {R"({"prompt": "a", "prompt_logprobs": 1025})", "prompt_logprobs", "[0, 1024]"},
      {R"({"prompt": "a", "prompt_logprobs": -1})", "prompt_logprobs", "[0, 1024]"},
      {R"({"prompt": "a", "prompt_logprobs": "x"})", "prompt_logprobs", "an integer"},
      {R"({"prompt": "a", "stream": true, "prompt_logprobs": 1})", "prompt_logprobs",
       "not available when `stream=True`"},
      {R"({"prompt": "a", "echo": true, "logprobs": 1025})", "logprobs", "[0, 1024]"},
      {R"({"prompt": "a", "return_tokens_as_token_ids": 1})", "return_tokens_as_token_ids",
       "a boolean"},
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

// vLLM's VLLM_MAX_N_SEQUENCES, VLLM_MAX_COMPLETION_PROMPTS and VLLM_MAX_STOP_STRINGS as the
// serve path sets them (request_limits.h), with vLLM's messages; serve_env_test checks that the
// variables reach a server.
TEST(OpenAiProtocolTest, RequestLimitsFollowVllmsVariables) {
  EXPECT_EQ(GetRequestLimits().max_n, 16384);  // vLLM's defaults until set
  EXPECT_EQ(GetRequestLimits().max_prompts, 1024);
  EXPECT_EQ(GetRequestLimits().max_stop_strings, 4);
  SetRequestLimits({.max_n = 300, .max_prompts = 2, .max_stop_strings = 1});
  auto parse = [](const char* body) {
    return ParseCompletionRequest(json::parse(body), kModel).status();
  };
  EXPECT_TRUE(parse(R"({"prompt": "a", "n": 300, "stop": ["x"]})").ok());  // past the old 128
  EXPECT_TRUE(parse(R"({"prompt": ["a", "b"]})").ok());
  const std::pair<const char*, const char*> refused[] = {
      {R"({"prompt": "a", "n": 301})", "n must be at most 300, got 301"},
      {R"({"prompt": ["a", "b", "c"]})",
       "prompt list length 3 exceeds the maximum allowed count of 2. To increase this limit, "
       "set the VLLM_MAX_COMPLETION_PROMPTS environment variable."},
      {R"({"prompt": "a", "stop": ["x", "y"]})",
       "List should have at most 1 item after validation, not 2"},
  };
  for (const auto& [body, message] : refused) {
    const absl::Status s = parse(body);
    EXPECT_EQ(HttpStatusFor(s), 400) << body;
    EXPECT_NE(s.message().find(message), std::string::npos) << s;
  }
  EXPECT_EQ(ErrorParam(parse(R"({"prompt": "a", "stop": ["x", "y"]})")), "stop");
  // A list of token ids is one prompt, whatever its length (as vLLM's is_list_of(prompt, int)).
  EXPECT_TRUE(parse(R"({"prompt": [1, 2, 3, 4]})").ok());
  SetRequestLimits({});
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
      "logprobs": true, "top_logprobs": 2000})")),
            "top_logprobs");
  EXPECT_EQ(ErrorParam(error(R"({"messages": [{"role": "user", "content": "x"}],
      "max_completion_tokens": 0})")),
            "max_completion_tokens");
}

TEST(OpenAiProtocolTest, EchoAndTokenIdOptions) {
  absl::StatusOr<CompletionRequest> r = ParseCompletionRequest(
      json::parse(R"({"prompt": "a", "echo": true, "return_tokens_as_token_ids": true})"), kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->echo);
  EXPECT_TRUE(r->options.return_tokens_as_token_ids);
  r = ParseCompletionRequest(json::parse(R"({"prompt": "a", "echo": false, "logprobs": 2,
      "prompt_logprobs": null})"),
                             kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->echo);
  EXPECT_FALSE(r->options.return_tokens_as_token_ids);

  absl::StatusOr<ChatCompletionRequest> chat =
      ParseChatCompletionRequest(json::parse(R"({"messages": [{"role": "user", "content": "x"}],
          "return_tokens_as_token_ids": true, "add_special_tokens": true})"),
                                 kModel);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_TRUE(chat->options.return_tokens_as_token_ids);
  EXPECT_TRUE(chat->add_special_tokens);
  chat = ParseChatCompletionRequest(
      json::parse(R"({"messages": [{"role": "user", "content": "x"}]})"), kModel);
  ASSERT_TRUE(chat.ok());
  EXPECT_FALSE(chat->add_special_tokens);  // vLLM's default for chat
  chat = ParseChatCompletionRequest(
      json::parse(
          R"({"messages": [{"role": "user", "content": "x"}], "chat_template": "{{ x }}"})"),
      kModel);
  ASSERT_FALSE(chat.ok());
  EXPECT_EQ(HttpStatusFor(chat.status()), 400);
  EXPECT_EQ(ErrorParam(chat.status()), "chat_template");
}

// vLLM's prompt_logprobs on both endpoints; echo with logprobs implies prompt_logprobs =
// logprobs; with stream only 0 is accepted.
TEST(OpenAiProtocolTest, PromptLogprobsOptions) {
  absl::StatusOr<CompletionRequest> r =
      ParseCompletionRequest(json::parse(R"({"prompt": "a", "prompt_logprobs": 2})"), kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->options.params.prompt_logprobs, 2);
  EXPECT_FALSE(r->options.params.logprobs.has_value());
  r = ParseCompletionRequest(json::parse(R"({"prompt": "a", "echo": true, "logprobs": 3})"),
                             kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->options.params.prompt_logprobs, 3);
  r = ParseCompletionRequest(
      json::parse(R"({"prompt": "a", "echo": true, "logprobs": 3, "prompt_logprobs": 5})"), kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->options.params.prompt_logprobs, 5);
  r = ParseCompletionRequest(json::parse(R"({"prompt": "a", "echo": true})"), kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->options.params.prompt_logprobs.has_value());
  r = ParseCompletionRequest(
      json::parse(R"({"prompt": "a", "stream": true, "prompt_logprobs": 0})"), kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->options.params.prompt_logprobs, 0);
  absl::StatusOr<ChatCompletionRequest> chat = ParseChatCompletionRequest(
      json::parse(R"({"messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 1})"),
      kModel);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->options.params.prompt_logprobs, 1);
  chat = ParseChatCompletionRequest(
      json::parse(R"({"messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 2000})"),
      kModel);
  ASSERT_FALSE(chat.ok());
  EXPECT_EQ(ErrorParam(chat.status()), "prompt_logprobs");
}

// The prompt_logprobs list as vLLM serializes it (null, then {"<id>": {logprob, rank,
// decoded_token}}), in a completion's choice and at the top of a chat response; a first prompt
// position among a completion's logprobs (echo) has null logprob and top_logprobs.
TEST(OpenAiProtocolTest, PromptLogprobsRendering) {
  PositionLogprobs first;
  first.sampled = TokenLogprob{5, "In", 0.0f, 0};
  first.no_logprob = true;
  PositionLogprobs second;
  second.sampled = TokenLogprob{9, " the", -1.5f, 3};
  second.top = {TokenLogprob{7, " a", -0.25f, 1}, TokenLogprob{8, " b", -1.0f, 2}};
  PositionLogprobs third;
  third.sampled = TokenLogprob{4, "x", -std::numeric_limits<float>::infinity(), 96};
  Choice c;
  c.text = "In the";
  c.prompt_logprobs = std::vector<PositionLogprobs>{first, second, third};
  c.logprobs = std::vector<PositionLogprobs>{first, second};
  const ResponseMeta meta{"cmpl-1", 1, kModel};
  json body = BuildCompletionResponse(meta, {c}, Usage{3, 0});
  const json& plp = body["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(plp.size(), 3u);
  EXPECT_TRUE(plp[0].is_null());
  EXPECT_EQ(plp[1].size(), 3u);
  EXPECT_EQ(plp[1]["9"], (json{{"logprob", -1.5}, {"rank", 3}, {"decoded_token", " the"}}));
  EXPECT_EQ(plp[1]["7"]["rank"], 1);
  EXPECT_EQ(plp[2]["4"]["logprob"], -9999.0);  // vLLM's clamp of -inf
  const json& lp = body["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], (json{"In", " the"}));
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["token_logprobs"][1], -1.5);
  EXPECT_EQ(lp["text_offset"], (json{0, 2}));

  c.logprobs.reset();
  json chat = BuildChatCompletionResponse(meta, {c}, Usage{3, 0});
  EXPECT_EQ(chat["prompt_logprobs"], plp);
  EXPECT_FALSE(chat["choices"][0].contains("prompt_logprobs"));
  c.prompt_logprobs.reset();
  EXPECT_FALSE(
      BuildCompletionResponse(meta, {c}, Usage{})["choices"][0].contains("prompt_logprobs"));
  EXPECT_FALSE(BuildChatCompletionResponse(meta, {c}, Usage{}).contains("prompt_logprobs"));
}

TEST(OpenAiProtocolTest, TokenizeCompletionForm) {
  absl::StatusOr<TokenizeRequest> r =
      ParseTokenizeRequest(json::parse(R"({"model": "m", "prompt": "In the beginning"})"), kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(*r->prompt, "In the beginning");
  EXPECT_TRUE(r->add_special_tokens);  // vLLM's default for a prompt
  EXPECT_FALSE(r->return_token_strs);
  r = ParseTokenizeRequest(json::parse(R"({"prompt": "", "add_special_tokens": false,
      "return_token_strs": true})"),
                           kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r->prompt, "");
  EXPECT_FALSE(r->add_special_tokens);
  EXPECT_TRUE(r->return_token_strs);
}

TEST(OpenAiProtocolTest, TokenizeChatForm) {
  absl::StatusOr<TokenizeRequest> r = ParseTokenizeRequest(
      json::parse(R"({"messages": [{"role": "user", "content": "hi"}]})"), kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->prompt.has_value());
  ASSERT_EQ(r->messages.size(), 1u);
  EXPECT_EQ(r->messages[0].content, "hi");
  EXPECT_FALSE(r->add_special_tokens);  // vLLM's default for chat
  EXPECT_TRUE(r->add_generation_prompt);
  EXPECT_FALSE(r->continue_final_message);
  r = ParseTokenizeRequest(json::parse(R"({"messages": [{"role": "assistant", "content": "a"}],
      "add_generation_prompt": false, "continue_final_message": true,
      "add_special_tokens": true, "return_token_strs": true})"),
                           kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->add_special_tokens && r->continue_final_message && r->return_token_strs);
  EXPECT_FALSE(r->add_generation_prompt);
  r = ParseTokenizeRequest(json::parse(R"({"messages": [{"role": "user", "content": "hi"}],
      "chat_template_kwargs": {"add_generation_prompt": false}})"),
                           kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->add_generation_prompt);
}

TEST(OpenAiProtocolTest, BadTokenizeAndDetokenizeBodies) {
  struct Case {
    const char* body;
    bool detokenize;
    int status;
    const char* param;
    const char* message_part;
  };
  const Case cases[] = {
      {R"({})", false, 400, "prompt", "prompt (a string) or messages"},
      {R"({"prompt": 5})", false, 400, "prompt", "prompt must be a string"},
      {R"({"prompt": ["a"]})", false, 400, "prompt", "prompt must be a string"},
      {R"({"prompt": "a", "add_special_tokens": "yes"})", false, 400, "add_special_tokens",
       "a boolean"},
      {R"({"prompt": "a", "return_token_strs": 1})", false, 400, "return_token_strs", "a boolean"},
      {R"({"model": "x", "prompt": "a"})", false, 404, "model", "does not exist"},
      {R"({"messages": []})", false, 400, "messages", "must not be empty"},
      {R"({"messages": "hi"})", false, 400, "messages", "messages must be"},
      {R"({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": true,
          "continue_final_message": true})",
       false, 400, "continue_final_message", "cannot both be true"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template": "x"})", false, 400,
       "chat_template", "--trust-request-chat-template"},
      {R"({})", true, 400, "tokens", "tokens (a list of token ids) is required"},
      {R"({"tokens": "1 2"})", true, 400, "tokens", "a list of token ids"},
      {R"({"tokens": [1, -2]})", true, 400, "tokens", "tokens must be in [0, "},
      {R"({"tokens": [1, 2.5]})", true, 400, "tokens", "a list of token ids"},
      {R"({"tokens": [1, 3000000000]})", true, 400, "tokens", "tokens must be in [0, "},
      {R"({"tokens": [[1]]})", true, 400, "tokens", "a list of token ids"},
      {R"({"model": "x", "tokens": [1]})", true, 404, "model", "does not exist"},
  };
  for (const Case& c : cases) {
    const json body = json::parse(c.body);
    absl::Status status = c.detokenize ? ParseDetokenizeRequest(body, kModel).status()
                                       : ParseTokenizeRequest(body, kModel).status();
    ASSERT_FALSE(status.ok()) << c.body;
    EXPECT_EQ(HttpStatusFor(status), c.status) << c.body;
    EXPECT_EQ(ErrorParam(status), c.param) << c.body << ": " << status;
    EXPECT_NE(status.message().find(c.message_part), std::string::npos) << status;
  }
  absl::StatusOr<DetokenizeRequest> d =
      ParseDetokenizeRequest(json::parse(R"({"tokens": [0, 5, 7]})"), kModel);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->tokens, (std::vector<int32_t>{0, 5, 7}));
  d = ParseDetokenizeRequest(json::parse(R"({"tokens": []})"), kModel);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->tokens.empty());
}

TEST(OpenAiProtocolTest, TokenizeAndDetokenizeResponses) {
  // vLLM's TokenizeResponse and DetokenizeResponse, field for field.
  EXPECT_EQ(BuildTokenizeResponse({0, 9, 4}, 1024, std::nullopt),
            json::parse(R"({"count": 3, "max_model_len": 1024, "tokens": [0, 9, 4],
                "token_strs": null})"));
  EXPECT_EQ(BuildTokenizeResponse({0, 9}, 8, std::vector<std::string>{"<s>", "\u0120a"}),
            json::parse(R"({"count": 2, "max_model_len": 8, "tokens": [0, 9],
                "token_strs": ["<s>", "\u0120a"]})"));
  EXPECT_EQ(BuildTokenizeResponse({}, 8, std::nullopt)["tokens"], json::array());
  EXPECT_EQ(BuildDetokenizeResponse("In the"), json::parse(R"({"prompt": "In the"})"));
  EXPECT_EQ(TokenIdString(42), "token_id:42");
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

// Request bodies keep the client's key order (as Python's json.loads): a schema's properties
// are generated in it and a template's tojson renders it. A key given twice keeps its first
// place and its last value; an object of 200,000 keys parses (linearly: hash-indexed keys).
TEST(OpenAiProtocolTest, BodiesKeepTheirKeyOrder) {
  auto body = ParseJsonObject(
      R"({"z": 1, "a": {"y": [{"q": 1, "b": 2}], "c": 3}, "m": 4, "z": 5, "a2": null})");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(body->dump(), R"({"z":5,"a":{"y":[{"q":1,"b":2}],"c":3},"m":4,"a2":null})");
  std::string wide = "{";
  for (int i = 200000; i > 0; --i) absl::StrAppend(&wide, "\"k", i, "\":", i, i > 1 ? "," : "}");
  auto parsed = ParseJsonObject(wide);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 200000u);
  EXPECT_EQ(parsed->begin().key(), "k200000");
  EXPECT_EQ((*parsed)["k1"], 1);
  // The structured-output schema reaches XGrammar in the client's order.
  core::SamplingParams params;
  auto r = ParseCompletionRequest(
      *ParseJsonObject(R"({"prompt": "a", "structured_outputs": {"json": {"type": "object",
          "properties": {"reasoning": {"type": "string"}, "answer": {"type": "string"}}}}})"),
      kModel);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string& schema = *r->options.params.structured_outputs->json;
  EXPECT_LT(schema.find("reasoning"), schema.find("answer")) << schema;
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

TEST(ResponseAssemblerTest, EchoPrependsThePromptToEachChoice) {
  // Two prompts, n = 2: choices 0, 1 echo "A", choices 2, 3 echo "B".
  ResponseAssembler a(ApiKind::kCompletion, {"cmpl-1", 5, "m"}, 4, 2, false, false, false);
  a.SetEcho({"A", "B"});
  GenerateOutput o;
  o.text_delta = "x";
  o.num_output_tokens = 1;
  a.OnOutput(0, o);
  o.finish_reason = core::FinishReason::kLength;
  for (int32_t i = 0; i < 4; ++i) a.OnOutput(i, o);
  json body = json::parse(a.Finish());
  EXPECT_EQ(body["choices"][0]["text"], "Axx");
  EXPECT_EQ(body["choices"][1]["text"], "Ax");
  EXPECT_EQ(body["choices"][3]["text"], "Bx");

  // Streaming: the prompt's text comes in the choice's first chunk, even an empty one.
  ResponseAssembler s(ApiKind::kCompletion, {"cmpl-2", 5, "m"}, 1, 1, true, false, false);
  s.SetEcho({"In the"});
  GenerateOutput first;
  std::string event = s.OnOutput(0, first);
  ASSERT_EQ(event.rfind("data: ", 0), 0u);
  EXPECT_EQ(json::parse(event.substr(6))["choices"][0]["text"], "In the");
  first.text_delta = " beginning";
  first.finish_reason = core::FinishReason::kLength;
  event = s.OnOutput(0, first);
  EXPECT_EQ(json::parse(event.substr(6))["choices"][0]["text"], " beginning");
}

// echo with logprobs: the prompt tokens' logprobs lead the choice's (the first null, at most
// `logprobs` alternatives each); prompt_logprobs appear in the choice, and in a stream in the
// choice's first chunk only.
TEST(ResponseAssemblerTest, EchoLogprobsStartWithThePromptLogprobs) {
  PositionLogprobs first;
  first.sampled = TokenLogprob{5, "In", 0.0f, 0};
  first.no_logprob = true;
  PositionLogprobs second;
  second.sampled = TokenLogprob{9, " the", -1.5f, 3};
  second.top = {TokenLogprob{7, " a", -0.25f, 1}, TokenLogprob{8, " b", -1.0f, 2}};
  PositionLogprobs sampled;
  sampled.sampled = TokenLogprob{6, " end", -0.5f, 1};
  sampled.top = {TokenLogprob{6, " end", -0.5f, 1}};
  GenerateOutput o;
  o.text_delta = " end";
  o.num_prompt_tokens = 2;
  o.num_output_tokens = 1;
  o.finish_reason = core::FinishReason::kLength;
  o.logprobs = {sampled};
  o.prompt_logprobs = std::vector<PositionLogprobs>{first, second};

  ResponseAssembler a(ApiKind::kCompletion, {"cmpl-1", 5, "m"}, 1, 1, false, false, true);
  a.SetEcho({"In the"});
  a.SetEchoLogprobs(1);
  a.OnOutput(0, o);
  json body = json::parse(a.Finish());
  const json& choice = body["choices"][0];
  EXPECT_EQ(choice["text"], "In the end");
  EXPECT_EQ(choice["logprobs"]["tokens"], (json{"In", " the", " end"}));
  EXPECT_EQ(choice["logprobs"]["token_logprobs"], (json{nullptr, -1.5, -0.5}));
  EXPECT_TRUE(choice["logprobs"]["top_logprobs"][0].is_null());
  EXPECT_EQ(choice["logprobs"]["top_logprobs"][1], (json{{" a", -0.25}}));  // 1 alternative
  EXPECT_EQ(choice["logprobs"]["text_offset"], (json{0, 2, 6}));
  ASSERT_EQ(choice["prompt_logprobs"].size(), 2u);
  EXPECT_EQ(choice["prompt_logprobs"][1].size(), 3u);  // prompt_logprobs keep all alternatives

  ResponseAssembler s(ApiKind::kCompletion, {"cmpl-2", 5, "m"}, 1, 1, true, false, true);
  s.SetEcho({"In the"});
  s.SetEchoLogprobs(2);
  GenerateOutput head = o;
  head.finish_reason.reset();
  std::string event = s.OnOutput(0, head);
  json chunk = json::parse(event.substr(6));
  EXPECT_EQ(chunk["choices"][0]["text"], "In the end");
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["tokens"].size(), 3u);
  EXPECT_EQ(chunk["choices"][0]["prompt_logprobs"].size(), 2u);
  GenerateOutput tail;
  tail.text_delta = "!";
  tail.finish_reason = core::FinishReason::kLength;
  tail.logprobs = {sampled};
  chunk = json::parse(s.OnOutput(0, tail).substr(6));
  EXPECT_FALSE(chunk["choices"][0].contains("prompt_logprobs"));
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["tokens"].size(), 1u);
}

TEST(ResponseAssemblerTest, TokensAsTokenIds) {
  GenerateOutput o;
  o.text_delta = "x";
  o.num_output_tokens = 1;
  o.finish_reason = core::FinishReason::kLength;
  o.logprobs.push_back({{17, "x", -0.25f}, {{17, "x", -0.25f}, {3, "y", -2.0f}}});
  ResponseAssembler a(ApiKind::kCompletion, {"cmpl-1", 5, "m"}, 1, 1, false, false, true);
  a.SetTokensAsTokenIds(true);
  a.OnOutput(0, o);
  json lp = json::parse(a.Finish())["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json::parse(R"(["token_id:17"])"));
  EXPECT_EQ(lp["top_logprobs"][0], json::parse(R"({"token_id:17": -0.25, "token_id:3": -2.0})"));

  ResponseAssembler c(ApiKind::kChat, {"chatcmpl-1", 5, "m"}, 1, 1, false, false, true);
  c.SetTokensAsTokenIds(true);
  c.OnOutput(0, o);
  json content = json::parse(c.Finish())["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(content["token"], "token_id:17");
  EXPECT_EQ(content["top_logprobs"][1]["token"], "token_id:3");
  EXPECT_EQ(content["bytes"].size(), std::string("token_id:17").size());
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

// --response-role's role on the message and a stream's first delta; usage's
// prompt_tokens_details only with a cached count (--enable-prompt-tokens-details).
TEST(OpenAiProtocolTest, ResponseRoleAndPromptTokensDetails) {
  ResponseMeta meta{"chatcmpl-1", 1, kModel};
  meta.role = "narrator";
  Choice c;
  c.text = "Hi";
  Usage usage{3, 1};
  json plain = BuildChatCompletionResponse(meta, {c}, usage);
  EXPECT_EQ(plain["choices"][0]["message"]["role"], "narrator");
  EXPECT_FALSE(plain["usage"].contains("prompt_tokens_details"));
  usage.cached_tokens = 2;
  json details = BuildChatCompletionResponse(meta, {c}, usage);
  EXPECT_EQ(details["usage"]["prompt_tokens_details"], (json{{"cached_tokens", 2}}));
  EXPECT_EQ(details["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(BuildChatChunk(meta, Choice{}, /*first=*/true)["choices"][0]["delta"]["role"],
            "narrator");
  EXPECT_EQ(BuildUsageChunk(meta, "chat.completion.chunk",
                            usage)["usage"]["prompt_tokens_details"]["cached_tokens"],
            2);
  // Chat's created_cache_tokens (prompt tokens written to the prefix cache) after cached_tokens.
  usage.created_cache_tokens = 16;
  EXPECT_EQ(BuildChatCompletionResponse(meta, {c}, usage)["usage"]["prompt_tokens_details"],
            (json{{"cached_tokens", 2}, {"created_cache_tokens", 16}}));
  EXPECT_EQ(BuildUsageChunk(meta, "chat.completion.chunk",
                            usage)["usage"]["prompt_tokens_details"]["created_cache_tokens"],
            16);
}

}  // namespace
}  // namespace vllm::frontend
