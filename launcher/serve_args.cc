#include "launcher/serve_args.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "config/kv_events_config.h"
#include "config/kv_transfer_config.h"
#include "config/speculative_config.h"
#include "ipc/curve.h"
#include "kv_events/kv_events.h"
#include "launcher/request_default_flags.h"
#include "launcher/serve_args_frontend.h"
#include "launcher/serve_config_file.h"
#include "launcher/vllm_serve_flags.h"
#include "nlohmann/json.hpp"

namespace vllm::launcher {
namespace {

absl::StatusOr<absl::Duration> SecondsFromEnv(const char* name, double default_s) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return absl::Seconds(default_s);
  double s = 0;
  if (!absl::SimpleAtod(v, &s) || !(s > 0) || s > 86400 * 7) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expected a number of seconds in (0, 604800], got '",
                     std::string(v).substr(0, 64), "'"));
  }
  return absl::Seconds(s);
}

}  // namespace

absl::StatusOr<absl::Duration> EngineReadyTimeout() {
  return SecondsFromEnv("VLLM_ENGINE_READY_TIMEOUT_S", 600);
}

absl::StatusOr<absl::Duration> EngineHeartbeatTimeout() {
  return SecondsFromEnv("VLLM_ENGINE_HEARTBEAT_TIMEOUT_S", 10);
}

absl::StatusOr<int64_t> ParseByteSize(const std::string& text) {
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"KiB", 1024.0},
      {"MiB", 1024.0 * 1024},
      {"GiB", 1024.0 * 1024 * 1024},
      {"KB", 1e3},
      {"MB", 1e6},
      {"GB", 1e9},
      {"K", 1024.0},
      {"M", 1024.0 * 1024},
      {"G", 1024.0 * 1024 * 1024},
  };
  std::string number = std::string(absl::StripAsciiWhitespace(text));
  double scale = 1;
  for (const auto& [unit, factor] : kUnits) {
    if (number.size() > unit.size() &&
        number.compare(number.size() - unit.size(), unit.size(), unit) == 0) {
      number.resize(number.size() - unit.size());
      scale = factor;
      break;
    }
  }
  double value = 0;
  if (!absl::SimpleAtod(number, &value) || !std::isfinite(value) || value <= 0 ||
      value * scale > 9e18) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-cache-memory: '", text, "' is not a size (examples: 4GiB, 512MiB, 1073741824)"));
  }
  return static_cast<int64_t>(value * scale);
}

