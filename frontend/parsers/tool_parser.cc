#include "frontend/parsers/tool_parser.h"

#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "frontend/parsers/tool_stream_base.h"

namespace vllm::frontend::parsers {

void DeltaMessage::Append(DeltaMessage other) {
  if (other.content.has_value()) AddContent(this, *other.content);
  for (ToolCallDelta& d : other.tool_calls) tool_calls.push_back(std::move(d));
}

RandomSource RandomOrDefault(const RandomSource& random) {
  if (random) return random;
  return [] {
    thread_local std::mt19937_64 engine(std::random_device{}());
    return engine();
  };
}

std::string MakeToolCallId(const RandomSource& random) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "chatcmpl-tool-";
  for (int half = 0; half < 2; ++half) {
    uint64_t bits = random();
    for (int i = 0; i < 16; ++i, bits >>= 4) id.push_back(kHex[bits & 0xF]);
  }
  return id;
}

std::string MakeMistralToolCallId(const RandomSource& random) {
  static constexpr std::string_view kAlphanumeric =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id;
  for (int i = 0; i < 9; ++i) id.push_back(kAlphanumeric[random() % kAlphanumeric.size()]);
  return id;
}

void AddContent(DeltaMessage* out, std::string_view text) {
  if (text.empty()) return;
  if (out->content.has_value()) {
    out->content->append(text);
  } else {
    out->content = std::string(text);
  }
}

DeltaMessage ToolStreamBase::Feed(std::string_view delta_text) {
  DeltaMessage out;
  if (finished_) return out;
  if (failed_) {
    AddContent(&out, delta_text);
    return out;
  }
  total_bytes_ += delta_text.size();
  buffer_.append(delta_text);
  if (total_bytes_ > kMaxToolParseBytes) {
    Fail(&out);
    return out;
  }
  Process(&out);
  return out;
}

DeltaMessage ToolStreamBase::Finish() {
  DeltaMessage out;
  if (finished_) return out;
  finished_ = true;
  if (!failed_) Finalize(&out);
  return out;
}

void ToolStreamBase::Fail(DeltaMessage* out) {
  failed_ = true;
  AddContent(out, held_raw_);
  AddContent(out, buffer_);
  held_raw_.clear();
  buffer_.clear();
}

bool ToolStreamBase::StartCall(DeltaMessage* out) {
  if (calls_ >= kMaxToolCalls) {
    Fail(out);
    return false;
  }
  ++calls_;
  name_sent_ = false;
  arguments_sent_ = 0;
  return true;
}

void ToolStreamBase::UpdateCall(const std::optional<std::string>& name, std::string_view arguments,
                                DeltaMessage* out) {
  UpdateCallWithId(name, arguments, "", out);
}

void ToolStreamBase::UpdateCallWithId(const std::optional<std::string>& name,
                                      std::string_view arguments, std::string_view model_id,
                                      DeltaMessage* out) {
  const int index = calls_ - 1;
  if (!name_sent_) {
    if (!name.has_value()) return;
    ToolCallDelta first;
    first.index = index;
    if (!model_id.empty()) {
      first.id = std::string(model_id);
    } else {
      first.id =
          id_style_ == IdStyle::kMistral ? MakeMistralToolCallId(random_) : MakeToolCallId(random_);
    }
    first.name = *name;
    out->tool_calls.push_back(std::move(first));
    name_sent_ = true;
    sent_any_ = true;
    held_raw_.clear();  // the call's text is the call now, never content
  }
  if (arguments.size() <= arguments_sent_) return;
  const std::string_view fragment = arguments.substr(arguments_sent_);
  arguments_sent_ = arguments.size();
  if (!out->tool_calls.empty() && out->tool_calls.back().index == index) {
    out->tool_calls.back().arguments.append(fragment);
  } else {
    out->tool_calls.push_back(
        ToolCallDelta{index, std::nullopt, std::nullopt, std::string(fragment)});
  }
}

bool ToolStreamBase::FeedCall(ToolCallObjectParser& call, DeltaMessage* out) {
  const size_t n = call.Feed(buffer_);
  Consume(n, !current_call_sent());
  UpdateCall(call.name(), call.arguments(), out);
  if (call.state() == ToolCallObjectParser::State::kError) {
    Fail(out);
    return false;
  }
  return call.state() == ToolCallObjectParser::State::kDone;
}

void ToolStreamBase::Consume(size_t n, bool hold) {
  if (hold) held_raw_.append(buffer_, 0, n);
  buffer_.erase(0, n);
}

ExtractedToolCalls ExtractWithStream(ToolStreamBase* stream, std::string_view model_output) {
  DeltaMessage all = stream->Feed(model_output);
  all.Append(stream->Finish());
  if (stream->failed() || all.tool_calls.empty()) {
    return ExtractedToolCalls{false, {}, std::string(model_output)};
  }
  ExtractedToolCalls result;
  result.tools_called = true;
  for (ToolCallDelta& d : all.tool_calls) {
    if (d.index >= static_cast<int>(result.tool_calls.size()))
      result.tool_calls.resize(d.index + 1);
    ToolCall& call = result.tool_calls[d.index];
    if (d.id.has_value()) call.id = std::move(*d.id);
    if (d.name.has_value()) call.name = std::move(*d.name);
    call.arguments += d.arguments;
  }
  result.content = std::move(all.content);
  return result;
}

std::vector<std::string> ToolParserNames() {
  return {"hermes", "llama3_json", "mistral", "pythonic"};
}

absl::StatusOr<std::unique_ptr<ToolParser>> MakeToolParser(std::string_view name,
                                                           ToolParserOptions options) {
  options.random = RandomOrDefault(options.random);
  if (name == "hermes") return NewHermesToolParser(std::move(options));
  if (name == "llama3_json") return NewLlama3JsonToolParser(std::move(options));
  if (name == "mistral") return NewMistralToolParser(std::move(options));
  if (name == "pythonic") return NewPythonicToolParser(std::move(options));
  return absl::InvalidArgumentError(
      absl::StrCat("unknown tool call parser '", std::string(name),
                   "'; valid parsers: ", absl::StrJoin(ToolParserNames(), ", ")));
}

}  // namespace vllm::frontend::parsers
