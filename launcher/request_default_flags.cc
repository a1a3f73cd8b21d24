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
}

}  // namespace vllm::launcher
