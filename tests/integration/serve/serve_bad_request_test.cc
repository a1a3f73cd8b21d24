// Bad requests against the real server (tokenizer, chat template, engine limits included):
// malformed JSON, wrong types, out-of-range values, limits, an unknown model, bad messages,
// /tokenize and /detokenize bodies, unsupported options, content type, path, method, malformed
// HTTP, an oversized body (413). Each is answered with the right 4xx and vLLM's nested
// {"error": {...}} body whose message names the problem; the process survives all of them and
// then answers a normal request correctly.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"

namespace vllm {
namespace {

using nlohmann::json;

constexpr char kCompletions[] = "/v1/completions";
constexpr char kChat[] = "/v1/chat/completions";
constexpr char kTokenize[] = "/tokenize";
constexpr char kDetokenize[] = "/detokenize";

struct BadRequest {
  const char* name;
  std::string path;
  std::string body;     // sent as is
  int status;           // expected HTTP status
  const char* message;  // expected in the error message
  const char* param;    // expected "param", or nullptr for none checked
  std::string method = "POST";
  std::string content_type = "application/json";
};

// A completion body with `field` set to `value` on a valid base request.
std::string Completion(const char* field, const json& value) {
  json body = {{"model", "kjv-llama-tiny"}, {"prompt", "In the beginning"}, {"max_tokens", 4}};
  body[field] = value;
  return body.dump();
}

std::string Chat(const char* field, const json& value) {
  json body = {{"model", "kjv-llama-tiny"},
               {"messages", {{{"role", "user"}, {"content", "Hello"}}}},
               {"max_tokens", 4}};
  body[field] = value;
  return body.dump();
}

std::vector<BadRequest> Table() {
  std::vector<int32_t> long_prompt(1100, 100);
  return {
      {"malformed JSON", kCompletions, R"({"prompt": "a",)", 400, "Invalid JSON", nullptr},
      {"empty body", kCompletions, "", 400, "Invalid JSON", nullptr},
      {"body not an object", kCompletions, "[1, 2]", 400, "must be a JSON object", nullptr},
      {"prompt missing", kCompletions, R"({"max_tokens": 4})", 400, "prompt is required", "prompt"},
      {"prompt wrong type", kCompletions, Completion("prompt", 5), 400, "prompt must be", "prompt"},
      {"prompt empty", kCompletions, Completion("prompt", ""), 400, "prompt must not be empty",
       "prompt"},
      {"max_tokens wrong type", kCompletions, Completion("max_tokens", "ten"), 400,
       "max_tokens must be an integer", "max_tokens"},
      {"max_tokens zero", kCompletions, Completion("max_tokens", 0), 400,
       "max_tokens must be at least 1", "max_tokens"},
      {"max_tokens past max_model_len", kCompletions, Completion("max_tokens", 2000), 400,
       "maximum context length is 1024", nullptr},
      {"temperature negative", kCompletions, Completion("temperature", -0.5), 400, "temperature",
       "temperature"},
      {"temperature wrong type", kCompletions, Completion("temperature", "hot"), 400,
       "temperature must be a number", "temperature"},
      {"top_p zero", kCompletions, Completion("top_p", 0), 400, "top_p must be in (0, 1]", "top_p"},
      {"top_p above 1", kCompletions, Completion("top_p", 1.5), 400, "top_p", "top_p"},
      {"top_k below -1", kCompletions, Completion("top_k", -2), 400, "top_k", "top_k"},
      {"top_k fractional", kCompletions, Completion("top_k", 1.5), 400, "top_k must be an integer",
       "top_k"},
      {"min_p above 1", kCompletions, Completion("min_p", 2), 400, "min_p", "min_p"},
      {"n zero", kCompletions, Completion("n", 0), 400, "n must be at least 1, got 0.", "n"},
      {"n too large", kCompletions, Completion("n", 16385), 400,
       "n must be at most 16384, got 16385. To increase this limit, set the VLLM_MAX_N_SEQUENCES",
       "n"},
      {"logprobs too many", kCompletions, Completion("logprobs", 100), 400,
       "Requested sample logprobs of 100, which is greater than max allowed: 20", "logprobs"},
      {"logprobs past any --max-logprobs", kCompletions, Completion("logprobs", 1025), 400,
       "logprobs must be in [0, 1024]", "logprobs"},
      {"logprobs negative", kCompletions, Completion("logprobs", -1), 400, "logprobs", "logprobs"},
      {"repetition_penalty zero", kCompletions, Completion("repetition_penalty", 0), 400,
       "repetition_penalty", "repetition_penalty"},
      {"presence_penalty too large", kCompletions, Completion("presence_penalty", 3), 400,
       "presence_penalty", "presence_penalty"},
      {"frequency_penalty too small", kCompletions, Completion("frequency_penalty", -3), 400,
       "frequency_penalty", "frequency_penalty"},
      {"min_tokens above max_tokens", kCompletions, Completion("min_tokens", 10), 400, "min_tokens",
       "min_tokens"},
      {"seed wrong type", kCompletions, Completion("seed", "abc"), 400, "seed must be an integer",
       "seed"},
      {"stop too long", kCompletions, Completion("stop", std::string(2000, 'x')), 400,
       "stop strings must be at most 1024 bytes", "stop"},
      {"stop wrong type", kCompletions, Completion("stop", 5), 400, "stop must be", "stop"},
      {"too many stop strings", kCompletions,
       Completion("stop", std::vector<std::string>(5, "amen")), 400,
       "List should have at most 4 items after validation, not 5", "stop"},
      {"stop_token_ids negative", kCompletions, Completion("stop_token_ids", {-1}), 400,
       "stop_token_ids", "stop_token_ids"},
      {"stream not a boolean", kCompletions, Completion("stream", "yes"), 400,
       "stream must be a boolean", "stream"},
      {"stream_options without stream", kCompletions,
       Completion("stream_options", {{"include_usage", true}}), 400,
       "stream_options can only be defined", "stream_options"},
      {"echo with logprobs too many", kCompletions,
       json{{"prompt", "In the beginning"}, {"echo", true}, {"logprobs", 21}}.dump(), 400,
       "Requested sample logprobs of 21", "logprobs"},
      {"prompt_logprobs too many", kCompletions, Completion("prompt_logprobs", 21), 400,
       "Requested prompt logprobs of 21, which is greater than max allowed: 20", "prompt_logprobs"},
      {"prompt_logprobs full vocabulary", kCompletions, Completion("prompt_logprobs", -1), 400,
       "prompt_logprobs must be in [0, 1024]", "prompt_logprobs"},
      {"prompt_logprobs streamed", kCompletions,
       json{{"prompt", "In the beginning"}, {"stream", true}, {"prompt_logprobs", 1}}.dump(), 400,
       "`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs"},
      {"chat: prompt_logprobs too many", kChat, Chat("prompt_logprobs", 50), 400,
       "Requested prompt logprobs of 50", "prompt_logprobs"},
      {"chat: request chat_template", kChat, Chat("chat_template", "{{ 1 }}"), 400,
       "--trust-request-chat-template", "chat_template"},
      {"tokenize: prompt missing", kTokenize, "{}", 400, "prompt (a string) or messages", "prompt"},
      {"tokenize: prompt not a string", kTokenize, R"({"prompt": [1, 2]})", 400,
       "prompt must be a string", "prompt"},
      {"tokenize: unknown model", kTokenize, R"({"model": "gpt-4", "prompt": "a"})", 404,
       "The model `gpt-4` does not exist", "model"},
      {"tokenize: bad role", kTokenize, R"({"messages": [{"role": "wizard", "content": "a"}]})",
       400, "unknown message role", "messages"},
      {"tokenize: both template flags", kTokenize,
       R"({"messages": [{"role": "user", "content": "a"}], "continue_final_message": true})", 400,
       "cannot both be true", "continue_final_message"},
      {"tokenize: GET", kTokenize, "", 405, "Method GET is not allowed", nullptr, "GET"},
      {"detokenize: id outside the vocabulary", kDetokenize, R"({"tokens": [5, 4096]})", 400,
       "token id 4096 (at index 1) is outside the vocabulary [0, 4096)", nullptr},
      {"detokenize: negative id", kDetokenize, R"({"tokens": [-5]})", 400, "tokens must be in",
       "tokens"},
      {"detokenize: tokens not a list", kDetokenize, R"({"tokens": "5 6"})", 400,
       "tokens must be a list of token ids", "tokens"},
      {"detokenize: tokens missing", kDetokenize, R"({"prompt": "a"})", 400,
       "tokens (a list of token ids) is required", "tokens"},
      {"detokenize: malformed JSON", kDetokenize, R"({"tokens": [1,)", 400, "Invalid JSON",
       nullptr},
      {"best_of", kCompletions, Completion("best_of", 2), 400, "best_of must be 1", "best_of"},
      {"prompt longer than max_model_len", kCompletions, Completion("prompt", long_prompt), 400,
       "maximum context length is 1024 tokens. However, your prompt has 1100", nullptr},
      {"token id outside the vocabulary", kCompletions, Completion("prompt", {5, 99999}), 400,
       "prompt token id 99999 is outside the vocabulary [0, 4096)", nullptr},
      {"negative token id", kCompletions, Completion("prompt", {5, -1}), 400, "prompt", "prompt"},
      {"unknown model", kCompletions, Completion("model", "gpt-4"), 404,
       "The model `gpt-4` does not exist", "model"},
      {"chat: messages missing", kChat, R"({"max_tokens": 4})", 400, "messages is required",
       "messages"},
      {"chat: messages empty", kChat, Chat("messages", json::array()), 400,
       "messages must not be empty", "messages"},
      {"chat: messages not a list", kChat, Chat("messages", "hi"), 400, "messages must be",
       "messages"},
      {"chat: bad role", kChat, Chat("messages", {{{"role", "wizard"}, {"content", "hi"}}}), 400,
       "unknown message role \"wizard\"", "messages"},
      {"chat: role missing", kChat, Chat("messages", {{{"content", "hi"}}}), 400,
       "needs a string \"role\"", "messages"},
      {"chat: user without content", kChat, Chat("messages", {{{"role", "user"}}}), 400,
       "needs a content", "messages"},
      {"chat: image part", kChat,
       Chat("messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}), 400,
       "only content parts of type \"text\"", "messages"},
      {"chat: logprobs not a boolean", kChat, Chat("logprobs", 5), 400,
       "logprobs must be a boolean", "logprobs"},
      {"chat: top_logprobs without logprobs", kChat, Chat("top_logprobs", 2), 400,
       "top_logprobs requires logprobs", "top_logprobs"},
      {"chat: unknown model", kChat, Chat("model", "llama-70b"), 404,
       "The model `llama-70b` does not exist", "model"},
      {"wrong content type", kCompletions, Completion("max_tokens", 4), 400,
       "Content-Type must be application/json", nullptr, "POST", "text/plain"},
      {"form content type", kChat, Chat("max_tokens", 4), 400,
       "Content-Type must be application/json", nullptr, "POST",
       "application/x-www-form-urlencoded"},
      {"unknown path", "/v1/embeddings", Completion("max_tokens", 4), 404,
       "Not Found: /v1/embeddings", nullptr},
      {"wrong method", kCompletions, "", 405, "Method GET is not allowed", nullptr, "GET"},
  };
}

class ServeBadRequestTest : public testing::ServeTest {};

void ExpectErrorBody(const testing::HttpResponse& r, int status, const char* message,
                     const char* param) {
  EXPECT_EQ(r.status, status) << r.body;
  EXPECT_EQ(r.content_type, "application/json");
  // vLLM's ErrorResponse: {"error": {"message", "type", "param", "code"}}.
  const json whole = r.Json();
  ASSERT_TRUE(whole.is_object() && whole.size() == 1 && whole.contains("error")) << r.body;
  const json& body = whole["error"];
  ASSERT_TRUE(body.is_object()) << r.body;
  EXPECT_TRUE(body.contains("param")) << r.body;
  EXPECT_EQ(body.value("code", 0), status) << r.body;
  EXPECT_TRUE(body.contains("type") && body["type"].is_string()) << r.body;
  if (status == 400) {
    EXPECT_EQ(body["type"], "BadRequestError");
  }
  EXPECT_TRUE(absl::StrContains(body.value("message", ""), message)) << r.body;
  if (param != nullptr) {
    EXPECT_EQ(body["param"], param) << r.body;
  }
}

TEST_F(ServeBadRequestTest, EveryBadRequestGetsAFourHundredNamingTheProblem) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  const std::vector<BadRequest> table = Table();
  ASSERT_GE(table.size(), 30u);
  for (const BadRequest& bad : table) {
    SCOPED_TRACE(bad.name);
    auto r = testing::Http(port_, bad.method, bad.path, bad.body, bad.content_type);
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectErrorBody(*r, bad.status, bad.message, bad.param);
  }

  // Broken HTTP, and a declared body over the 32 MiB limit (refused before it is sent).
  {
    SCOPED_TRACE("malformed HTTP");
    auto r = testing::HttpRaw(port_, "GARBAGE\r\n\r\n");
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectErrorBody(*r, 400, "Malformed HTTP request", nullptr);
  }
  {
    SCOPED_TRACE("body too large");
    auto r = testing::HttpRaw(
        port_,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 41943040\r\n\r\n{");
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectErrorBody(*r, 413, "exceeds the limit", nullptr);
  }

  // Still healthy, nothing left running, and a normal request (with a charset parameter on
  // the content type) is answered correctly.
  auto health = testing::Http(port_, "GET", "/health");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->status, 200);
  auto good = testing::Http(port_, "POST", kCompletions,
                            json{{"model", "kjv-llama-tiny"},
                                 {"prompt", "In the beginning"},
                                 {"max_tokens", 5},
                                 {"ignore_eos", true},
                                 {"temperature", 0}}
                                .dump(),
                            "application/json; charset=utf-8");
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_EQ(good->status, 200) << good->body;
  const json g = good->Json();
  EXPECT_EQ(g["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(g["choices"][0]["text"].get<std::string>().empty());
  EXPECT_EQ(g["usage"]["completion_tokens"], 5);
  auto chat = testing::Http(port_, "POST", kChat, Chat("max_tokens", 3));
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->status, 200) << chat->body;
  const testing::MetricSamples m = testing::ScrapeMetrics(port_);
  EXPECT_EQ(m.at("vllm:num_requests_running{model_name=\"kjv-llama-tiny\",engine=\"0\"}"), 0);
  EXPECT_TRUE(server_->running());
}

}  // namespace
}  // namespace vllm
