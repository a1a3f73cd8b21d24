// The server-wide request defaults: --generation-config / --override-generation-config as
// vLLM 0.33's get_diff_sampling_param reads them, and --chat-template-content-format (its
// "auto" detection and the "openai" content lists).
#include "frontend/openai/request_defaults.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {
namespace {

using nlohmann::ordered_json;

class RequestDefaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("request_defaults_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  absl::StatusOr<RequestDefaults> Resolve(const std::string& generation_config,
                                          const std::string& override_json = "") {
    ServingFlags flags;
    flags.generation_config = generation_config;
    flags.override_generation_config = override_json;
    return ResolveRequestDefaults(dir_, flags, "");
  }
  std::filesystem::path dir_;
};

TEST_F(RequestDefaultsTest, AutoReadsTheModelsGenerationConfig) {
  // Meta-Llama-3.1-8B-Instruct's, plus fields vLLM does not read.
  Write("generation_config.json",
        R"({"bos_token_id": 128000, "do_sample": true, "eos_token_id": [128001, 128009],
            "max_new_tokens": 7, "top_p": 0.9, "temperature": 0.6,
            "transformers_version": "4.42.3"})");
  auto d = Resolve("auto");
  ASSERT_TRUE(d.ok()) << d.status();
  // vLLM's order (available_params), max_new_tokens renamed max_tokens.
  EXPECT_EQ(d->sampling.dump(), R"({"temperature":0.6,"top_p":0.9,"max_tokens":7})");
  EXPECT_FALSE(d->override_max_tokens.has_value());  // auto: only the override's caps
  EXPECT_EQ(DescribeSamplingDefaults(d->sampling),
            "{'temperature': 0.6, 'top_p': 0.9, 'max_tokens': 7}");
}

TEST_F(RequestDefaultsTest, VllmIgnoresTheFileAndOverridesMerge) {
  Write("generation_config.json", R"({"temperature": 0.6, "top_k": 20})");
  auto none = Resolve("vllm");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->sampling.empty());
  auto over = Resolve("vllm", R"({"top_k": 5, "skip_special_tokens": false})");
  ASSERT_TRUE(over.ok()) << over.status();
  EXPECT_EQ(DescribeSamplingDefaults(over->sampling), "{'top_k': 5, 'skip_special_tokens': False}");
  auto merged = Resolve("auto", R"({"temperature": 0.1, "max_new_tokens": 4})");
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->sampling.dump(), R"({"temperature":0.1,"top_k":20,"max_tokens":4})");
  EXPECT_EQ(merged->override_max_tokens, 4);
}

TEST_F(RequestDefaultsTest, AFolderItsMaxNewTokensCapsRequests) {
  Write("generation_config.json", R"({"max_new_tokens": 9, "repetition_penalty": 1.1})");
  auto d = Resolve(dir_.string());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->sampling.dump(), R"({"repetition_penalty":1.1,"max_tokens":9})");
  EXPECT_EQ(d->override_max_tokens, 9);
  EXPECT_FALSE(Resolve((dir_ / "missing").string()).ok());
}

TEST_F(RequestDefaultsTest, WithoutGenerationConfigTheModelConfigsFields) {
  Write("config.json", R"({"temperature": 0.7, "text_config": {"top_k": 3, "temperature": 2}})");
  auto d = Resolve("auto");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->sampling.dump(), R"({"temperature":0.7,"top_k":3})");
  std::filesystem::remove(dir_ / "config.json");
  auto empty = Resolve("auto");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->sampling.empty());
}

TEST_F(RequestDefaultsTest, BadValuesAreRefusedNamingWhere) {
  Write("generation_config.json", R"({"temperature": "hot"})");
  auto bad = Resolve("auto");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "generation_config.json: temperature"))
      << bad.status();
  Write("generation_config.json", R"({"max_new_tokens": 0})");
  EXPECT_FALSE(Resolve("auto").ok());
  Write("generation_config.json", "[1]");
  EXPECT_FALSE(Resolve("auto").ok());
  for (const char* o : {"{oops", "[]", R"({"top_k": 1.5})"}) {
    ServingFlags flags;
    flags.override_generation_config = o;
    const absl::Status s = CheckServingFlags(flags);
    EXPECT_TRUE(absl::StrContains(s.message(), "--override-generation-config")) << o << " " << s;
  }
  ServingFlags flags;
  flags.chat_template_content_format = "markdown";
  EXPECT_TRUE(
      absl::StrContains(CheckServingFlags(flags).message(), "--chat-template-content-format"));
}

