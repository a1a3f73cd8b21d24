// Fuzzes the tool-call and reasoning parsers (frontend/parsers/): the input's first byte picks
// the parsers and the delta size, the rest is model output. Extract runs on the whole text; a
// stream of each kind runs on it cut into deltas of 1..16 bytes. Invariants: no crash, leak or
// runaway time; Extract without calls returns the text as content (mistral's malformed array:
// the text after [TOOL_CALLS], stripped, as vLLM); a stream's deltas have the OpenAI shape (a
// call's first delta carries the next index, an id and a name, later ones neither); a tool
// stream that sends no call sends the whole text as content; a reasoning stream sends no more
// text than it was fed, and all of it when the text has no tag.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "frontend/parsers/reasoning_parser.h"
#include "frontend/parsers/tool_parser.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace vllm::frontend::parsers;

void CheckToolParser(const ToolParser& parser, std::string_view text, size_t piece) {
  const ExtractedToolCalls whole = parser.Extract(text);
  FUZZ_CHECK(whole.tools_called == !whole.tool_calls.empty(), "tools_called without calls");
  if (!whole.tools_called && parser.name() != "mistral") {
    FUZZ_CHECK(whole.content == std::string(text), "Extract lost text");
  }
  auto stream = parser.NewStream();
  std::string content;
  size_t calls = 0;
  auto take = [&](const DeltaMessage& d) {
    if (d.content.has_value()) {
      FUZZ_CHECK(!d.content->empty(), "an empty content delta");
      content += *d.content;
    }
    for (const ToolCallDelta& c : d.tool_calls) {
      const bool first = c.index == static_cast<int>(calls);
      FUZZ_CHECK(first || (c.index >= 0 && c.index < static_cast<int>(calls)), "a bad index");
      FUZZ_CHECK(c.id.has_value() == first && c.name.has_value() == first,
                 "id and name must come with a call's first delta only");
      if (first) ++calls;
    }
  };
  for (size_t at = 0; at < text.size(); at += piece) take(stream->Feed(text.substr(at, piece)));
  take(stream->Finish());
  FUZZ_CHECK(stream->tools_called() == (calls > 0), "tools_called disagrees with the deltas");
  if (calls == 0) FUZZ_CHECK(content == text, "a stream without calls lost text");
}

void CheckReasoningParser(const ReasoningParser& parser, std::string_view text, size_t piece,
                          bool thinking) {
  const ReasoningRequestOptions request{.enable_thinking = thinking};
  const ReasoningResult whole = parser.Extract(text, request);
  FUZZ_CHECK(whole.reasoning_content.value_or("").size() + whole.content.value_or("").size() <=
                 text.size(),
             "Extract made text up");
  auto stream = parser.NewStream(request);
  ReasoningDelta all;
  for (size_t at = 0; at < text.size(); at += piece)
    all.Append(stream->Feed(text.substr(at, piece)));
  all.Append(stream->Finish());
  const size_t sent = all.reasoning_content.value_or("").size() + all.content.value_or("").size();
  FUZZ_CHECK(sent <= text.size(), "a stream made text up");
  if (text.find('<') == std::string_view::npos)
    FUZZ_CHECK(sent == text.size(), "a stream lost text");
  (void)parser.IsReasoningEnd(text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const std::string_view text = vllm::fuzz::AsText(data + 1, size - 1);
  const size_t piece = 1 + (flags >> 4);
  static const auto* const kTools = [] {
    auto* parsers = new std::vector<std::unique_ptr<ToolParser>>();
    for (const std::string& name : ToolParserNames()) parsers->push_back(*MakeToolParser(name));
    return parsers;
  }();
  static const auto* const kReasoning = [] {
    auto* parsers = new std::vector<std::unique_ptr<ReasoningParser>>();
    for (const std::string& name : ReasoningParserNames()) {
      parsers->push_back(*MakeReasoningParser(name));
    }
    return parsers;
  }();
  CheckToolParser(*(*kTools)[flags % kTools->size()], text, piece);
  CheckReasoningParser(*(*kReasoning)[(flags >> 2) % kReasoning->size()], text, piece,
                       (flags & 8) == 0);
  return 0;
}
