// The serve flags behind the server-wide request defaults (frontend/openai/request_defaults.h),
// as given: plain data shared by ApiServerOptions' resolution, the launcher's ServeArgs and its
// ApiServerSpec. No dependencies.
#ifndef VLLM_FRONTEND_OPENAI_SERVING_FLAGS_H_
#define VLLM_FRONTEND_OPENAI_SERVING_FLAGS_H_

#include <cstddef>
#include <string>

namespace vllm::frontend {

// The longest --override-generation-config, --default-chat-template-kwargs and
// --generation-config path.
inline constexpr size_t kMaxServingFlagBytes = 4096;

// The flags as given.
struct ServingFlags {
  // --generation-config: "auto" (the model directory's generation_config.json, else the
  // sampling fields of its config.json), "vllm" (none: vLLM's neutral defaults), or a folder
  // holding a generation_config.json.
  std::string generation_config = "auto";
  // --override-generation-config: a JSON object merged over the generation config ("" none).
  std::string override_generation_config;
  // --chat-template-content-format: "auto", "string" or "openai".
  std::string chat_template_content_format = "auto";
  // --default-chat-template-kwargs: a JSON object under every chat request's
  // chat_template_kwargs ("" none).
  std::string default_chat_template_kwargs;
  // --return-tokens-as-token-ids: logprobs' tokens as "token_id:<id>" unless a request says.
  bool return_tokens_as_token_ids = false;
  // --enable-force-include-usage: every stream carries usage (and continuous usage).
  bool enable_force_include_usage = false;
  // --response-role: a chat response's role when the request has add_generation_prompt.
  std::string response_role = "assistant";
  // --enable-prompt-tokens-details: usage carries prompt_tokens_details.cached_tokens (and
  // for chat created_cache_tokens).
  bool enable_prompt_tokens_details = false;
  // --enable-per-request-metrics: a single-stream response carries vLLM's timing `metrics`.
  bool enable_per_request_metrics = false;
  // --enable-log-outputs (needs --enable-log-requests): vLLM's "Generated response" lines;
  // --enable-log-deltas (default on): a stream's deltas each get one too.
  bool enable_log_outputs = false;
  bool enable_log_deltas = true;
  bool operator==(const ServingFlags&) const = default;
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_OPENAI_SERVING_FLAGS_H_
