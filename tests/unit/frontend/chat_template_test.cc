// ChatTemplate against Python jinja2 with transformers' settings: goldens recorded by
// tools/fixtures/make_tokenizer_goldens.py (Llama 3, Qwen2, Qwen2.5, Mistral and a subset
// exerciser) and the bundled model's chats from tools/fixtures/make_tokenizer_reference.py.
#include "frontend/jinja/chat_template.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/fixtures.h"

namespace vllm::frontend {
namespace {

const std::filesystem::path kRoot(VLLM_SOURCE_DIR);
const std::filesystem::path kFixtures = kRoot / "tests" / "fixtures" / "tokenizer";

using ::vllm::testing::ReadJson;

std::vector<ChatMessage> Messages(const nlohmann::json& j) {
  std::vector<ChatMessage> out;
  for (const auto& m : j) out.push_back({m["role"], m["content"]});
  return out;
}

TEST(ChatTemplateTest, MatchesJinja2Goldens) {
  const nlohmann::json g = ReadJson(kFixtures / "chat_templates.json");
  const std::string bos = g["bos_token"], eos = g["eos_token"];
  int checked = 0;
  for (const auto& r : g["renders"]) {
    const std::string name = r["template"];
    auto t = ChatTemplate::Parse(g["templates"][name].get<std::string>());
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    auto text = t->Render(Messages(r["messages"]), r["add_generation_prompt"], bos, eos);
    const std::string where = name + " conversation " + r["conversation"].dump() +
                              (r["add_generation_prompt"].get<bool>() ? " +gen" : "");
    if (r.contains("error")) {
      ASSERT_FALSE(text.ok()) << where;
      EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(text.status().message(), r["error"].get<std::string>()) << where;
    } else {
      ASSERT_TRUE(text.ok()) << where << ": " << text.status();
      EXPECT_EQ(*text, r["text"].get<std::string>()) << where;
    }
    ++checked;
  }
  EXPECT_GE(checked, 40);
}

TEST(ChatTemplateTest, BundledModelMatchesTransformers) {
  const nlohmann::json config =
      ReadJson(kRoot / "models" / "kjv-llama-tiny" / "tokenizer_config.json");
  const nlohmann::json ref = ReadJson(kFixtures / "kjv_llama_tiny.json");
  auto t = ChatTemplate::Parse(config["chat_template"].get<std::string>());
  ASSERT_TRUE(t.ok()) << t.status();
  for (const auto& c : ref["chat"]) {
    auto text = t->Render(Messages(c["messages"]), c["add_generation_prompt"], config["bos_token"],
                          config["eos_token"]);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, c["text"].get<std::string>());
  }
}

std::string RenderOrError(const std::string& source) {
  auto t = ChatTemplate::Parse(source);
  if (!t.ok()) return "parse: " + std::string(t.status().message());
  auto r = t->Render({{"user", "hi"}}, false, "<s>", "</s>");
  if (!r.ok()) return "render: " + std::string(r.status().message());
  return *r;
}

TEST(ChatTemplateTest, Subset) {
  EXPECT_EQ(RenderOrError("{{ messages[0].content ~ '!' }}"), "hi!");
  EXPECT_EQ(RenderOrError(
                "{% for x in [1, 2, 3] %}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}"),
            "1,2,3");
  EXPECT_EQ(RenderOrError("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(RenderOrError("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"),
            "1");
  EXPECT_EQ(RenderOrError("{{ 'abc'[1:] }}{{ [1,2,3][-1] }}{{ 'a' if false else 'b' }}"), "bc3b");
  EXPECT_EQ(RenderOrError("{{ ' x '.strip() }}{{ 'ab'.startswith('a') }}"), "xTrue");
  EXPECT_EQ(RenderOrError("{{ undefined_thing }}|{{ undefined_thing is defined }}"), "|False");
  EXPECT_EQ(RenderOrError("  {%- if true -%}  x  {%- endif %}\n"), "x");
  EXPECT_EQ(RenderOrError("{{ raise_exception('nope') }}"), "render: nope");
}

TEST(ChatTemplateTest, ErrorsNameLineAndColumn) {
  EXPECT_EQ(RenderOrError("ok\n  {% macro m() %}{% endmacro %}"),
            "parse: chat template: line 2, column 6: unsupported statement 'macro'");
  EXPECT_EQ(RenderOrError("{{ 1 + }}"),
            "parse: chat template: line 1, column 8: expected an expression");
  EXPECT_EQ(RenderOrError("{% if x %}"),
            "parse: chat template: line 1, column 11: missing {% endif %}");
  EXPECT_NE(RenderOrError("{{ 'a' + 1 }}")
                .find("render: chat template: line 1, column 8: unsupported operand"),
            std::string::npos);
  EXPECT_NE(RenderOrError("{{ x | nosuch }}").find("unknown filter 'nosuch'"), std::string::npos);
  EXPECT_NE(RenderOrError("{{ 'unterminated }}").find("unterminated string"), std::string::npos);
  EXPECT_NE(RenderOrError("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}")
                .find("too deeply"),
            std::string::npos);
  EXPECT_NE(
      RenderOrError("{% for i in range(400) %}{% for j in range(400) %}{% for k in range(1) %}"
                    "{% endfor %}{% endfor %}{% endfor %}")
          .find("100000 loop iterations"),
      std::string::npos);
}

TEST(ChatTemplateTest, FuzzNeverCrashes) {
  const nlohmann::json g = ReadJson(kFixtures / "chat_templates.json");
  std::vector<std::string> sources;
  for (const auto& [name, src] : g["templates"].items()) sources.push_back(src);
  std::mt19937 rng(11);
  const std::string alphabet = "{}%#-+()[]'\".,|~=<>!: \nabcdefinorstx0123456789_";
  for (int iter = 0; iter < 1000; ++iter) {
    std::string s = sources[rng() % sources.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      const size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s.erase(at, 1 + rng() % 8);
          break;
        case 1:
          s.insert(at, 1, alphabet[rng() % alphabet.size()]);
          break;
        default:
          s[at] = alphabet[rng() % alphabet.size()];
      }
    }
    auto t = ChatTemplate::Parse(s);
    if (t.ok())
      (void)t->Render({{"system", "s"}, {"user", "u"}, {"assistant", "a"}}, iter % 2 == 0, "<s>",
                      "</s>");
  }
}

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// Templates that once crashed or ran away (stack overflow, signed overflow, gigabytes); each
// must now fail with InvalidArgument naming the limit, quickly.
TEST(ChatTemplateTest, HostileTemplatesHitALimit) {
  const std::string doubling =
      "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}";
  const struct {
    std::string source;
    std::string error;
  } kCases[] = {
      // Left-deep chains (filters, operators, attributes) are bounded like bracket nesting.
      {"{{ 1" + Repeat("|string", 200) + " }}", "nested too deeply"},
      {"{{ 1" + Repeat(" + 1", 200) + " }}", "nested too deeply"},
      {"{{ messages" + Repeat(".x", 200) + " }}", "nested too deeply"},
      {"{{ 'ab' * 9223372036854775807 }}", "string repetition too long"},
      {"{% for i in range(-9223372036854775807, 9223372036854775807) %}{% endfor %}",
       "range() too long"},
      {doubling + "{{ ns.s|length }}", "value larger than 64 MiB"},
      {"{% set ns = namespace(l=[]) %}{% for i in range(300) %}{% set ns.l = [ns.l] %}"
       "{% endfor %}",
       "nested deeper than 128"},
      {"{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}"
       "{% endfor %}",
       "value larger than 64 MiB"},
      {"{% set ns = namespace(l=[1]) %}{% for i in range(80) %}{% set ns.l = [ns.l, ns.l] %}"
       "{% endfor %}{{ ns.l }}",
       "value larger than 64 MiB"},
      {"{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}", "cannot be stored"},
      {"{% set ns = namespace(a=1) %}{{ [ns] }}", "cannot be stored in a list"},
      {"{% set ns = namespace(s='a') %}{% for i in range(20) %}{% set ns.s = ns.s ~ ns.s %}"
       "{% endfor %}{{ ns.s.replace('a', ns.s)|length }}",
       "replace: result larger than 64 MiB"},
      {"{% set ns = namespace(s='a') %}{% for i in range(23) %}{% set ns.s = ns.s ~ ns.s %}"
       "{% endfor %}{{ ns.s|list|length }}",
       "into a list"},
      {"{% set ns = namespace(s='ab') %}{% for i in range(20) %}{% set ns.s = ns.s ~ ns.s %}"
       "{% endfor %}{% for i in range(99990) %}{{ ns.s[5] }}{% endfor %}",
       "too much work"},
      // Small values, many evaluations: nested loops over a 400-character string (found by
      // chat_template_fuzzer as loops over `messages|tojson`: 10 s per input under ASan before
      // the evaluation budget, ~0.3 s per render without sanitizers).
      {"{% set s = 'x' * 400 %}{% for a in s %}{% for b in s %}{{ a ~ b ~ a ~ b }}"
       "{{ a is string }}{{ b is defined }}{{ (a ~ b)|length }}{% endfor %}{% endfor %}",
       "over 1000000 expression evaluations"},
  };
  for (const auto& c : kCases) {
    const std::string result = RenderOrError(c.source);
    EXPECT_NE(result.find(c.error), std::string::npos)
        << c.source.substr(0, 120) << "\n=> " << result.substr(0, 200);
  }
}

TEST(ChatTemplateTest, LongConversationsStayWithinTheBudgets) {
  // 20000 messages through every real template of the fixtures (Llama 3, Qwen 2 / 2.5,
  // Mistral v1 / v3) and the bundled model's: the work budgets must leave room for
  // conversations far longer than any context window. ("subset", a synthetic template that
  // exercises every feature per message, is not a real one: it exceeds the budget at 20000.)
  const nlohmann::json g = ReadJson(kFixtures / "chat_templates.json");
  std::vector<std::string> sources;
  for (const auto& [name, src] : g["templates"].items()) {
    if (name != "subset") sources.push_back(src);
  }
  ASSERT_GE(sources.size(), 5u);
  sources.push_back(
      ReadJson(kRoot / "models" / "kjv-llama-tiny" / "tokenizer_config.json")["chat_template"]
          .get<std::string>());
  std::vector<ChatMessage> messages;
  for (int i = 0; i < 20000; ++i) {
    messages.push_back({i % 2 == 0 ? "user" : "assistant", "message " + std::to_string(i)});
  }
  int rendered = 0;
  for (const std::string& source : sources) {
    auto t = ChatTemplate::Parse(source);
    ASSERT_TRUE(t.ok()) << t.status();
    auto text = t->Render(messages, true, "<s>", "</s>");
    // Some templates refuse the conversation's shape (e.g. no system message); none may run
    // out of budget on it.
    if (!text.ok()) {
      EXPECT_EQ(text.status().message().find("too much work"), std::string_view::npos)
          << source.substr(0, 80) << ": " << text.status();
      EXPECT_EQ(text.status().message().find("loop iterations"), std::string_view::npos)
          << source.substr(0, 80) << ": " << text.status();
      continue;
    }
    EXPECT_NE(text->find("message 19999"), std::string::npos);
    ++rendered;
  }
  EXPECT_GE(rendered, 3);
}

TEST(ChatTemplateTest, StringIndexingAndSlicingByCodePoint) {
  EXPECT_EQ(RenderOrError("{{ 'h\u00e9llo'[1] }}|{{ 'h\u00e9llo'[-4] }}|{{ 'abc'[5] }}|"
                          "{{ 'h\u00e9llo'[1:3] }}|{{ 'abc'[-9:2] }}|{{ 'abc'[2:1] }}"),
            "\xC3\xA9|\xC3\xA9||\xC3\xA9l|ab|");
  EXPECT_EQ(RenderOrError("{{ 'h\u00e9llo'|reverse }}|{{ 'h\u00e9'|last }}|{{ 'abc'|first }}|"
                          "{{ 'ab' * -2 }}|{{ 'xax'.replace('a', 'bb') }}"),
            "oll\xC3\xA9h|\xC3\xA9|a||xbbx");
}

}  // namespace
}  // namespace vllm::frontend
