// The outputs of forced tool choices, which a grammar built from the tools shapes (vLLM's
// get_json_schema_from_tools, and its "required"/named branches of the chat parser):
//
//   "required": a JSON array of calls, [{"name": "f", "parameters": {...}}, ...]; each element
//   is a call, its arguments the json.dumps text of "parameters" (vLLM's non-streaming
//   answer). Output that is not such an array has no calls.
//   named:      the whole output is the arguments of the one function the request named, as
//   generated (vLLM sends the text unchanged); blank output has no call.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "frontend/parsers/text_util.h"
#include "frontend/parsers/tool_call_object.h"
#include "frontend/parsers/tool_stream_base.h"

namespace vllm::frontend::parsers {
namespace {

class RequiredStream final : public ToolStreamBase {
 public:
  explicit RequiredStream(RandomSource random)
      : ToolStreamBase(std::move(random), IdStyle::kChatCompletion) {}

 private:
  enum class Mode {
    kStart,    // before '['
    kFirst,    // after '[': the first call or ']'
    kBetween,  // after a call: ',' or ']'
    kNext,     // after ',': the next call
    kCall,     // reading one call object
    kDone,     // after ']': whitespace only
  };

  void Process(DeltaMessage* out) override {
    while (!failed() && !buffer_.empty()) {
      if (!Step(out)) return;
    }
  }

  // Handles the front of buffer_; false when it needs more text (or failed).
  bool Step(DeltaMessage* out) {
    if (mode_ == Mode::kCall) {
      if (!FeedCall(*call_, out)) return false;
      mode_ = Mode::kBetween;
      return true;
    }
    size_t spaces = 0;
    while (spaces < buffer_.size() && IsJsonSpace(buffer_[spaces])) ++spaces;
    Consume(spaces);
    if (buffer_.empty()) return false;
    const char c = buffer_[0];
    switch (mode_) {
      case Mode::kStart:
        if (c != '[') break;
        Consume(1);
        mode_ = Mode::kFirst;
        return true;
      case Mode::kFirst:
      case Mode::kNext:
        if (c == ']' && mode_ == Mode::kFirst) {
          Consume(1);
          mode_ = Mode::kDone;
          return true;
        }
        if (c != '{' || !StartCall(out)) break;
        call_.emplace(/*accept_parameters=*/true);
        mode_ = Mode::kCall;
        return true;
      case Mode::kBetween:
        if (c != ',' && c != ']') break;
        Consume(1);
        mode_ = c == ',' ? Mode::kNext : Mode::kDone;
        return true;
      case Mode::kDone:
      case Mode::kCall:
        break;
    }
    Fail(out);
    return false;
  }

  void Finalize(DeltaMessage* out) override {
    if (mode_ != Mode::kDone) Fail(out);
  }

  Mode mode_ = Mode::kStart;
  std::optional<ToolCallObjectParser> call_;
};

class RequiredToolParser final : public ToolParser {
 public:
  explicit RequiredToolParser(ToolParserOptions options) : options_(std::move(options)) {}
  std::string_view name() const override { return "required"; }
  ExtractedToolCalls Extract(std::string_view text) const override {
    if (text.size() > kMaxToolParseBytes) return ExtractedToolCalls{false, {}, std::string(text)};
    RequiredStream stream(options_.random);
    return ExtractWithStream(&stream, text);
  }
  std::unique_ptr<ToolStreamParser> NewStream() const override {
    return std::make_unique<RequiredStream>(options_.random);
  }

 private:
  const ToolParserOptions options_;
};

// Every piece of output is an argument fragment of the one call; its first non-empty piece
// opens the call (id and name).
class NamedStream final : public ToolStreamParser {
 public:
  NamedStream(std::string name, std::string id) : name_(std::move(name)), id_(std::move(id)) {}
  DeltaMessage Feed(std::string_view delta_text) override {
    DeltaMessage out;
    if (delta_text.empty()) return out;
    ToolCallDelta d;
    if (!started_) {
      d.id = id_;
      d.name = name_;
      started_ = true;
    }
    d.arguments = std::string(delta_text);
    out.tool_calls.push_back(std::move(d));
    return out;
  }
  DeltaMessage Finish() override { return {}; }
  bool tools_called() const override { return started_; }

 private:
  const std::string name_;
  const std::string id_;
  bool started_ = false;
};

class NamedToolParser final : public ToolParser {
 public:
  NamedToolParser(std::string function, ToolParserOptions options)
      : function_(std::move(function)), options_(std::move(options)) {}
  std::string_view name() const override { return "named"; }
  ExtractedToolCalls Extract(std::string_view text) const override {
    if (StripAscii(text).empty()) return ExtractedToolCalls{false, {}, std::nullopt};
    ExtractedToolCalls r;
    r.tools_called = true;
    r.tool_calls.push_back(ToolCall{MakeToolCallId(options_.random), function_, std::string(text)});
    return r;
  }
  std::unique_ptr<ToolStreamParser> NewStream() const override {
    return std::make_unique<NamedStream>(function_, MakeToolCallId(options_.random));
  }

 private:
  const std::string function_;
  const ToolParserOptions options_;
};

}  // namespace

std::unique_ptr<ToolParser> MakeRequiredToolParser(ToolParserOptions options) {
  options.random = RandomOrDefault(options.random);
  return std::make_unique<RequiredToolParser>(std::move(options));
}

std::unique_ptr<ToolParser> MakeNamedToolParser(std::string function, ToolParserOptions options) {
  options.random = RandomOrDefault(options.random);
  return std::make_unique<NamedToolParser>(std::move(function), std::move(options));
}

}  // namespace vllm::frontend::parsers
