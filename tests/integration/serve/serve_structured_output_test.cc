// Structured outputs against the real server on the bundled model (CPU), whose free text is
// King James English, so the grammar does all the work: regex, choice, EBNF grammar,
// json_object and JSON schemas through structured_outputs, response_format and the old
// guided_* fields, each output checked by an independent matcher (std::regex, nlohmann's JSON
// parser and hand checks of the schema); n > 1 and streaming; a greedy unconstrained request
// answers the same alone and beside constrained ones; bad and hostile specs get a 400 and the
// server keeps serving; /metrics counts the grammar compiles and compile-cache hits. One server
// for every case. Then --reasoning-parser on the bundled model given <think> and </think>
// tokens: chat answers put the text before </think> in `reasoning` (streamed alike), and a
// constraint starts only after the reasoning ends (a prompt that ends it is constrained from
// the first token, one that opens it is not). And constrained requests under data parallelism
// (-dp 2), chunked prefill (prompts longer than the step's token budget) and preemption (a KV
// cache too small for them all): every answer still follows its schema.
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"
#include "tests/support/tokenizer_json.h"

namespace vllm {
namespace {

using nlohmann::json;

class ServeStructuredOutputTest : public testing::ServeTest {
 protected:
  json Post(const std::string& path, const json& body, int want_status = 200) {
    auto r = testing::Http(port_, "POST", path, body.dump());
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return json();
    EXPECT_EQ(r->status, want_status)
        << path << " " << body.dump().substr(0, 300) << " -> " << r->body.substr(0, 600);
    return r->Json();
  }
  // A completion's text (finish_reason must be stop).
  std::string Complete(json body) {
    body["prompt"] = "And God said";
    if (!body.contains("max_tokens")) body["max_tokens"] = 64;
    json r = Post("/v1/completions", body);
    if (!r.contains("choices")) return "";
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << r.dump();
    return r["choices"][0]["text"].get<std::string>();
  }
};

TEST_F(ServeStructuredOutputTest, ConstraintsAreFollowedAndBadSpecsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  {
    SCOPED_TRACE("regex, greedy and sampled");
    const std::string re = "[A-Z][a-z]{2,7} [0-9]{1,3}:[0-9]{1,3}";
    for (double temperature : {0.0, 1.0}) {
      std::string text = Complete(
          {{"structured_outputs", {{"regex", re}}}, {"temperature", temperature}, {"seed", 7}});
      EXPECT_TRUE(std::regex_match(text, std::regex(re))) << text;
    }
  }
  {
    SCOPED_TRACE("choice, n = 3, and the old guided_choice");
    const std::vector<std::string> choices = {"light", "darkness", "the firmament"};
    json r = Post("/v1/completions", {{"prompt", "And God called the"},
                                      {"max_tokens", 16},
                                      {"n", 3},
                                      {"temperature", 1.0},
                                      {"seed", 1},
                                      {"structured_outputs", {{"choice", choices}}}});
    ASSERT_EQ(r["choices"].size(), 3u) << r.dump();
    for (const json& c : r["choices"]) {
      EXPECT_NE(std::find(choices.begin(), choices.end(), c["text"].get<std::string>()),
                choices.end())
          << c.dump();
    }
    std::string text = Complete({{"guided_choice", choices}});
    EXPECT_NE(std::find(choices.begin(), choices.end(), text), choices.end()) << text;
  }
  {
    SCOPED_TRACE("EBNF grammar");
    const std::string grammar = R"(root ::= verse (", " verse)*
verse ::= book " " [1-9] [0-9]? ":" [1-9] [0-9]?
book ::= "Genesis" | "Exodus" | "Psalms")";
    std::string text = Complete({{"structured_outputs", {{"grammar", grammar}}}});
    const std::regex verse("(Genesis|Exodus|Psalms) [1-9][0-9]?:[1-9][0-9]?");
    const std::regex list(
        "(Genesis|Exodus|Psalms) [1-9][0-9]?:[1-9][0-9]?"
        "(, (Genesis|Exodus|Psalms) [1-9][0-9]?:[1-9][0-9]?)*");
    EXPECT_TRUE(std::regex_match(text, list)) << text;
  }
  {
    SCOPED_TRACE("JSON schema: structured_outputs, response_format and guided_json");
    const json schema = {{"type", "object"},
                         {"properties",
                          {{"book", {{"type", "string"}, {"enum", {"Genesis", "Exodus"}}}},
                           {"chapter", {{"type", "integer"}, {"minimum", 1}, {"maximum", 50}}},
                           {"words", {{"type", "string"}, {"maxLength", 12}}},
                           {"holy", {{"type", "boolean"}}}}},
                         {"required", {"book", "chapter", "words", "holy"}},
                         {"additionalProperties", false}};
    auto check = [](const std::string& text) {
      json doc = json::parse(text, nullptr, false);
      ASSERT_FALSE(doc.is_discarded()) << text;
      ASSERT_TRUE(doc.is_object()) << text;
      EXPECT_EQ(doc.size(), 4u) << text;
      EXPECT_TRUE(doc["book"] == "Genesis" || doc["book"] == "Exodus") << text;
      ASSERT_TRUE(doc["chapter"].is_number_integer()) << text;
      EXPECT_GE(doc["chapter"].get<int>(), 1);
      EXPECT_LE(doc["chapter"].get<int>(), 50);
      ASSERT_TRUE(doc["words"].is_string()) << text;
      EXPECT_TRUE(doc["holy"].is_boolean()) << text;
    };
    for (double temperature : {0.0, 1.0}) {
      check(Complete({{"structured_outputs", {{"json", schema}, {"disable_any_whitespace", true}}},
                      {"temperature", temperature},
                      {"seed", 3},
                      {"max_tokens", 200}}));
    }
    check(Complete({{"guided_json", schema.dump()},
                    {"structured_outputs", {{"disable_any_whitespace", true}}},
                    {"max_tokens", 200}}));
    json chat =
        Post("/v1/chat/completions",
             {{"messages", {{{"role", "user"}, {"content", "Name a verse"}}}},
              {"max_tokens", 200},
              {"structured_outputs", {{"disable_any_whitespace", true}}},
              {"response_format",
               {{"type", "json_schema"},
                {"json_schema", {{"name", "verse"}, {"schema", schema}, {"strict", true}}}}}});
    ASSERT_TRUE(chat.contains("choices")) << chat.dump();
    EXPECT_EQ(chat["choices"][0]["finish_reason"], "stop") << chat.dump();
    check(chat["choices"][0]["message"]["content"].get<std::string>());
  }
  {
    SCOPED_TRACE("json_object, streamed");
    testing::StreamResult s = testing::RunStream(
        port_, "/v1/completions",
        {{"prompt", "And God said"},
         {"max_tokens", 120},
         {"stream", true},
         {"structured_outputs", {{"json_object", true}, {"disable_any_whitespace", true}}}},
        absl::Now() + absl::Seconds(60));
    ASSERT_EQ(s.status, 200) << s.error;
    ASSERT_TRUE(s.done);
    std::string text;
    std::string finish;
    for (const json& e : s.events) {
      text += e["choices"][0]["text"].get<std::string>();
      if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
    }
    if (finish == "stop") {
      json doc = json::parse(text, nullptr, false);
      EXPECT_TRUE(doc.is_object()) << text;
    } else {
      EXPECT_EQ(finish, "length");
      EXPECT_EQ(text.front(), '{') << text;
    }
  }
  {
    SCOPED_TRACE("bad and hostile specs: 400 naming the field, the server keeps serving");
    auto refused = [&](const json& body, const std::string& param) {
      json b = body;
      b["prompt"] = "x";
      b["max_tokens"] = 4;
      json r = Post("/v1/completions", b, 400);
      EXPECT_EQ(r["error"]["param"], param) << r.dump();
    };
    refused({{"structured_outputs", {{"regex", "(a"}}}}, "structured_outputs.regex");
    refused({{"structured_outputs", {{"grammar", "root ::= nowhere"}}}},
            "structured_outputs.grammar");
    refused({{"structured_outputs", {{"json", "{not json"}}}}, "structured_outputs.json");
    refused({{"structured_outputs", {{"regex", "a"}, {"choice", {"a"}}}}}, "structured_outputs");
    refused({{"structured_outputs", {{"json", {{"type", "string"}}}, {"whitespace_pattern", " "}}}},
            "structured_outputs.whitespace_pattern");
    refused({{"structured_outputs", {{"json", {{"not", {{"type", "string"}}}}}}}},
            "structured_outputs.json");
    refused({{"response_format", {{"type", "xml"}}}}, "response_format.type");
    refused({{"structured_outputs", {{"json", {{"$ref", "#"}}}}}}, "structured_outputs.json");
    refused({{"guided_decoding_backend", "outlines"}, {"guided_regex", "a"}},
            "guided_decoding_backend");
    refused({{"logit_bias", {{"abc", 10}}}}, "logit_bias");  // a key that is no token id
    std::string deep;
    for (int i = 0; i < 10000; ++i) deep += R"({"type":"array","items":)";
    deep += "true" + std::string(10000, '}');
    refused({{"structured_outputs", {{"json", deep}}}}, "structured_outputs.json");
    // Large but legal: a 100 000-value enum and a 500 KB pattern either compile or are refused,
    // within the request's time, and nothing else waits on them.
    json big_enum = json::array();
    for (int i = 0; i < 100000; ++i) big_enum.push_back(std::to_string(i));
    auto r = testing::Http(port_, "POST", "/v1/completions",
                           json{{"prompt", "x"},
                                {"max_tokens", 4},
                                {"structured_outputs", {{"json", {{"enum", big_enum}}}}}}
                               .dump());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->status == 200 || r->status == 400) << r->body.substr(0, 300);
    r = testing::Http(port_, "POST", "/v1/completions",
                      json{{"prompt", "x"},
                           {"max_tokens", 4},
                           {"structured_outputs", {{"regex", std::string(500000, 'a') + "(a+)+$"}}}}
                          .dump());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->status == 200 || r->status == 400) << r->body.substr(0, 300);
    EXPECT_FALSE(Complete({{"structured_outputs", {{"regex", "[0-9]{4}"}}}}).empty());
  }
  {
    SCOPED_TRACE("greedy free text is unchanged beside constrained requests");
    json body = {{"prompt", "In the beginning"}, {"max_tokens", 24}, {"temperature", 0}};
    json alone = Post("/v1/completions", body);
    std::vector<std::thread> others;
    for (int i = 0; i < 4; ++i) {
      others.emplace_back([&, i] {
        Post("/v1/completions", {{"prompt", "And God said"},
                                 {"max_tokens", 40},
                                 {"temperature", 1.0},
                                 {"seed", i},
                                 {"structured_outputs", {{"regex", "[a-z ]{10,30}"}}}});
      });
    }
    json beside = Post("/v1/completions", body);
    for (std::thread& t : others) t.join();
    EXPECT_EQ(alone["choices"][0]["text"], beside["choices"][0]["text"]);
  }
  {
    SCOPED_TRACE("/metrics: grammar compiles and compile-cache hits");
    // Every earlier request has answered, and an engine's counters reach the server before the
    // outputs of the step that follows them, so the deltas below are exact.
    const testing::MetricSamples before = testing::ScrapeMetrics(port_);
    const std::string labels = R"({model_name="kjv-llama-tiny",engine="0")";
    for (const char* name :
         {"vllm:structured_output_cache_queries_total", "vllm:structured_output_cache_hits_total",
          "vllm:structured_output_compile_seconds_count"}) {
      EXPECT_TRUE(before.contains(name + labels + "}")) << name;
    }
    for (const char* reason : {"failed", "timeout"}) {
      EXPECT_TRUE(before.contains("vllm:structured_output_compile_errors_total" + labels +
                                  ",reason=\"" + reason + "\"}"))
          << reason;
    }
    // The earlier cases compiled grammars and asked for the same one more than once.
    EXPECT_GT(testing::SumOf(before, "vllm:structured_output_compile_seconds_count"), 0);
    EXPECT_GT(testing::SumOf(before, "vllm:structured_output_cache_hits_total"), 0);
    // A regex no earlier case used: one miss and one compile, then one hit.
    const std::string re = "[0-9]{2}-metrics-[a-z]{2}";
    for (int i = 0; i < 2; ++i) {
      EXPECT_TRUE(
          std::regex_match(Complete({{"structured_outputs", {{"regex", re}}}}), std::regex(re)));
    }
    const testing::MetricSamples after = testing::ScrapeMetrics(port_);
    auto delta = [&](const std::string& name) {
      return testing::SumOf(after, name) - testing::SumOf(before, name);
    };
    EXPECT_EQ(delta("vllm:structured_output_cache_queries_total"), 2);
    EXPECT_EQ(delta("vllm:structured_output_cache_hits_total"), 1);
    EXPECT_EQ(delta("vllm:structured_output_compile_seconds_count"), 1);
    EXPECT_GT(delta("vllm:structured_output_compile_seconds_sum"), 0);
    EXPECT_EQ(after.at("vllm:structured_output_compile_seconds_bucket" + labels + R"(,le="+Inf"})"),
              after.at("vllm:structured_output_compile_seconds_count" + labels + "}"));
  }
}

