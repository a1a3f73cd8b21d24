// Tool-calling chat templates (Qwen3, Llama 3.1) rendered with ChatTemplate::RenderJson against
// Python jinja2 set up as transformers sets it up: goldens recorded by
// tools/fixtures/make_tool_template_goldens.py in tests/fixtures/chat_templates/. And the
// Jinja features those templates need: slices with a step, strip(chars), select/reject,
// tojson(indent), JSON inputs.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "frontend/jinja/chat_template.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {
namespace {

using ojson = nlohmann::ordered_json;

const std::filesystem::path kDir =
    std::filesystem::path(VLLM_SOURCE_DIR) / "tests" / "fixtures" / "chat_templates";

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ChatTemplateToolsTest, MatchesJinja2Goldens) {
  const ojson goldens = ojson::parse(ReadFile(kDir / "tool_renders.json"));
  int checked = 0;
  for (const auto& r : goldens["renders"]) {
    const std::string name = r["template"];
    const ojson& info = goldens["templates"][name];
    auto t = ChatTemplate::Parse(ReadFile(kDir / info["file"].get<std::string>()));
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    const std::string where = name + " / " + r["case"].get<std::string>();
    auto text = t->RenderJson(r["messages"], r["tools"], r["extra"], r["add_generation_prompt"],
                              info["bos_token"], info["eos_token"]);
    if (r.contains("error")) {
      ASSERT_FALSE(text.ok()) << where;
      EXPECT_EQ(text.status().message(), r["error"].get<std::string>()) << where;
    } else {
      ASSERT_TRUE(text.ok()) << where << ": " << text.status();
      EXPECT_EQ(*text, r["text"].get<std::string>()) << where;
    }
    ++checked;
  }
  EXPECT_GE(checked, 15);
}

std::string Render(const std::string& source, const ojson& messages = ojson::array(),
                   const ojson& tools = nullptr, const ojson& extra = ojson::object()) {
  auto t = ChatTemplate::Parse(source);
  if (!t.ok()) return "parse: " + std::string(t.status().message());
  auto r = t->RenderJson(messages, tools, extra, false, "<s>", "</s>");
  if (!r.ok()) return "render: " + std::string(r.status().message());
  return *r;
}

TEST(ChatTemplateToolsTest, SlicesWithASteps) {
  EXPECT_EQ(Render("{{ [1, 2, 3, 4, 5][::-1] }}|{{ [1, 2, 3, 4, 5][::2] }}|"
                   "{{ [1, 2, 3, 4, 5][3:0:-1] }}|{{ [1, 2, 3, 4, 5][-1:-6:-2] }}|"
                   "{{ [1, 2, 3][5::-1] }}|{{ [1, 2, 3][:-9:-1] }}|{{ [][::-1] }}"),
            "[5, 4, 3, 2, 1]|[1, 3, 5]|[4, 3, 2]|[5, 3, 1]|[3, 2, 1]|[3, 2, 1]|[]");
  EXPECT_EQ(Render("{{ 'h\xC3\xA9llo'[::-1] }}|{{ 'abcdef'[1::2] }}|{{ 'abc'[::1] }}"),
            "oll\xC3\xA9h|bdf|abc");
  EXPECT_NE(Render("{{ [1][::0] }}").find("slice step cannot be zero"), std::string::npos);
  EXPECT_EQ(Render("{% for m in messages[::-1] %}{{ m.role }}{% endfor %}",
                   ojson::parse(R"([{"role": "a"}, {"role": "b"}])")),
            "ba");
}

TEST(ChatTemplateToolsTest, FloatsPrintAsPythonPrintsThem) {
  EXPECT_EQ(Render("{{ 1000000000000000.0 }} {{ 10000000000000000.0 }} {{ 0.00001 }} "
                   "{{ [0.1, 10000000000000000000000.0] | tojson }}"),
            "1000000000000000.0 1e+16 1e-05 [0.1, 1e+22]");
}

TEST(ChatTemplateToolsTest, StripWithCharacters) {
  EXPECT_EQ(Render("[{{ '\\n\\nx\\n '.strip('\\n') }}]|[{{ 'xxaxx'.lstrip('x') }}]|"
                   "[{{ 'xxaxx'.rstrip('x') }}]|[{{ ' a '.strip(none) }}]|"
                   "[{{ '\xC3\xA9"
                   "a\xC3\xA9'.strip('\xC3\xA9') }}]"),
            "[x\n ]|[axx]|[xxa]|[a]|[a]");
}

TEST(ChatTemplateToolsTest, SelectAndReject) {
  EXPECT_EQ(Render("{{ ['a', 'code_interpreter', 'b'] | reject('equalto', 'code_interpreter') | "
                   "join(', ') }}|{{ [1, 2, 3, 4] | select('even') | list }}"),
            "a, b|[2, 4]");
}

TEST(ChatTemplateToolsTest, JsonInputsKeepPythonsTypesAndOrder) {
  // (An integer beyond int64 becomes a float; Python keeps it exact.)
  const ojson messages = ojson::parse(
      R"([{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f",
          "arguments": {"z": 1, "a": [true, null, 2.5, 18446744073709551615]}}}]}])");
  EXPECT_EQ(
      Render("{{ messages[0].content is none }} {{ messages[0].tool_calls[0].function "
             "| tojson }}",
             messages),
      R"(True {"name": "f", "arguments": {"z": 1, "a": [true, null, 2.5, 1.8446744073709552e+19]}})");
  EXPECT_EQ(Render("{{ tools is none }} {{ tools is defined }}"), "True True");
  EXPECT_EQ(Render("{{ tools | length }} {{ enable_thinking }} {{ messages | length }}",
                   ojson::array(), ojson::parse("[{}, {}]"),
                   ojson::parse(R"({"enable_thinking": false, "messages": "ignored"})")),
            "2 False 0");
  EXPECT_EQ(Render("{{ x | tojson(indent=2) }}", ojson::array(), nullptr,
                   ojson::parse(R"({"x": {"a": [1, {}], "b": []}})")),
            "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
}

TEST(ChatTemplateToolsTest, JsonInputsAreBounded) {
  auto t = ChatTemplate::Parse("{{ messages | length }}");
  ASSERT_TRUE(t.ok());
  ojson deep = ojson::array();
  for (int i = 0; i < 200; ++i) deep = ojson::array({deep});
  EXPECT_FALSE(t->RenderJson(deep, nullptr, ojson::object(), false, "", "").ok());
  EXPECT_FALSE(t->RenderJson(ojson::object(), nullptr, ojson::object(), false, "", "").ok());
  EXPECT_FALSE(t->RenderJson(ojson::array(), "tools", ojson::object(), false, "", "").ok());
  EXPECT_FALSE(t->RenderJson(ojson::array(), nullptr, ojson::array(), false, "", "").ok());
}

}  // namespace
}  // namespace vllm::frontend
