// vLLM 0.33's request fields beyond OpenAI's sampling basics (vLLM's "extra" and "sampling"
// parameters of CompletionRequest / ChatCompletionRequest), and the refusal of those this
// server does not implement. Every field of vLLM's two request classes is read by
// openai_protocol.cc, structured_output_request.cc, chat_tools.cc or here — honoured as vLLM
// honours it, or a 400 naming it (tests/integration/serve/serve_request_fields_test.cc walks
// the list).
#ifndef VLLM_FRONTEND_OPENAI_REQUEST_FIELDS_H_
#define VLLM_FRONTEND_OPENAI_REQUEST_FIELDS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "frontend/openai/openai_protocol.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {

// Reads logit_bias (keys are token-id strings, values clamped to [-100, 100] as vLLM),
// allowed_token_ids, bad_words, truncate_prompt_tokens / truncation_side, return_token_ids,
// stream_options.continuous_usage_stats, request_id, cache_salt, add_special_tokens
// (completions), use_beam_search and length_penalty (beam_search.h), stream_interval and, for
// chat, echo, documents and return_prompt_text; refuses (InvalidArgument naming the field)
// logprob_token_ids, prompt_embeds, ec_transfer_params, repetition_detection,
// thinking_token_budget, return_weight_versions, spaces_between_special_tokens = false and the
// multimodal kwargs; checks
// the types of the fields vLLM itself ignores on these endpoints (user, session_id,
// watermarking without a configured watermark, vllm_xargs without an extension,
// routed_experts_prompt_start, return_token_offsets, mm_payload, return_mm_kwargs).
// Call after options->stream is known.
[[nodiscard]] absl::Status ParseVllmFields(const nlohmann::ordered_json& body, bool chat,
                                           GenerationOptions* options);

// vLLM's logit_bias keys: int() of each key (surrounding whitespace, a sign, '_' between
// digits); InvalidArgument naming logit_bias with vLLM's message listing the bad keys.
[[nodiscard]] absl::Status ParseLogitBias(const nlohmann::ordered_json& value,
                                          core::SamplingParams* params);

// Chat's echo: the last message's content when "echo" is true and the last message has the
// response's role (`response_role`, the server's --response-role, with add_generation_prompt;
// otherwise the last message's own role, so always), as vLLM prepends it to each choice's
// content; nullopt otherwise.
[[nodiscard]] absl::StatusOr<std::optional<std::string>> ChatEcho(
    const nlohmann::ordered_json& body, const std::vector<ChatMessage>& messages,
    bool add_generation_prompt, std::string_view response_role = "assistant");

// Chat's "documents" (a list of string-to-string objects, for RAG templates) as the chat
// template's `documents` variable: moved into body's chat_template_kwargs (overriding a key
// of the same name, as vLLM's merge_kwargs does).
[[nodiscard]] absl::Status MoveDocumentsToTemplateKwargs(nlohmann::ordered_json* body);

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_OPENAI_REQUEST_FIELDS_H_
