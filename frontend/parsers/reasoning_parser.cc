#include "frontend/parsers/reasoning_parser.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "frontend/parsers/text_util.h"

namespace vllm::frontend::parsers {
namespace {

constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kToolCall = "<tool_call>";
constexpr std::string_view kToolCallEnd = "</tool_call>";
constexpr std::string_view kFunction = "<function";

// Whether the text after a <tool_call> opens a Qwen3.5 / Qwen3-Coder call: whitespace, then
// "<function" and '=' or whitespace (vLLM's `<function[\s=]` on the lstripped text).
enum class Lookahead { kYes, kNo, kUnknown };
Lookahead OpensFunction(std::string_view after, bool complete) {
  while (!after.empty() && IsAsciiSpace(after.front())) after.remove_prefix(1);
  const size_t n = std::min(after.size(), kFunction.size());
  if (after.substr(0, n) != kFunction.substr(0, n)) return Lookahead::kNo;
  if (after.size() <= kFunction.size()) return complete ? Lookahead::kNo : Lookahead::kUnknown;
  const char c = after[kFunction.size()];
  return c == '=' || IsAsciiSpace(c) ? Lookahead::kYes : Lookahead::kNo;
}

// What a parser of the <think> family does.
struct ThinkRules {
  bool tool_call_ends_reasoning = false;  // qwen3: <tool_call><function=…> ends it too
};

// The stream of both parsers: reasoning until </think> (the first <think> is dropped), then
// content. Held back: a possible partial tag, and (qwen3) a <tool_call> whose next bytes do
// not yet say whether a function call follows. Only the first <tool_call> is considered, as
// Extract does.
class ThinkStream final : public ReasoningStreamParser {
 public:
  ThinkStream(ThinkRules rules, bool content_only) : rules_(rules), ended_(content_only) {}

  ReasoningDelta Feed(std::string_view delta_text) override {
    ReasoningDelta out;
    if (ended_) {
      if (!delta_text.empty()) out.content = std::string(delta_text);
      return out;
    }
    buffer_.append(delta_text);
    Process(/*complete=*/false, &out);
    return out;
  }

  ReasoningDelta Finish() override {
    ReasoningDelta out;
    if (!ended_) Process(/*complete=*/true, &out);
    return out;
  }

  bool reasoning_ended() const override { return ended_; }

 private:
  static void Add(std::optional<std::string>* field, std::string_view text) {
    if (text.empty()) return;
    if (field->has_value()) {
      (*field)->append(text);
    } else {
      *field = std::string(text);
    }
  }

  void Process(bool complete, ReasoningDelta* out) {
    while (!ended_) {
      const size_t end = buffer_.find(kThinkEnd);
      const size_t start = start_dropped_ ? std::string::npos : buffer_.find(kThinkStart);
      const size_t tool = watch_tool_call() ? buffer_.find(kToolCall) : std::string::npos;
      const size_t first = std::min({end, start, tool});
      if (first == std::string::npos) {
        size_t hold = complete ? 0 : PartialTagOverlap(buffer_, kThinkEnd);
        if (!complete && !start_dropped_)
          hold = std::max(hold, PartialTagOverlap(buffer_, kThinkStart));
        if (!complete && watch_tool_call())
          hold = std::max(hold, PartialTagOverlap(buffer_, kToolCall));
        Add(&out->reasoning_content, std::string_view(buffer_).substr(0, buffer_.size() - hold));
        buffer_.erase(0, buffer_.size() - hold);
        return;
      }
      Add(&out->reasoning_content, std::string_view(buffer_).substr(0, first));
      buffer_.erase(0, first);
      if (first == end) {
        End(kThinkEnd.size(), out);
      } else if (first == start) {
        buffer_.erase(0, kThinkStart.size());
        start_dropped_ = true;
      } else {
        const Lookahead opens =
            OpensFunction(std::string_view(buffer_).substr(kToolCall.size()), complete);
        if (opens == Lookahead::kUnknown) return;  // wait for the next piece
        tool_call_seen_ = true;
        if (opens == Lookahead::kYes) {
          End(0, out);  // the call is content, for the tool parser
        } else {
          Add(&out->reasoning_content, kToolCall);
          buffer_.erase(0, kToolCall.size());
        }
      }
    }
  }

  bool watch_tool_call() const { return rules_.tool_call_ends_reasoning && !tool_call_seen_; }

  // Reasoning ends `tag_size` bytes into buffer_; the rest is content.
  void End(size_t tag_size, ReasoningDelta* out) {
    ended_ = true;
    Add(&out->content, std::string_view(buffer_).substr(tag_size));
    buffer_.clear();
  }