namespace {

// What the flags are parsed into that is not a field as is (checked against other flags, or
// only counted). Every other flag binds to its VllmConfig or ServeArgs field directly.
struct FlagValues {
  std::string model, positional_model, tokenizer;
  int32_t dp_local = 1, dp_start_rank = 0, dp_rank = 0;
  bool dp_hybrid_lb = false, dp_external_lb = false;
  // -dpl / -dpr taken from --nnodes and --node-rank (InferDpFromNodes), as if given.
  bool dp_from_nodes = false;
  HttpFlagValues http;  // serve_args_frontend.h
  std::string chat_template, kv_events_config, kv_transfer_config, cluster_key_file,
      structured_outputs_config, reasoning_parser, speculative_config;
};

// Throws CLI11's error (parsing stops; ParseServeArgs returns it) for a value its parser
// refuses; the message names the flag.
template <class T>
T OrThrow(absl::StatusOr<T> value) {
  if (!value.ok()) throw CLI::ValidationError(std::string(value.status().message()));
  return *std::move(value);
}

// A flag whose value `parse` turns into `target` (an enum, a byte size).
template <class T, class Parse>
CLI::Option* AddParsedOption(CLI::App& app, const std::string& name, T& target, Parse parse,
                             const std::string& help) {
  return app.add_option_function<std::string>(
      name, [&target, parse](const std::string& v) { target = OrThrow<T>(parse(v)); }, help);
}

// ModelConfig and LoadConfig.
void AddModelFlags(CLI::App& app, FlagValues& f, ServeArgs& a) {
  config::VllmConfig& c = a.config;
  app.add_option("model_tag", f.positional_model, "The model to serve (same as --model).");
  app.add_option("--model", f.model,
                 "Name or path of the Hugging Face model to use. Default: the bundled "
                 "models/kjv-llama-tiny.")
      ->group("ModelConfig");
  app.add_option("--tokenizer", f.tokenizer,
                 "The tokenizer: only the model's own (the default) is accepted.")
      ->group("ModelConfig");
  app.add_option("--served-model-name", a.served_model_names,
                 "The model name(s) used in the API. Default: the --model argument.")
      ->group("ModelConfig");
  app.add_option_function<std::string>(
         "--max-model-len",
         [&c](const std::string& v) {
           const int64_t n = OrThrow(ParseHumanReadableInt("--max-model-len", v, true));
           if (n == 0 || n < -1 || n > (1 << 24)) {
             throw CLI::ValidationError(
                 absl::StrCat("--max-model-len: ", n, " is not in [1, 16777216] (or -1/auto)"));
           }
           c.model.max_model_len = n == -1 ? 0 : static_cast<int32_t>(n);
         },
         "Model context length (prompt and output): 2048, 1k (1000), 1K (1024), 2m, or -1 / "
         "auto for the model config's (the default).")
      ->group("ModelConfig");
  AddParsedOption(app, "--dtype", c.model.dtype, config::ParseModelDType,
                  "Data type for model weights and activations (CUDA; the CPU backend computes "
                  "in float32). \"auto\" will use FP16 precision for FP32 and FP16 models, and "
                  "BF16 precision for BF16 models; \"half\" / \"float16\" for FP16; "
                  "\"bfloat16\" for a balance between precision and range; \"float\" / "
                  "\"float32\" for FP32 precision.")
      ->group("ModelConfig");
  app.add_option("--seed", c.model.seed, "Random seed for requests without one.")
      ->group("ModelConfig");
  app.add_option("--max-logprobs", c.model.max_logprobs,
                 "Maximum number of log probabilities to return per token (logprobs, "
                 "top_logprobs) and per prompt position (prompt_logprobs); a request asking for "
                 "more is refused. Default: 20. At most 1024 (-1, vLLM's \"no cap\", is refused).")
      ->group("ModelConfig");
  app.add_flag("--enforce-eager", c.model.enforce_eager,
               "Always execute the model in eager mode: no CUDA graphs. Default: CUDA graphs "
               "for decode steps and eager execution for the rest.")
      ->group("ModelConfig");
  app.add_flag("--enable-sleep-mode", c.model.enable_sleep_mode,
               "Enable sleep mode: POST /sleep?level=1 frees the KV cache, level=2 the weights "
               "too, /wake_up re-creates them (the routes need VLLM_SERVER_DEV_MODE=1). "
               "Without it they pause scheduling and free nothing.")
      ->group("ModelConfig");
  AddParsedOption(app, "--load-format", c.load.load_format, config::ParseLoadFormat,
                  "The format of the model weights to load: auto, safetensors, or dummy (random "
                  "weights, for profiling).")
      ->group("LoadConfig");
}

// ParallelConfig: tensor, pipeline and data parallelism, the nodes, the executor backend.
void AddParallelFlags(CLI::App& app, FlagValues& f, ServeArgs& a) {
  config::VllmConfig& c = a.config;
  app.add_option("--tensor-parallel-size", c.parallel.tensor_parallel_size,
                 "Number of tensor-parallel groups (alias -tp).")
      ->group("ParallelConfig");
  app.add_option("--pipeline-parallel-size", c.parallel.pipeline_parallel_size,
                 "Number of pipeline-parallel groups (alias -pp).")
      ->group("ParallelConfig");
  app.add_option("--data-parallel-size", c.parallel.data_parallel_size,
                 "Number of data-parallel replicas (alias -dp).")
      ->group("ParallelConfig");
  app.add_option("--data-parallel-size-local", f.dp_local,
                 "Number of data-parallel replicas on this node (alias -dpl).")
      ->check(CLI::Range(0, 1024))
      ->group("ParallelConfig");
  app.add_option("--data-parallel-start-rank", f.dp_start_rank,
                 "The first data-parallel rank on this node (with --headless; alias -dpr).")
      ->check(CLI::Range(0, 1024))
      ->group("ParallelConfig");
  app.add_option("--data-parallel-rank", f.dp_rank,
                 "Data-parallel rank of this instance; set, it enables external load balancing "
                 "(alias -dpn).")
      ->check(CLI::Range(0, 1023))
      ->group("ParallelConfig");
  app.add_flag("--data-parallel-hybrid-lb", f.dp_hybrid_lb,
               "Each node's API server balances over its local engines only (alias -dph).")
      ->group("ParallelConfig");
  app.add_flag("--data-parallel-external-lb", f.dp_external_lb,
               "An external load balancer spreads requests over one API server per rank (alias "
               "-dpe).")
      ->group("ParallelConfig");
  app.add_option("--data-parallel-address", c.parallel.data_parallel_address,
                 "Address of the data-parallel head node (alias -dpa).")
      ->group("ParallelConfig");
  app.add_option("--data-parallel-rpc-port", c.parallel.data_parallel_rpc_port,
                 "RPC port of the data-parallel head (alias -dpp).")
      ->group("ParallelConfig");
  app.add_flag("--headless", a.headless,
               "Run engines only, without the API server: this node's replicas "
               "(--data-parallel-start-rank .. + --data-parallel-size-local - 1) join the head at "
               "--data-parallel-address:--data-parallel-rpc-port. With --nnodes above 1, on node "
               "ranks 1 .. N-1: run this node's workers of the engine on node rank 0.")
      ->group("ParallelConfig");
  app.add_flag("--restart-dead-engines", a.restart_dead_engines,
               "Start a local engine core that died again; it joins the head again and takes "
               "requests. Needs TCP between the engines and the head (--data-parallel-address). "
               "Not in vLLM.")
      ->group("ParallelConfig");
  app.add_flag("--rejoin-head,!--no-rejoin-head", a.rejoin_head,
               "With --headless: when the head goes silent (a partition, or the head restarts), "
               "keep trying to join it again, with a back-off (1 s doubled up to 30 s, logged); "
               "the head decides whether to take the node back. Default on; "
               "--no-rejoin-head: this node's launcher exits once its engines took the head as "
               "gone. Not in vLLM.")
      ->group("ParallelConfig");
  app.add_flag("--data-parallel-lockstep", a.data_parallel_lockstep,
               "Request waves across the data-parallel engines: while any engine has work, the "
               "idle ones run dummy forward steps, so collectives across DP ranks (MoE expert "
               "parallelism) stay in step. vLLM does this for MoE models with DP > 1; here it "
               "is a flag, off by default. Give it on the head; needs --data-parallel-size > 1 "
               "with internal load balancing. Not in vLLM.")
      ->group("ParallelConfig");
  app.add_option("--cluster-key-file", f.cluster_key_file,
                 "A CURVE key file (mode 0600) every node of the cluster has: the TCP sockets "
                 "between nodes (data-parallel engines, --nnodes workers) then admit only peers "
                 "holding it, and are encrypted. Not in vLLM.")
      ->group("ParallelConfig");
  AddParsedOption(app, "--distributed-executor-backend", c.parallel.distributed_executor_backend,
                  config::ParseExecutorBackend,
                  "Backend for the workers: uni (in-process) or mp (worker processes). Default: "
                  "uni for one worker, mp otherwise.")
      ->group("ParallelConfig");
}

// ParallelConfig: one engine's workers across nodes (vLLM 0.33's multi-node without Ray).
void AddNodeFlags(CLI::App& app, ServeArgs& a) {
  config::ParallelConfig& p = a.config.parallel;
  app.add_option("--nnodes,-n", p.nnodes,
                 "Number of nodes one engine's workers span: the tensor × pipeline ranks split "
                 "evenly over them, node n running the n-th block. Needs the mp executor backend; "
                 "every node is started with the same flags and its own --node-rank. Default: 1.")
      ->group("ParallelConfig");
  app.add_option("--node-rank,-r", p.node_rank,
                 "This node's zero-based index among the --nnodes nodes: 0 runs the API server "
                 "and the engine core, 1 .. N-1 run their workers only (with --headless). "
                 "Default: 0.")
      ->group("ParallelConfig");
  app.add_option("--master-addr", p.master_addr,
                 "Address of node rank 0, which the other nodes' workers connect to, for "
                 "multi-node inference (--nnodes above 1). Default: 127.0.0.1.")
      ->group("ParallelConfig");
  app.add_option("--master-port", p.master_port,
                 "Port of node rank 0 for the other nodes' workers, for multi-node inference "
                 "(--nnodes above 1). Default: 29501.")
      ->group("ParallelConfig");
}

// CacheConfig.
void AddCacheFlags(CLI::App& app, ServeArgs& a) {
  config::VllmConfig& c = a.config;
  app.add_option("--block-size", c.cache.block_size,
                 "Token block size of the paged KV cache: 1, 8, 16, 32, 64 or 128.")
      ->group("CacheConfig");
  app.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", c.cache.enable_prefix_caching,
               "Enable (default) or disable automatic prefix caching.")
      ->group("CacheConfig");
  c.cache.kv_cache_memory_bytes = int64_t{4} << 30;
  AddParsedOption(app, "--kv-cache-memory", c.cache.kv_cache_memory_bytes, ParseByteSize,
                  "KV-cache memory per worker on the CPU (like VLLM_CPU_KVCACHE_SPACE): 4GiB, "
                  "512MiB, or bytes. Default: 4GiB.")
      ->group("CacheConfig");
  app.add_option_function<std::string>(
         "--kv-cache-memory-bytes",
         [&c](const std::string& v) {
           const int64_t n = OrThrow(ParseHumanReadableInt("--kv-cache-memory-bytes", v, false));
           if (n < 1) throw CLI::ValidationError("--kv-cache-memory-bytes: must be positive");
           c.cache.kv_cache_memory_bytes = n;
         },
         "KV-cache size per worker in bytes, as vLLM's human-readable integers (4G = 4 GiB, "
         "4g = 4e9); the same setting as --kv-cache-memory.")
      ->group("CacheConfig");
  app.add_option("--gpu-memory-utilization", c.cache.gpu_memory_utilization,
                 "The fraction of GPU memory to be used for the model executor (weights, "
                 "activations and KV cache), from 0 to 1; e.g. 0.5 means 50% GPU memory "
                 "utilization. A per-instance limit (CUDA only). Default: 0.9.")
      ->group("CacheConfig");
  app.add_option_function<double>(
         "--kv-offloading-size",
         [&c](double gib) {
           if (!(std::isfinite(gib) && gib > 0 && gib <= config::kMaxKvOffloadingGiB)) {
             throw CLI::ValidationError(
                 absl::StrFormat("--kv-offloading-size: expected GiB in (0, %.0f], got %g",
                                 config::kMaxKvOffloadingGiB, gib));
           }
           c.cache.kv_offloading_size = gib;
         },
         "Size of the KV cache offloading buffer in GiB. When TP > 1, this is the total buffer "
         "size summed across all TP ranks. Unset (default): no KV offloading. When set, KV-cache "
         "blocks are offloaded to CPU memory through OffloadingConnector (as "
         "--kv-transfer-config '{\"kv_connector\": \"OffloadingConnector\", \"kv_role\": "
         "\"kv_both\"}').")
      ->group("CacheConfig");
  app.add_option("--kv-offloading-backend", c.cache.kv_offloading_backend,
                 "The backend for KV cache offloading: native (vLLM's built-in CPU offloading; "
                 "vLLM's lmcache is not available here). Only used with --kv-offloading-size. "
                 "Default: native.")
      ->group("CacheConfig");
  app.add_option_function<int32_t>(
         "--num-gpu-blocks-override", [&c](int32_t n) { c.cache.num_gpu_blocks_override = n; },
         "Use this many KV-cache blocks instead of the memory budget.")
      ->group("CacheConfig");
}

