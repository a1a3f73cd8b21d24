// Reasoning parsers: vLLM's `--reasoning-parser` (vllm/reasoning/): they split a model's
// <think>…</think> reasoning from its answer, whole (Extract) or while it streams.
//
//   auto parser = MakeReasoningParser("qwen3");                 // or "deepseek_r1"
//   ReasoningResult r = (*parser)->Extract(text);                // non-streaming
//   auto stream = (*parser)->NewStream();  stream->Feed(delta);  ...  stream->Finish();
//   (*parser)->IsReasoningEnd(prompt_and_output_so_far);         // structured output may start
#ifndef VLLM_FRONTEND_PARSERS_REASONING_PARSER_H_
#define VLLM_FRONTEND_PARSERS_REASONING_PARSER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace vllm::frontend::parsers {

// A whole output split (vLLM's extract_reasoning: (reasoning, content); nullopt where vLLM
// returns None: deepseek_r1's empty reasoning before </think> is "", qwen3's is nullopt).
struct ReasoningResult {
  std::optional<std::string> reasoning_content;
  std::optional<std::string> content;

  friend bool operator==(const ReasoningResult&, const ReasoningResult&) = default;
};

// One step of a stream: each field is set only when it has text.
struct ReasoningDelta {
  std::optional<std::string> reasoning_content;
  std::optional<std::string> content;

  bool empty() const { return !reasoning_content.has_value() && !content.has_value(); }
  // Appends `other`'s texts to this one's.
  void Append(const ReasoningDelta& other);
};

// Per-request settings (vLLM reads them from chat_template_kwargs).
struct ReasoningRequestOptions {
  // qwen3: false when the request set enable_thinking=false (the template then put an empty
  // <think></think> in the prompt): the output is all content (a stray </think> dropped).
  bool enable_thinking = true;
};

// The state of one streamed output. Not thread-safe: one per choice of one request.
class ReasoningStreamParser {
 public:
  virtual ~ReasoningStreamParser() = default;
  // Takes the next piece of output text (any split; a tag may span pieces: a possible
  // partial tag at the end is held back until the next piece or Finish).
  virtual ReasoningDelta Feed(std::string_view delta_text) = 0;
  // The output ended: returns what was held back. Feed must not be called after it.
  virtual ReasoningDelta Finish() = 0;
  // Whether the reasoning has ended (every later byte is content): then a tool parser or
  // structured output takes over the content.
  virtual bool reasoning_ended() const = 0;
};

// Model-wide settings.
struct ReasoningParserOptions {
  // The tokenizer's ids of "<think>" and "</think>", for IsReasoningEnd on token ids; when
  // unset that overload answers false.
  std::optional<int32_t> think_start_token_id;
  std::optional<int32_t> think_end_token_id;
  // qwen3: the id of "<tool_call>", an implicit end for IsReasoningEndIds (ignored by
  // deepseek_r1).
  std::optional<int32_t> tool_call_token_id;
};

// A reasoning parser for one model family. Immutable: every method is const and
// thread-safe.
class ReasoningParser {
 public:
  virtual ~ReasoningParser() = default;
  virtual std::string_view name() const = 0;
  // Splits a whole output. Never fails.
  virtual ReasoningResult Extract(std::string_view model_output,
                                  const ReasoningRequestOptions& request = {}) const = 0;
  virtual std::unique_ptr<ReasoningStreamParser> NewStream(
      const ReasoningRequestOptions& request = {}) const = 0;
  // Whether `text` (the prompt, or the prompt and the output so far) ends outside reasoning:
  // its last </think> (qwen3: or <tool_call>) comes after its last <think>. vLLM's
  // is_reasoning_end, on text.
  virtual bool IsReasoningEnd(std::string_view text) const = 0;
  // The same on token ids, with the ids of ReasoningParserOptions: scanning back, an end id
  // (qwen3: or the <tool_call> id) comes before the start id. False when the think ids are
  // not set.
  bool IsReasoningEndIds(std::span<const int32_t> token_ids) const;

 protected:
  explicit ReasoningParser(ReasoningParserOptions options) : options_(options) {}
  const ReasoningParserOptions options_;
};

// The names MakeReasoningParser accepts, in a stable order.
std::vector<std::string> ReasoningParserNames();

// "deepseek_r1": the text before </think> is reasoning even without <think> (DeepSeek-R1's
// template puts <think> in the prompt; text before a first <think> in the output is dropped);
// an output without </think> is all reasoning.
// "qwen3": vLLM 0.33's qwen3 parser transitions (vllm/parser/qwen3.py): the output starts in
// the reasoning (<think> may be in the prompt); there every <think> is dropped, </think> ends
// it, and any <tool_call> ends it implicitly and is content (the tool parser reads the call);
// in the content a stray </think> is dropped. Without an end an output is all reasoning (it
// was cut short), or all content when the request disabled thinking. An empty side is
// nullopt. InvalidArgument naming `name` and the valid names for any other.
[[nodiscard]] absl::StatusOr<std::unique_ptr<ReasoningParser>> MakeReasoningParser(
    std::string_view name, ReasoningParserOptions options = {});

}  // namespace vllm::frontend::parsers

#endif  // VLLM_FRONTEND_PARSERS_REASONING_PARSER_H_
