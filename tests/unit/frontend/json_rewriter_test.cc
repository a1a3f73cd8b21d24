// The text layer of the tool-call parsers: Python's float repr, JsonRewriter (json.loads then
// json.dumps) and PythonLiteralRewriter (ast literal then json.dumps), whole and fed in
// pieces. Expected texts are what CPython 3.11 prints.
#include "frontend/parsers/json_rewriter.h"

#include <string>
#include <vector>

#include "base/python_repr.h"
#include "frontend/parsers/python_literal.h"
#include "gtest/gtest.h"

namespace vllm::frontend::parsers {
namespace {

TEST(PythonFloatReprTest, MatchesCPython) {
  const struct {
    double value;
    const char* repr;
  } kCases[] = {
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {1.0, "1.0"},
      {0.1, "0.1"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {123456789012345678.0, "1.2345678901234568e+17"},
      {1e-4, "0.0001"},
      {1e-5, "1e-05"},
      {1.5e-7, "1.5e-07"},
      {100.0, "100.0"},
      {1e22, "1e+22"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {5e-324, "5e-324"},
      {0.30000000000000004, "0.30000000000000004"},
      {9999999999999998.0, "9999999999999998.0"},
      {-1234.5678, "-1234.5678"},
  };
  for (const auto& c : kCases) EXPECT_EQ(base::PythonFloatRepr(c.value), c.repr) << c.repr;
}

// The rewriter's output for `json` fed whole and fed in every two-piece split; "" when it
// is an error.
std::string Rewrite(std::string_view json) {
  std::string whole;
  JsonRewriter r;
  const size_t n = r.Feed(json, &whole);
  r.Finish(&whole);
  const bool ok = r.state() == JsonRewriter::State::kDone;
  for (size_t cut = 0; cut <= json.size(); ++cut) {
    JsonRewriter p;
    std::string out;
    size_t used = p.Feed(json.substr(0, cut), &out);
    if (used == cut) used += p.Feed(json.substr(cut), &out);
    p.Finish(&out);
    EXPECT_EQ(p.state() == JsonRewriter::State::kDone, ok) << json << " cut " << cut;
    if (ok) {
      EXPECT_EQ(out, whole) << json << " cut " << cut;
      EXPECT_EQ(used, n);
    }
  }
  return ok ? whole : "";
}

TEST(JsonRewriterTest, WritesWhatJsonDumpsWrites) {
  EXPECT_EQ(Rewrite(R"({"city":"Paris","days":3})"), R"({"city": "Paris", "days": 3})");
  EXPECT_EQ(Rewrite(" {\n \"a\" : [ 1 , 2.50 , -0 , 1e2 , 1E-7 , true , null ] , \"b\" : { } } "),
            R"({"a": [1, 2.5, 0, 100.0, 1e-07, true, null], "b": {}})");
  EXPECT_EQ(Rewrite(R"({"x": 12345678901234567890123, "y": 1e400, "z": -1e400, "w": 1.0e16})"),
            R"({"x": 12345678901234567890123, "y": Infinity, "z": -Infinity, "w": 1e+16})");
  EXPECT_EQ(Rewrite(R"([NaN, Infinity, -Infinity, 1e-400, -0.0])"),
            "[NaN, Infinity, -Infinity, 0.0, -0.0]");
  // Strings: escapes decoded and written back as json.dumps(ensure_ascii=False) does.
  EXPECT_EQ(Rewrite(R"("\u00e9\n\ud83d\ude00\/\b\f\u0001\t\"\\")"),
            "\"\xC3\xA9\\n\xF0\x9F\x98\x80/\\b\\f\\u0001\\t\\\"\\\\\"");
  EXPECT_EQ(Rewrite("\"\xE6\xBC\xA2\xE5\xAD\x97\""), "\"\xE6\xBC\xA2\xE5\xAD\x97\"");
  // A lone surrogate (which UTF-8 cannot hold) stays an escape.
  EXPECT_EQ(Rewrite(R"("\ud800x\udc00")"), R"("\ud800x\udc00")");
  EXPECT_EQ(Rewrite("42"), "42");
  EXPECT_EQ(Rewrite("[]"), "[]");
}

TEST(JsonRewriterTest, RefusesWhatJsonLoadsRefuses) {
  for (const char* bad : {"",          "{",        "[1,]",      "{\"a\":1,}",
                          "{\"a\" 1}", "01",       "1.",        ".5",
                          "+1",        "1e",       "tru",       "nul",
                          "'x'",       "\"a\nb\"", "\"\\x41\"", "\"\\u12g4\"",
                          "{1: 2}",    "[1 2]",    "}",         "\"unterminated"}) {
    EXPECT_EQ(Rewrite(bad), "") << bad;
  }
  // Nesting past the bound.
  EXPECT_EQ(Rewrite(std::string(200, '[') + std::string(200, ']')), "");
  EXPECT_NE(Rewrite(std::string(100, '[') + std::string(100, ']')), "");
}

TEST(JsonRewriterTest, StopsAfterTheValue) {
  JsonRewriter r;
  std::string out;
  EXPECT_EQ(r.Feed(R"({"a": 1}</tool_call>)", &out), 8u);
  EXPECT_EQ(r.state(), JsonRewriter::State::kDone);
  EXPECT_EQ(out, R"({"a": 1})");
  JsonRewriter number;
  out.clear();
  EXPECT_EQ(number.Feed("12}", &out), 2u);  // a number ends at the byte after it
  EXPECT_EQ(out, "12");
}

// The JSON that PythonLiteralRewriter writes for `literal`, fed whole and in every split;
// "" when it is an error or does not take all of `literal`.
std::string Literal(std::string_view literal) {
  std::string whole;
  PythonLiteralRewriter r;
  const size_t used = r.Feed(literal, &whole);
  r.Finish(&whole);
  const bool ok = r.state() == PythonLiteralRewriter::State::kDone && used == literal.size();
  for (size_t cut = 0; cut <= literal.size(); ++cut) {
    PythonLiteralRewriter p;
    std::string out;
    if (p.Feed(literal.substr(0, cut), &out) == cut) p.Feed(literal.substr(cut), &out);
    p.Finish(&out);
    if (used == literal.size()) {
      EXPECT_EQ(p.state() == PythonLiteralRewriter::State::kDone, ok) << literal << " " << cut;
    }
    if (ok) {
      EXPECT_EQ(out, whole) << literal << " cut " << cut;
    }
  }
  return ok ? whole : "";
}

TEST(PythonLiteralRewriterTest, WritesWhatJsonDumpsOfTheLiteralWrites) {
  EXPECT_EQ(Literal("[1, 2.5, True, None, False]"), "[1, 2.5, true, null, false]");
  EXPECT_EQ(Literal("{'k': 'v', 1: False, 2.5: None, None: 1}"),
            R"({"k": "v", "1": false, "2.5": null, "null": 1})");
  EXPECT_EQ(Literal("{True: 2}"), R"({"true": 2})");
  EXPECT_EQ(Literal(R"('it\'s')"), R"("it's")");
  EXPECT_EQ(Literal(R"("a\nb")"), R"("a\nb")");
  EXPECT_EQ(Literal(R"('''x"y''')"), R"("x\"y")");
  EXPECT_EQ(Literal(R"("""a""b"c""")"), R"("a\"\"b\"c")");
  EXPECT_EQ(Literal(R"(r'\d')"), R"("\\d")");
  EXPECT_EQ(Literal(R"("a" 'b')"), R"("ab")");
  EXPECT_EQ(Literal(R"('\x41\u00e9\101\0')"),
            "\"A\xC3\xA9"
            "A\\u0000\"");
  EXPECT_EQ(Literal(R"('\q')"), R"("\\q")");
  EXPECT_EQ(Literal("''"), R"("")");
  EXPECT_EQ(Literal("'\xF0\x9F\x98\x80'"), "\"\xF0\x9F\x98\x80\"");
  EXPECT_EQ(Literal("12345678901234567890"), "12345678901234567890");
  EXPECT_EQ(Literal("-1"), "-1");
  EXPECT_EQ(Literal("-2.5"), "-2.5");
  EXPECT_EQ(Literal("-0"), "0");
  EXPECT_EQ(Literal("-0.0"), "-0.0");
  EXPECT_EQ(Literal("1e5"), "100000.0");
  EXPECT_EQ(Literal(".5"), "0.5");
  EXPECT_EQ(Literal("1."), "1.0");
  EXPECT_EQ(Literal("0x1F"), "31");
  EXPECT_EQ(Literal("0o17"), "15");
  EXPECT_EQ(Literal("0b101"), "5");
  EXPECT_EQ(Literal("1_000"), "1000");
  EXPECT_EQ(Literal("1_0.5e-3"), "0.0105");
  EXPECT_EQ(Literal("[1, [2, {'a': []}],]"), R"([1, [2, {"a": []}]])");
  EXPECT_EQ(Literal("{\n  'a': 1,\n  'b': 2,\n}"), R"({"a": 1, "b": 2})");
}

TEST(PythonLiteralRewriterTest, RefusesWhatIsNotALiteral) {
  for (const char* bad :
       {"(1, 2)",        "{1, 2}",        "b'x'", "f'x'",    "x",    "1 + 2", "[1, 2",
        "'abc",          "'a\nb'",        "1j",   "007",     "1__0", "0x",    "{[1]: 2}",
        "\"\\N{DASH}\"", "'\\U00110000'", "- 1",  "{'a' 1}", "[,]",  "Truex"}) {
    EXPECT_EQ(Literal(bad), "") << bad;
  }
  EXPECT_EQ(Literal(std::string(200, '[') + std::string(200, ']')), "");
}

}  // namespace
}  // namespace vllm::frontend::parsers