// SchedulerConfig, the KV-cache events (VllmConfig) and DeviceConfig.
void AddSchedulerAndDeviceFlags(CLI::App& app, FlagValues& f, ServeArgs& a) {
  config::VllmConfig& c = a.config;
  app.add_option("--max-num-seqs", c.scheduler.max_num_seqs,
                 "Maximum number of sequences per iteration.")
      ->group("SchedulerConfig");
  app.add_option_function<std::string>(
         "--max-num-batched-tokens",
         [&c](const std::string& v) {
           const int64_t n = OrThrow(ParseHumanReadableInt("--max-num-batched-tokens", v, false));
           if (n < 1 || n > (1 << 24)) {
             throw CLI::ValidationError(
                 absl::StrCat("--max-num-batched-tokens: ", n, " is not in [1, 16777216]"));
           }
           c.scheduler.max_num_batched_tokens = static_cast<int32_t>(n);
         },
         "Maximum number of tokens per iteration (2048, 8k, 8K).")
      ->group("SchedulerConfig");
  app.add_option("--long-prefill-token-threshold", c.scheduler.long_prefill_token_threshold,
                 "Largest prefill chunk of one request (0: no limit).")
      ->group("SchedulerConfig");
  app.add_option("--kv-events-config", f.kv_events_config,
                 "KV-cache events as JSON (vLLM's KVEventsConfig), e.g. "
                 "'{\"enable_kv_cache_events\": true, \"endpoint\": \"tcp://*:5557\"}': each "
                 "engine core publishes its block stores and removals on ZMQ PUB (port + its "
                 "data-parallel rank).")
      ->group("VllmConfig");
  app.add_option("--kv-transfer-config", f.kv_transfer_config,
                 "The KV connector as JSON (vLLM's KVTransferConfig), e.g. "
                 "'{\"kv_connector\": \"NixlConnector\", \"kv_role\": \"kv_both\"}'; "
                 "connectors ExampleConnector, NixlConnector and OffloadingConnector.")
      ->group("VllmConfig");
  app.add_option("--structured-outputs-config", f.structured_outputs_config,
                 "Structured outputs as JSON (vLLM's StructuredOutputsConfig), e.g. "
                 "'{\"backend\": \"xgrammar\", \"disable_any_whitespace\": true}'.")
      ->group("VllmConfig");
  app.add_option("--speculative-config", f.speculative_config,
                 "Speculative decoding as JSON (vLLM's SpeculativeConfig), e.g. "
                 "'{\"method\": \"ngram\", \"num_speculative_tokens\": 3, "
                 "\"prompt_lookup_max\": 4}'; methods ngram and suffix.")
      ->group("VllmConfig");
  app.add_option("--reasoning-parser", f.reasoning_parser,
                 "deepseek_r1 or qwen3: chat answers split <think>...</think> into reasoning, "
                 "and structured outputs start after it.")
      ->group("VllmConfig");
  app.add_flag("--enable-auto-tool-choice", c.tool_calling.enable_auto_tool_choice,
               "tool_choice \"auto\": parse function calls out of the text (needs "
               "--tool-call-parser).")
      ->group("Frontend");
  app.add_option("--tool-call-parser", c.tool_calling.tool_call_parser,
                 "The model's tool-call format: hermes, llama3_json, mistral or pythonic.")
      ->group("Frontend");
  app.add_flag("--exclude-tools-when-tool-choice-none",
               c.tool_calling.exclude_tools_when_tool_choice_none,
               "Leave the tools out of the prompt when tool_choice is \"none\".")
      ->group("Frontend");
  app.add_option("--max-structured-output-compile-seconds",
                 c.structured_outputs.max_compile_seconds,
                 "A request whose grammar takes longer to compile fails (ours; default 30).")
      ->group("VllmConfig");
  app.add_flag("--enable-chunked-prefill,!--no-enable-chunked-prefill",
               c.scheduler.enable_chunked_prefill, "Split long prompts across steps (default on).")
      ->group("SchedulerConfig");
  AddParsedOption(app, "--scheduling-policy", c.scheduler.policy, config::ParseSchedulingPolicy,
                  "fcfs or priority.")
      ->group("SchedulerConfig");
  app.add_option("--stream-interval", c.scheduler.stream_interval,
                 "Tokens per streamed chunk, the first and last excepted (default 1).")
      ->check(CLI::Range(1, 1 << 20))
      ->group("SchedulerConfig");
  AddParsedOption(app, "--device", c.device.device, config::ParseDevice,
                  "Device: auto (cuda when a GPU is visible on the engine's node), cpu, cuda.")
      ->group("DeviceConfig");
}

