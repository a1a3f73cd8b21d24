// Every field of vLLM 0.33's CompletionRequest and ChatCompletionRequest (the list, with each
// field's line in vLLM's source, is data/vllm_request_fields.txt) against the real server on
// the bundled model: each field is honoured, with a check that it changed the answer as in
// vLLM, or refused with a 400 naming it. A field of the list without a row here fails the test,
// so a field a newer vLLM adds shows up as a failing row. One server for every row.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"

namespace vllm {
namespace {

using nlohmann::json;

constexpr int32_t kBos = 0;  // the bundled tokenizer's <|begin_of_text|> (special)
constexpr const char* kPrompt = "And God said, Let there be light: and there was light.";

class ServeRequestFieldsTest : public testing::ServeTest {
 public:
  int port() const { return port_; }
  // A greedy request of `extra` on top of a small default body.
  json Gen(bool chat, const json& extra, int want = 200) {
    json body = chat ? json{{"messages", {{{"role", "user"}, {"content", kPrompt}}}}}
                     : json{{"prompt", kPrompt}};
    body["max_tokens"] = 6;
    body["temperature"] = 0;
    for (const auto& [k, v] : extra.items()) {
      if (v.is_null()) {
        body.erase(k);
      } else {
        body[k] = v;
      }
    }
    auto r = testing::Http(port_, "POST", chat ? "/v1/chat/completions" : "/v1/completions",
                           body.dump());
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return json();
    EXPECT_EQ(r->status, want) << body.dump().substr(0, 400) << " -> " << r->body.substr(0, 400);
    return r->Json();
  }
  // A 400 whose error names `field` (its param, or its message).
  void Refused(bool chat, const json& extra, const std::string& field) {
    json r = Gen(chat, extra, 400);
    const json& e = r["error"];
    EXPECT_TRUE(e["param"] == field || absl::StrContains(e["message"].dump(), field)) << r.dump();
    EXPECT_EQ(e["code"], 400) << r.dump();
  }
  static std::string Text(bool chat, const json& r) {
    const json& c = r["choices"][0];
    if (!chat) return c["text"].get<std::string>();
    return c["message"]["content"].is_string() ? c["message"]["content"].get<std::string>() : "";
  }
  // The output token ids of the first choice (via return_token_ids).
  std::vector<int32_t> Ids(bool chat, json extra) {
    extra["return_token_ids"] = true;
    json r = Gen(chat, extra);
    if (!r.contains("choices")) return {};
    return r["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  }
  int64_t PromptTokens(bool chat, const json& extra) {
    return Gen(chat, extra)["usage"]["prompt_tokens"].get<int64_t>();
  }
  testing::StreamResult Stream(bool chat, const json& extra) {
    json body = chat ? json{{"messages", {{{"role", "user"}, {"content", kPrompt}}}}}
                     : json{{"prompt", kPrompt}};
    body["max_tokens"] = 4;
    body["temperature"] = 0;
    body["stream"] = true;
    for (const auto& [k, v] : extra.items()) body[k] = v;
    return testing::RunStream(port_, chat ? "/v1/chat/completions" : "/v1/completions", body,
                              absl::Now() + absl::Seconds(30));
  }
};

using Row = std::function<void(ServeRequestFieldsTest&, bool chat)>;

// The test's view of the field list: (class, field) in file order.
std::vector<std::pair<std::string, std::string>> VllmFields() {
  std::ifstream in(std::string(VLLM_SOURCE_DIR) +
                   "/tests/integration/serve/data/vllm_request_fields.txt");
  std::vector<std::pair<std::string, std::string>> fields;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string cls, field;
    words >> cls >> field;
    fields.emplace_back(cls, field);
  }
  return fields;
}

std::map<std::string, Row> Rows();

TEST_F(ServeRequestFieldsTest, EveryVllmFieldIsHonouredOrRefused) {
  const auto fields = VllmFields();
  ASSERT_GT(fields.size(), 100u) << "the field list did not load";
  ASSERT_NO_FATAL_FAILURE(StartServer());
  const std::map<std::string, Row> rows = Rows();
  for (const auto& [cls, field] : fields) {
    SCOPED_TRACE(cls + "." + field);
    auto it = rows.find(field);
    if (it == rows.end()) {
      ADD_FAILURE() << "vLLM's " << cls << "." << field << " has no row: honour it or refuse it";
      continue;
    }
    it->second(*this, cls == "ChatCompletionRequest");
  }
}

// Each choice's token logprobs (completions: logprobs.token_logprobs; chat: logprobs.content).
std::vector<double> TokenLogprobs(bool chat, const json& choice) {
  std::vector<double> out;
  if (!chat) return choice["logprobs"]["token_logprobs"].get<std::vector<double>>();
  for (const json& c : choice["logprobs"]["content"]) out.push_back(c["logprob"].get<double>());
  return out;
}

double Sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

// vLLM's use_beam_search: n beams, each step's candidates from 2 x n logprobs, the best n
// sorted by score; ignore_eos, so every beam's cumulative logprob is its tokens' sum.
void BeamSearchRow(ServeRequestFieldsTest& t, bool chat) {
  const json logprobs = chat ? json(true) : json(1);
  const json greedy =
      t.Gen(chat, {{"max_tokens", 6}, {"ignore_eos", true}, {"logprobs", logprobs}});
  const double greedy_sum = Sum(TokenLogprobs(chat, greedy["choices"][0]));
  for (int n : {2, 3}) {
    SCOPED_TRACE(n);
    json r = t.Gen(chat, {{"use_beam_search", true},
                          {"n", n},
                          {"max_tokens", 6},
                          {"ignore_eos", true},
                          {"logprobs", logprobs},
                          {"return_token_ids", true}});
    ASSERT_EQ(r["choices"].size(), static_cast<size_t>(n)) << r.dump();
    std::set<std::vector<int32_t>> distinct;
    double previous = 1.0;
    for (const json& c : r["choices"]) {
      distinct.insert(c["token_ids"].get<std::vector<int32_t>>());
      EXPECT_EQ(c["token_ids"].size(), 6u);
      EXPECT_EQ(c["finish_reason"], "length");
      const double sum = Sum(TokenLogprobs(chat, c));
      EXPECT_LE(sum, previous + 1e-4) << "not sorted by cumulative logprob: " << r.dump();
      previous = sum;
    }
    EXPECT_EQ(distinct.size(), static_cast<size_t>(n)) << r.dump();
    EXPECT_GE(Sum(TokenLogprobs(chat, r["choices"][0])), greedy_sum - 1e-4) << r.dump();
    EXPECT_EQ(r["usage"]["completion_tokens"], 6 * n);
  }
  t.Refused(chat, {{"use_beam_search", true}, {"allowed_token_ids", {5, 6}}}, "allowed_token_ids");
  if (!chat) {  // vLLM's completions refuse these; its chat streams the beams whole
    t.Refused(chat, {{"use_beam_search", true}, {"stream", true}}, "beam search");
    t.Refused(chat, {{"use_beam_search", true}, {"echo", true}, {"logprobs", 1}}, "echo");
    return;
  }
  const json body{{"use_beam_search", true}, {"n", 2}, {"max_tokens", 4}, {"ignore_eos", true}};
  json whole = t.Gen(chat, body);
  testing::StreamResult s = t.Stream(chat, body);
  ASSERT_TRUE(s.done) << s.error;
  std::string text[2];
  for (const json& e : s.events) {
    for (const json& c : e["choices"]) {
      if (c["delta"]["content"].is_string()) {
        text[c["index"].get<int>()] += c["delta"]["content"].get<std::string>();
      }
    }
  }
  for (int i = 0; i < 2; ++i) EXPECT_EQ(text[i], whole["choices"][i]["message"]["content"]);
}

// length_penalty: beams ended by EOS (in their logprobs with include_stop_str_in_output) are
// shorter; the choices are sorted by cumulative logprob / length ^ length_penalty, so a
// penalty favouring length reorders them.
void LengthPenaltyRow(ServeRequestFieldsTest& t, bool chat) {
  std::vector<std::vector<int32_t>> order[2];
  const double penalties[2] = {0.0, 3.0};
  for (int p = 0; p < 2; ++p) {
    json r = t.Gen(chat, {{"use_beam_search", true},
                          {"n", 4},
                          {"max_tokens", 8},
                          {"length_penalty", penalties[p]},
                          {"include_stop_str_in_output", true},
                          {"logprobs", chat ? json(true) : json(1)},
                          {"return_token_ids", true}});
    ASSERT_EQ(r["choices"].size(), 4u) << r.dump();
    double previous = 1e9;
    for (const json& c : r["choices"]) {
      order[p].push_back(c["token_ids"].get<std::vector<int32_t>>());
      const double len = static_cast<double>(std::max<size_t>(c["token_ids"].size(), 1));
      const double score = Sum(TokenLogprobs(chat, c)) / std::pow(len, penalties[p]);
      EXPECT_LE(score, previous + 1e-4) << "not sorted by score: " << r.dump();
      previous = score;
    }
  }
  // The completion's prompt ends a verse, so EOS ends some beams early; the chat's beams all
  // run to max_tokens (equal lengths: the same order whatever the penalty).
  if (!chat) {
    EXPECT_NE(order[0], order[1]) << "length_penalty changed nothing";
  }
  t.Refused(chat, {{"use_beam_search", true}, {"length_penalty", "long"}}, "length_penalty");
}

// Rows for the sampling fields.
void AddSamplingRows(std::map<std::string, Row>* rows) {
  auto& r = *rows;
  r["frequency_penalty"] = [](ServeRequestFieldsTest& t, bool chat) {
    json base{{"max_tokens", 24}, {"ignore_eos", true}};
    json pen = base;
    pen["frequency_penalty"] = 2.0;
    EXPECT_NE(t.Ids(chat, base), t.Ids(chat, pen));
    t.Refused(chat, {{"frequency_penalty", 3.0}}, "frequency_penalty");
  };
  r["presence_penalty"] = [](ServeRequestFieldsTest& t, bool chat) {
    json base{{"max_tokens", 24}, {"ignore_eos", true}};
    json pen = base;
    pen["presence_penalty"] = 2.0;
    EXPECT_NE(t.Ids(chat, base), t.Ids(chat, pen));
  };
  r["repetition_penalty"] = [](ServeRequestFieldsTest& t, bool chat) {
    json base{{"max_tokens", 24}, {"ignore_eos", true}};
    json pen = base;
    pen["repetition_penalty"] = 3.0;
    EXPECT_NE(t.Ids(chat, base), t.Ids(chat, pen));
  };
  r["logit_bias"] = [](ServeRequestFieldsTest& t, bool chat) {
    // +100 (clamped from 500) on one id: greedy picks it every time; -100 on the greedy
    // answer's first token: it never comes first.
    const std::vector<int32_t> greedy = t.Ids(chat, {});
    ASSERT_FALSE(greedy.empty());
    for (int32_t id : t.Ids(chat, {{"logit_bias", {{"500", 500}}}, {"ignore_eos", true}})) {
      EXPECT_EQ(id, 500);
    }
    const auto banned = t.Ids(chat, {{"logit_bias", {{std::to_string(greedy[0]), -100}}}});
    ASSERT_FALSE(banned.empty());
    EXPECT_NE(banned[0], greedy[0]);
    t.Refused(chat, {{"logit_bias", {{"abc", 1}}}}, "logit_bias");
    t.Refused(chat, {{"logit_bias", {{"999999", 1}}}}, "logit_bias");
  };
  r["allowed_token_ids"] = [](ServeRequestFieldsTest& t, bool chat) {
    const std::set<int32_t> allowed = {100, 200, 300};
    for (int32_t id : t.Ids(chat, {{"allowed_token_ids", allowed},
                                   {"temperature", 1.0},
                                   {"seed", 3},
                                   {"ignore_eos", true}})) {
      EXPECT_TRUE(allowed.count(id)) << id;
    }
    t.Refused(chat, {{"allowed_token_ids", json::array()}}, "allowed_token_ids");
    t.Refused(chat, {{"allowed_token_ids", {5000}}}, "allowed_token_ids");
  };
  r["bad_words"] = [](ServeRequestFieldsTest& t, bool chat) {
    // The greedy answer's first token that is a word: banned, the answer differs by then.
    const std::vector<int32_t> greedy = t.Ids(chat, {{"max_tokens", 12}});
    for (size_t k = 0; k < greedy.size(); ++k) {
      auto d = testing::Http(t.port(), "POST", "/detokenize", json{{"tokens", {greedy[k]}}}.dump());
      ASSERT_TRUE(d.ok());
      const std::string word = d->Json()["prompt"].get<std::string>();
      if (word.find_first_not_of(" \n\t") == std::string::npos) continue;
      const auto ids = t.Ids(chat, {{"max_tokens", 12}, {"bad_words", {word}}});
      ASSERT_GT(ids.size(), k);
      EXPECT_NE(std::vector<int32_t>(ids.begin(), ids.begin() + k + 1),
                std::vector<int32_t>(greedy.begin(), greedy.begin() + k + 1))
          << word;
      break;
    }
    t.Refused(chat, {{"bad_words", {""}}}, "bad_words");
  };
  r["seed"] = [](ServeRequestFieldsTest& t, bool chat) {
    json s{{"temperature", 1.0}, {"seed", 42}, {"max_tokens", 12}};
    EXPECT_EQ(t.Ids(chat, s), t.Ids(chat, s));
  };
  r["temperature"] = [](ServeRequestFieldsTest& t, bool chat) {
    EXPECT_EQ(t.Ids(chat, {{"temperature", 0}}), t.Ids(chat, {{"temperature", 0}}));
    t.Refused(chat, {{"temperature", -1}}, "temperature");
  };
  auto equals_greedy = [](const char* field, json value) {
    return [field, value](ServeRequestFieldsTest& t, bool chat) {
      json greedy{{"max_tokens", 12}};
      json narrow{{"max_tokens", 12}, {"temperature", 1.0}, {"seed", 9}, {field, value}};
      EXPECT_EQ(t.Ids(chat, greedy), t.Ids(chat, narrow));
    };
  };
  r["top_p"] = equals_greedy("top_p", 1e-6);
  r["top_k"] = equals_greedy("top_k", 1);
  r["min_p"] = equals_greedy("min_p", 1.0);
  r["stop_token_ids"] = [](ServeRequestFieldsTest& t, bool chat) {
    const std::vector<int32_t> greedy = t.Ids(chat, {});
    json r = t.Gen(chat, {{"stop_token_ids", {greedy[1]}}});
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << r.dump();
    EXPECT_EQ(r["choices"][0]["stop_reason"], greedy[1]) << r.dump();
  };
  r["min_tokens"] = [](ServeRequestFieldsTest& t, bool chat) {
    const std::vector<int32_t> greedy = t.Ids(chat, {});
    json r = t.Gen(chat, {{"stop_token_ids", {greedy[1]}}, {"min_tokens", 5}});
    EXPECT_GE(r["usage"]["completion_tokens"].get<int>(), 5) << r.dump();
  };
  r["ignore_eos"] = [](ServeRequestFieldsTest& t, bool chat) {
    // With a +100 bias on EOS the answer ends at once, unless EOS is ignored.
    json eos{{"logit_bias", {{"1", 100}}}, {"max_tokens", 5}};
    EXPECT_EQ(t.Gen(chat, eos)["usage"]["completion_tokens"], 1);
    eos["ignore_eos"] = true;
    EXPECT_EQ(t.Gen(chat, eos)["usage"]["completion_tokens"], 5);
  };
  r["skip_special_tokens"] = [](ServeRequestFieldsTest& t, bool chat) {
    json bos{{"logit_bias", {{std::to_string(kBos), 100}}}, {"max_tokens", 2}};
    EXPECT_EQ(t.Text(chat, t.Gen(chat, bos)), "");
    bos["skip_special_tokens"] = false;
    EXPECT_TRUE(absl::StrContains(t.Text(chat, t.Gen(chat, bos)), "<|begin_of_text|>"));
  };
  r["include_stop_str_in_output"] = [](ServeRequestFieldsTest& t, bool chat) {
    const std::string text = t.Text(chat, t.Gen(chat, {{"max_tokens", 8}}));
    ASSERT_GE(text.size(), 4u);
    const std::string stop = text.substr(2, 2);
    EXPECT_EQ(t.Text(chat, t.Gen(chat, {{"max_tokens", 8}, {"stop", stop}})), text.substr(0, 2));
    EXPECT_EQ(
        t.Text(
            chat,
            t.Gen(chat, {{"max_tokens", 8}, {"stop", stop}, {"include_stop_str_in_output", true}})),
        text.substr(0, 4));
  };
  r["stop"] = r["include_stop_str_in_output"];
}

// Rows for the prompt, output-shape and vLLM-specific fields.
void AddRequestRows(std::map<std::string, Row>* rows) {
  auto& r = *rows;
  auto accepted = [](json good, json bad) {  // vLLM ignores it here too; its type is checked
    return [good, bad](ServeRequestFieldsTest& t, bool chat) {
      t.Gen(chat, good);
      if (!bad.is_null()) t.Refused(chat, bad, good.begin().key());
    };
  };
  auto refused = [](json value, json neutral) {  // not implemented: a 400 naming it
    return [value, neutral](ServeRequestFieldsTest& t, bool chat) {
      t.Refused(chat, value, value.begin().key());
      if (!neutral.is_null()) t.Gen(chat, neutral);
    };
  };
  r["model"] = [](ServeRequestFieldsTest& t, bool chat) {
    t.Gen(chat, {{"model", "kjv-llama-tiny"}});
    t.Gen(chat, {{"model", "gpt-4"}}, 404);
  };
  r["prompt"] = [](ServeRequestFieldsTest& t, bool chat) {
    EXPECT_LT(t.PromptTokens(chat, {{"prompt", "And"}}), t.PromptTokens(chat, {}));
  };
  r["messages"] = [](ServeRequestFieldsTest& t, bool chat) {
    json two = {{{"role", "user"}, {"content", kPrompt}}, {{"role", "user"}, {"content", kPrompt}}};
    EXPECT_GT(t.PromptTokens(chat, {{"messages", two}}), t.PromptTokens(chat, {}));
  };
  r["echo"] = [](ServeRequestFieldsTest& t, bool chat) {
    if (!chat) {
      EXPECT_TRUE(absl::StartsWith(t.Text(chat, t.Gen(chat, {{"echo", true}})), kPrompt));
      return;
    }
    json msgs = {{{"role", "user"}, {"content", "Say"}},
                 {{"role", "assistant"}, {"content", "Yea"}}};
    EXPECT_TRUE(
        absl::StartsWith(t.Text(chat, t.Gen(chat, {{"messages", msgs}, {"echo", true}})), "Yea"));
  };
  r["max_tokens"] = [](ServeRequestFieldsTest& t, bool chat) {
    EXPECT_EQ(t.Gen(chat, {{"max_tokens", 3}, {"ignore_eos", true}})["usage"]["completion_tokens"],
              3);
  };
  r["max_completion_tokens"] = [](ServeRequestFieldsTest& t, bool chat) {
    EXPECT_EQ(t.Gen(chat, {{"max_completion_tokens", 2},
                           {"ignore_eos", true}})["usage"]["completion_tokens"],
              2);
  };
  r["n"] = [](ServeRequestFieldsTest& t, bool chat) {
    EXPECT_EQ(t.Gen(chat, {{"n", 2}})["choices"].size(), 2u);
  };
  r["logprobs"] = [](ServeRequestFieldsTest& t, bool chat) {
    json r = t.Gen(chat, {{"logprobs", chat ? json(true) : json(2)}});
    EXPECT_TRUE(r["choices"][0]["logprobs"].is_object()) << r.dump();
  };
  r["top_logprobs"] = [](ServeRequestFieldsTest& t, bool chat) {
    json r = t.Gen(chat, {{"logprobs", true}, {"top_logprobs", 3}});
    EXPECT_EQ(r["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 3u) << r.dump();
  };
  r["prompt_logprobs"] = [](ServeRequestFieldsTest& t, bool chat) {
    json r = t.Gen(chat, {{"prompt_logprobs", 1}});
    EXPECT_TRUE((chat ? r["prompt_logprobs"] : r["choices"][0]["prompt_logprobs"]).is_array());
  };
  r["stream"] = [](ServeRequestFieldsTest& t, bool chat) {
    testing::StreamResult s = t.Stream(chat, json::object());
    EXPECT_TRUE(s.done) << s.error;
    EXPECT_GE(s.events.size(), 2u);
  };
  r["stream_options"] = [](ServeRequestFieldsTest& t, bool chat) {
    testing::StreamResult s = t.Stream(
        chat, {{"stream_options", {{"include_usage", true}, {"continuous_usage_stats", true}}}});
    ASSERT_TRUE(s.done) << s.error;
    for (const json& e : s.events) EXPECT_TRUE(e["usage"].is_object()) << e.dump();
    t.Refused(chat, {{"stream_options", {{"include_usage", true}}}}, "stream_options");
  };
  r["return_token_ids"] = [](ServeRequestFieldsTest& t, bool chat) {
    json r = t.Gen(chat, {{"return_token_ids", true}});
    const json& ids = chat ? r["prompt_token_ids"] : r["choices"][0]["prompt_token_ids"];
    EXPECT_EQ(ids.size(), r["usage"]["prompt_tokens"].get<size_t>()) << r.dump();
    EXPECT_EQ(r["choices"][0]["token_ids"].size(), r["usage"]["completion_tokens"].get<size_t>());
    testing::StreamResult s = t.Stream(chat, {{"return_token_ids", true}});
    ASSERT_TRUE(s.done) << s.error;
    EXPECT_TRUE(chat ? s.events[0].contains("prompt_token_ids")
                     : s.events[0]["choices"][0].contains("prompt_token_ids"))
        << s.events[0].dump();
  };
  r["truncate_prompt_tokens"] = [](ServeRequestFieldsTest& t, bool chat) {
    EXPECT_EQ(t.PromptTokens(chat, {{"truncate_prompt_tokens", 3}}), 3);
    t.Refused(chat, {{"truncate_prompt_tokens", 100000}}, "truncate_prompt_tokens");
  };
  r["truncation_side"] = [](ServeRequestFieldsTest& t, bool chat) {
    json full = t.Gen(chat, {{"return_token_ids", true}});
    const auto all = (chat ? full["prompt_token_ids"] : full["choices"][0]["prompt_token_ids"])
                         .get<std::vector<int32_t>>();
    json right = t.Gen(
        chat,
        {{"return_token_ids", true}, {"truncate_prompt_tokens", 2}, {"truncation_side", "right"}});
    EXPECT_EQ(chat ? right["prompt_token_ids"] : right["choices"][0]["prompt_token_ids"],
              json(std::vector<int32_t>(all.begin(), all.begin() + 2)));
    t.Refused(chat, {{"truncation_side", "middle"}}, "truncation_side");
  };
  r["add_special_tokens"] = [](ServeRequestFieldsTest& t, bool chat) {
    // BOS from the tokenizer: added by default to a completion's text prompt, not to a chat's.
    EXPECT_EQ(t.PromptTokens(chat, {}), t.PromptTokens(chat, {{"add_special_tokens", !chat}}));
    EXPECT_EQ(t.PromptTokens(chat, {{"add_special_tokens", true}}) -
                  t.PromptTokens(chat, {{"add_special_tokens", false}}),
              1);
  };
  r["request_id"] = [](ServeRequestFieldsTest& t, bool chat) {
    EXPECT_EQ(t.Gen(chat, {{"request_id", "abc"}})["id"], chat ? "chatcmpl-abc" : "cmpl-abc");
  };
  r["return_tokens_as_token_ids"] = [](ServeRequestFieldsTest& t, bool chat) {
    json r = t.Gen(
        chat, {{"logprobs", chat ? json(true) : json(1)}, {"return_tokens_as_token_ids", true}});
    const json& tok = chat ? r["choices"][0]["logprobs"]["content"][0]["token"]
                           : r["choices"][0]["logprobs"]["tokens"][0];
    EXPECT_TRUE(absl::StartsWith(tok.get<std::string>(), "token_id:")) << r.dump();
  };
  r["cache_salt"] = [](ServeRequestFieldsTest& t, bool chat) {
    t.Gen(chat, {{"cache_salt", "pepper"}});
    t.Refused(chat, {{"cache_salt", "a/b"}}, "cache_salt");
  };
  r["kv_transfer_params"] = [](ServeRequestFieldsTest& t, bool chat) {
    t.Refused(chat, {{"kv_transfer_params", {{"do_remote_decode", true}}}}, "kv_transfer_params");
  };
  r["response_format"] = [](ServeRequestFieldsTest& t, bool chat) {
    json r = t.Gen(chat, {{"response_format", {{"type", "json_object"}}}, {"max_tokens", 2}});
    EXPECT_TRUE(absl::StartsWith(t.Text(chat, r), "{") || t.Text(chat, r).empty()) << r.dump();
    t.Refused(chat, {{"response_format", {{"type", "bogus"}}}}, "response_format");
  };
  r["structured_outputs"] = [](ServeRequestFieldsTest& t, bool chat) {
    const std::string text =
        t.Text(chat, t.Gen(chat, {{"structured_outputs", {{"choice", {"yes", "no"}}}}}));
    EXPECT_TRUE(text == "yes" || text == "no") << text;
    t.Refused(chat, {{"structured_outputs", {{"choice", {"a"}}, {"regex", "b"}}}},
              "structured_outputs");
  };
  r["suffix"] = refused({{"suffix", "amen"}}, {{"suffix", ""}});
  r["use_beam_search"] = BeamSearchRow;
  r["length_penalty"] = LengthPenaltyRow;
  r["logprob_token_ids"] = refused({{"logprob_token_ids", {5}}}, nullptr);
  r["prompt_embeds"] = refused({{"prompt_embeds", "AAAA"}}, nullptr);
  r["ec_transfer_params"] = refused({{"ec_transfer_params", {{"x", 1}}}}, nullptr);
  r["repetition_detection"] =
      refused({{"repetition_detection", {{"max_pattern_size", 4}}}}, nullptr);
  r["thinking_token_budget"] =
      refused({{"thinking_token_budget", 10}}, {{"thinking_token_budget", -1}});
  r["stream_interval"] = [](ServeRequestFieldsTest& t, bool chat) {
    // 10 tokens 3 at a time: the first chunk at once, then 3, 3 and the last 3 (vLLM's
    // output processor); the same tokens as without it.
    const json extra{{"max_tokens", 10}, {"ignore_eos", true}, {"return_token_ids", true}};
    json interval = extra;
    interval["stream_interval"] = 3;
    std::vector<std::vector<int32_t>> chunks[2];
    for (int with = 0; with < 2; ++with) {
      testing::StreamResult s = t.Stream(chat, with ? interval : extra);
      ASSERT_TRUE(s.done) << s.error;
      for (const json& e : s.events) {
        if (e["choices"].empty() || !e["choices"][0]["token_ids"].is_array() ||
            e["choices"][0]["token_ids"].empty()) {
          continue;
        }
        chunks[with].push_back(e["choices"][0]["token_ids"].get<std::vector<int32_t>>());
      }
    }
    EXPECT_EQ(chunks[0].size(), 10u);
    const std::vector<size_t> want = {1, 3, 3, 3};
    std::vector<size_t> sizes;
    std::vector<int32_t> all[2];
    for (int with = 0; with < 2; ++with) {
      for (const auto& c : chunks[with]) all[with].insert(all[with].end(), c.begin(), c.end());
    }
    for (const auto& c : chunks[1]) sizes.push_back(c.size());
    EXPECT_EQ(sizes, want);
    EXPECT_EQ(all[0], all[1]);
    t.Refused(chat, {{"stream_interval", 0}}, "stream_interval");
  };
  r["return_weight_versions"] =
      refused({{"return_weight_versions", true}}, {{"return_weight_versions", false}});
  r["return_prompt_text"] = [](ServeRequestFieldsTest& t, bool chat) {
    json r = t.Gen(chat, {{"return_prompt_text", true}});
    EXPECT_TRUE(r["prompt_text"].is_string()) << r.dump();
  };
  r["spaces_between_special_tokens"] = refused({{"spaces_between_special_tokens", false}},
                                               {{"spaces_between_special_tokens", true}});
  r["media_io_kwargs"] = refused({{"media_io_kwargs", {{"image", {{"x", 1}}}}}}, nullptr);
  r["mm_processor_kwargs"] = refused({{"mm_processor_kwargs", {{"x", 1}}}}, nullptr);
  r["chat_template"] = refused({{"chat_template", "{{ messages }}"}}, nullptr);
  r["user"] = accepted({{"user", "me"}}, {{"user", 5}});
  r["priority"] = accepted({{"priority", 3}}, {{"priority", "high"}});  // fcfs: no effect
  r["session_id"] = accepted({{"session_id", "s1"}}, {{"session_id", 5}});
  r["watermarking"] = accepted({{"watermarking", true}}, {{"watermarking", "x"}});
  r["vllm_xargs"] = accepted({{"vllm_xargs", {{"k", 1}}}}, {{"vllm_xargs", 5}});
  r["routed_experts_prompt_start"] =
      accepted({{"routed_experts_prompt_start", 0}}, {{"routed_experts_prompt_start", -1}});
  r["return_token_offsets"] = accepted({{"return_token_offsets", true}}, nullptr);
  r["mm_payload"] = accepted({{"mm_payload", "none"}}, {{"mm_payload", "bogus"}});
  r["return_mm_kwargs"] = accepted({{"return_mm_kwargs", false}}, nullptr);
}

// Rows for the chat-only fields.
void AddChatRows(std::map<std::string, Row>* rows) {
  auto& r = *rows;
  r["tools"] = [](ServeRequestFieldsTest& t, bool chat) {
    t.Refused(chat, {{"tools", json::array()}}, "tools");
    // tool_choice "auto" (the default with tools) needs --enable-auto-tool-choice.
    json tool = {{"type", "function"},
                 {"function", {{"name", "f"}, {"parameters", json::object()}}}};
    t.Refused(chat, {{"tools", {tool}}}, "tool_choice");
    t.Gen(chat, {{"tools", {tool}}, {"tool_choice", "none"}});
  };
  r["tool_choice"] = [](ServeRequestFieldsTest& t, bool chat) {
    t.Refused(chat, {{"tool_choice", "required"}}, "tool_choice");
  };
  r["parallel_tool_calls"] = [](ServeRequestFieldsTest& t, bool chat) {
    t.Gen(chat, {{"parallel_tool_calls", false}});
    t.Refused(chat, {{"parallel_tool_calls", "x"}}, "parallel_tool_calls");
  };
  r["reasoning_effort"] = [](ServeRequestFieldsTest& t, bool chat) {
    t.Gen(chat, {{"reasoning_effort", "low"}});
    t.Refused(chat, {{"reasoning_effort", "bogus"}}, "reasoning_effort");
  };
  r["include_reasoning"] = [](ServeRequestFieldsTest& t, bool chat) {
    t.Gen(chat, {{"include_reasoning", false}});
    t.Refused(chat, {{"include_reasoning", "x"}}, "include_reasoning");
  };
  r["add_generation_prompt"] = [](ServeRequestFieldsTest& t, bool chat) {
    EXPECT_GT(t.PromptTokens(chat, {}), t.PromptTokens(chat, {{"add_generation_prompt", false}}));
  };
  r["continue_final_message"] = [](ServeRequestFieldsTest& t, bool chat) {
    t.Refused(chat, {{"continue_final_message", true}}, "continue_final_message");
    json msgs = {{{"role", "user"}, {"content", "Say"}},
                 {{"role", "assistant"}, {"content", "Yea"}}};
    EXPECT_LT(t.PromptTokens(chat, {{"messages", msgs},
                                    {"add_generation_prompt", false},
                                    {"continue_final_message", true}}),
              t.PromptTokens(chat, {{"messages", msgs}, {"add_generation_prompt", false}}));
  };
  r["chat_template_kwargs"] = [](ServeRequestFieldsTest& t, bool chat) {
    EXPECT_GT(t.PromptTokens(chat, {}),
              t.PromptTokens(chat, {{"chat_template_kwargs", {{"add_generation_prompt", false}}}}));
    t.Refused(chat, {{"chat_template_kwargs", 5}}, "chat_template_kwargs");
  };
  r["documents"] = [](ServeRequestFieldsTest& t, bool chat) {
    t.Gen(chat, {{"documents", {{{"title", "Genesis"}, {"text", "In the beginning"}}}}});
    t.Refused(chat, {{"documents", "x"}}, "documents");
  };
}

std::map<std::string, Row> Rows() {
  std::map<std::string, Row> rows;
  AddSamplingRows(&rows);
  AddRequestRows(&rows);
  AddChatRows(&rows);
  return rows;
}

}  // namespace
}  // namespace vllm
