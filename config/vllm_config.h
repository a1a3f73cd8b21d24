// VllmConfig: every setting of one engine (vLLM's vllm/config/: ModelConfig, CacheConfig,
// ParallelConfig, SchedulerConfig, DeviceConfig, LoadConfig and the VllmConfig that holds
// them), each part with its validation. The CLI binds its flags to these fields
// (launcher/serve_args.cc); code that builds an engine in-process fills them through
// config::EngineArgs. Every process of an engine — engine-core, worker-proc — receives the
// config encoded (config_codec.h) on an inherited file descriptor, never as re-spelled argv.
//
// Each part lists its fields once, with the values each may hold, in its static `Fields`
// (FieldBounds, field_bounds.h): the codec (encode, bounded decode), Validate() (every bound,
// naming the flag: "--max-num-seqs: 0 is outside [1, 1048576]") and DescribeVllmConfig walk
// that list. A new setting is its member, its line in `Fields`, its flag and its reader: the
// codec changes by itself (the wire carries a fingerprint of the lists, not a version number).
//
// Values as the user gave them, except where a field says "resolved": the engine factory
// (executor/engine_factory.h) fills those from the model and the machine before any worker
// starts, and the workers receive the resolved config.
//
// Plain value types; no I/O except DescribeVllmConfig's string.
#ifndef VLLM_CONFIG_VLLM_CONFIG_H_
#define VLLM_CONFIG_VLLM_CONFIG_H_

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/field_bounds.h"
#include "config/kv_events_config.h"
#include "config/kv_transfer_config.h"
#include "config/speculative_config.h"

namespace vllm::config {

// --load-format: safetensors from the model directory, or random weights of the right shape.
enum class LoadFormat { kAuto, kSafetensors, kDummy };
// "auto", "safetensors", "dummy"; InvalidArgument naming --load-format and the choices.
[[nodiscard]] absl::StatusOr<LoadFormat> ParseLoadFormat(std::string_view name);
std::string_view LoadFormatName(LoadFormat format);

// --device. kAuto resolves to kCuda when a GPU is visible (worker::ResolveDevice: it needs the
// CUDA runtime, which this library does not link); the engine factory resolves it once, in the
// process that builds the engine (on its own node), and everything downstream of it sees kCpu
// or kCuda.
enum class Device { kAuto, kCpu, kCuda };
// "auto", "cpu", "cuda"; InvalidArgument naming --device and the choices.
[[nodiscard]] absl::StatusOr<Device> ParseDevice(std::string_view name);
std::string_view DeviceName(Device device);

// --dtype for weights and activations on CUDA (the CPU always computes in float32). kAuto:
// the checkpoint's torch_dtype, except float32 checkpoints run in float16 (vLLM's rule).
enum class ModelDType { kAuto, kFloat32, kBFloat16, kFloat16 };
// vLLM's names: auto, float32 / float, bfloat16, float16 / half; InvalidArgument naming --dtype.
[[nodiscard]] absl::StatusOr<ModelDType> ParseModelDType(std::string_view name);
std::string_view ModelDTypeName(ModelDType dtype);

// --scheduling-policy: first come first served, or by the request's priority (lower first,
// then arrival).
enum class SchedulingPolicy { kFcfs, kPriority };
[[nodiscard]] absl::StatusOr<SchedulingPolicy> ParseSchedulingPolicy(std::string_view name);
std::string_view SchedulingPolicyName(SchedulingPolicy policy);

// --distributed-executor-backend: the worker in the engine's process (uni) or one worker
// process per rank (mp). kAuto: uni for one rank, mp otherwise.
enum class ExecutorBackend { kAuto, kUni, kMp };
[[nodiscard]] absl::StatusOr<ExecutorBackend> ParseExecutorBackend(std::string_view name);
std::string_view ExecutorBackendName(ExecutorBackend backend);

// The collective between CPU worker processes: our shared-memory all-reduce, or gloo.
enum class CommBackend { kShm, kGloo };
[[nodiscard]] absl::StatusOr<CommBackend> ParseCommBackend(std::string_view name);
std::string_view CommBackendName(CommBackend backend);

// The most --max-logprobs may allow: the largest logprobs / prompt_logprobs a request can ask
// for, and the bound of every logprobs list on the wire (core/codec.h).
inline constexpr int32_t kMaxLogprobsLimit = 1024;

struct ModelConfig {
  // A Hugging Face model directory (config.json, tokenizer.json, *.safetensors).
  std::filesystem::path model;
  // Context length (prompt plus output). 0: the model's max_position_embeddings (resolved).
  int32_t max_model_len = 0;
  ModelDType dtype = ModelDType::kAuto;
  // Seeds dummy weights and requests that carry no seed.
  uint64_t seed = 0;
  // CUDA: no CUDA graphs.
  bool enforce_eager = false;
  // Most log-probabilities a request may ask for, per token (logprobs, top_logprobs) and per
  // prompt position (prompt_logprobs). vLLM's default, the OpenAI API's limit.
  int32_t max_logprobs = 20;
  // --enable-sleep-mode: /sleep at level 1 and 2 frees the KV cache (and the weights) in the
  // workers; without it they stay allocated (core/engine_core.h, SleepExecutor).
  bool enable_sleep_mode = false;