// The OpenAI server's flags (vLLM's cli_args.py).
void AddFrontendFlags(CLI::App& app, FlagValues& f, ServeArgs& a) {
  app.add_option("--host", a.host, "Host name to listen on.")->group("Frontend");
  app.add_option("--port", a.port, "Port to listen on.")
      ->check(CLI::Range(0, 65535))
      ->group("Frontend");
  AddHttpFlags(app, f.http);
  app.add_option("--max-connections", a.max_connections,
                 "Client connections served at once; past it the longest-idle connection is "
                 "closed, or /health alone is answered. Default: the open-file limit "
                 "(ulimit -n) less 160.")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->group("Frontend");
  app.add_option("--shutdown-timeout", a.shutdown_timeout_s,
                 "On SIGTERM, stop accepting and give requests in flight up to this many "
                 "seconds to finish before they are aborted with an error (0: abort at once). "
                 "Ctrl-C (SIGINT) aborts at once. Default: 25.")
      ->check(CLI::Range(0.0, 86400.0))
      ->group("Frontend");
  app.add_option("--api-server-count", a.api_server_count,
                 "Number of API server processes sharing the port (alias -asc). Default: 1.")
      ->check(CLI::Range(1, 64))
      ->group("Frontend");
  app.add_option("--chat-template", f.chat_template,
                 "The chat template (a file or the template itself). Default: the model's.")
      ->group("Frontend");
}