  const ThinkRules rules_;
  bool ended_;
  bool start_dropped_ = false;
  bool tool_call_seen_ = false;
  std::string buffer_;
};

// DeepSeek-R1 and Qwen3: <think>…</think>, the start possibly in the prompt.
class ThinkReasoningParser final : public ReasoningParser {
 public:
  ThinkReasoningParser(std::string_view name, ThinkRules rules, ReasoningParserOptions options)
      : ReasoningParser(options), name_(name), rules_(rules) {}

  std::string_view name() const override { return name_; }

  // vLLM's extract_reasoning: everything up to the first <think> is dropped; then the text
  // before the first </think> is reasoning and the rest content.
  ReasoningResult Extract(std::string_view text,
                          const ReasoningRequestOptions& request) const override {
    const bool qwen3 = rules_.tool_call_ends_reasoning;
    if (const size_t start = text.find(kThinkStart); start != std::string_view::npos) {
      text.remove_prefix(start + kThinkStart.size());
    }
    if (const size_t end = text.find(kThinkEnd); end != std::string_view::npos) {
      return Split(text, end, kThinkEnd.size());
    }
    if (qwen3 && !request.enable_thinking) return {std::nullopt, std::string(text)};
    if (qwen3) {
      const size_t tool = text.find(kToolCall);
      if (tool != std::string_view::npos &&
          OpensFunction(text.substr(tool + kToolCall.size()), true) == Lookahead::kYes) {
        ReasoningResult r{std::nullopt, std::string(text.substr(tool))};
        if (tool > 0) r.reasoning_content = std::string(text.substr(0, tool));
        return r;
      }
    }
    return {std::string(text), std::nullopt};  // cut short inside the reasoning
  }

  std::unique_ptr<ReasoningStreamParser> NewStream(
      const ReasoningRequestOptions& request) const override {
    const bool content_only = rules_.tool_call_ends_reasoning && !request.enable_thinking;
    return std::make_unique<ThinkStream>(rules_, content_only);
  }

  bool IsReasoningEnd(std::string_view text) const override {
    const size_t start = text.rfind(kThinkStart);
    const size_t end = text.rfind(kThinkEnd);
    if (end != std::string_view::npos && (start == std::string_view::npos || end > start)) {
      return true;
    }
    if (!rules_.tool_call_ends_reasoning) return false;
    // An open call after the last <think>, with <function…> after it.
    const size_t tool = text.rfind(kToolCall);
    return tool != std::string_view::npos && (start == std::string_view::npos || tool > start) &&
           text.find(kToolCallEnd, tool) == std::string_view::npos &&
           OpensFunction(text.substr(tool + kToolCall.size()), true) == Lookahead::kYes;
  }

 private:
  // Reasoning before `at`, content after the `tag_size` bytes there (nullopt when empty).
  static ReasoningResult Split(std::string_view text, size_t at, size_t tag_size) {
    ReasoningResult r{std::string(text.substr(0, at)), std::nullopt};
    const std::string_view content = text.substr(at + tag_size);
    if (!content.empty()) r.content = std::string(content);
    return r;
  }

  const std::string name_;
  const ThinkRules rules_;
};

}  // namespace

void ReasoningDelta::Append(const ReasoningDelta& other) {
  for (auto [mine, theirs] : {std::pair{&reasoning_content, &other.reasoning_content},
                              std::pair{&content, &other.content}}) {
    if (!theirs->has_value()) continue;
    if (mine->has_value()) {
      (*mine)->append(**theirs);
    } else {
      *mine = *theirs;
    }
  }
}

bool ReasoningParser::IsReasoningEndIds(std::span<const int32_t> token_ids) const {
  if (!options_.think_start_token_id.has_value() || !options_.think_end_token_id.has_value()) {
    return false;
  }
  for (auto it = token_ids.rbegin(); it != token_ids.rend(); ++it) {
    if (*it == *options_.think_start_token_id) return false;
    if (*it == *options_.think_end_token_id) return true;
  }
  return false;
}

std::vector<std::string> ReasoningParserNames() { return {"deepseek_r1", "qwen3"}; }

absl::StatusOr<std::unique_ptr<ReasoningParser>> MakeReasoningParser(
    std::string_view name, ReasoningParserOptions options) {
  if (name == "deepseek_r1") {
    return std::make_unique<ThinkReasoningParser>(name, ThinkRules{}, options);
  }
  if (name == "qwen3") {
    return std::make_unique<ThinkReasoningParser>(name, ThinkRules{true}, options);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown reasoning parser '", std::string(name),
                   "'; valid parsers: ", absl::StrJoin(ReasoningParserNames(), ", ")));
}

}  // namespace vllm::frontend::parsers