  template <class Self, class V>
  static void Fields(Self& m, V& v) {
    v("model", m.model, MaxBytes(kMaxPathBytes));
    v("max_model_len", m.max_model_len, Range(0, 1 << 24));
    v("dtype", m.dtype);
    v("seed", m.seed);
    v("enforce_eager", m.enforce_eager);
    v("max_logprobs", m.max_logprobs, Range(0, kMaxLogprobsLimit));
    v("enable_sleep_mode", m.enable_sleep_mode);
  }
  [[nodiscard]] absl::Status Validate() const;
  friend bool operator==(const ModelConfig&, const ModelConfig&) = default;
};

struct LoadConfig {
  LoadFormat load_format = LoadFormat::kAuto;

  template <class Self, class V>
  static void Fields(Self& l, V& v) {
    v("load_format", l.load_format);
  }
  [[nodiscard]] absl::Status Validate() const { return absl::OkStatus(); }
  friend bool operator==(const LoadConfig&, const LoadConfig&) = default;
};

// The largest --kv-offloading-size, in GiB (1 PiB).
inline constexpr double kMaxKvOffloadingGiB = 1 << 20;

struct CacheConfig {
  // Tokens per KV-cache block: 1, 8, 16, 32, 64 or 128.
  int32_t block_size = 16;
  bool enable_prefix_caching = true;
  // The CPU: bytes of KV cache per worker (vLLM's VLLM_CPU_KVCACHE_SPACE).
  int64_t kv_cache_memory_bytes = int64_t{1} << 30;
  // CUDA: fraction of the GPU's memory for weights, activations and KV cache, in (0, 1].
  double gpu_memory_utilization = 0.9;
  // Use this many KV-cache blocks instead of sizing the cache from memory.
  std::optional<int32_t> num_gpu_blocks_override;
  // --kv-offloading-size: GiB of CPU memory to offload KV-cache blocks to (with TP > 1, the
  // total over the ranks); 0 is vLLM's None: no offloading. Set, it makes the engine run
  // OffloadingConnector (VllmConfig::ResolveKvOffloading). At most kMaxKvOffloadingGiB.
  double kv_offloading_size = 0;
  // --kv-offloading-backend: "native" (vLLM's own CPU offloading) only; vLLM's "lmcache" is a
  // Python package this runtime cannot load.
  std::string kv_offloading_backend = "native";

