#include "launcher/request_default_flags.h"

#include <string>

#include "frontend/openai/request_defaults.h"

namespace vllm::launcher {
namespace {

// Checks the whole of `serving` after `field` took `value`; throws CLI11's error naming the
// flag when CheckServingFlags refuses it.
void Set(frontend::ServingFlags& serving, std::string frontend::ServingFlags::*field,
         const std::string& value) {
  frontend::ServingFlags next = serving;
  next.*field = value;
  if (absl::Status s = frontend::CheckServingFlags(next); !s.ok()) {
    throw CLI::ValidationError(std::string(s.message()));
  }
  serving = std::move(next);
}

}  // namespace

void AddRequestDefaultFlags(CLI::App& app, frontend::ServingFlags& serving) {
  using F = frontend::ServingFlags;
  app.add_option_function<std::string>(
         "--generation-config",
         [&serving](const std::string& v) { Set(serving, &F::generation_config, v); },
         "Default sampling parameters of requests: auto (the model's generation_config.json), "
         "vllm (none), or a folder holding a generation_config.json. Default: auto.")
      ->group("ModelConfig");
  app.add_option_function<std::string>(
         "--override-generation-config",
         [&serving](const std::string& v) { Set(serving, &F::override_generation_config, v); },
         "A JSON object merged over the generation config, e.g. '{\"temperature\": 0.5}'.")
      ->group("ModelConfig");
  app.add_option_function<std::string>(
         "--chat-template-content-format",
         [&serving](const std::string& v) { Set(serving, &F::chat_template_content_format, v); },
         "How message content reaches the chat template: string (parts joined), openai (a "
         "list of {type, text} parts), or auto (detected from the template). Default: auto.")
      ->group("Frontend");
  app.add_option_function<std::string>(
         "--default-chat-template-kwargs",
         [&serving](const std::string& v) { Set(serving, &F::default_chat_template_kwargs, v); },
         "A JSON object of chat template variables under every chat request's "
         "chat_template_kwargs, e.g. '{\"enable_thinking\": false}'.")
      ->group("Frontend");
  app.add_flag("--return-tokens-as-token-ids", serving.return_tokens_as_token_ids,
               "Logprobs' tokens as 'token_id:<id>' unless a request says otherwise.")
      ->group("Frontend");
  app.add_flag("--enable-force-include-usage", serving.enable_force_include_usage,
               "Every streamed response carries usage, in every chunk.")
      ->group("Frontend");
  app.add_option("--response-role", serving.response_role,
                 "The role name to return if `request.add_generation_prompt=true`. Default: "
                 "assistant.")
      ->group("Frontend");
  app.add_flag("--enable-prompt-tokens-details", serving.enable_prompt_tokens_details,
               "Usage carries prompt_tokens_details (cached_tokens: the prompt tokens found in "
               "the prefix cache).")
      ->group("Frontend");
  app.add_flag("--enable-per-request-metrics", serving.enable_per_request_metrics,
               "Include per-request timing metrics in API responses (a single-choice "
               "response's `metrics`; a stream's on its usage chunk).")
      ->group("Frontend");
  app.add_flag("--enable-log-outputs", serving.enable_log_outputs,
               "Log model outputs (generations); requires --enable-log-requests. Output text "
               "and finish reasons at INFO, output token ids at DEBUG.")
      ->group("Frontend");
  app.add_flag("--enable-log-deltas", serving.enable_log_deltas,
               "Log each streamed delta too (with --enable-log-outputs); --no-enable-log-deltas: "
               "only the complete output. Default: on.")
      ->group("Frontend");
}

absl::Status CheckResponseLogFlags(const frontend::ServingFlags& serving, bool log_requests,
                                   bool log_stats) {
  if (serving.enable_log_outputs && !log_requests) {
    return absl::InvalidArgumentError("Error: --enable-log-outputs requires --enable-log-requests");
  }
  if (serving.enable_per_request_metrics && !log_stats) {
    return absl::InvalidArgumentError(
        "Error: --enable-per-request-metrics requires engine statistics logging; remove "
        "--disable-log-stats to enable per-request metrics.");
  }
  return absl::OkStatus();
}

}  // namespace vllm::launcher