// The model (positional or --model, or the default) and the frontend's optional strings.
absl::Status ApplyModelFlags(const FlagValues& f, const std::string& default_model, ServeArgs& a) {
  std::filesystem::path& model = a.config.model.model;
  if (!f.positional_model.empty() && !f.model.empty() && f.positional_model != f.model) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the model is given twice: '", f.positional_model, "' and --model '", f.model, "'"));
  }
  model = !f.model.empty()              ? f.model
          : !f.positional_model.empty() ? f.positional_model
                                        : default_model;
  if (!f.tokenizer.empty() && f.tokenizer != model.string()) {
    return absl::InvalidArgumentError(absl::StrCat("--tokenizer '", f.tokenizer,
                                                   "': the tokenizer is the model's own ('",
                                                   model.string(), "'); another is not supported"));
  }
  if (a.served_model_names.empty()) {
    // As vLLM: the --model argument as given; the bundled default answers to its short name.
    const bool is_default = f.model.empty() && f.positional_model.empty();
    a.served_model_names.push_back(is_default ? model.filename().string() : model.string());
  }
  if (!f.chat_template.empty()) a.chat_template = f.chat_template;
  return absl::OkStatus();
}

// --kv-events-config, strictly (an unknown key or a wrong type names the key and the flag).
absl::Status ApplyKvEventsConfig(const std::string& json, config::VllmConfig& c) {
  VLLM_ASSIGN_OR_RETURN(c.kv_events, config::ParseKvEventsConfig(json));
  const config::KvEventsConfig& k = c.kv_events;
  const int32_t dp_size = c.parallel.data_parallel_size;
  if (!k.enable || k.publisher != "zmq" || dp_size <= 1) return absl::OkStatus();
  // Each replica offsets the port by its rank (vLLM does the same, and fails at start-up on
  // anything else); refuse it before anything starts.
  for (const std::string* ep : {&k.endpoint, k.replay_endpoint ? &*k.replay_endpoint : nullptr}) {
    if (ep != nullptr && kv_events::OffsetEndpointForRank(*ep, 1) == *ep) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kv-events-config: endpoint '", *ep,
                       "' cannot be offset per data-parallel rank (", "--data-parallel-size ",
                       dp_size, "): use tcp://host:port (rank r takes port + r) or inproc://name"));
    }
  }
  return absl::OkStatus();
}

// --structured-outputs-config, strictly (an unknown key or a wrong type names the key and the
// flag), and --reasoning-parser.
absl::Status ApplyStructuredOutputsConfig(const FlagValues& f, config::VllmConfig& c) {
  config::StructuredOutputsConfig& s = c.structured_outputs;
  auto error = [](const std::string& key, const std::string& problem) {
    return absl::InvalidArgumentError(
        absl::StrCat("--structured-outputs-config ", key, ": ", problem));
  };
  if (!f.structured_outputs_config.empty()) {
    const nlohmann::json j = nlohmann::json::parse(f.structured_outputs_config, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError("--structured-outputs-config: expected a JSON object");
    }
    for (const auto& [key, v] : j.items()) {
      if (key == "backend") {
        if (!v.is_string()) return error(key, "expected a string");
        s.backend = v.get<std::string>();
        if (s.backend != "auto" && s.backend != "xgrammar") {
          return error(key, absl::StrCat("'", s.backend,
                                         "' is not available: this server's backend is xgrammar "
                                         "(auto or xgrammar)"));
        }
      } else if (key == "disable_fallback" || key == "disable_any_whitespace" ||
                 key == "disable_additional_properties" || key == "enable_in_reasoning") {
        if (!v.is_boolean()) return error(key, "expected true or false");
        if (key == "disable_fallback") s.disable_fallback = v.get<bool>();
        if (key == "disable_any_whitespace") s.disable_any_whitespace = v.get<bool>();
        if (key == "disable_additional_properties") s.disable_additional_properties = v.get<bool>();
        if (key == "enable_in_reasoning") s.enable_in_reasoning = v.get<bool>();
      } else if (key == "reasoning_parser") {
        if (!v.is_string()) return error(key, "expected a string");
        s.reasoning_parser = v.get<std::string>();
      } else if (key == "reasoning_parser_plugin") {
        if (!v.is_string()) return error(key, "expected a string");
        if (!v.get<std::string>().empty()) return error(key, "plugins are not supported");
      } else {
        return error(key, "not a StructuredOutputsConfig field");
      }
    }
  }
  if (!f.reasoning_parser.empty()) s.reasoning_parser = f.reasoning_parser;
  return absl::OkStatus();
}

