#include "structured_output/reasoning.h"

#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "frontend/tokenizer/tokenizer.h"

namespace vllm::structured_output {

absl::StatusOr<ReasoningTokens> FindReasoningTokens(std::string_view parser,
                                                    const frontend::Tokenizer& tokenizer) {
  if (parser != "deepseek_r1" && parser != "qwen3") {
    return absl::InvalidArgumentError(
        absl::StrCat("--reasoning-parser: unknown parser '", std::string(parser),
                     "' (structured outputs know deepseek_r1 and qwen3)"));
  }
  ReasoningTokens tokens;
  for (auto [text, id] : {std::pair<const char*, int32_t*>{"<think>", &tokens.start_id},
                          std::pair<const char*, int32_t*>{"</think>", &tokens.end_id}}) {
    const std::optional<int32_t> found = tokenizer.TokenToId(text);
    if (!found.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--reasoning-parser ", std::string(parser), ": the model's tokenizer has no ", text,
          " token; the reasoning parser could not locate think start/end tokens in the "
          "tokenizer (choose a parser that matches the model, or none)"));
    }
    *id = *found;
  }
  if (parser == "qwen3") {
    // vLLM 0.33's qwen3 transitions: <tool_call> in the reasoning ends it and opens a call.
    if (const std::optional<int32_t> id = tokenizer.TokenToId("<tool_call>"); id.has_value()) {
      tokens.implicit_end_ids.push_back(*id);
    }
    for (const char* boundary : {"<|im_start|>", "<|im_end|>"}) {
      if (const std::optional<int32_t> id = tokenizer.TokenToId(boundary); id.has_value()) {
        tokens.boundary_ids.push_back(*id);
      }
    }
  }
  return tokens;
}

absl::StatusOr<ReasoningTokens> LoadReasoningTokens(std::string_view parser,
                                                    const std::filesystem::path& model_dir) {
  absl::StatusOr<std::unique_ptr<frontend::Tokenizer>> tokenizer =
      frontend::Tokenizer::Load(model_dir);
  if (!tokenizer.ok()) {
    return absl::Status(
        tokenizer.status().code(),
        absl::StrCat("--reasoning-parser ", std::string(parser),
                     ": cannot read the model's tokenizer: ", tokenizer.status().message()));
  }
  return FindReasoningTokens(parser, **tokenizer);
}

bool ReasoningTokens::IsImplicitEnd(int32_t token) const {
  return std::find(implicit_end_ids.begin(), implicit_end_ids.end(), token) !=
         implicit_end_ids.end();
}

bool ReasoningTokens::IsEnd(int32_t token) const { return token == end_id || IsImplicitEnd(token); }

bool PromptEndsReasoning(const ReasoningTokens& tokens, std::span<const int32_t> prompt) {
  for (auto it = prompt.rbegin(); it != prompt.rend(); ++it) {
    if (tokens.IsEnd(*it)) return true;
    if (*it == tokens.start_id || std::find(tokens.boundary_ids.begin(), tokens.boundary_ids.end(),
                                            *it) != tokens.boundary_ids.end()) {
      return false;
    }
  }
  return false;
}

}  // namespace vllm::structured_output
