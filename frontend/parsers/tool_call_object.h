// ToolCallObjectParser: reads one `{"name": ..., "arguments": {...}}` object a piece at a
// time (the JSON calls of hermes, llama3_json and mistral), exposing the name as soon as its
// string is complete and the arguments' json.dumps text as it grows. Internal to
// frontend/parsers/.
#ifndef VLLM_FRONTEND_PARSERS_TOOL_CALL_OBJECT_H_
#define VLLM_FRONTEND_PARSERS_TOOL_CALL_OBJECT_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "frontend/parsers/json_rewriter.h"

namespace vllm::frontend::parsers {

class ToolCallObjectParser {
 public:
  enum class State { kInProgress, kDone, kError };

  // `accept_parameters`: "parameters" is another name of "arguments" (Llama 3.1's prompt asks
  // for "parameters").
  explicit ToolCallObjectParser(bool accept_parameters) : accept_parameters_(accept_parameters) {}

  // Consumes input up to the object's closing '}' (included) or an error; returns the bytes
  // consumed (leading whitespace included). An error: not a JSON object, a name that is not a
  // string, a key given twice, no name or no arguments at the end, both "arguments" and
  // "parameters", nesting past kMaxJsonNesting.
  size_t Feed(std::string_view in);
  // The input ended before the object did: an error unless it is already done.
  void Finish();

  State state() const { return state_; }
  // Whether anything but whitespace has been consumed.
  bool started() const { return mode_ != Mode::kStart; }
  // The name, once its string is complete.
  const std::optional<std::string>& name() const { return name_; }
  // The json.dumps text of the arguments read so far (final: it only grows).
  const std::string& arguments() const { return arguments_; }

 private:
  enum class Mode { kStart, kKeyOrEnd, kKeyAfterComma, kKey, kColon, kValue, kCommaOrEnd };
  enum class Field { kName, kArguments, kOther };

  // Handles one byte outside keys and values; false when it must be offered again.
  bool Step(char c);
  void StartKey();
  void EndKey();
  void EndValue();
  void Fail() { state_ = State::kError; }

  const bool accept_parameters_;
  State state_ = State::kInProgress;
  Mode mode_ = Mode::kStart;
  Field field_ = Field::kOther;
  JsonRewriter reader_;  // the key or value being read
  std::string scratch_;  // what reader_ writes for keys, names and other values
  std::optional<std::string> name_;
  std::string arguments_;
  bool seen_arguments_key_ = false;  // "arguments" (or "parameters") was a key
  bool seen_arguments_ = false;      // and its value is complete
};

}  // namespace vllm::frontend::parsers

#endif  // VLLM_FRONTEND_PARSERS_TOOL_CALL_OBJECT_H_
