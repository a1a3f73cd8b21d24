// vLLM's token-id APIs against the real server on the bundled model: POST /tokenize → POST
// /detokenize round trips (with and without BOS, token strings); a prompt's and a chat's
// /tokenize count equals the completion's and the chat completion's usage.prompt_tokens (with
// and without the generation prompt); completions' echo (plain, streamed, token-id prompt) is
// the prompt's text plus the same greedy continuation; with return_tokens_as_token_ids the
// logprobs tokens are "token_id:<id>" and those ids detokenize to the generated text (chat too).
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"

namespace vllm {
namespace {

using nlohmann::json;

constexpr char kModelName[] = "kjv-llama-tiny";
constexpr char kBos[] = "<|begin_of_text|>";

class ServeTokenizeTest : public testing::ServeTest {
 protected:
  // POSTs `body` to `path`; the 200 body as JSON (a failure otherwise).
  json Post(const std::string& path, const json& body) {
    auto r = testing::Http(port_, "POST", path, body.dump());
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return json();
    EXPECT_EQ(r->status, 200) << path << " " << body.dump() << " -> " << r->body;
    return r->Json();
  }
};

TEST_F(ServeTokenizeTest, TokenIdApisAgreeWithGeneration) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  const std::string text = "In the beginning God created the heaven and the earth.";

  // /tokenize → /detokenize round trips, with and without BOS.
  json tok = Post("/tokenize", {{"model", kModelName}, {"prompt", text}});
  ASSERT_TRUE(tok.is_object());
  EXPECT_EQ(tok["max_model_len"], 1024);
  EXPECT_TRUE(tok["token_strs"].is_null());
  const std::vector<int32_t> ids = tok["tokens"].get<std::vector<int32_t>>();
  ASSERT_GE(ids.size(), 5u);
  EXPECT_EQ(tok["count"], ids.size());
  EXPECT_EQ(ids[0], 0);  // BOS
  EXPECT_EQ(Post("/detokenize", {{"model", kModelName}, {"tokens", ids}})["prompt"],
            std::string(kBos) + text);
  json plain = Post("/tokenize",
                    {{"prompt", text}, {"add_special_tokens", false}, {"return_token_strs", true}});
  const std::vector<int32_t> plain_ids = plain["tokens"].get<std::vector<int32_t>>();
  EXPECT_EQ(plain_ids, std::vector<int32_t>(ids.begin() + 1, ids.end()));
  EXPECT_EQ(Post("/detokenize", {{"tokens", plain_ids}})["prompt"], text);
  ASSERT_EQ(plain["token_strs"].size(), plain_ids.size());
  EXPECT_EQ(plain["token_strs"][0], "In");
  EXPECT_EQ(plain["token_strs"][1], "\xC4\xA0the");  // byte-level form: "Ġthe"
  EXPECT_EQ(Post("/detokenize", {{"tokens", json::array()}})["prompt"], "");

  // A completion of the same text counts the same prompt tokens.
  json completion = Post("/v1/completions", {{"prompt", text}, {"max_tokens", 2}});
  EXPECT_EQ(completion["usage"]["prompt_tokens"], ids.size());

  // Chat: /tokenize's ids are what the chat completion sends (its prompt_tokens), and they
  // decode to the rendered template (BOS written by the template, not added twice).
  const json messages = {{{"role", "system"}, {"content", "Answer in the words of the KJV."}},
                         {{"role", "user"}, {"content", "Who created the heaven?"}}};
  json chat_tok = Post("/tokenize", {{"messages", messages}});
  const std::vector<int32_t> chat_ids = chat_tok["tokens"].get<std::vector<int32_t>>();
  json chat = Post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 3}});
  EXPECT_EQ(chat["usage"]["prompt_tokens"], chat_ids.size());
  const std::string rendered = Post("/detokenize", {{"tokens", chat_ids}})["prompt"];
  EXPECT_EQ(rendered.rfind(kBos, 0), 0u) << rendered;
  EXPECT_EQ(rendered.find(kBos, 1), std::string::npos) << rendered;
  EXPECT_TRUE(absl::EndsWith(rendered, "<|start_header_id|>assistant<|end_header_id|>\n\n"))
      << rendered;
  // add_special_tokens adds the tokenizer's BOS in front of the template's (as vLLM).
  json chat_special = Post("/tokenize", {{"messages", messages}, {"add_special_tokens", true}});
  EXPECT_EQ(chat_special["count"], chat_ids.size() + 1);
  // Without the generation prompt the chat is shorter, and the chat completion agrees.
  json no_gen = Post("/tokenize", {{"messages", messages}, {"add_generation_prompt", false}});
  EXPECT_LT(no_gen["count"].get<size_t>(), chat_ids.size());
  json chat_no_gen =
      Post("/v1/chat/completions",
           {{"messages", messages}, {"max_tokens", 1}, {"add_generation_prompt", false}});
  EXPECT_EQ(chat_no_gen["usage"]["prompt_tokens"], no_gen["count"]);
}

