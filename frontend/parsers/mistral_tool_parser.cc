// "mistral": calls after the [TOOL_CALLS] token (vLLM's MistralToolParser), in the forms
// Mistral's tokenizer versions write:
//   before v11 (Mistral 7B v0.3, Mixtral):  [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]
//   v11 (Mistral Small 3.1, ...):           [TOOL_CALLS]name{args}[TOOL_CALLS]name{args}
//   v13 text form:                          [TOOL_CALLS]name[ARGS]{args}, optionally
//                                           name[CALL_ID]id[ARGS]{args}
// vLLM picks the form from the tokenizer's version; we pick it from the text: a '[' after the
// first [TOOL_CALLS] is the array form. In the array form the arguments are rewritten as
// json.dumps does; in the others they are the model's text, unchecked, as vLLM sends them.
// Ids are 9 alphanumerics (mistral_common's rule), or the model's [CALL_ID].
#include <optional>
#include <string>
#include <string_view>

#include "frontend/parsers/text_util.h"
#include "frontend/parsers/tool_call_object.h"
#include "frontend/parsers/tool_stream_base.h"

namespace vllm::frontend::parsers {
namespace {

constexpr std::string_view kToolCalls = "[TOOL_CALLS]";
constexpr std::string_view kArgs = "[ARGS]";
constexpr std::string_view kCallId = "[CALL_ID]";

// The first of `tags` in `text` at or after 0: its offset and which (npos when none).
struct TagHit {
  size_t at = std::string::npos;
  std::string_view tag;
};
TagHit FindFirst(std::string_view text, std::initializer_list<std::string_view> tags) {
  TagHit hit;
  for (std::string_view tag : tags) {
    const size_t at = text.find(tag);
    if (at < hit.at) hit = TagHit{at, tag};
  }
  return hit;
}

size_t HoldBack(std::string_view text, std::initializer_list<std::string_view> tags) {
  size_t hold = 0;
  for (std::string_view tag : tags) hold = std::max(hold, PartialTagOverlap(text, tag));
  return hold;
}

class MistralStream final : public ToolStreamBase {
 public:
  explicit MistralStream(RandomSource random)
      : ToolStreamBase(std::move(random), IdStyle::kMistral) {}

  bool array_form() const { return array_form_; }

 private:
  enum class Mode {
    kContent,     // before [TOOL_CALLS]
    kDetect,      // after it: '[' or a name
    kArrayItem,   // array form: before an object ('{', or ']' when `first`)
    kArrayCall,   // array form: reading an object
    kArrayAfter,  // array form: ',' or ']'
    kDone,        // after the array: dropped
    kName,        // name form: the name, up to '{' or [ARGS] ([CALL_ID] may come between)
    kCallId,      // name form: the model's call id, up to [ARGS]
    kArguments,   // name form: the arguments, up to the next [TOOL_CALLS]
  };

  void Process(DeltaMessage* out) override {
    while (!failed() && !buffer_.empty() && Step(out)) {
    }
  }

  bool Step(DeltaMessage* out) {
    switch (mode_) {
      case Mode::kContent:
        return ProcessContent(out);
      case Mode::kDetect:
        SkipSpaces(true);
        if (buffer_.empty()) return false;
        array_form_ = buffer_[0] == '[';
        if (array_form_) Consume(1);
        mode_ = array_form_ ? Mode::kArrayItem : Mode::kName;
        return true;
      case Mode::kArrayItem:
      case Mode::kArrayAfter:
        return ProcessArrayPunctuation(out);
      case Mode::kArrayCall:
        return ProcessArrayCall(out);
      case Mode::kDone:
        Consume(buffer_.size(), /*hold=*/false);
        return false;
      case Mode::kName:
      case Mode::kCallId:
        return ProcessName(out);
      case Mode::kArguments:
        return ProcessArguments(out);
    }
    return false;
  }

  void SkipSpaces(bool hold) {
    size_t n = 0;
    while (n < buffer_.size() && IsJsonSpace(buffer_[n])) ++n;
    Consume(n, hold);
  }

  bool ProcessContent(DeltaMessage* out) {
    const size_t at = buffer_.find(kToolCalls);
    if (at == std::string::npos) {
      const size_t n = buffer_.size() - PartialTagOverlap(buffer_, kToolCalls);
      AddContent(out, std::string_view(buffer_).substr(0, n));
      Consume(n, /*hold=*/false);
      return false;
    }
    AddContent(out, std::string_view(buffer_).substr(0, at));
    Consume(at, /*hold=*/false);
    Consume(kToolCalls.size());
    mode_ = Mode::kDetect;
    return true;
  }

  bool ProcessArrayPunctuation(DeltaMessage* out) {
    SkipSpaces(calls() == 0);
    if (buffer_.empty()) return false;
    const char c = buffer_[0];
    if (mode_ == Mode::kArrayItem && c == '{') {
      if (!StartCall(out)) return false;
      object_.emplace(/*accept_parameters=*/false);
      mode_ = Mode::kArrayCall;
      return true;
    }
    if (mode_ == Mode::kArrayAfter && (c == ',' || c == ']')) {
      Consume(1, /*hold=*/false);
      mode_ = c == ',' ? Mode::kArrayItem : Mode::kDone;
      return true;
    }
    Fail(out);  // also an empty array: no calls
    return false;
  }

