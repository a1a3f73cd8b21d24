// "hermes": <tool_call>{"name": ..., "arguments": {...}}</tool_call>, as Hermes 2 Pro,
// Qwen2.5 and Qwen3 write calls (vLLM's Hermes2ProToolParser).
//
// Content is the text before the first <tool_call>; text between and after calls is dropped
// (as vLLM does in both modes). A call's closing tag may be missing at the end of the output.
#include <optional>
#include <string_view>

#include "frontend/parsers/text_util.h"
#include "frontend/parsers/tool_call_object.h"
#include "frontend/parsers/tool_stream_base.h"

namespace vllm::frontend::parsers {
namespace {

constexpr std::string_view kStartTag = "<tool_call>";
constexpr std::string_view kEndTag = "</tool_call>";

class HermesStream final : public ToolStreamBase {
 public:
  explicit HermesStream(RandomSource random)
      : ToolStreamBase(std::move(random), IdStyle::kChatCompletion) {}

 private:
  enum class Mode {
    kContent,    // before the first call
    kCall,       // inside <tool_call>, reading the JSON object
    kAfterCall,  // after the object: whitespace, then </tool_call>
    kBetween,    // after a call: dropped text until the next <tool_call>
  };

  void Process(DeltaMessage* out) override {
    while (!failed() && !buffer_.empty()) {
      const bool more = mode_ == Mode::kCall        ? ProcessCall(out)
                        : mode_ == Mode::kAfterCall ? ProcessAfterCall(out)
                                                    : ProcessText(out);
      if (!more) return;
    }
  }

  // Text outside calls: content before the first, dropped after; a partial <tool_call> at
  // the end is held back.
  bool ProcessText(DeltaMessage* out) {
    const bool content = mode_ == Mode::kContent;
    const size_t at = buffer_.find(kStartTag);
    if (at == std::string::npos) {
      const size_t n = buffer_.size() - PartialTagOverlap(buffer_, kStartTag);
      if (content) AddContent(out, std::string_view(buffer_).substr(0, n));
      Consume(n, /*hold=*/false);
      return false;
    }
    if (content) AddContent(out, std::string_view(buffer_).substr(0, at));
    Consume(at, /*hold=*/false);
    Consume(kStartTag.size());
    if (!StartCall(out)) return false;
    call_.emplace(/*accept_parameters=*/false);
    mode_ = Mode::kCall;
    return true;
  }

  bool ProcessCall(DeltaMessage* out) {
    if (!FeedCall(*call_, out)) return false;
    mode_ = Mode::kAfterCall;
    return true;
  }

  bool ProcessAfterCall(DeltaMessage* out) {
    size_t spaces = 0;
    while (spaces < buffer_.size() && IsJsonSpace(buffer_[spaces])) ++spaces;
    Consume(spaces, /*hold=*/false);
    if (buffer_.empty()) return false;
    if (buffer_.starts_with(kEndTag)) {
      Consume(kEndTag.size(), /*hold=*/false);
      mode_ = Mode::kBetween;
      return true;
    }
    if (!kEndTag.starts_with(buffer_)) Fail(out);  // text inside the tags after the object
    return false;
  }

  void Finalize(DeltaMessage* out) override {
    switch (mode_) {
      case Mode::kContent:
        AddContent(out, buffer_);
        buffer_.clear();
        return;
      case Mode::kBetween:
        buffer_.clear();
        return;
      case Mode::kCall:
        Fail(out);  // the output ended inside a call's JSON
        return;
      case Mode::kAfterCall:
        // A complete object whose closing tag never came is a call (vLLM's second regex
        // alternative); a partial closing tag makes the body invalid JSON for vLLM.
        if (!buffer_.empty()) Fail(out);
        return;
    }
  }

  Mode mode_ = Mode::kContent;
  std::optional<ToolCallObjectParser> call_;
};

class HermesToolParser final : public ToolParser {
 public:
  explicit HermesToolParser(ToolParserOptions options) : options_(std::move(options)) {}

  std::string_view name() const override { return "hermes"; }
  bool reads_special_tokens() const override { return true; }  // <tool_call> (Qwen)

  ExtractedToolCalls Extract(std::string_view model_output) const override {
    HermesStream stream(options_.random);
    return ExtractWithStream(&stream, model_output);
  }

  std::unique_ptr<ToolStreamParser> NewStream() const override {
    return std::make_unique<HermesStream>(options_.random);
  }

 private:
  const ToolParserOptions options_;
};

}  // namespace

std::unique_ptr<ToolParser> NewHermesToolParser(ToolParserOptions options) {
  return std::make_unique<HermesToolParser>(std::move(options));
}

}  // namespace vllm::frontend::parsers