TEST_F(ServeStructuredOutputTest, DataParallelChunkedPrefillAndPreemption) {
  // 40 blocks of 16 tokens per engine for 12 requests of ~110 prompt + up to ~60 output
  // tokens each: the scheduler must preempt; a 32-token budget chunks every prompt. N-gram
  // drafts (speculative decoding) are cut to what each grammar accepts and verified on both
  // engines.
  ASSERT_NO_FATAL_FAILURE(
      StartServer({"-dp", "2", "--num-gpu-blocks-override", "40", "--max-num-batched-tokens", "32",
                   "--max-num-seqs", "8", "--enable-chunked-prefill", "--max-model-len", "512",
                   "--speculative-config",
                   R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1,
           "prompt_lookup_max": 3})"}));
  const std::vector<std::string> books = {"Genesis", "Exodus", "Ruth", "Job"};
  const json schema = {{"type", "object"},
                       {"properties",
                        {{"book", {{"enum", books}}},
                         {"chapter", {{"type", "integer"}, {"minimum", 1}, {"maximum", 50}}},
                         {"words", {{"type", "string"}, {"maxLength", 24}}}}},
                       {"required", {"book", "chapter", "words"}},
                       {"additionalProperties", false}};
  std::string prompt;
  for (int i = 0; i < 12; ++i) prompt += "And the LORD spake unto Moses, saying, ";
  constexpr int kRequests = 12;
  std::vector<json> answers(kRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([&, i] {
      // Prompts differ from their first token, so no two share cached blocks.
      json body{{"prompt", std::to_string(i) + " " + prompt},
                {"max_tokens", 96},
                {"temperature", 1},
                {"seed", i},
                {"structured_outputs", {{"json", schema}, {"disable_any_whitespace", true}}}};
      auto r = testing::Http(port_, "POST", "/v1/completions", body.dump(), "application/json",
                             absl::Seconds(120));
      if (r.ok() && r->status == 200) answers[i] = r->Json();
    });
  }
  for (std::thread& t : clients) t.join();
  int stopped = 0;
  for (int i = 0; i < kRequests; ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(answers[i].contains("choices")) << answers[i].dump();
    const json& choice = answers[i]["choices"][0];
    const std::string text = choice["text"].get<std::string>();
    if (choice["finish_reason"] != "stop") continue;  // cut by max_tokens: a prefix
    ++stopped;
    const json v = json::parse(text, nullptr, false);
    ASSERT_TRUE(v.is_object()) << text;
    EXPECT_EQ(v.size(), 3u) << text;
    EXPECT_NE(std::find(books.begin(), books.end(), v.value("book", "")), books.end()) << text;
    ASSERT_TRUE(v["chapter"].is_number_integer()) << text;
    EXPECT_GE(v["chapter"].get<int>(), 1);
    EXPECT_LE(v["chapter"].get<int>(), 50);
    ASSERT_TRUE(v["words"].is_string()) << text;
  }
  EXPECT_GE(stopped, kRequests / 2);
  const testing::MetricSamples m = testing::ScrapeMetrics(port_);
  EXPECT_GT(testing::SumOf(m, "vllm:num_preemptions_total"), 0) << "no preemption happened";
  EXPECT_GT(testing::SumOf(m, "vllm:spec_decode_num_drafts_total"), 0) << "no draft verified";
  // Both engines served constrained requests.
  int engines_used = 0;
  for (const char* engine : {"0", "1"}) {
    double n = 0;
    for (const auto& [name, value] : m) {
      if (name.starts_with("vllm:request_success_total") &&
          name.find(std::string("engine=\"") + engine + "\"") != std::string::npos) {
        n += value;
      }
    }
    engines_used += n > 0;
  }
  EXPECT_EQ(engines_used, 2);
}

// The bundled model with two of its rare subword ids (4089 "abas", 4092 "ishon") given to
// <think> and </think> as added tokens, in a temporary directory (weights and configs linked).
class ThinkModel {
 public:
  ThinkModel() {
    char pattern[] = "/tmp/vllm-think-model-XXXXXX";
    if (mkdtemp(pattern) == nullptr) return;
    dir_ = pattern;
    const std::filesystem::path bundled =
        std::filesystem::path(VLLM_SOURCE_DIR) / "models" / "kjv-llama-tiny";
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors"}) {
      std::filesystem::create_symlink(bundled / f, dir_ / f);
    }
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
      std::ifstream in(bundled / f);
      json j = json::parse(in);
      for (const auto& [id, text] : {std::pair{4089, "<think>"}, std::pair{4092, "</think>"}}) {
        json token = testing::AddedTokenJson(id, text);
        if (std::string(f) == "tokenizer.json") {
          j["added_tokens"].push_back(std::move(token));
        } else {
          token.erase("id");
          j["added_tokens_decoder"][std::to_string(id)] = std::move(token);
        }
      }
      std::ofstream(dir_ / f) << j.dump();
    }
  }
  ~ThinkModel() {
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

TEST_F(ServeStructuredOutputTest, ReasoningComesFirst) {
  ThinkModel model;
  ASSERT_FALSE(model.dir().empty());
  ASSERT_NO_FATAL_FAILURE(StartServer({"--model", model.dir().string(), "--served-model-name",
                                       "kjv-think", "--reasoning-parser", "deepseek_r1"}));
  {
    SCOPED_TRACE("chat: the text before </think> is reasoning, streamed alike");
    json body{{"messages", {{{"role", "user"}, {"content", "Who was Moses?"}}}},
              {"max_tokens", 24},
              {"temperature", 0}};
    json r = Post("/v1/chat/completions", body);
    ASSERT_TRUE(r.contains("choices")) << r.dump();
    const json& message = r["choices"][0]["message"];
    // The bundled model never writes </think> here: deepseek_r1 reads it all as reasoning.
    ASSERT_TRUE(message["reasoning"].is_string()) << message.dump();
    EXPECT_FALSE(message["reasoning"].get<std::string>().empty());
    EXPECT_EQ(message["reasoning_content"], message["reasoning"]);
    EXPECT_TRUE(message["content"].is_null()) << message.dump();
    body["stream"] = true;
    testing::StreamResult stream =
        testing::RunStream(port_, "/v1/chat/completions", body, absl::Now() + absl::Seconds(30));
    ASSERT_TRUE(stream.done) << stream.error;
    std::string reasoning, content;
    for (const json& e : stream.events) {
      if (!e.contains("choices") || e["choices"].empty()) continue;
      const json& delta = e["choices"][0]["delta"];
      if (delta.contains("reasoning")) reasoning += delta["reasoning"].get<std::string>();
      if (delta.contains("content")) content += delta["content"].get<std::string>();
    }
    EXPECT_EQ(reasoning, message["reasoning"].get<std::string>());
    EXPECT_EQ(content, "");
  }
  {
    SCOPED_TRACE("a constraint applies after the reasoning");
    const json schema = {{"type", "object"},
                         {"properties", {{"answer", {{"enum", {"yea", "nay"}}}}}},
                         {"required", {"answer"}}};
    json body{{"max_tokens", 16},
              {"temperature", 0},
              {"structured_outputs", {{"json", schema}, {"disable_any_whitespace", true}}}};
    body["prompt"] = "Is the LORD good?<think>I know it.</think>";
    json r = Post("/v1/completions", body);
    ASSERT_TRUE(r.contains("choices")) << r.dump();
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
    const json answer = json::parse(r["choices"][0]["text"].get<std::string>(), nullptr, false);
    ASSERT_TRUE(answer.is_object()) << r.dump();
    EXPECT_TRUE(answer["answer"] == "yea" || answer["answer"] == "nay") << answer.dump();
    // Reasoning still open: free King James English, no JSON.
    body["prompt"] = "Is the LORD good?<think>";
    r = Post("/v1/completions", body);
    ASSERT_TRUE(r.contains("choices")) << r.dump();
    const std::string text = r["choices"][0]["text"].get<std::string>();
    EXPECT_FALSE(text.starts_with("{")) << text;
    EXPECT_EQ(r["choices"][0]["finish_reason"], "length") << text;
  }
}

}  // namespace
}  // namespace vllm
