// PythonLiteralRewriter: reads one Python literal a piece at a time and writes the JSON that
// json.dumps(ast.literal_value, ensure_ascii=False) gives, for the pythonic tool-call parser.
// Internal to frontend/parsers/.
#ifndef VLLM_FRONTEND_PARSERS_PYTHON_LITERAL_H_
#define VLLM_FRONTEND_PARSERS_PYTHON_LITERAL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/parsers/json_rewriter.h"

namespace vllm::frontend::parsers {

// The literals vLLM's pythonic parser accepts (ast.Constant, ast.List, ast.Dict with constant
// keys): strings ('…', "…", triple-quoted, r/u prefixes, adjacent pieces joined, Python's
// escapes), integers (decimal, 0x/0o/0b within 64 bits, '_' separators), floats, True, False,
// None, lists and dicts, nested up to kMaxJsonNesting; and, unlike vLLM, a leading '-' on a
// number (vLLM's ast check refuses the UnaryOp). Written as json.dumps writes them: dict keys
// as strings (1 -> "1", True -> "true", None -> "null"), ", " and ": " separators, numbers as
// Python prints them. Anything else (tuples, sets, bytes, f-strings, names, calls, comments)
// is an error. Everything appended is final, as JsonRewriter's is. Not thread-safe.
class PythonLiteralRewriter {
 public:
  enum class State { kInProgress, kDone, kError };

  // Consumes input while the literal is incomplete, appending what is final to *out; returns
  // the bytes consumed. A literal ends at the first byte that cannot continue it (a number,
  // a name such as True, a string that an adjacent piece could still extend), which is not
  // consumed; brackets end at their closing byte, which is. Consumes nothing once not
  // kInProgress.
  size_t Feed(std::string_view in, std::string* out);
  // The input ended: completes a pending number, name or string; else an error.
  void Finish(std::string* out);
  State state() const { return state_; }

 private:
  enum class Mode {
    kValue,       // a value or, in a dict, a key
    kFirst,       // after '[' or '{': an element or the closing bracket
    kAfterComma,  // after ',': an element or the closing bracket (trailing comma)
    kAfterValue,  // ',' or the closing bracket
    kColon,
    kName,  // True / False / None, or a string prefix
    kNumber,
    kQuotes,  // opening quotes: one, two (an empty string) or three
    kString,
    kEscape,
    kEscapeDigits,  // \ooo, \xhh, \uXXXX, \UXXXXXXXX
    kRawEscape,     // the byte after a backslash in a raw string
    kStringEnd,     // a string closed: another piece may follow
  };
  struct Level {
    char bracket;      // '[' or '{'
    bool key = false;  // a dict's element being read is a key
  };

  bool Step(char c, std::string* out);
  bool StepValue(char c, std::string* out);
  bool StepPunctuation(char c, std::string* out);
  bool StepName(char c, std::string* out);
  bool StepQuotes(char c);
  bool StepString(char c, std::string* out);
  bool StepEscape(char c, std::string* out);
  bool StepEscapeDigits(char c, std::string* out);
  bool EndNumber(std::string* out);
  // Writes a finished scalar: a dict key that is not a string is quoted.
  void EmitScalar(std::string_view json, std::string* out);
  void BeginElement(std::string* out);
  // A decoded code point (an escape) / a byte of the source text, into a JSON string.
  void EmitChar(uint32_t cp, std::string* out) { AppendJsonStringChar(cp, out); }
  void EmitSourceByte(char c, std::string* out);
  void FlushQuotes(std::string* out);
  void AfterValue();
  bool Fail() {
    state_ = State::kError;
    return false;
  }

  State state_ = State::kInProgress;
  Mode mode_ = Mode::kValue;
  std::vector<Level> stack_;
  bool pending_separator_ = false;  // ", " owed before the next element
  std::string token_;               // a number or name being read
  char quote_ = 0;
  int quotes_ = 0;  // opening quotes seen (kQuotes), closing quotes pending (kString)
  bool triple_ = false;
  bool raw_ = false;
  bool continuing_ = false;  // an adjacent piece of a string already opened
  char escape_kind_ = 0;     // 'o', 'x', 'u', 'U'
  int escape_digits_ = 0;
  uint32_t escape_value_ = 0;
};

}  // namespace vllm::frontend::parsers

#endif  // VLLM_FRONTEND_PARSERS_PYTHON_LITERAL_H_
