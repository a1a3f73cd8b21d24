// The flags of `vllm-launch [serve] [MODEL] [flags]`, with vLLM's names and short aliases
// (vllm/engine/arg_utils.py, vllm/entrypoints/openai/cli_args.py). With no flags the server
// serves the bundled model (models/kjv-llama-tiny) on the CPU at 127.0.0.1:8000.
//
// Parsing never exits the process: --help/--version text and every error come back to the
// caller, which prints them. Errors name the flag and, for choices, the allowed values.
#ifndef VLLM_LAUNCHER_SERVE_ARGS_H_
#define VLLM_LAUNCHER_SERVE_ARGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "config/vllm_config.h"
#include "frontend/openai/http_options.h"
#include "frontend/openai/serving_flags.h"
#include "launcher/spec/api_server_spec.h"  // DpLoadBalancing

namespace vllm::launcher {

struct ServeArgs {
  // The engine's settings (model, dtype, device, parallel sizes, cache, scheduler), bound to
  // their flags and validated: what every engine-core process receives (each with its own
  // data_parallel_rank). The device is as given (auto is resolved by the engine factory, on
  // the engine's node). The fields below are the server's own.
  config::VllmConfig config;
  std::string host = "127.0.0.1";
  int32_t port = 8000;
  // API keys, --root-path, CORS, the access / request / stats logs (serve_args_frontend.h).
  frontend::HttpOptions http;
  // Connections served at once; 0: frontend::DefaultMaxConnections() (from RLIMIT_NOFILE).
  int64_t max_connections = 0;
  // SIGTERM: stop accepting and let requests in flight finish for up to this many seconds,
  // then end them with an error (0: at once). SIGINT (Ctrl-C) never waits.
  double shutdown_timeout_s = 25.0;
  // Names the model answers to (--served-model-name); default: the --model argument, or
  // "kjv-llama-tiny" for the bundled default.
  std::vector<std::string> served_model_names;
  std::optional<std::string> chat_template;  // a file or the template itself
  // --generation-config, --override-generation-config, --chat-template-content-format
  // (launcher/request_default_flags.h).
  frontend::ServingFlags serving;
  // Data parallelism (sizes and ranks: config.parallel): replicas of the engine (each with its
  // own tensor-parallel group). The head node runs the API server and replicas 0 .. -dpl - 1;
  // --headless nodes run engines only, which join the head over TCP (multi_node: the engines
  // talk TCP — some replica is on another node, or --data-parallel-address was given).
  bool headless = false;
  bool multi_node = false;
  // One engine's workers across nodes (config.parallel.nnodes > 1; vLLM's --nnodes /
  // --node-rank, no Ray): node rank 0 runs the API server, the engine core and its block of
  // ranks; a worker node (--headless with --node-rank above 0) runs only its block of the
  // engine's workers, which reach node rank 0 at --master-addr:--master-port. A worker node
  // needs no data-parallel flags and is never multi_node (no engine core runs on it).
  bool worker_node = false;
  // kHybrid / kExternal: this instance serves replicas -dpr .. -dpr + -dpl - 1 on this node
  // alone (its /metrics and /health name them by their global ranks).
  DpLoadBalancing dp_load_balancing = DpLoadBalancing::kInternal;
  std::string cluster_key_file;  // --cluster-key-file (checked readable at parse time)
  // A local engine core that dies is started again (it joins the head again; TCP only).
  bool restart_dead_engines = false;
  // --headless (--rejoin-head, the default): an engine that took the head as gone (silent for
  // VLLM_ENGINE_HEARTBEAT_TIMEOUT_S) is started again to re-join it, with a bounded back-off;
  // a worker node of --nnodes joins again. --no-rejoin-head: the node ends instead.
  bool rejoin_head = true;
  // --data-parallel-lockstep: request waves; an engine with no work runs dummy steps while
  // another has work (vLLM does this for MoE models with DP > 1; here a flag, off by
  // default). Needs -dp > 1 with internal load balancing; given on the head only.
  bool data_parallel_lockstep = false;
  // --api-server-count: API server processes sharing --port (SO_REUSEPORT), each with its
  // own client of every engine. Over TCP, API server i takes the handshake port -dpp + i.
  int32_t api_server_count = 1;
  // The serve flags as given (the launcher starts each API server process with them).
  std::vector<std::string> argv;
};

// What parsing produced: arguments to run with, or text to print and an exit code
// (--help, --version: 0).
struct ParsedServeArgs {
  std::optional<ServeArgs> args;
  std::string text;
  int exit_code = 0;
};

// `default_model` is used when neither a positional MODEL nor --model is given.
// InvalidArgument naming the flag for anything malformed (unknown flag, bad number, a value
// outside its choices or range).
[[nodiscard]] absl::StatusOr<ParsedServeArgs> ParseServeArgs(const std::vector<std::string>& argv,
                                                             const std::string& default_model);

// How long the head waits for every engine to join, and an engine for the head's CONFIG:
// VLLM_ENGINE_READY_TIMEOUT_S (vLLM's variable; default 600 s). InvalidArgument naming the
// variable when it is not a positive number.
[[nodiscard]] absl::StatusOr<absl::Duration> EngineReadyTimeout();
// How long the head waits for a sign of life from an engine on another node before it takes
// the engine as dead: VLLM_ENGINE_HEARTBEAT_TIMEOUT_S (ours; default 10 s; engines send a
// heartbeat every second).
[[nodiscard]] absl::StatusOr<absl::Duration> EngineHeartbeatTimeout();

// Parses "4GiB", "512MiB", "1e9", "123456" (bytes) as --kv-cache-memory accepts.
[[nodiscard]] absl::StatusOr<int64_t> ParseByteSize(const std::string& text);

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_SERVE_ARGS_H_
