#include "frontend/parsers/tool_call_object.h"

#include "frontend/parsers/text_util.h"

namespace vllm::frontend::parsers {

size_t ToolCallObjectParser::Feed(std::string_view in) {
  size_t i = 0;
  while (i < in.size() && state_ == State::kInProgress) {
    if (mode_ == Mode::kKey || mode_ == Mode::kValue) {
      const bool to_arguments = mode_ == Mode::kValue && field_ == Field::kArguments;
      i += reader_.Feed(in.substr(i), to_arguments ? &arguments_ : &scratch_);
      if (reader_.state() == JsonRewriter::State::kError) {
        Fail();
      } else if (reader_.state() == JsonRewriter::State::kDone) {
        if (mode_ == Mode::kKey) {
          EndKey();
        } else {
          EndValue();
        }
      }
      continue;
    }
    if (Step(in[i])) ++i;
  }
  return i;
}

void ToolCallObjectParser::Finish() {
  if (state_ == State::kInProgress) Fail();
}

bool ToolCallObjectParser::Step(char c) {
  if (IsJsonSpace(c)) return true;
  switch (mode_) {
    case Mode::kStart:
      if (c != '{') break;
      mode_ = Mode::kKeyOrEnd;
      return true;
    case Mode::kKeyOrEnd:
      if (c == '"') {
        StartKey();
        return false;  // the reader reads the key from its quote
      }
      if (c != '}' || !name_.has_value() || !seen_arguments_) break;
      state_ = State::kDone;
      return true;
    case Mode::kColon:
      if (c != ':') break;
      reader_ = JsonRewriter();
      scratch_.clear();
      mode_ = Mode::kValue;
      return true;
    case Mode::kKeyAfterComma:
      if (c != '"') break;
      StartKey();
      return false;
    case Mode::kCommaOrEnd:
      if (c == ',') {
        mode_ = Mode::kKeyAfterComma;
        return true;
      }
      if (c != '}' || !name_.has_value() || !seen_arguments_) break;
      state_ = State::kDone;
      return true;
    case Mode::kKey:
    case Mode::kValue:
      break;  // read by reader_
  }
  Fail();
  return false;
}

void ToolCallObjectParser::StartKey() {
  reader_ = JsonRewriter();
  scratch_.clear();
  mode_ = Mode::kKey;
}

void ToolCallObjectParser::EndKey() {
  const std::string& key = reader_.decoded_string();
  field_ = Field::kOther;
  if (key == "name") {
    if (name_.has_value()) return Fail();
    field_ = Field::kName;
  } else if (key == "arguments" || (accept_parameters_ && key == "parameters")) {
    // A second arguments object (or both spellings) cannot be streamed as one.
    if (seen_arguments_key_) return Fail();
    seen_arguments_key_ = true;
    field_ = Field::kArguments;
  }
  mode_ = Mode::kColon;
}

void ToolCallObjectParser::EndValue() {
  if (field_ == Field::kName) {
    if (!reader_.is_string()) return Fail();
    name_ = reader_.decoded_string();
  } else if (field_ == Field::kArguments) {
    seen_arguments_ = true;
  }
  scratch_.clear();
  mode_ = Mode::kCommaOrEnd;
}

}  // namespace vllm::frontend::parsers
