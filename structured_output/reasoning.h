// The reasoning gate of structured outputs (vLLM's structured_outputs_config.reasoning_parser):
// with a reasoning parser configured, a constrained request is free while the model reasons
// (<think> ... </think>): its grammar neither constrains nor sees the reasoning tokens, and
// applies from the token after the think-end token on. Qwen3 also ends reasoning implicitly on
// <tool_call> (vLLM 0.33's qwen3 parser transitions: a tool call straight from the reasoning),
// and that token is the first content token: the grammar takes it. While a request reasons,
// an implicit end its grammar could not take as its first token is masked, so the model cannot
// end the reasoning into output the grammar refuses (vLLM's _masked_reasoning_ends).
//
// Thread-safety: plain values and pure functions.
#ifndef VLLM_STRUCTURED_OUTPUT_REASONING_H_
#define VLLM_STRUCTURED_OUTPUT_REASONING_H_

#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace vllm::frontend {
class Tokenizer;
}  // namespace vllm::frontend

namespace vllm::structured_output {

// The token ids a reasoning parser delimits reasoning with.
struct ReasoningTokens {
  int32_t start_id = -1;  // "<think>"
  int32_t end_id = -1;    // "</think>"
  // Where a backward scan of the prompt stops (qwen3: the ChatML turn boundaries <|im_start|>
  // and <|im_end|> the tokenizer has, so that a </think> of an earlier turn does not count).
  std::vector<int32_t> boundary_ids;
  // Tokens that end the reasoning and are content themselves (qwen3: <tool_call>, when the
  // tokenizer has it as one token; vLLM's implicit_reasoning_end_token_ids).
  std::vector<int32_t> implicit_end_ids;

  // Whether `token` ends the reasoning (the end id or an implicit end).
  bool IsEnd(int32_t token) const;
  bool IsImplicitEnd(int32_t token) const;

  friend bool operator==(const ReasoningTokens&, const ReasoningTokens&) = default;
};

// The ids of `parser` (one of config::kReasoningParsers other than "": "deepseek_r1", "qwen3")
// in `tokenizer` (its added tokens and vocabulary); qwen3's <tool_call> and turn boundaries
// only where the tokenizer has them. InvalidArgument naming --reasoning-parser
// and the missing token when the tokenizer lacks "<think>" or "</think>" (vLLM: "reasoning
// parser could not locate think start/end tokens in the tokenizer!"), or naming the parser
// when it is unknown.
[[nodiscard]] absl::StatusOr<ReasoningTokens> FindReasoningTokens(
    std::string_view parser, const frontend::Tokenizer& tokenizer);

// Same, with the tokenizer read from `model_dir` (its error when that fails).
[[nodiscard]] absl::StatusOr<ReasoningTokens> LoadReasoningTokens(
    std::string_view parser, const std::filesystem::path& model_dir);

// Whether the prompt has already ended the reasoning (vLLM's is_reasoning_end on the prompt
// tokens, for deepseek_r1 and for qwen3 with thinking on): scanning back from the prompt's last
// token, an end id (explicit or implicit: a prompt ending in "<tool_call>" has left the
// reasoning) comes before any start id or boundary id. A prompt with none of them has not
// (the model reasons first). Qwen3's template with enable_thinking=false ends the prompt with
// "<think>\n\n</think>\n\n": ended.
bool PromptEndsReasoning(const ReasoningTokens& tokens, std::span<const int32_t> prompt);

}  // namespace vllm::structured_output

#endif  // VLLM_STRUCTURED_OUTPUT_REASONING_H_
