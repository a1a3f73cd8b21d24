// JsonRewriter: reads one JSON value a piece at a time and writes it as Python's
// json.dumps(json.loads(text), ensure_ascii=False) would, which is how vLLM turns a parsed
// call's arguments back into text. The shared JSON-text helpers of the parsers are here too.
// Internal to frontend/parsers/.
#ifndef VLLM_FRONTEND_PARSERS_JSON_REWRITER_H_
#define VLLM_FRONTEND_PARSERS_JSON_REWRITER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vllm::frontend::parsers {

// Appends code point `cp` as it appears inside a string written by json.dumps(ensure_ascii=
// False): '"' and '\' escaped, \b \f \n \r \t short, other controls as \u00XX, surrogates
// (which UTF-8 cannot hold) as \uXXXX, everything else as UTF-8.
void AppendJsonStringChar(uint32_t cp, std::string* out);

// Appends `s` (UTF-8) as a JSON string literal, quotes included, escaped as above.
void AppendJsonString(std::string_view s, std::string* out);

// Python's text for a number after a round trip through json.loads/json.dumps or ast:
// `digits` is an integer's decimal digits (an optional '-' first) and comes back without a
// negative zero; a float's text is parsed and written as repr() does, "Infinity" and
// "-Infinity" for overflow. False when `text` is not a number of that kind.
bool CanonicalInteger(std::string_view digits, std::string* out);
bool CanonicalFloat(std::string_view text, std::string* out);

// Reads one JSON value (RFC 8259, plus Python's NaN, Infinity and -Infinity) and appends its
// json.dumps text: separators ", " and ": ", no other whitespace, strings re-escaped, numbers
// canonical (CanonicalInteger / CanonicalFloat). Every byte it appends is final: the text
// appended after any prefix of the input is a prefix of the text for the whole value, so a
// stream can forward it at once (numbers, literals and a pending surrogate escape are held
// until they end). Nesting deeper than kMaxJsonNesting is an error. Not thread-safe.
class JsonRewriter {
 public:
  enum class State { kInProgress, kDone, kError };

  // Consumes the input while the value is incomplete, and appends what is final to *out.
  // Returns the number of bytes consumed: all of `in`, or fewer when the value completed
  // (up to its last byte; a number ends at the byte after it, which is not consumed) or an
  // error was found (the offending byte is not consumed). Consumes nothing once not
  // kInProgress.
  size_t Feed(std::string_view in, std::string* out);
  // The input ended: completes a top-level number (or literal); anything else still open is
  // an error.
  void Finish(std::string* out);

  State state() const { return state_; }
  // True while nothing but whitespace has been consumed.
  bool started() const { return started_; }
  // For a top-level string: its decoded text (complete once kDone).
  bool is_string() const { return top_is_string_; }
  const std::string& decoded_string() const { return decoded_; }

 private:
  enum class Mode {
    kValue,
    kObjectFirst,  // after '{': a key or '}'
    kArrayFirst,   // after '[': a value or ']'
    kKey,          // after ',' in an object
    kColon,
    kAfterValue,  // inside a container: ',' or its end
    kString,
    kEscape,
    kUnicode,
    kNumber,
    kLiteral,
  };

  // Handles one byte; false when it must be offered again (after a number or literal ended).
  bool Step(char c, std::string* out);
  bool StepValue(char c, std::string* out);
  bool StepString(char c, std::string* out);
  bool StepEscape(char c, std::string* out);
  void StepUnicode(char c, std::string* out);
  bool EndNumber(std::string* out);
  bool StepLiteral(char c, std::string* out);
  void Open(char bracket, std::string* out);
  void Close(char bracket, std::string* out);
  void AfterValue();
  void EmitCodePoint(uint32_t cp, std::string* out);
  void FlushHighSurrogate(std::string* out);
  void Fail() { state_ = State::kError; }

  State state_ = State::kInProgress;
  Mode mode_ = Mode::kValue;
  std::vector<char> stack_;  // '{' or '['
  bool started_ = false;
  bool in_key_ = false;
  bool top_is_string_ = false;
  std::string decoded_;
  std::string token_;  // a number or literal being read
  uint32_t unicode_ = 0;
  int unicode_digits_ = 0;
  uint32_t high_surrogate_ = 0;  // a \uD800-\uDBFF escape waiting for its pair
};

}  // namespace vllm::frontend::parsers

#endif  // VLLM_FRONTEND_PARSERS_JSON_REWRITER_H_