  bool ProcessArrayCall(DeltaMessage* out) {
    if (!FeedCall(*object_, out)) return false;
    mode_ = Mode::kArrayAfter;
    return true;
  }

  bool ProcessName(DeltaMessage* out) {
    const bool in_name = mode_ == Mode::kName;
    std::string& text = in_name ? name_ : call_id_;
    const TagHit hit = in_name ? FindFirst(buffer_, {"{", kArgs, kCallId, kToolCalls})
                               : FindFirst(buffer_, {kArgs, kToolCalls});
    if (hit.at == std::string::npos) {
      const size_t n = buffer_.size() - HoldBack(buffer_, {kArgs, kCallId, kToolCalls});
      text.append(buffer_, 0, n);
      Consume(n);
      return false;
    }
    text.append(buffer_, 0, hit.at);
    Consume(hit.at);
    if (hit.tag == kToolCalls) {
      // A segment without arguments is no call (vLLM skips it).
      Consume(hit.tag.size());
      name_.clear();
      call_id_.clear();
      mode_ = Mode::kName;
      return true;
    }
    if (hit.tag == kCallId) {
      Consume(hit.tag.size());
      mode_ = Mode::kCallId;
      return true;
    }
    if (hit.tag == kArgs) Consume(hit.tag.size());  // a '{' stays: it begins the arguments
    if (!StartCall(out)) return false;
    UpdateCallWithId(std::string(StripAscii(name_)), "", StripAscii(call_id_), out);
    name_.clear();
    call_id_.clear();
    arguments_.clear();
    mode_ = Mode::kArguments;
    return true;
  }

  bool ProcessArguments(DeltaMessage* out) {
    const size_t at = buffer_.find(kToolCalls);
    const size_t n =
        at == std::string::npos ? buffer_.size() - PartialTagOverlap(buffer_, kToolCalls) : at;
    arguments_.append(buffer_, 0, n);
    Consume(n, /*hold=*/false);
    UpdateCall(std::nullopt, arguments_, out);
    if (at == std::string::npos) return false;
    Consume(kToolCalls.size());
    mode_ = Mode::kName;
    return true;
  }

  void Finalize(DeltaMessage* out) override {
    switch (mode_) {
      case Mode::kContent:
        AddContent(out, buffer_);
        buffer_.clear();
        return;
      case Mode::kDone:
        return;
      case Mode::kArguments:
        // A partial [TOOL_CALLS] held back at the end was the arguments' text.
        arguments_ += buffer_;
        buffer_.clear();
        UpdateCall(std::nullopt, arguments_, out);
        return;
      case Mode::kName:
      case Mode::kCallId:
        if (calls() > 0) {
          Consume(buffer_.size(), /*hold=*/false);
          held_raw_.clear();
          return;
        }
        Fail(out);
        return;
      default:
        Fail(out);  // the array (or the detection) never completed
        return;
    }
  }

  Mode mode_ = Mode::kContent;
  bool array_form_ = false;
  std::optional<ToolCallObjectParser> object_;
  std::string name_;
  std::string call_id_;
  std::string arguments_;
};

class MistralToolParser final : public ToolParser {
 public:
  explicit MistralToolParser(ToolParserOptions options) : options_(std::move(options)) {}

  std::string_view name() const override { return "mistral"; }
  bool reads_special_tokens() const override { return true; }  // [TOOL_CALLS]

  ExtractedToolCalls Extract(std::string_view model_output) const override {
    MistralStream stream(options_.random);
    ExtractedToolCalls result = ExtractWithStream(&stream, model_output);
    if (result.tools_called || !stream.array_form()) return result;
    // vLLM retries a malformed array with the text from its first "[{" to its last "}]" (its
    // regex \[{.*}\]), and answers with the text after [TOOL_CALLS], stripped, when that fails
    // too.
    const size_t bot = model_output.find(kToolCalls);
    const std::string_view after = StripAscii(model_output.substr(bot + kToolCalls.size()));
    const size_t first = after.find("[{");
    const size_t last = after.rfind("}]");
    if (first != std::string_view::npos && last != std::string_view::npos && first < last) {
      MistralStream retry(options_.random);
      ExtractedToolCalls second = ExtractWithStream(
          &retry, std::string(kToolCalls) + std::string(after.substr(first, last + 2 - first)));
      if (second.tools_called) {
        if (bot > 0) second.content = std::string(model_output.substr(0, bot));
        return second;
      }
    }
    result.content = std::string(after);
    return result;
  }

  std::unique_ptr<ToolStreamParser> NewStream() const override {
    return std::make_unique<MistralStream>(options_.random);
  }

 private:
  const ToolParserOptions options_;
};

}  // namespace

std::unique_ptr<ToolParser> NewMistralToolParser(ToolParserOptions options) {
  return std::make_unique<MistralToolParser>(std::move(options));
}

}  // namespace vllm::frontend::parsers