TEST(RequestDefaults, SamplingDefaultsFillWhatTheBodyLeavesOut) {
  RequestDefaults d;
  d.sampling = ordered_json::parse(R"({"temperature": 0.5, "top_p": 0.8, "max_tokens": 3})");
  ordered_json body = ordered_json::parse(R"({"prompt": "x", "top_p": 1.0, "temperature": null})");
  ApplySamplingDefaults(d, &body);
  EXPECT_EQ(body["temperature"], 0.5);        // null is unset (vLLM's None)
  EXPECT_EQ(body["top_p"], 1.0);              // the request's own value wins
  EXPECT_FALSE(body.contains("max_tokens"));  // ApplyMaxTokensDefault's
}

TEST(RequestDefaults, ServerFlagsFillTheBody) {
  RequestDefaults d;
  d.return_tokens_as_token_ids = true;
  d.force_include_usage = true;
  d.chat_template_kwargs = ordered_json::parse(R"({"enable_thinking": false, "x": 1})");
  ordered_json chat = ordered_json::parse(
      R"({"messages": [], "stream": true, "stream_options": {"include_usage": false},
          "chat_template_kwargs": {"x": 2, "y": null, "enable_thinking": "auto"}})");
  ApplySamplingDefaults(d, &chat);
  EXPECT_EQ(chat["return_tokens_as_token_ids"], true);
  EXPECT_EQ(chat["stream_options"].dump(),
            R"({"include_usage":true,"continuous_usage_stats":true})");
  // vLLM's merge_kwargs: the request's keys win unless null or "auto".
  EXPECT_EQ(chat["chat_template_kwargs"].dump(), R"({"enable_thinking":false,"x":2})");
  ordered_json plain =
      ordered_json::parse(R"({"prompt": "x", "return_tokens_as_token_ids": false})");
  ApplySamplingDefaults(d, &plain);
  EXPECT_EQ(plain["return_tokens_as_token_ids"], false);  // the request's own
  EXPECT_FALSE(plain.contains("stream_options"));         // not a stream
  EXPECT_FALSE(plain.contains("chat_template_kwargs"));   // not a chat
}

TEST(RequestDefaults, DetectsTemplatesThatLoopOverContent) {
  const std::string llama =
      "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
      "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}";
  EXPECT_EQ(DetectContentFormat(llama), ContentFormat::kString);
  EXPECT_EQ(DetectContentFormat(""), ContentFormat::kString);
  EXPECT_EQ(DetectContentFormat("{% for oops"), ContentFormat::kString);
  for (const char* t : {
           "{% for message in messages %}{% for part in message['content'] %}{{ part['text'] }}"
           "{% endfor %}{% endfor %}",
           "{% set msgs = messages[1:] %}{% for m in msgs %}{% for c in m.content | list %}{{ c }}"
           "{% endfor %}{% endfor %}",
           "{% set ns = namespace(rest=messages) %}{% for m in ns.rest %}{% for p in "
           "m['content'] %}{{ p }}{% endfor %}{% endfor %}",
           "{% for c in content %}{{ c }}{% endfor %}",
       }) {
    EXPECT_EQ(DetectContentFormat(t), ContentFormat::kOpenAi) << t;
  }
  // A loop over something else's content is not a message's.
  EXPECT_EQ(DetectContentFormat("{% for t in tools %}{% for p in t['content'] %}{% endfor %}"
                                "{% endfor %}"),
            ContentFormat::kString);
}

TEST(RequestDefaults, OpenAiContentIsAListOfTextParts) {
  const ordered_json body = ordered_json::parse(R"({"messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]},
      {"role": "assistant", "content": null},
      {"role": "tool", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}
  ]})");
  const ordered_json strings = ordered_json::parse(R"([
      {"role": "system", "content": "Be brief."}, {"role": "user", "content": "A\nB"},
      {"role": "assistant", "content": ""}, {"role": "tool", "content": "x\ny"}])");
  RequestDefaults d;
  ordered_json messages = strings;
  ApplyContentFormat(d, body, &messages);
  EXPECT_EQ(messages, strings);  // "string": as TemplateMessages made them
  d.content_format = ContentFormat::kOpenAi;
  ApplyContentFormat(d, body, &messages);
  EXPECT_EQ(messages[0]["content"].dump(), R"([{"type":"text","text":"Be brief."}])");
  EXPECT_EQ(messages[1]["content"].dump(),
            R"([{"type":"text","text":"A"},{"type":"text","text":"B"}])");
  EXPECT_EQ(messages[2]["content"].dump(), "[]");
  EXPECT_EQ(messages[3]["content"], "x\ny");  // a tool message's text stays joined (vLLM)
}

}  // namespace
}  // namespace vllm::frontend
