// Test helpers of the tool-call parser tests: reassembling a stream's deltas as the OpenAI SDK
// does, and checking that every way of splitting an output into deltas gives what Extract
// gives.
#ifndef VLLM_TESTS_UNIT_FRONTEND_TOOL_PARSER_TEST_UTIL_H_
#define VLLM_TESTS_UNIT_FRONTEND_TOOL_PARSER_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/parsers/tool_parser.h"
#include "gtest/gtest.h"

namespace vllm::frontend::parsers::testing {

// A deterministic RandomSource (a counter through splitmix64).
inline RandomSource CountingRandom() {
  auto state = std::make_shared<uint64_t>(0);
  return [state] {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
}

inline std::unique_ptr<ToolParser> Parser(std::string_view name) {
  auto parser = MakeToolParser(name, ToolParserOptions{CountingRandom()});
  EXPECT_TRUE(parser.ok()) << parser.status();
  return *std::move(parser);
}

// A stream's output put back together.
struct Streamed {
  std::string content;
  std::vector<ToolCall> calls;
  bool tools_called = false;
};

// Appends `delta` as the OpenAI SDK's stream accumulator does, checking the chunk shape: a
// call's first delta has the next index, an id and a name; later ones neither.
inline void Accumulate(const DeltaMessage& delta, Streamed* s) {
  if (delta.content.has_value()) {
    EXPECT_FALSE(delta.content->empty()) << "an empty content delta";
    s->content += *delta.content;
  }
  for (const ToolCallDelta& d : delta.tool_calls) {
    const int known = static_cast<int>(s->calls.size());
    if (d.index == known) {
      EXPECT_TRUE(d.id.has_value()) << "call " << d.index << "'s first delta has no id";
      EXPECT_TRUE(d.name.has_value()) << "call " << d.index << "'s first delta has no name";
      s->calls.push_back(ToolCall{d.id.value_or(""), d.name.value_or(""), ""});
    } else {
      EXPECT_TRUE(d.index >= 0 && d.index < known) << "delta for unknown call " << d.index;
      EXPECT_FALSE(d.id.has_value()) << "a later delta repeats the id";
      EXPECT_FALSE(d.name.has_value()) << "a later delta repeats the name";
      if (d.index < 0 || d.index >= known) continue;
    }
    s->calls[d.index].arguments += d.arguments;
  }
}

// Streams `text` cut at `cuts` (increasing offsets) and finishes.
inline Streamed StreamPieces(const ToolParser& parser, std::string_view text,
                             const std::vector<size_t>& cuts) {
  std::unique_ptr<ToolStreamParser> stream = parser.NewStream();
  Streamed s;
  size_t from = 0;
  for (size_t cut : cuts) {
    Accumulate(stream->Feed(text.substr(from, cut - from)), &s);
    from = cut;
  }
  Accumulate(stream->Feed(text.substr(from)), &s);
  Accumulate(stream->Finish(), &s);
  s.tools_called = stream->tools_called();
  return s;
}

// What the stream must give: Extract's calls (ids aside) and content.
inline void ExpectSame(const ExtractedToolCalls& want, const Streamed& got,
                       const std::string& where) {
  EXPECT_EQ(got.tools_called, want.tools_called) << where;
  EXPECT_EQ(got.content, want.content.value_or("")) << where;
  ASSERT_EQ(got.calls.size(), want.tool_calls.size()) << where;
  for (size_t i = 0; i < got.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, want.tool_calls[i].name) << where << " call " << i;
    EXPECT_EQ(got.calls[i].arguments, want.tool_calls[i].arguments) << where << " call " << i;
    EXPECT_FALSE(got.calls[i].id.empty()) << where;
  }
}

// Every two-piece split, byte by byte, and some random many-piece splits of `text` stream to
// what Extract returns.
inline void ExpectStreamingMatchesExtract(const ToolParser& parser, std::string_view text) {
  const ExtractedToolCalls want = parser.Extract(text);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    ExpectSame(want, StreamPieces(parser, text, {cut}), "split at " + std::to_string(cut));
  }
  std::vector<size_t> every;
  for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
  ExpectSame(want, StreamPieces(parser, text, every), "byte by byte");
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20 && text.size() > 2; ++trial) {
    std::vector<size_t> cuts;
    for (size_t i = 1; i < text.size(); ++i) {
      if (rng() % 4 == 0) cuts.push_back(i);
    }
    ExpectSame(want, StreamPieces(parser, text, cuts), "random split " + std::to_string(trial));
  }
}

}  // namespace vllm::frontend::parsers::testing

#endif  // VLLM_TESTS_UNIT_FRONTEND_TOOL_PARSER_TEST_UTIL_H_