TEST_F(ServeTokenizeTest, EchoAndTokensAsTokenIds) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  const std::string prompt = "And God said, Let there be light";
  const json greedy = {
      {"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};
  json plain = Post("/v1/completions", greedy);
  const std::string generated = plain["choices"][0]["text"];
  ASSERT_FALSE(generated.empty());

  // echo: the prompt's text, then the same greedy continuation; usage unchanged.
  json with_echo = greedy;
  with_echo["echo"] = true;
  json echoed = Post("/v1/completions", with_echo);
  EXPECT_EQ(echoed["choices"][0]["text"], prompt + generated);
  EXPECT_EQ(echoed["usage"], plain["usage"]);
  // Streaming: the prompt arrives in the first chunk.
  with_echo["stream"] = true;
  testing::StreamResult stream =
      testing::RunStream(port_, "/v1/completions", with_echo, absl::Now() + absl::Seconds(60));
  ASSERT_EQ(stream.status, 200) << stream.error;
  ASSERT_TRUE(stream.done);
  ASSERT_FALSE(stream.events.empty());
  std::string streamed;
  for (const json& e : stream.events) streamed += e["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, prompt + generated);
  EXPECT_TRUE(absl::StartsWith(stream.events[0]["choices"][0]["text"].get<std::string>(), prompt));
  // A token-id prompt echoes its decoded text (BOS included, as vLLM).
  json tok = Post("/tokenize", {{"prompt", prompt}});
  json by_ids = greedy;
  by_ids["prompt"] = tok["tokens"];
  by_ids["echo"] = true;
  EXPECT_EQ(Post("/v1/completions", by_ids)["choices"][0]["text"],
            std::string(kBos) + prompt + generated);

  // return_tokens_as_token_ids: every logprobs token is "token_id:<id>", and the ids decode
  // to the generated text.
  json as_ids = greedy;
  as_ids["logprobs"] = 2;
  as_ids["return_tokens_as_token_ids"] = true;
  json lp = Post("/v1/completions", as_ids)["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 8u);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < lp["tokens"].size(); ++i) {
    const std::string token = lp["tokens"][i];
    ASSERT_TRUE(absl::StartsWith(token, "token_id:")) << token;
    int32_t id = 0;
    ASSERT_TRUE(absl::SimpleAtoi(token.substr(9), &id)) << token;
    ids.push_back(id);
    // Greedy: the chosen token is the most likely, so it is among the top alternatives.
    EXPECT_TRUE(lp["top_logprobs"][i].contains(token)) << lp["top_logprobs"][i].dump();
    for (const auto& [key, value] : lp["top_logprobs"][i].items()) {
      EXPECT_TRUE(absl::StartsWith(key, "token_id:")) << key;
    }
  }
  EXPECT_EQ(Post("/detokenize", {{"tokens", ids}})["prompt"], generated);
  // The chat endpoint renders its logprobs the same way.
  json chat = Post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                            {"max_tokens", 3},
                                            {"logprobs", true},
                                            {"return_tokens_as_token_ids", true}});
  for (const json& entry : chat["choices"][0]["logprobs"]["content"]) {
    EXPECT_TRUE(absl::StartsWith(entry["token"].get<std::string>(), "token_id:")) << entry;
  }
}

}  // namespace
}  // namespace vllm
