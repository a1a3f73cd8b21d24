// "llama3_json": Llama 3.1/3.2 JSON calls, {"name": ..., "parameters": {...}} (or
// "arguments"), optionally after <|python_tag|>, several separated by ';' (vLLM's
// Llama3JsonToolParser).
//
// vLLM's two modes differ and so do ours: Extract parses every JSON object anywhere in the
// output (any that is not a call makes the whole output content) and returns no content;
// a stream treats the output as calls only when it begins (after whitespace) with
// <|python_tag|> or '{', and as plain content otherwise.
#include <optional>
#include <string_view>
#include <vector>

#include "frontend/parsers/text_util.h"
#include "frontend/parsers/tool_call_object.h"
#include "frontend/parsers/tool_stream_base.h"

namespace vllm::frontend::parsers {
namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>";

class Llama3JsonStream final : public ToolStreamBase {
 public:
  explicit Llama3JsonStream(RandomSource random)
      : ToolStreamBase(std::move(random), IdStyle::kChatCompletion) {}

 private:
  enum class Mode {
    kStart,    // deciding between calls and plain content
    kObjects,  // between calls: whitespace and ';'
    kCall,     // reading one JSON object
  };

  void Process(DeltaMessage* out) override {
    while (!failed() && !buffer_.empty()) {
      const bool more = mode_ == Mode::kStart     ? ProcessStart(out)
                        : mode_ == Mode::kObjects ? ProcessBetween(out)
                                                  : ProcessCall(out);
      if (!more) return;
    }
  }

  bool ProcessStart(DeltaMessage* out) {
    size_t spaces = 0;
    while (spaces < buffer_.size() && IsJsonSpace(buffer_[spaces])) ++spaces;
    Consume(spaces);
    if (buffer_.empty()) return false;
    if (buffer_[0] == '{') {
      mode_ = Mode::kObjects;
      return true;
    }
    if (buffer_.starts_with(kPythonTag)) {
      Consume(kPythonTag.size());
      mode_ = Mode::kObjects;
      return true;
    }
    if (!kPythonTag.starts_with(buffer_)) Fail(out);  // not a call: plain content
    return false;
  }

  bool ProcessBetween(DeltaMessage* out) {
    size_t skip = 0;
    while (skip < buffer_.size() && (IsJsonSpace(buffer_[skip]) || buffer_[skip] == ';')) ++skip;
    Consume(skip, /*hold=*/calls() == 0);
    if (buffer_.empty()) return false;
    if (buffer_[0] != '{') {
      Fail(out);
      return false;
    }
    if (!StartCall(out)) return false;
    call_.emplace(/*accept_parameters=*/true);
    mode_ = Mode::kCall;
    return true;
  }

  bool ProcessCall(DeltaMessage* out) {
    if (!FeedCall(*call_, out)) return false;
    mode_ = Mode::kObjects;
    return true;
  }

  void Finalize(DeltaMessage* out) override {
    // Output that ended before a call completed (or held only the tag and whitespace) is
    // content.
    if (mode_ != Mode::kObjects || calls() == 0) Fail(out);
  }

  Mode mode_ = Mode::kStart;
  std::optional<ToolCallObjectParser> call_;
};

class Llama3JsonToolParser final : public ToolParser {
 public:
  explicit Llama3JsonToolParser(ToolParserOptions options) : options_(std::move(options)) {}

  std::string_view name() const override { return "llama3_json"; }

  // vLLM's extract_tool_calls: every '{' outside an object already read starts one, which
  // must be a call; the text around the objects is dropped.
  ExtractedToolCalls Extract(std::string_view text) const override {
    const ExtractedToolCalls none{false, {}, std::string(text)};
    if (text.size() > kMaxToolParseBytes) return none;
    std::vector<ToolCall> calls;
    for (size_t at = text.find('{'); at != std::string_view::npos; at = text.find('{', at)) {
      ToolCallObjectParser object(/*accept_parameters=*/true);
      const size_t n = object.Feed(text.substr(at));
      if (object.state() != ToolCallObjectParser::State::kDone) return none;
      if (static_cast<int>(calls.size()) >= kMaxToolCalls) return none;
      calls.push_back(
          ToolCall{MakeToolCallId(options_.random), *object.name(), object.arguments()});
      at += n;
    }
    if (calls.empty()) return none;
    return ExtractedToolCalls{true, std::move(calls), std::nullopt};
  }

  std::unique_ptr<ToolStreamParser> NewStream() const override {
    return std::make_unique<Llama3JsonStream>(options_.random);
  }

 private:
  const ToolParserOptions options_;
};

}  // namespace

std::unique_ptr<ToolParser> NewLlama3JsonToolParser(ToolParserOptions options) {
  return std::make_unique<Llama3JsonToolParser>(std::move(options));
}

}  // namespace vllm::frontend::parsers
