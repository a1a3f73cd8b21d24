// "pythonic": a Python list of calls, [get_weather(city="Paris", days=3), now()], as Llama
// 3.2 and Llama 4 write them (vLLM's PythonicToolParser). Keyword arguments become the JSON
// object json.dumps writes for them.
//
// As vLLM: the output must begin with '[' and be nothing but the list (whitespace after it);
// a function name starts with a letter and is followed directly by '('; an argument is
// name=literal (PythonLiteralRewriter: no positional arguments, no expressions). The whole
// output is content otherwise, and there is never content beside calls.
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
    kStart,       // the first byte: '['
    kBeforeCall,  // a function name, or ']' after at least one call
    kName,        // the function's name, up to '('
    kBeforeArg,   // an argument name, or ')'
    kArgName,     // up to '='
    kValue,       // the argument's literal
    kAfterArg,    // ',' or ')'
    kAfterCall,   // ',' or ']'
    kAfterList,   // whitespace only
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
    const bool space = IsJsonSpace(c);
    switch (mode_) {
      case Mode::kStart:
        if (c != '[') break;
        mode_ = Mode::kBeforeCall;
        return true;
      case Mode::kBeforeCall:
        if (space) return true;
        if (c == ']' && calls() > 0) {
          mode_ = Mode::kAfterList;
          return true;
        }
        if (!IsLetter(c)) break;
        token_ = std::string(1, c);
        mode_ = Mode::kName;
        return true;
      case Mode::kName:
        if (IsNameChar(c) && token_.size() < kMaxNameBytes) {
          token_.push_back(c);
          return true;
        }
        if (c != '(' || !StartCall(out)) break;
        arguments_.clear();  // (not = "{": GCC 12 warns wrongly, PR105329)
        arguments_.push_back('{');
        argument_names_.clear();
        UpdateCall(token_, arguments_, out);
        mode_ = Mode::kBeforeArg;
        return true;
      case Mode::kBeforeArg:
        if (space) return true;
        if (c == ')') return EndCall(out);
        if (!IsLetter(c) && c != '_') break;
        token_ = std::string(1, c);
        mode_ = Mode::kArgName;
        return true;
      case Mode::kArgName:
        if (IsNameChar(c) && token_.size() < kMaxNameBytes) {
          token_.push_back(c);
          return true;
        }
        if (c != '=' || !argument_names_.insert(token_).second) break;  // f(a=1, a=2): an error
        if (argument_names_.size() > 1) arguments_ += ", ";
        AppendJsonString(token_, &arguments_);
        arguments_ += ": ";
        UpdateCall(std::nullopt, arguments_, out);
        value_.emplace();
        mode_ = Mode::kValue;
        return true;
      case Mode::kAfterArg:
        if (space) return true;
        if (c == ',') {
          mode_ = Mode::kBeforeArg;
          return true;
        }
        if (c == ')') return EndCall(out);
        break;
      case Mode::kAfterCall:
        if (space) return true;
        if (c == ',' || c == ']') {
          mode_ = c == ',' ? Mode::kBeforeCall : Mode::kAfterList;
          return true;
        }
        break;
      case Mode::kAfterList:
        if (space) return true;
        break;
      case Mode::kValue:
        break;
    }
    Fail(out);
    return false;
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
    mode_ = Mode::kAfterCall;
    return true;
  }

  void Finalize(DeltaMessage* out) override {
    if (mode_ == Mode::kValue) value_->Finish(&arguments_);  // the call is still open: fails
    if (mode_ != Mode::kAfterList) Fail(out);
  }

  Mode mode_ = Mode::kStart;
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
