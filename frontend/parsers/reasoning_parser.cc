#include "frontend/parsers/reasoning_parser.h"

#include <algorithm>
#include <initializer_list>
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

void Add(std::optional<std::string>* field, std::string_view text) {
  if (text.empty()) return;
  if (field->has_value()) {
    (*field)->append(text);
  } else {
    *field = std::string(text);
  }
}

// How much of `buffer`'s end may still grow into one of `tags` (held back until the next piece).
size_t Hold(std::string_view buffer, std::initializer_list<std::string_view> tags) {
  size_t hold = 0;
  for (std::string_view tag : tags) hold = std::max(hold, PartialTagOverlap(buffer, tag));
  return hold;
}

// DeepSeek-R1's stream: reasoning until </think> (the first <think> is dropped), then content.
// Held back: a possible partial tag.
class DeepSeekR1Stream final : public ReasoningStreamParser {
 public:
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
  void Process(bool complete, ReasoningDelta* out) {
    while (!ended_) {
      const size_t end = buffer_.find(kThinkEnd);
      const size_t start = start_dropped_ ? std::string::npos : buffer_.find(kThinkStart);
      const size_t first = std::min(end, start);
      if (first == std::string::npos) {
        size_t hold = 0;
        if (!complete)
          hold =
              start_dropped_ ? Hold(buffer_, {kThinkEnd}) : Hold(buffer_, {kThinkEnd, kThinkStart});
        Add(&out->reasoning_content, std::string_view(buffer_).substr(0, buffer_.size() - hold));
        buffer_.erase(0, buffer_.size() - hold);
        return;
      }
      Add(&out->reasoning_content, std::string_view(buffer_).substr(0, first));
      buffer_.erase(0, first);
      if (first == end) {
        ended_ = true;
        Add(&out->content, std::string_view(buffer_).substr(kThinkEnd.size()));
        buffer_.clear();
      } else {
        buffer_.erase(0, kThinkStart.size());
        start_dropped_ = true;
      }
    }
  }

  bool ended_ = false;
  bool start_dropped_ = false;
  std::string buffer_;
};

// DeepSeek-R1: <think>…</think>, the start possibly in the prompt.
class DeepSeekR1ReasoningParser final : public ReasoningParser {
 public:
  explicit DeepSeekR1ReasoningParser(ReasoningParserOptions options) : ReasoningParser(options) {}

  std::string_view name() const override { return "deepseek_r1"; }

  // vLLM's extract_reasoning: everything up to the first <think> is dropped; then the text
  // before the first </think> is reasoning and the rest content.
  ReasoningResult Extract(std::string_view text, const ReasoningRequestOptions&) const override {
    if (const size_t start = text.find(kThinkStart); start != std::string_view::npos) {
      text.remove_prefix(start + kThinkStart.size());
    }
    const size_t end = text.find(kThinkEnd);
    if (end == std::string_view::npos) return {std::string(text), std::nullopt};  // cut short
    ReasoningResult r{std::string(text.substr(0, end)), std::nullopt};
    const std::string_view content = text.substr(end + kThinkEnd.size());
    if (!content.empty()) r.content = std::string(content);
    return r;
  }

  std::unique_ptr<ReasoningStreamParser> NewStream(const ReasoningRequestOptions&) const override {
    return std::make_unique<DeepSeekR1Stream>();
  }

  bool IsReasoningEnd(std::string_view text) const override {
    const size_t start = text.rfind(kThinkStart);
    const size_t end = text.rfind(kThinkEnd);
    return end != std::string_view::npos && (start == std::string_view::npos || end > start);
  }
};

// Qwen3's stream, vLLM 0.33's qwen3 transitions as the reasoning parser sees them: in the
// reasoning, <think> is dropped, </think> ends it (dropped), and <tool_call> ends it implicitly
// and is content (the call, for the tool parser); in the content a stray </think> is dropped
// and everything else is content. Starts in the content when thinking is off. Held back: a
// possible partial tag of the current state.
class Qwen3Stream final : public ReasoningStreamParser {
 public:
  explicit Qwen3Stream(bool thinking) : ended_(!thinking) {}

