// vLLM's environment variables: the table of every `VLLM_*` variable vLLM 0.33.0 reads
// (vllm/envs.py, `environment_variables`: 303 names), each honoured here with vLLM's meaning,
// default and parsing, or not (with the reason), or refused at start-up; our own variables;
// Python-compatible parsers; the honoured values read once (`ReadVllmEnv`); the start-up
// warning that names every set variable that is not honoured and every unknown `VLLM_*` name.
//
// Parsing is vLLM's: `int(...)` is Python's int() (surrounding whitespace, a sign, `_` between
// digits), booleans are `bool(int(v))` or `v.strip().lower() in ("1", "true")` as envs.py
// spells each. A value vLLM would fail on (ValueError) fails here, naming the variable.
#ifndef VLLM_CONFIG_VLLM_ENVS_H_
#define VLLM_CONFIG_VLLM_ENVS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace vllm::config {

// How envs.py turns the text into a value.
enum class EnvParse : uint8_t {
  kStr,        // the text
  kStrLower,   // .lower()
  kStrUpper,   // .upper()
  kPath,       // os.path.expanduser
  kInt,        // int(v)
  kOptInt,     // int(v) when set, else None
  kFloat,      // float(v)
  kBoolInt,    // bool(int(v))
  kBool1True,  // v.strip().lower() in ("1", "true")
  kBoolTrue1,  // v.lower() in ("true", "1")
  kBoolEq1,    // v == "1"
  kOptBool,    // None when unset, else bool(int(v))
  kChoice,     // one of a fixed list
  kList,       // comma-separated
  kJson,       // JSON text or a file
  kSpecial,    // computed by a function in envs.py
};

enum class EnvStatus : uint8_t {
  kHonoured,     // same meaning, default and parsing as vLLM
  kNotHonoured,  // ignored: named in the start-up warning when set
  kRefused,      // start-up fails when it is set (kLoggingConfigPath) or true (LoRA updating)
};

// Why a variable is not honoured (the groups; kOther: the row's note says why).
enum class EnvWhy : uint8_t {
  kNone,
  kOther,
  kRocm,
  kTpu,
  kXpu,
  kLora,
  kRay,
  kMultimodal,
  kConnector,
  kTorchCompile,
  kInstall,
  kUsage,
  kKernels,
  kEndpoint,
};
std::string_view EnvWhyText(EnvWhy why);

struct VllmEnvVar {
  std::string_view name;
  EnvParse parse;
  std::string_view vllm_default;  // "" for None (unset)
  EnvStatus status;
  EnvWhy why;
  std::string_view note = {};  // what it does here (honoured) or why not
};

// The source of the table.
inline constexpr std::string_view kVllmEnvsSource = "vLLM 0.33.0, vllm/envs.py";

// Every VLLM_* name of vLLM's `environment_variables`, in envs.py's order.
std::span<const VllmEnvVar> VllmEnvTable();
const VllmEnvVar* FindVllmEnv(std::string_view name);
// The VLLM_* variables that are this runtime's own (not vLLM's): known, never warned about.
std::span<const std::string_view> OwnEnvVariables();
bool IsOwnEnvVariable(std::string_view name);

// Python's int() on environment text (base 10). InvalidArgument naming `name`.
absl::StatusOr<int64_t> ParsePythonInt(std::string_view name, std::string_view text);

// Returns the value of a variable, or null when unset (std::getenv by default).
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup ProcessEnv();