// Load balancing across nodes, as vLLM 0.33 infers it (EngineArgs.create_engine_config):
// --data-parallel-rank N: external (this instance serves rank N alone, with its own API
// server; a load balancer outside spreads requests over the ranks' servers); -dpl with a start
// rank > 0 on a node that is not --headless, or --data-parallel-hybrid-lb: hybrid (each
// node's API server balances over its own -dpl replicas only; with -dpl 1 that is external).
// Either way no engine talks to another node (no request waves: dense models). Sets
// a.dp_load_balancing and this node's replicas (f.dp_local, f.dp_start_rank).
absl::Status InferDpLoadBalancing(const CLI::App& app, FlagValues& f, ServeArgs& a) {
  const int32_t dp_size = a.config.parallel.data_parallel_size;
  // As vLLM: without -dpl, every replica runs on this node (a headless node's count must be
  // given).
  const bool dpl_given = app.count("--data-parallel-size-local") > 0 || f.dp_from_nodes;
  if (!dpl_given) f.dp_local = dp_size;
  const bool dpn_given = app.count("--data-parallel-rank") > 0;
  if (f.dp_external_lb && !dpn_given) {
    return absl::InvalidArgumentError(
        "--data-parallel-external-lb: needs --data-parallel-rank, the rank this instance serves");
  }
  bool external = dpn_given;
  bool hybrid = false;
  if (external) {
    if (a.headless) {
      return absl::InvalidArgumentError(
          "--data-parallel-rank: an instance of external load balancing runs its API server; "
          "not with --headless");
    }
    if (dpl_given && f.dp_local != 1) {
      return absl::InvalidArgumentError(
          "--data-parallel-size-local: must be 1 with --data-parallel-rank (one replica per "
          "instance)");
    }
    if (f.dp_rank >= dp_size) {
      return absl::InvalidArgumentError(absl::StrCat("--data-parallel-rank ", f.dp_rank,
                                                     ": not below --data-parallel-size ", dp_size));
    }
    f.dp_local = 1;
    f.dp_start_rank = f.dp_rank;
  } else if (f.dp_hybrid_lb && a.headless) {
    return absl::InvalidArgumentError(
        "--data-parallel-hybrid-lb: every node runs its own API server; not with --headless");
  } else if (f.dp_hybrid_lb && !dpl_given) {
    return absl::InvalidArgumentError(
        "--data-parallel-hybrid-lb: needs --data-parallel-size-local, this node's replicas");
  } else if (dpl_given) {
    hybrid = f.dp_hybrid_lb || (f.dp_start_rank > 0 && !a.headless);
    if (hybrid && f.dp_local == 1) {
      external = true;
      hybrid = false;
    }
    if (f.dp_local == dp_size) hybrid = false;
  }
  a.dp_load_balancing = external ? DpLoadBalancing::kExternal
                        : hybrid ? DpLoadBalancing::kHybrid
                                 : DpLoadBalancing::kInternal;
  return absl::OkStatus();
}

