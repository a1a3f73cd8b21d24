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
}

}  // namespace vllm::launcher