  template <class Self, class V>
  static void Fields(Self& c, V& v) {
    v("block_size", c.block_size);
    v("enable_prefix_caching", c.enable_prefix_caching);
    v("kv_cache_memory_bytes", c.kv_cache_memory_bytes, Range(1, int64_t{1} << 50));
    v("gpu_memory_utilization", c.gpu_memory_utilization);
    v("num_gpu_blocks_override", c.num_gpu_blocks_override, Range(1, 1 << 30));
    v("kv_offloading_size", c.kv_offloading_size);
    v("kv_offloading_backend", c.kv_offloading_backend);  // "native": Validate() says why
  }
  [[nodiscard]] absl::Status Validate() const;
  friend bool operator==(const CacheConfig&, const CacheConfig&) = default;
};

struct ParallelConfig {
  int32_t tensor_parallel_size = 1;
  int32_t pipeline_parallel_size = 1;
  int32_t data_parallel_size = 1;
  // Replicas on this node and the first of their ranks (--headless nodes start past 0).
  int32_t data_parallel_size_local = 1;
  int32_t data_parallel_start_rank = 0;
  // This engine's replica index: stamped on its outputs. Set per engine process.
  int32_t data_parallel_rank = 0;
  std::string data_parallel_address = "127.0.0.1";
  int32_t data_parallel_rpc_port = 13345;
  ExecutorBackend distributed_executor_backend = ExecutorBackend::kAuto;
  CommBackend comm_backend = CommBackend::kShm;
  // One engine's workers across nodes (vLLM's --nnodes / --node-rank / --master-addr /
  // --master-port): node 0 runs the engine core and ranks 0 .. local_world_size() - 1, node n
  // (--headless) the next block of ranks; every node reaches the head at master_addr:master_port.
  int32_t nnodes = 1;
  int32_t node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int32_t master_port = 29501;

  template <class Self, class V>
  static void Fields(Self& p, V& v) {
    v("tensor_parallel_size", p.tensor_parallel_size, Range(1, 64));
    v("pipeline_parallel_size", p.pipeline_parallel_size, Range(1, 64));
    v("data_parallel_size", p.data_parallel_size, Range(1, 1024));
    v("data_parallel_size_local", p.data_parallel_size_local, Range(0, 1024));
    v("data_parallel_start_rank", p.data_parallel_start_rank, Range(0, 1023));
    v("data_parallel_rank", p.data_parallel_rank, Range(0, 1023));
    v("data_parallel_address", p.data_parallel_address);
    v("data_parallel_rpc_port", p.data_parallel_rpc_port, Range(1, 65535));
    v("distributed_executor_backend", p.distributed_executor_backend);
    v("comm_backend", p.comm_backend);
    v("nnodes", p.nnodes, Range(1, 1024));
    v("node_rank", p.node_rank, Range(0, 1023));
    v("master_addr", p.master_addr);
    v("master_port", p.master_port, Range(1, 65535));
  }
  // Ranks of one engine: tensor × pipeline.
  int32_t world_size() const { return tensor_parallel_size * pipeline_parallel_size; }
  // This engine's replica index among those of its node (0 .. data_parallel_size_local - 1).
  int32_t data_parallel_rank_local() const { return data_parallel_rank - data_parallel_start_rank; }
  // The GPU (index among the visible ones) of worker `rank` of this engine: the node's engines
  // take consecutive blocks of world_size() GPUs, in replica order (vLLM gives each engine
  // process its slice of CUDA_VISIBLE_DEVICES; the indices are the same).
  int32_t local_device_index(int32_t rank) const {
    return data_parallel_rank_local() * world_size() + rank;
  }
  // Nodes one engine's workers span (vLLM's nnodes_within_dp), this node's index among them,
  // and the ranks each holds: node n runs ranks n × local_world_size() .. + local_world_size().
  int32_t nnodes_within_dp() const;
  int32_t node_rank_within_dp() const;
  int32_t local_world_size() const { return world_size() / nnodes_within_dp(); }
  // The node (within the engine's nodes) that runs worker `rank`.
  int32_t node_of_rank(int32_t rank) const { return rank / local_world_size(); }
  // kAuto resolved: uni for one rank, mp otherwise.
  ExecutorBackend executor_backend() const;
  [[nodiscard]] absl::Status Validate() const;
  friend bool operator==(const ParallelConfig&, const ParallelConfig&) = default;
};

struct SchedulerConfig {
  // Most requests running at once.
  int32_t max_num_seqs = 256;
  // Token budget of one step. 0: 2048 with chunked prefill, else max(max_model_len, 2048)
  // (vLLM's defaults; resolved).
  int32_t max_num_batched_tokens = 0;
  // When off, a prompt must fit one step's budget whole.
  bool enable_chunked_prefill = true;
  // A prefill chunk never exceeds this many tokens (0: no limit beyond the budget).
  int32_t long_prefill_token_threshold = 0;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  // Streamed responses carry at least this many tokens per chunk, the first and last chunks
  // excepted (vLLM's --stream-interval; a request's stream_interval can only raise it).
  int32_t stream_interval = 1;