// This node's place in the data-parallel group: multi_node (TCP between the engines and the
// head) and the flags that only make sense with it, --headless, lockstep.
absl::Status CheckDataParallelFlags(const CLI::App& app, const FlagValues& f, ServeArgs& a) {
  const int32_t dp_size = a.config.parallel.data_parallel_size;
  const bool local_lb = a.dp_load_balancing != DpLoadBalancing::kInternal;
  // TCP between the engines and the head: replicas on other nodes, or an address given (so
  // that engines can join again on one node too, --restart-dead-engines). With external or
  // hybrid balancing every engine is on its API server's node.
  a.multi_node = !local_lb && !a.worker_node &&
                 (a.headless || f.dp_local != dp_size || app.count("--data-parallel-address") > 0);
  // A worker node of --nnodes runs no replica of its own: the -dpl / -dpr checks are for the
  // data-parallel headless nodes.
  if (a.headless && !a.worker_node) {
    if (f.dp_local < 1) {
      return absl::InvalidArgumentError(
          "--headless needs --data-parallel-size-local: how many replicas run on this node");
    }
    if (app.count("--data-parallel-start-rank") == 0 && !f.dp_from_nodes && f.dp_local != dp_size) {
      return absl::InvalidArgumentError(
          "--headless needs --data-parallel-start-rank: the first replica rank of this node");
    }
  } else if (f.dp_start_rank != 0 && !local_lb) {
    return absl::InvalidArgumentError(
        "--data-parallel-start-rank: the head node (without --headless) runs ranks from 0");
  }
  if (!a.multi_node) {
    // vLLM's external/hybrid recipes pass the head's -dpa/-dpp (its coordinator's, for
    // request waves); no dense replica here needs them.
    // Across nodes (--nnodes) the workers reach node rank 0 over TCP: the key applies.
    std::vector<const char*> tcp_only = {"--restart-dead-engines"};
    // The NixlConnector's KV transfer sockets are TCP too: the key authenticates them.
    if (a.config.parallel.nnodes == 1 && a.config.kv_transfer.kv_connector != "NixlConnector") {
      tcp_only.push_back("--cluster-key-file");
    }
    if (!local_lb) tcp_only.push_back("--data-parallel-rpc-port");
    for (const char* flag : tcp_only) {
      if (app.count(flag) > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag,
                         ": only used when the engines reach the head over TCP (replicas on other "
                         "nodes, or --data-parallel-address given, e.g. 127.0.0.1 on one node)"));
      }
    }
  }
  if (app.count("--rejoin-head") > 0 && !a.headless) {  // either spelling
    return absl::InvalidArgumentError(
        "--rejoin-head / --no-rejoin-head: only with --headless (a node that joins a head over "
        "the network)");
  }
  if (a.restart_dead_engines && a.config.parallel.nnodes > 1) {
    return absl::InvalidArgumentError(
        "--restart-dead-engines: not with --nnodes above 1 (a restarted engine core has no "
        "workers on the other nodes)");
  }
  if (a.data_parallel_lockstep) {
    if (dp_size < 2 || local_lb) {
      return absl::InvalidArgumentError(
          "--data-parallel-lockstep: needs --data-parallel-size > 1 with one head balancing "
          "every replica (not hybrid or external load balancing)");
    }
    if (a.headless) {
      return absl::InvalidArgumentError(
          "--data-parallel-lockstep: give it on the head (its CONFIG tells every engine)");
    }
  }
  return absl::OkStatus();
}

// --api-server-count and --cluster-key-file.
absl::Status CheckFrontendFlags(const FlagValues& f, ServeArgs& a) {
  const int32_t rpc_port = a.config.parallel.data_parallel_rpc_port;
  if (a.api_server_count > 1) {
    if (a.headless) {
      return absl::InvalidArgumentError(
          "--api-server-count: a --headless node runs no API server (give it on the head)");
    }
    // Over TCP, API server i takes the handshake port -dpp + i.
    if (a.multi_node && rpc_port + a.api_server_count - 1 > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("--api-server-count ", a.api_server_count,
                       ": API server i listens for engines at "
                       "--data-parallel-rpc-port + i, past 65535 from ",
                       rpc_port));
    }
  }
  if (!f.cluster_key_file.empty()) {
    // Read now, so a bad file fails before anything starts (errors never echo the key).
    if (auto keys = ipc::LoadCurveKeyFile(f.cluster_key_file); !keys.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cluster-key-file: ", keys.status().message()));
    }
    a.cluster_key_file = f.cluster_key_file;
  }
  return absl::OkStatus();
}

// --nnodes / --node-rank against --headless and --device, on a validated config (node rank in
// range, --nnodes dividing the world size). Which node runs what: node rank 0 the API server and
// the engine core, the others (--headless) their workers only.
absl::Status CheckNodeFlags(const ServeArgs& a) {
  const config::ParallelConfig& p = a.config.parallel;
  if (p.nnodes == 1) return absl::OkStatus();
  if (p.node_rank > 0 && !a.headless) {
    return absl::InvalidArgumentError(
        absl::StrCat("`--node-rank ", p.node_rank,
                     "` runs this node's workers only: add --headless (node rank 0 runs the API "
                     "server and the engine core)"));
  }
  if (p.node_rank == 0 && a.headless) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--headless with `--nnodes ", p.nnodes,
        "` and `--node-rank 0`: node rank 0 is the head: it runs the API server; give --headless "
        "on node ranks 1 .. ",
        p.nnodes - 1));
  }
  // Explicitly cuda only: auto is resolved later, on the engine's node.
  if (a.config.device.device == config::Device::kCuda) {
    return absl::InvalidArgumentError(
        "--nnodes above 1 runs on the CPU backend so far (--device cpu); CUDA across nodes is "
        "not verified yet");
  }
  return absl::OkStatus();
}

