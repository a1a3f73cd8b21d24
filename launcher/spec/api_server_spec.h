// What the launcher of `--api-server-count N` and each API server process it starts
// (`vllm-launch api-server`) say to each other over their socketpair (descriptor 3 in the API
// server), as length-prefixed frames (launcher/spec/frames.h) of one msgpack array each:
//
//   launcher → API server   ["ApiServerSpec", 3, index, count, vllm_config (bin: the
//                            config/config_codec.h encoding), frontend, coordinator,
//                            serving]   (first)
//       frontend:    [host, port, [api_key...], max_connections, shutdown_timeout_s (f64),
//                     [served_model_name...], chat_template | nil, multi_node,
//                     dp_load_balancing ("internal" | "hybrid" | "external"),
//                     cluster_key_file, root_path, [allowed_origin...], [allowed_method...],
//                     [allowed_header...], allow_credentials, uvicorn_log_level ("trace" ..
//                     "critical"), access_log, log_requests, max_log_len | nil, log_stats,
//                     request_id_headers, disable_fastapi_docs, [access_log_skip_path...],
//                     h11_max_incomplete_event_size, h11_max_header_count,
//                     server_load_tracking, sse_keep_alive_interval_s]
//                    (lists ≤ 64 entries; HttpOptions' kv_cache_device and stats interval are
//                     not sent: the API server sets them as the launcher would)
//       coordinator: [stats, publish, waves, report_key_hex]   (all "": none)
//       serving:     [generation_config, override_generation_config,
//                     chat_template_content_format, default_chat_template_kwargs,
//                     return_tokens_as_token_ids, enable_force_include_usage,
//                     response_role, enable_prompt_tokens_details,
//                     enable_per_request_metrics, enable_log_outputs, enable_log_deltas]
//                    (frontend::ServingFlags)
//   (strings ≤ kMaxSpecString bytes; chat_template ≤ kMaxChatTemplateBytes)
//   launcher → API server   ["engine_dead", rank, why]     a local engine core ended
//   API server → launcher   ["handshake", address]         its client's handshake socket (first)
//                           ["ready", port]                it serves HTTP
// EOF on either side: the other is gone.
//
// The spec is the whole serve configuration: the API server parses no serve flags. Decoding
// is bounded (kMaxApiServerSpecBytes; strings ≤ kMaxSpecString bytes, ≤ 64 model names,
// depth 2), checks types and ranges, decodes and validates the VllmConfig, and names the field
// at fault. Whatever decodes re-encodes to the same bytes.
#ifndef VLLM_LAUNCHER_SPEC_API_SERVER_SPEC_H_
#define VLLM_LAUNCHER_SPEC_API_SERVER_SPEC_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "config/vllm_config.h"
#include "frontend/openai/http_options.h"
#include "frontend/openai/serving_flags.h"
#include "launcher/spec/coordinator_spec.h"

namespace vllm::launcher {

inline constexpr size_t kMaxApiServerSpecBytes = 60 * 1024;
// --chat-template may be the template itself.
inline constexpr size_t kMaxChatTemplateBytes = 32 * 1024;
inline constexpr size_t kMaxServedModelNames = 64;
inline constexpr int32_t kMaxApiServers = 64;

// Who spreads requests over the data-parallel replicas (vLLM 0.33's three modes).
enum class DpLoadBalancing {
  kInternal,  // the head's API server(s) balance over every replica, on any node
  kHybrid,    // each node's API server balances over its own -dpl replicas
  kExternal,  // one replica (--data-parallel-rank) per instance; a balancer outside spreads
};

// The server's own settings (ServeArgs' fields that are not the engine's).
struct FrontendSettings {
  std::string host = "127.0.0.1";
  int32_t port = 8000;                          // 0 .. 65535
  int64_t max_connections = 0;                  // 0 .. 2^24
  double shutdown_timeout_s = 25.0;             // 0 .. 86400
  std::vector<std::string> served_model_names;  // 1 .. kMaxServedModelNames
  std::optional<std::string> chat_template;
  bool multi_node = false;
  DpLoadBalancing dp_load_balancing = DpLoadBalancing::kInternal;
  std::string cluster_key_file;
  frontend::HttpOptions http;  // api keys, root path, CORS, logging
  bool operator==(const FrontendSettings&) const = default;
};

struct ApiServerSpec {
  int32_t index = 0;  // 0 .. count - 1
  int32_t count = 2;  // 1 .. kMaxApiServers
  config::VllmConfig config;
  FrontendSettings frontend;
  DpCoordinatorAddresses coordinator;  // publish empty: no coordinator
  frontend::ServingFlags serving;      // the JSON checked by the API server at start-up
  bool operator==(const ApiServerSpec&) const = default;
};

// A control message after the spec.
struct ApiServerMessage {
  enum class Kind { kHandshake, kReady, kEngineDead };
  Kind kind = Kind::kHandshake;
  std::string text;    // handshake: the address (not empty); engine dead: why
  int32_t number = 0;  // ready: the port (1 .. 65535); engine dead: the rank (>= 0)
  bool operator==(const ApiServerMessage&) const = default;
};

// InvalidArgument naming the field when a string is over its limit (kMaxSpecString;
// kMaxChatTemplateBytes), there are more than kMaxServedModelNames names, or the whole is
// over kMaxApiServerSpecBytes: nothing is cut.
[[nodiscard]] absl::StatusOr<std::string> EncodeApiServerSpec(const ApiServerSpec& spec);
// InvalidArgument naming the field for anything off-schema, out of range, or a config that
// does not validate.
[[nodiscard]] absl::StatusOr<ApiServerSpec> DecodeApiServerSpec(std::string_view bytes);

std::string EncodeApiServerMessage(const ApiServerMessage& message);
[[nodiscard]] absl::StatusOr<ApiServerMessage> DecodeApiServerMessage(std::string_view bytes);

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_SPEC_API_SERVER_SPEC_H_
