// "pythonic": a Python list of calls, [get_weather(city="Paris", days=3), now()], as Llama
// 3.2 and Llama 4 write them (vLLM's PythonicToolParser). Keyword arguments become the JSON
// object json.dumps writes for them.
//
// As vLLM: the output must begin with '[' and the first call's name directly (its regex gate),
// and be nothing but the list (whitespace after it); a function name starts with a letter; an
// argument is name=literal (PythonLiteralRewriter: no expressions). The whole output is content
// otherwise, and there is never content beside calls. Positional arguments make it content too
// (vLLM's gate refuses them in a lone call; after an earlier call its greedy pattern lets them
// through and vLLM drops them).
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "frontend/parsers/json_rewriter.h"
#include "frontend/parsers/python_literal.h"
#include "frontend/parsers/text_util.h"
#include "frontend/parsers/tool_stream_base.h"

namespace vllm::frontend::parsers {
namespace {

// Longer function or argument names are refused.
constexpr size_t kMaxNameBytes = 256;

bool IsLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsNameChar(char c) { return IsLetter(c) || (c >= '0' && c <= '9') || c == '_'; }

class PythonicStream final : public ToolStreamBase {
 public:
  explicit PythonicStream(RandomSource random)
      : ToolStreamBase(std::move(random), IdStyle::kChatCompletion) {}

 private:
  enum class Mode {
    kStart,        // the first byte: '['
    kBeforeCall,   // a function name, or ']' after at least one call
    kName,         // the function's name, up to '('
    kBeforeParen,  // whitespace, then '('
    kBeforeArg,    // an argument name, or ')'
    kArgName,      // up to '='
    kArgEquals,    // whitespace, then '='
    kValue,        // the argument's literal
    kAfterArg,     // ',' or ')'
    kAfterCall,    // ',' or ']'
    kAfterList,    // whitespace only
  };

  void Process(DeltaMessage* out) override {
    while (!failed() && !buffer_.empty()) {
      if (mode_ == Mode::kValue) {
        if (!ProcessValue(out)) return;
        continue;
      }
      const char c = buffer_[0];
      if (!Step(c, out)) return;
      Consume(1, !current_call_sent());
    }
  }

  // Handles one byte outside argument values; false after a Fail.
  bool Step(char c, DeltaMessage* out) {
    const bool ok = mode_ == Mode::kStart || mode_ == Mode::kBeforeCall ||
                            mode_ == Mode::kAfterCall || mode_ == Mode::kAfterList
                        ? StepList(c)
                        : StepCall(c, out);
    if (!ok) Fail(out);
    return ok;
  }

  // The list around the calls. vLLM's regex gate wants the first call's name right after '['.
  bool StepList(char c) {
    const bool space = IsJsonSpace(c);
    switch (mode_) {
      case Mode::kStart:
        mode_ = Mode::kBeforeCall;
        return c == '[';
      case Mode::kBeforeCall:
        if (space) return !first_call_;
        if (c == ']' && calls() > 0) {
          mode_ = Mode::kAfterList;
          return true;
        }
        token_ = std::string(1, c);
        mode_ = Mode::kName;
        return IsLetter(c);
      case Mode::kAfterCall:
        if (space) return true;
        mode_ = c == ',' ? Mode::kBeforeCall : Mode::kAfterList;
        return c == ',' || c == ']';
      default:  // kAfterList
        return space;
    }
  }

  // A call: name(arg=literal, ...). Python's whitespace, except where vLLM's regex gate wants
  // none: between the first call's name and '(', and around its first argument's name.
  bool StepCall(char c, DeltaMessage* out) {
    const bool space = IsJsonSpace(c);
    const bool strict = first_call_ && argument_names_.empty();
    switch (mode_) {
      case Mode::kName:
      case Mode::kBeforeParen:
        if (mode_ == Mode::kName && IsNameChar(c) && token_.size() < kMaxNameBytes) {
          token_.push_back(c);
          return true;
        }
        if (space && !first_call_) {
          mode_ = Mode::kBeforeParen;
          return true;
        }
        return c == '(' && BeginCall(out);
      case Mode::kBeforeArg:
        if (space) return !strict;
        if (c == ')') return EndCall(out);
        token_ = std::string(1, c);
        mode_ = Mode::kArgName;
        return IsLetter(c) || (c == '_' && !strict);
      case Mode::kArgName:
      case Mode::kArgEquals:
        if (mode_ == Mode::kArgName && IsNameChar(c) && token_.size() < kMaxNameBytes) {
          token_.push_back(c);
          return true;
        }
        if (space && !strict) {
          mode_ = Mode::kArgEquals;
          return true;
        }
        return c == '=' && BeginArgument(out);
      case Mode::kAfterArg:
        if (space) return true;
        if (c == ')') return EndCall(out);
        mode_ = Mode::kBeforeArg;
        return c == ',';
      default:
        return false;
    }
  }

  bool BeginCall(DeltaMessage* out) {
    if (!StartCall(out)) return false;
    arguments_.clear();  // (not = "{": GCC 12 warns wrongly, PR105329)
    arguments_.push_back('{');
    argument_names_.clear();
    UpdateCall(token_, arguments_, out);
    mode_ = Mode::kBeforeArg;
    return true;
  }

  bool BeginArgument(DeltaMessage* out) {
    if (!argument_names_.insert(token_).second) return false;  // f(a=1, a=2): an error
    if (argument_names_.size() > 1) arguments_ += ", ";
    AppendJsonString(token_, &arguments_);
    arguments_ += ": ";
    UpdateCall(std::nullopt, arguments_, out);
    value_.emplace();
    mode_ = Mode::kValue;
    return true;
  }

  bool ProcessValue(DeltaMessage* out) {
    const size_t n = value_->Feed(buffer_, &arguments_);
    Consume(n, !current_call_sent());
    UpdateCall(std::nullopt, arguments_, out);
    if (value_->state() == PythonLiteralRewriter::State::kError) {
      Fail(out);
      return false;
    }
    if (value_->state() != PythonLiteralRewriter::State::kDone) return false;
    mode_ = Mode::kAfterArg;
    return true;
  }

  bool EndCall(DeltaMessage* out) {
    arguments_ += "}";
    UpdateCall(std::nullopt, arguments_, out);
    first_call_ = false;
    mode_ = Mode::kAfterCall;
    return true;
  }

  void Finalize(DeltaMessage* out) override {
    if (mode_ == Mode::kValue) value_->Finish(&arguments_);  // the call is still open: fails
    if (mode_ != Mode::kAfterList) Fail(out);
  }

  Mode mode_ = Mode::kStart;
  bool first_call_ = true;
  std::string token_;
  std::string arguments_;
  std::set<std::string> argument_names_;
  std::optional<PythonLiteralRewriter> value_;
};

class PythonicToolParser final : public ToolParser {
 public:
  explicit PythonicToolParser(ToolParserOptions options) : options_(std::move(options)) {}

  std::string_view name() const override { return "pythonic"; }

  ExtractedToolCalls Extract(std::string_view model_output) const override {
    PythonicStream stream(options_.random);
    return ExtractWithStream(&stream, model_output);
  }

  std::unique_ptr<ToolStreamParser> NewStream() const override {
    return std::make_unique<PythonicStream>(options_.random);
  }

 private:
  const ToolParserOptions options_;
};

}  // namespace

std::unique_ptr<ToolParser> NewPythonicToolParser(ToolParserOptions options) {
  return std::make_unique<PythonicToolParser>(std::move(options));
}

}  // namespace vllm::frontend::parsers