  ReasoningDelta Feed(std::string_view delta_text) override {
    ReasoningDelta out;
    buffer_.append(delta_text);
    Process(/*complete=*/false, &out);
    return out;
  }

  ReasoningDelta Finish() override {
    ReasoningDelta out;
    Process(/*complete=*/true, &out);
    return out;
  }

  bool reasoning_ended() const override { return ended_; }

 private:
  void Process(bool complete, ReasoningDelta* out) {
    while (true) {
      std::optional<std::string>* field = ended_ ? &out->content : &out->reasoning_content;
      const size_t end = buffer_.find(kThinkEnd);
      const size_t start = ended_ ? std::string::npos : buffer_.find(kThinkStart);
      const size_t tool = ended_ ? std::string::npos : buffer_.find(kToolCall);
      const size_t first = std::min({end, start, tool});
      if (first == std::string::npos) {
        size_t hold = 0;
        if (!complete) {
          hold = ended_ ? Hold(buffer_, {kThinkEnd})
                        : Hold(buffer_, {kThinkEnd, kThinkStart, kToolCall});
        }
        Add(field, std::string_view(buffer_).substr(0, buffer_.size() - hold));
        buffer_.erase(0, buffer_.size() - hold);
        return;
      }
      Add(field, std::string_view(buffer_).substr(0, first));
      buffer_.erase(0, first);
      if (first == tool) {
        ended_ = true;  // the call stays in the buffer: content
      } else {
        if (first == end) ended_ = true;  // (in the content: a stray </think>, dropped)
        buffer_.erase(0, first == end ? kThinkEnd.size() : kThinkStart.size());
      }
    }
  }

  bool ended_;
  std::string buffer_;
};

class Qwen3ReasoningParser final : public ReasoningParser {
 public:
  explicit Qwen3ReasoningParser(ReasoningParserOptions options) : ReasoningParser(options) {}

  std::string_view name() const override { return "qwen3"; }

  // vLLM 0.33's ParserEngine.extract_reasoning: the stream over the whole text; an empty side
  // is nullopt (None).
  ReasoningResult Extract(std::string_view text,
                          const ReasoningRequestOptions& request) const override {
    Qwen3Stream stream(request.enable_thinking);
    ReasoningDelta all = stream.Feed(text);
    all.Append(stream.Finish());
    return {std::move(all.reasoning_content), std::move(all.content)};
  }

  std::unique_ptr<ReasoningStreamParser> NewStream(
      const ReasoningRequestOptions& request) const override {
    return std::make_unique<Qwen3Stream>(request.enable_thinking);
  }

  // Scanning back, an end (</think> or <tool_call>) before any <think>.
  bool IsReasoningEnd(std::string_view text) const override {
    const size_t start = text.rfind(kThinkStart);
    const size_t think_end = text.rfind(kThinkEnd);
    const size_t tool = text.rfind(kToolCall);
    size_t end = std::string_view::npos;
    if (think_end != std::string_view::npos) end = think_end;
    if (tool != std::string_view::npos && (end == std::string_view::npos || tool > end)) end = tool;
    return end != std::string_view::npos && (start == std::string_view::npos || end > start);
  }
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
  const bool qwen3 = name() == "qwen3";
  for (auto it = token_ids.rbegin(); it != token_ids.rend(); ++it) {
    if (*it == *options_.think_start_token_id) return false;
    if (*it == *options_.think_end_token_id) return true;
    if (qwen3 && options_.tool_call_token_id == *it) return true;
  }
  return false;
}

std::vector<std::string> ReasoningParserNames() { return {"deepseek_r1", "qwen3"}; }

absl::StatusOr<std::unique_ptr<ReasoningParser>> MakeReasoningParser(
    std::string_view name, ReasoningParserOptions options) {
  if (name == "deepseek_r1") return std::make_unique<DeepSeekR1ReasoningParser>(options);
  if (name == "qwen3") return std::make_unique<Qwen3ReasoningParser>(options);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown reasoning parser '", std::string(name),
                   "'; valid parsers: ", absl::StrJoin(ReasoningParserNames(), ", ")));
}

}  // namespace vllm::frontend::parsers