// The honoured values, with vLLM's defaults.
struct VllmEnv {
  std::string host_ip;                                     // VLLM_HOST_IP ("": pick one)
  std::optional<std::string> api_key;                      // VLLM_API_KEY
  bool configure_logging = true;                           // VLLM_CONFIGURE_LOGGING
  std::string logging_level = "INFO";                      // VLLM_LOGGING_LEVEL (upper case)
  std::optional<std::string> logging_config_path;          // VLLM_LOGGING_CONFIG_PATH (refused)
  std::optional<int64_t> cpu_kvcache_space_gib;            // VLLM_CPU_KVCACHE_SPACE
  int64_t engine_ready_timeout_s = 600;                    // VLLM_ENGINE_READY_TIMEOUT_S
  int64_t execute_model_timeout_s = 300;                   // VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS
  int64_t worker_shutdown_timeout_s = 5;                   // VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS
  int64_t http_timeout_keep_alive_s = 5;                   // VLLM_HTTP_TIMEOUT_KEEP_ALIVE
  int64_t http_max_request_body_size = int64_t{32} << 20;  // VLLM_HTTP_MAX_REQUEST_BODY_SIZE
  int64_t dp_rank = 0;                                     // VLLM_DP_RANK
  int64_t dp_rank_local = 0;                               // VLLM_DP_RANK_LOCAL (default: dp_rank)
  int64_t dp_size = 1;                                     // VLLM_DP_SIZE
  std::string dp_master_ip = "127.0.0.1";                  // VLLM_DP_MASTER_IP
  int64_t dp_master_port = 0;                              // VLLM_DP_MASTER_PORT
  std::string nixl_side_channel_host = "localhost";        // VLLM_NIXL_SIDE_CHANNEL_HOST
  int64_t nixl_side_channel_port = 5600;                   // VLLM_NIXL_SIDE_CHANNEL_PORT
  bool allow_runtime_lora_updating = false;  // VLLM_ALLOW_RUNTIME_LORA_UPDATING (refused)
  // Request limits (frontend/openai/openai_protocol.h), each at most kMaxEnvRequestLimit.
  int64_t max_n_sequences = 16384;        // VLLM_MAX_N_SEQUENCES: n (and best_of)
  int64_t max_completion_prompts = 1024;  // VLLM_MAX_COMPLETION_PROMPTS: prompts in a list
  int64_t max_stop_strings = 4;           // VLLM_MAX_STOP_STRINGS: entries of a `stop` list
  // VLLM_PORT: the first port tried for internal TCP ports (upward); nullopt: the kernel's.
  std::optional<int64_t> port;
  bool keep_alive_on_engine_death = false;  // VLLM_KEEP_ALIVE_ON_ENGINE_DEATH
  int64_t mq_max_chunk_bytes_mb = 16;       // VLLM_MQ_MAX_CHUNK_BYTES_MB (1 .. kMaxMqChunkMb)
  bool allow_long_max_model_len = false;    // VLLM_ALLOW_LONG_MAX_MODEL_LEN
};

// Our bounds on values vLLM leaves unbounded (a larger value is refused at start-up, naming
// the variable): a request of 2^20 choices or prompts is far beyond any engine's queue, and a
// broadcast chunk above 1 GiB beyond any step.
inline constexpr int64_t kMaxEnvRequestLimit = int64_t{1} << 20;
inline constexpr int64_t kMaxMqChunkMb = 1024;

// Reads and parses every honoured (and refused) variable as vLLM does. InvalidArgument naming
// the variable for text vLLM would fail on, and for values that cannot be used (a negative
// timeout, a port outside 1..65535, a KV cache of 0 GiB).
[[nodiscard]] absl::StatusOr<VllmEnv> ReadVllmEnv(const EnvLookup& lookup = ProcessEnv());
// This process's environment, read once (the launcher refused bad values at start-up, before
// any other process started: a value that fails here is taken as unset, vLLM's defaults).
const VllmEnv& ProcessVllmEnv();

// What start-up refuses, whatever the flags: VLLM_LOGGING_CONFIG_PATH set (also with
// VLLM_CONFIGURE_LOGGING=0, as vLLM), VLLM_ALLOW_RUNTIME_LORA_UPDATING true.
// InvalidArgument naming the variable.
[[nodiscard]] absl::Status CheckVllmEnvRefusals(const VllmEnv& env);

// The one start-up warning line: every set variable of the table that is not honoured (with
// its reason) and every unknown VLLM_* name (neither vLLM's nor ours), in the order of
// `environ`; nullopt when there is none. `environ` is "NAME=value" strings, null-terminated.
std::optional<std::string> UnhonouredEnvWarning(const char* const* environ);

}  // namespace vllm::config

#endif  // VLLM_CONFIG_VLLM_ENVS_H_
