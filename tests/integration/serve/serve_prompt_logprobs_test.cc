// vLLM's prompt_logprobs against the real server on the bundled model (CPU): the completion
// choice's prompt_logprobs (null, then {"<id>": {logprob, rank, decoded_token}} holding the
// prompt token and the top-k), echo with logprobs leading with the prompt's logprobs, the chat
// response's top-level prompt_logprobs, the first chunk of a stream, and 400 for values vLLM
// refuses. The same prompt asked twice (the second time fully cached) gives the same values.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"

namespace vllm {
namespace {

using nlohmann::json;

constexpr char kPrompt[] = "In the beginning God created the heaven and the earth.";

class ServePromptLogprobsTest : public testing::ServeTest {
 protected:
  // POSTs `body` to `path`; the body as JSON after checking the status.
  json Post(const std::string& path, const json& body, int want_status = 200) {
    auto r = testing::Http(port_, "POST", path, body.dump());
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return json();
    EXPECT_EQ(r->status, want_status) << path << " " << body.dump() << " -> " << r->body;
    return r->Json();
  }

  // Checks the shape of a prompt_logprobs list for `ids` with `k` alternatives.
  static void ExpectPromptLogprobs(const json& list, const std::vector<int32_t>& ids, int k) {
    ASSERT_TRUE(list.is_array()) << list.dump();
    ASSERT_EQ(list.size(), ids.size());
    EXPECT_TRUE(list[0].is_null());
    for (size_t p = 1; p < ids.size(); ++p) {
      SCOPED_TRACE(p);
      const json& entry = list[p];
      ASSERT_TRUE(entry.is_object()) << entry.dump();
      const std::string key = std::to_string(ids[p]);
      ASSERT_TRUE(entry.contains(key)) << entry.dump();  // the prompt token itself
      const int32_t rank = entry[key]["rank"].get<int32_t>();
      EXPECT_GE(rank, 1);
      // The prompt token plus k alternatives, one fewer when it is among them.
      EXPECT_EQ(entry.size(), static_cast<size_t>(rank <= k ? k : k + 1)) << entry.dump();
      double best = -1e30;
      for (const auto& [id, lp] : entry.items()) {
        EXPECT_LE(lp["logprob"].get<double>(), 0.0);
        EXPECT_TRUE(lp["decoded_token"].is_string());
        if (lp["rank"] == 1) best = lp["logprob"].get<double>();
      }
      if (k > 0) {
        EXPECT_LE(entry[key]["logprob"].get<double>(), best + 1e-6);
      }
    }
  }

  std::vector<int32_t> PromptIds() {
    json tok = Post("/tokenize", {{"prompt", kPrompt}});
    return tok["tokens"].get<std::vector<int32_t>>();
  }
};

TEST_F(ServePromptLogprobsTest, CompletionsChatEchoAndStreams) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  const std::vector<int32_t> ids = PromptIds();
  ASSERT_GE(ids.size(), 8u);

  json first =
      Post("/v1/completions",
           {{"prompt", kPrompt}, {"max_tokens", 2}, {"temperature", 0}, {"prompt_logprobs", 2}});
  ASSERT_TRUE(first.is_object());
  EXPECT_EQ(first["usage"]["prompt_tokens"], ids.size());
  ASSERT_NO_FATAL_FAILURE(ExpectPromptLogprobs(first["choices"][0]["prompt_logprobs"], ids, 2));
  EXPECT_TRUE(first["choices"][0]["logprobs"].is_null());

  // echo with logprobs: the choice's logprobs start with the prompt's (the first null); the
  // prompt is cached by now, and the values are the same.
  json echo = Post("/v1/completions", {{"prompt", kPrompt},
                                       {"max_tokens", 3},
                                       {"temperature", 0},
                                       {"echo", true},
                                       {"logprobs", 1}});
  ASSERT_TRUE(echo.is_object());
  const json& choice = echo["choices"][0];
  EXPECT_EQ(choice["text"].get<std::string>().rfind(kPrompt, 0), 0u) << choice["text"];
  const json& lp = choice["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), ids.size() + 3);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["text_offset"][0], 0);
  ASSERT_NO_FATAL_FAILURE(ExpectPromptLogprobs(choice["prompt_logprobs"], ids, 1));
  for (size_t p = 1; p < ids.size(); ++p) {
    const double want =
        first["choices"][0]["prompt_logprobs"][p][std::to_string(ids[p])]["logprob"];
    EXPECT_NEAR(lp["token_logprobs"][p].get<double>(), want, 1e-5) << p;
    EXPECT_NEAR(choice["prompt_logprobs"][p][std::to_string(ids[p])]["logprob"].get<double>(), want,
                1e-5)
        << p;
    EXPECT_LE(lp["top_logprobs"][p].size(), 1u);
  }
  for (size_t i = ids.size(); i < ids.size() + 3; ++i) {
    EXPECT_TRUE(lp["token_logprobs"][i].is_number()) << i;  // the generated tokens follow
  }

  // Chat: at the top level of the response.
  json chat = Post("/v1/chat/completions",
                   {{"messages", {{{"role", "user"}, {"content", "Who created the heaven?"}}}},
                    {"max_tokens", 2},
                    {"prompt_logprobs", 1}});
  ASSERT_TRUE(chat.is_object());
  ASSERT_TRUE(chat["prompt_logprobs"].is_array()) << chat.dump();
  EXPECT_EQ(chat["prompt_logprobs"].size(), chat["usage"]["prompt_tokens"]);
  EXPECT_TRUE(chat["prompt_logprobs"][0].is_null());
  EXPECT_TRUE(chat["prompt_logprobs"][1].is_object());

  // A stream (prompt_logprobs 0 only, as vLLM): in the first chunk, and only there.
  testing::StreamResult stream = testing::RunStream(
      port_, "/v1/completions",
      {{"prompt", kPrompt}, {"max_tokens", 3}, {"stream", true}, {"prompt_logprobs", 0}},
      absl::Now() + absl::Seconds(60));
  ASSERT_EQ(stream.status, 200) << stream.error;
  ASSERT_TRUE(stream.done);
  ASSERT_GE(stream.events.size(), 1u);
  ASSERT_NO_FATAL_FAILURE(
      ExpectPromptLogprobs(stream.events[0]["choices"][0]["prompt_logprobs"], ids, 0));
  for (size_t i = 1; i < stream.events.size(); ++i) {
    EXPECT_FALSE(stream.events[i]["choices"][0].contains("prompt_logprobs")) << i;
  }

  // What vLLM refuses.
  json bad = Post("/v1/completions", {{"prompt", kPrompt}, {"prompt_logprobs", 21}}, 400);
  EXPECT_EQ(bad["error"]["param"], "prompt_logprobs");
  bad =
      Post("/v1/completions", {{"prompt", kPrompt}, {"stream", true}, {"prompt_logprobs", 1}}, 400);
  EXPECT_EQ(bad["error"]["param"], "prompt_logprobs");
}

}  // namespace
}  // namespace vllm