// vLLM's data parallelism with --nnodes: the nodes share the replicas, each node running
// (-dp × -tp × -pp / --nnodes) / (-tp × -pp) of them from node rank × that on, the head's
// address --master-addr, unless -dpl / -dpr / -dpa are given. A replica larger than a node's
// share would span nodes: ParallelConfig::Validate refuses it.
void InferDpFromNodes(const CLI::App& app, FlagValues& f, ServeArgs& a) {
  config::ParallelConfig& p = a.config.parallel;
  if (p.nnodes <= 1 || p.data_parallel_size <= 1) return;
  const int64_t within = p.world_size();
  const int64_t total = int64_t{p.data_parallel_size} * within;
  if (total % p.nnodes != 0 || total / p.nnodes < within) return;  // Validate says why
  const int64_t local_world = total / p.nnodes;
  if (app.count("--data-parallel-size-local") == 0) {
    f.dp_local = static_cast<int32_t>(local_world / within);
    f.dp_from_nodes = true;
  }
  if (app.count("--data-parallel-start-rank") == 0) {
    f.dp_start_rank = static_cast<int32_t>(p.node_rank * local_world / within);
  }
  if (app.count("--data-parallel-address") == 0) p.data_parallel_address = p.master_addr;
}

// What the flags say, checked against each other, into a.config (validated) and a.
absl::Status ApplyFlags(const CLI::App& app, FlagValues& f, const std::string& default_model,
                        ServeArgs& a) {
  config::VllmConfig& c = a.config;
  VLLM_RETURN_IF_ERROR(ApplyModelFlags(f, default_model, a));
  VLLM_RETURN_IF_ERROR(ApplyHttpFlags(app, f.http, a.http));
  VLLM_RETURN_IF_ERROR(CheckResponseLogFlags(a.serving, a.http.log_requests, a.http.log_stats));
  if (app.count("--kv-events-config") > 0) {
    VLLM_RETURN_IF_ERROR(ApplyKvEventsConfig(f.kv_events_config, c));
  }
  if (app.count("--kv-transfer-config") > 0) {
    VLLM_ASSIGN_OR_RETURN(c.kv_transfer, config::ParseKvTransferConfig(f.kv_transfer_config));
  }
  VLLM_RETURN_IF_ERROR(c.ResolveKvOffloading());  // --kv-offloading-size's connector
  VLLM_RETURN_IF_ERROR(ApplyStructuredOutputsConfig(f, c));
  if (app.count("--speculative-config") > 0) {
    VLLM_ASSIGN_OR_RETURN(c.speculative, config::ParseSpeculativeConfig(f.speculative_config));
  }
  InferDpFromNodes(app, f, a);
  VLLM_RETURN_IF_ERROR(InferDpLoadBalancing(app, f, a));
  c.parallel.data_parallel_size_local = f.dp_local;
  c.parallel.data_parallel_start_rank = f.dp_start_rank;
  c.parallel.data_parallel_rank = f.dp_start_rank;  // each engine process gets its own
  a.worker_node = c.parallel.nnodes > 1 && c.parallel.node_rank_within_dp() > 0 && a.headless;
  VLLM_RETURN_IF_ERROR(CheckDataParallelFlags(app, f, a));
  VLLM_RETURN_IF_ERROR(CheckFrontendFlags(f, a));
  // The one VllmConfig every process of the engine receives: every bound of every field and
  // the checks across them (--pipeline-parallel-size above 1, --gpu-memory-utilization 0, ...).
  // The device stays as given: auto is resolved by the engine factory, on the engine's node.
  VLLM_RETURN_IF_ERROR(c.Validate());
  return CheckNodeFlags(a);
}

}  // namespace

absl::StatusOr<ParsedServeArgs> ParseServeArgs(const std::vector<std::string>& argv,
                                               const std::string& default_model) {
  ServeArgs a;
  FlagValues f;
  CLI::App app("Start the vLLM-compatible OpenAI API server (vllm-launch).", "vllm-launch");
  app.set_version_flag("--version", std::string("vllm-launch 0.1.0"));
  AddModelFlags(app, f, a);
  AddParallelFlags(app, f, a);
  AddNodeFlags(app, a);
  AddCacheFlags(app, a);
  AddSchedulerAndDeviceFlags(app, f, a);
  AddFrontendFlags(app, f, a);
  AddRequestDefaultFlags(app, a.serving);

  for (const std::string& arg : argv) {  // vLLM's --help=GROUP / --help=KEYWORD
    if (arg.rfind("--help=", 0) != 0) continue;
    std::vector<HelpEntry> ours;
    for (const CLI::Option* o : app.get_options()) {
      if (o->get_group().empty() || o->nonpositional() == false) continue;
      ours.push_back({o->get_name(false, true), o->get_group(), o->get_description()});
    }
    ParsedServeArgs help;
    help.text = FilteredHelp(arg.substr(7), ours, app.help());
    return help;
  }
  auto normalized = ExpandServeArgv(
      argv, [&app](const std::string& name) { return app.get_option_no_throw(name) != nullptr; });
  if (!normalized.ok()) return normalized.status();
  std::vector<std::string> args = *std::move(normalized);
  std::reverse(args.begin(), args.end());  // CLI11 consumes a reversed vector
  ParsedServeArgs parsed;
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    parsed.text = app.help();
    return parsed;
  } catch (const CLI::CallForVersion&) {
    parsed.text = "vllm-launch 0.1.0\n";
    return parsed;
  } catch (const CLI::ParseError& err) {
    return absl::InvalidArgumentError(err.what());
  }
  VLLM_RETURN_IF_ERROR(ApplyFlags(app, f, default_model, a));
  a.argv = argv;
  parsed.args = std::move(a);
  return parsed;
}

}  // namespace vllm::launcher
