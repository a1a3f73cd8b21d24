// The server-wide defaults of generation requests that vLLM 0.33's serve flags set:
// --generation-config / --override-generation-config (vLLM's ModelConfig.get_diff_sampling_param
// and OpenAIServing's default_sampling_params: a request field the body leaves out or sets to
// null takes the model's generation_config.json value, else OpenAI's default) and
// --chat-template-content-format (how a message's content list reaches the chat template).
// ServingFlags is the flags as given (shared by the launcher's ServeArgs and its ApiServerSpec);
// RequestDefaults what the API server applies, resolved once at start-up.
#ifndef VLLM_FRONTEND_OPENAI_REQUEST_DEFAULTS_H_
#define VLLM_FRONTEND_OPENAI_REQUEST_DEFAULTS_H_

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "frontend/engine/engine_client.h"
#include "frontend/openai/openai_protocol.h"
#include "frontend/openai/serving_flags.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {

// A generation_config.json larger than this is refused.
inline constexpr size_t kMaxGenerationConfigBytes = 1 << 20;

// The flag values' own checks (a known content format, an override that is a JSON object),
// before anything starts. InvalidArgument naming the flag.
[[nodiscard]] absl::Status CheckServingFlags(const ServingFlags& flags);

enum class ContentFormat { kString, kOpenAi };

// What the API server applies to every request.
struct RequestDefaults {
  // vLLM's default_sampling_params: the request fields (repetition_penalty, presence_penalty,
  // frequency_penalty, temperature, top_k, top_p, min_p, max_tokens, skip_special_tokens) the
  // generation config sets; empty with --generation-config vllm and no override.
  nlohmann::ordered_json sampling = nlohmann::ordered_json::object();
  // vLLM's override_max_tokens: a request's max_tokens is at most this (the folder's
  // max_new_tokens with --generation-config FOLDER, else the override's max_new_tokens).
  std::optional<int32_t> override_max_tokens;
  // --chat-template-content-format, "auto" resolved against the chat template (see
  // DetectContentFormat).
  ContentFormat content_format = ContentFormat::kString;
  // --default-chat-template-kwargs (empty: none), --return-tokens-as-token-ids,
  // --enable-force-include-usage.
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  bool return_tokens_as_token_ids = false;
  bool force_include_usage = false;
  // --response-role, --enable-prompt-tokens-details, --enable-per-request-metrics,
  // --enable-log-outputs and --enable-log-deltas (the launcher adds --max-log-len):
  // ApplyResponseFlags puts them on each request's GenerationOptions.
  std::string response_role = "assistant";
  bool prompt_tokens_details = false;
  bool per_request_metrics = false;
  bool log_outputs = false;
  bool log_deltas = true;
  std::optional<int64_t> log_max_len;
};

// The response flags of `defaults` on a parsed request's options; a chat request's
// response_role is --response-role with `add_generation_prompt`, else `last_role` (vLLM's
// get_chat_request_role).
void ApplyResponseFlags(const RequestDefaults& defaults, bool add_generation_prompt,
                        const std::string& last_role, GenerationOptions* options);

// Reads the generation config `flags` names for the model in `model_dir` and merges the
// override over it, as vLLM's get_diff_sampling_param; logs vLLM's warning when it changes
// the defaults. Resolves the content format "auto" against `chat_template` (the served
// template's source; empty: none, "string"). InvalidArgument naming the file or flag for a file
// that is not a JSON object, a sampling field of the wrong type, or a max_new_tokens below 1.
[[nodiscard]] absl::StatusOr<RequestDefaults> ResolveRequestDefaults(
    const std::filesystem::path& model_dir, const ServingFlags& flags,
    std::string_view chat_template);

// Python's repr of the defaults as vLLM's log line writes them ("{'temperature': 0.6}").
std::string DescribeSamplingDefaults(const nlohmann::ordered_json& sampling);

// vLLM's "auto" content format: "openai" when the template loops over a message's content
// (`{% for part in message['content'] %}`, through the messages loop's variable), else
// "string".
ContentFormat DetectContentFormat(std::string_view chat_template);

// Sets each default sampling field (max_tokens excepted: ApplyMaxTokensDefault) the body leaves
// out or sets to null, so the request parses as if it had sent it; likewise
// return_tokens_as_token_ids (the server's when the request has none), a stream's
// stream_options with --enable-force-include-usage ({"include_usage": true,
// "continuous_usage_stats": true}, whatever the request's, as vLLM's should_include_usage), and
// a chat's chat_template_kwargs over the defaults (vLLM's merge_kwargs: the request's keys win
// unless null or "auto").
void ApplySamplingDefaults(const RequestDefaults& defaults, nlohmann::ordered_json* body);

// vLLM's get_max_tokens with the defaults: a request without max_tokens gets the default
// max_tokens, cut to what max_model_len leaves after its prompt (a text prompt is tokenized for
// that); one with max_tokens is cut to override_max_tokens. A
// min_tokens above the result is vLLM's 400.
[[nodiscard]] absl::Status ApplyMaxTokensDefault(const RequestDefaults& defaults,
                                                 const EngineClient& engine,
                                                 const std::vector<Prompt>& prompts,
                                                 GenerationOptions* options);

// The "openai" content format: each template message's content (TemplateMessages' string) as
// vLLM passes it then, rebuilt from the body's message: a list of {"type": "text", "text"}
// parts (a string content is one part; null none); a tool message's stays the joined string.
// Nothing with the "string" format.
void ApplyContentFormat(const RequestDefaults& defaults, const nlohmann::ordered_json& body,
                        nlohmann::ordered_json* template_messages);

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_OPENAI_REQUEST_DEFAULTS_H_