  template <class Self, class V>
  static void Fields(Self& s, V& v) {
    v("max_num_seqs", s.max_num_seqs, Range(1, 1 << 20));
    v("max_num_batched_tokens", s.max_num_batched_tokens, Range(0, 1 << 24));
    v("enable_chunked_prefill", s.enable_chunked_prefill);
    v("long_prefill_token_threshold", s.long_prefill_token_threshold, Range(0, 1 << 24));
    v("scheduling_policy", s.policy);
    v("stream_interval", s.stream_interval, Range(1, 1 << 20));
  }
  friend bool operator==(const SchedulerConfig&, const SchedulerConfig&) = default;
};

struct DeviceConfig {
  // kAuto until the engine factory resolves it (in the process that builds the engine).
  Device device = Device::kAuto;

  template <class Self, class V>
  static void Fields(Self& d, V& v) {
    v("device", d.device);
  }
  [[nodiscard]] absl::Status Validate() const { return absl::OkStatus(); }
  friend bool operator==(const DeviceConfig&, const DeviceConfig&) = default;
};

inline constexpr std::string_view kStructuredOutputBackends[] = {"auto", "xgrammar"};
inline constexpr std::string_view kReasoningParsers[] = {"", "deepseek_r1", "qwen3"};

// --structured-outputs-config (vLLM's StructuredOutputsConfig), plus our bound on compile time.
struct StructuredOutputsConfig {
  // "auto" and "xgrammar" both mean XGrammar, our only backend (vLLM's guidance, outlines and
  // lm-format-enforcer are refused by name).
  std::string backend = "auto";
  // Never fall back to another backend: we have none to fall back to, so always true in effect.
  bool disable_fallback = false;
  // Compact JSON (no free whitespace) for every request.
  bool disable_any_whitespace = false;
  // No properties beyond those a schema lists: XGrammar's strict mode, always on.
  bool disable_additional_properties = false;
  // Structured outputs start after the reasoning (<think>...</think>) this parser finds; ""
  // constrains from the first token. Also --reasoning-parser.
  std::string reasoning_parser;
  // The grammar constrains from the first token even with a reasoning parser (vLLM's
  // enable_in_reasoning): the reasoning itself then follows the grammar.
  bool enable_in_reasoning = false;
  // A request whose grammar takes longer than this to compile fails (ours:
  // --max-structured-output-compile-seconds).
  int32_t max_compile_seconds = 30;

  template <class Self, class V>
  static void Fields(Self& s, V& v) {
    v("backend", s.backend, OneOf(kStructuredOutputBackends));
    v("disable_fallback", s.disable_fallback);
    v("disable_any_whitespace", s.disable_any_whitespace);
    v("disable_additional_properties", s.disable_additional_properties);
    v("reasoning_parser", s.reasoning_parser, OneOf(kReasoningParsers));
    v("enable_in_reasoning", s.enable_in_reasoning);
    v("max_compile_seconds", s.max_compile_seconds, Range(1, 3600));
  }
  [[nodiscard]] absl::Status Validate() const { return absl::OkStatus(); }
  friend bool operator==(const StructuredOutputsConfig&, const StructuredOutputsConfig&) = default;
};

inline constexpr std::string_view kToolCallParsers[] = {"", "hermes", "llama3_json", "mistral",
                                                        "pythonic"};

// Tool calling in the OpenAI server (vLLM's frontend flags of the same names).
struct ToolCallingConfig {
  // tool_choice "auto" parses function calls out of the text with tool_call_parser.
  bool enable_auto_tool_choice = false;
  // The model family's call format ("" none): needed for any tool_choice but "none".
  std::string tool_call_parser;
  // tool_choice "none" leaves the tools out of the prompt too.
  bool exclude_tools_when_tool_choice_none = false;

