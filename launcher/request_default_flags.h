// vLLM 0.33's serve flags behind the server's request defaults (frontend/openai/
// request_defaults.h): --generation-config, --override-generation-config,
// --chat-template-content-format, --default-chat-template-kwargs, --return-tokens-as-token-ids
// --enable-force-include-usage, --response-role, --enable-prompt-tokens-details,
// --enable-per-request-metrics, --enable-log-outputs and --enable-log-deltas, bound to
// ServeArgs::serving and checked as parsed.
#ifndef VLLM_LAUNCHER_REQUEST_DEFAULT_FLAGS_H_
#define VLLM_LAUNCHER_REQUEST_DEFAULT_FLAGS_H_

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "frontend/openai/serving_flags.h"

namespace vllm::launcher {

// Adds the flags to `app` (group ModelConfig / Frontend, as vLLM's). A value the flag refuses
// (a content format not auto/string/openai, an override that is not a JSON object or sets a
// sampling field of the wrong type) stops parsing with a message naming the flag.
void AddRequestDefaultFlags(CLI::App& app, frontend::ServingFlags& serving);

// vLLM's checks across flags (validate_parsed_serve_args, its messages): --enable-log-outputs
// needs --enable-log-requests, --enable-per-request-metrics no --disable-log-stats.
[[nodiscard]] absl::Status CheckResponseLogFlags(const frontend::ServingFlags& serving,
                                                 bool log_requests, bool log_stats);

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_REQUEST_DEFAULT_FLAGS_H_