  template <class Self, class V>
  static void Fields(Self& s, V& v) {
    v("enable_auto_tool_choice", s.enable_auto_tool_choice);
    v("tool_call_parser", s.tool_call_parser, OneOf(kToolCallParsers));
    v("exclude_tools_when_tool_choice_none", s.exclude_tools_when_tool_choice_none);
  }
  [[nodiscard]] absl::Status Validate() const {
    if (enable_auto_tool_choice && tool_call_parser.empty()) {
      return absl::InvalidArgumentError("--enable-auto-tool-choice requires --tool-call-parser");
    }
    return absl::OkStatus();
  }
  friend bool operator==(const ToolCallingConfig&, const ToolCallingConfig&) = default;
};

struct VllmConfig {
  ModelConfig model;
  CacheConfig cache;
  ParallelConfig parallel;
  SchedulerConfig scheduler;
  DeviceConfig device;
  LoadConfig load;
  // --kv-events-config (vLLM's kv_events_config): each engine core publishes its KV-cache
  // events; its endpoint is offset by the engine's data-parallel rank.
  KvEventsConfig kv_events;
  // --kv-transfer-config (vLLM's kv_transfer_config): the KV connector the engine runs, if any;
  // --kv-offloading-size fills it (ResolveKvOffloading).
  KvTransferConfig kv_transfer;
  StructuredOutputsConfig structured_outputs;
  ToolCallingConfig tool_calling;
  SpeculativeConfig speculative;

  // The parts in wire order.
  template <class Self, class V>
  static void Parts(Self& c, V& v) {
    v("model", c.model);
    v("cache", c.cache);
    v("parallel", c.parallel);
    v("scheduler", c.scheduler);
    v("device", c.device);
    v("load", c.load);
    v("kv_events", c.kv_events);
    v("kv_transfer", c.kv_transfer);
    v("structured_outputs", c.structured_outputs);
    v("tool_calling", c.tool_calling);
    v("speculative", c.speculative);
  }
  // vLLM's VllmConfig._post_init_kv_transfer_config: with cache.kv_offloading_size set, the
  // engine offloads through OffloadingConnector: kv_transfer.kv_connector becomes
  // "OffloadingConnector", kv_role "kv_both", and kv_connector_extra_config gains
  // "cpu_bytes_to_use": kv_offloading_size × 2^30 (a float, as vLLM's; the other keys kept).
  // Where vLLM would silently overwrite what --kv-transfer-config says (another kv_connector,
  // another kv_role, another cpu_bytes_to_use), InvalidArgument naming both flags instead.
  // Nothing without kv_offloading_size; idempotent. The CLI and EngineArgs call it before
  // Validate(), which refuses an offloading size that was not resolved so.
  [[nodiscard]] absl::Status ResolveKvOffloading();
  // Every field's bounds (each part's `Fields`), every part's own checks, then the ones across
  // parts. InvalidArgument naming the flag.
  [[nodiscard]] absl::Status Validate() const;
  // Every field marked "resolved" is: max_model_len at least 2, max_num_batched_tokens at
  // least 1, the device not kAuto. What the engine's parts (the scheduler, the workers) require
  // of the config the engine factory resolved and validated; they check this, not Validate().
  // InvalidArgument naming the flag.
  [[nodiscard]] absl::Status CheckResolved() const;
  friend bool operator==(const VllmConfig&, const VllmConfig&) = default;
};

// One line for the engine's start-up log, as vLLM's "Initializing a V1 LLM engine with config:
// model=..., ..." (every field of every part, `name=value`, in the order of config_fields.h;
// the device as device_config, the KV-events fields prefixed kv_events_config., the KV-transfer
// fields kv_transfer_config.).
std::string DescribeVllmConfig(const VllmConfig& config);

}  // namespace vllm::config

#endif  // VLLM_CONFIG_VLLM_CONFIG_H_
