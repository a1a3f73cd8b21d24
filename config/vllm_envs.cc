#include "config/vllm_envs.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace vllm::config {
namespace {

// Ours, read somewhere in the tree (grep getenv): known, not vLLM's.
constexpr std::array<std::string_view, 12> kOwn = {
    "VLLM_ENGINE_HEARTBEAT_TIMEOUT_S",  // launcher: a silent remote engine is dead after it
    "VLLM_CPU_GEMM_ISA",                // kernels/cpu: caps the GEMM instruction set
    "VLLM_CPU_VEC_ISA",                 // kernels/cpu: caps the vector instruction set
    "VLLM_CPU_PACKED_WEIGHTS",          // worker: packed CPU weights on/off
    "VLLM_CUBLASLT_TUNE",               // kernels/cuda: cuBLASLt algorithm search
    "VLLM_TEST_WATCHDOG_S",             // tests: the per-test watchdog
    "VLLM_TOKENIZER_EXTRA_GOLDENS",     // tests: more tokenizer goldens
    "VLLM_TOKENIZER_BENCH",             // tests: the tokenizer benchmark
    "VLLM_LINT_STRICT",                 // scripts/test.sh: a missing lint tool fails
    "VLLM_TIDY_VERBOSE",                // tools/lint/run_clang_tidy.py
    "VLLM_TIDY_CACHE_DIR",              // tools/lint/run_clang_tidy.py
    "VLLM_JOBS",                        // scripts/setup.sh: build parallelism
};

constexpr int64_t kMaxPort = 65535;

std::string Shown(std::string_view text) {
  std::string s(text.substr(0, 64));
  if (text.size() > 64) s += "...";
  return s;
}

absl::Status Invalid(std::string_view name, std::string_view text, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(name), "='", Shown(text),
                                                 "': ", std::string(what),
                                                 " (as vLLM's vllm/envs.py reads it)"));
}

// The reader's view of one variable.
class Reader {
 public:
  explicit Reader(const EnvLookup& lookup) : lookup_(lookup) {}

  const char* Raw(const char* name) const { return lookup_(name); }

  // int(os.getenv(name, default)) within [lo, hi].
  absl::Status Int(const char* name, int64_t lo, int64_t hi, int64_t* out) const {
    const char* v = Raw(name);
    if (v == nullptr) return absl::OkStatus();
    auto parsed = ParsePythonInt(name, v);
    if (!parsed.ok()) return parsed.status();
    if (*parsed < lo || *parsed > hi) {
      return Invalid(name, v, absl::StrCat("expected an integer in [", lo, ", ", hi, "]"));
    }
    *out = *parsed;
    return absl::OkStatus();
  }

  // bool(int(os.getenv(name, default))).
  absl::Status BoolInt(const char* name, bool* out) const {
    const char* v = Raw(name);
    if (v == nullptr) return absl::OkStatus();
    auto parsed = ParsePythonInt(name, v);
    if (!parsed.ok()) return parsed.status();
    *out = *parsed != 0;
    return absl::OkStatus();
  }

  // os.environ.get(name, default).strip().lower() in ("1", "true").
  void Bool1True(const char* name, bool* out) const {
    const char* v = Raw(name);
    if (v == nullptr) return;
    const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(v));
    *out = t == "1" || t == "true";
  }

  void Str(const char* name, std::string* out) const {
    if (const char* v = Raw(name); v != nullptr) *out = v;
  }

 private:
  const EnvLookup& lookup_;
};

absl::Status ReadLogging(const Reader& r, VllmEnv& e) {
  if (absl::Status s = r.BoolInt("VLLM_CONFIGURE_LOGGING", &e.configure_logging); !s.ok()) {
    return s;
  }
  if (const char* v = r.Raw("VLLM_LOGGING_LEVEL"); v != nullptr) {
    // Python's logging knows these names (logging._nameToLevel); anything else is vLLM's
    // "Unknown level" at start-up.
    static constexpr std::string_view kLevels[] = {"CRITICAL", "FATAL", "ERROR", "WARN",
                                                   "WARNING",  "INFO",  "DEBUG", "NOTSET"};
    const std::string level = absl::AsciiStrToUpper(v);
    if (std::find(std::begin(kLevels), std::end(kLevels), level) == std::end(kLevels)) {
      return Invalid("VLLM_LOGGING_LEVEL", v,
                     "expected DEBUG, INFO, WARNING, ERROR, CRITICAL (or FATAL, WARN, NOTSET)");
    }
    e.logging_level = level;
  }
  // vLLM: `if VLLM_LOGGING_CONFIG_PATH:` (an empty value is as unset).
  if (const char* v = r.Raw("VLLM_LOGGING_CONFIG_PATH"); v != nullptr && *v != '\0') {
    e.logging_config_path = v;
  }
  return absl::OkStatus();
}

// The VLLM_DP_* variables (vLLM reads them when --data-parallel-size is 1).
absl::Status ReadDataParallel(const Reader& r, VllmEnv& e) {
  constexpr int64_t kMaxRanks = 1 << 20;
  if (absl::Status s = r.Int("VLLM_DP_RANK", 0, kMaxRanks, &e.dp_rank); !s.ok()) return s;
  e.dp_rank_local = e.dp_rank;  // envs.py's default for VLLM_DP_RANK_LOCAL
  if (absl::Status s = r.Int("VLLM_DP_RANK_LOCAL", 0, kMaxRanks, &e.dp_rank_local); !s.ok()) {
    return s;
  }
  if (absl::Status s = r.Int("VLLM_DP_SIZE", 1, kMaxRanks, &e.dp_size); !s.ok()) return s;
  r.Str("VLLM_DP_MASTER_IP", &e.dp_master_ip);
  return r.Int("VLLM_DP_MASTER_PORT", 0, kMaxPort, &e.dp_master_port);
}

// The request limits, VLLM_PORT, the engine-death switch, the broadcast chunk and the long
// --max-model-len switch.
absl::Status ReadServingLimits(const Reader& r, VllmEnv& e) {
  if (absl::Status s = r.Int("VLLM_MAX_N_SEQUENCES", 1, kMaxEnvRequestLimit, &e.max_n_sequences);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          r.Int("VLLM_MAX_COMPLETION_PROMPTS", 1, kMaxEnvRequestLimit, &e.max_completion_prompts);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = r.Int("VLLM_MAX_STOP_STRINGS", 0, kMaxEnvRequestLimit, &e.max_stop_strings);
      !s.ok()) {
    return s;
  }
  // envs.py's get_vllm_port: int(v); a URI is Kubernetes' service variable for a service
  // named "vllm" (its own message).
  if (const char* v = r.Raw("VLLM_PORT"); v != nullptr) {
    const std::string_view text(v);
    if (text.find("://") != std::string_view::npos) {
      return Invalid("VLLM_PORT", text,
                     "appears to be a URI. This may be caused by a Kubernetes service discovery "
                     "issue (a service named vllm); set VLLM_PORT to a port number or unset it");
    }
    int64_t port = 0;
    if (absl::Status s = r.Int("VLLM_PORT", 1, kMaxPort, &port); !s.ok()) return s;
    e.port = port;
  }
  if (absl::Status s = r.BoolInt("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", &e.keep_alive_on_engine_death);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          r.Int("VLLM_MQ_MAX_CHUNK_BYTES_MB", 1, kMaxMqChunkMb, &e.mq_max_chunk_bytes_mb);
      !s.ok()) {
    return s;
  }
  r.Bool1True("VLLM_ALLOW_LONG_MAX_MODEL_LEN", &e.allow_long_max_model_len);
  return absl::OkStatus();
}

}  // namespace

std::string_view EnvWhyText(EnvWhy why) {
  switch (why) {
    case EnvWhy::kNone:
      return "";
    case EnvWhy::kOther:
      return "not applicable here";
    case EnvWhy::kRocm:
      return "ROCm / AITER: this runtime has no ROCm backend";
    case EnvWhy::kTpu:
      return "TPU / XLA: no TPU backend";
    case EnvWhy::kXpu:
      return "Intel XPU: no XPU backend";
    case EnvWhy::kLora:
      return "LoRA adapters are not supported";
    case EnvWhy::kRay:
      return "Ray is not used (workers are this runtime's own processes)";
    case EnvWhy::kMultimodal:
      return "multimodal inputs are not served (text models only)";
    case EnvWhy::kConnector:
      return "that KV / EC connector is not built (NixlConnector, ExampleConnector and "
             "OffloadingConnector are)";
    case EnvWhy::kTorchCompile:
      return "torch.compile / PyTorch CUDA-graph internals: no PyTorch here";
    case EnvWhy::kInstall:
      return "installation or build time of the vllm wheel: not applicable";
    case EnvWhy::kUsage:
      return "no usage statistics are collected or sent";
    case EnvWhy::kKernels:
      return "a PyTorch / Triton / FlashInfer / DeepGEMM kernel or model-specific switch: "
             "this runtime has its own kernels";
    case EnvWhy::kEndpoint:
      return "that endpoint, model family or parser is not served";
  }
  return "";
}

const VllmEnvVar* FindVllmEnv(std::string_view name) {
  for (const VllmEnvVar& v : VllmEnvTable()) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

std::span<const std::string_view> OwnEnvVariables() { return kOwn; }

bool IsOwnEnvVariable(std::string_view name) {
  return std::find(kOwn.begin(), kOwn.end(), name) != kOwn.end();
}

absl::StatusOr<int64_t> ParsePythonInt(std::string_view name, std::string_view text) {
  const absl::string_view stripped =
      absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size()));
  const std::string_view t(stripped.data(), stripped.size());
  size_t i = 0;
  bool negative = false;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) negative = t[i++] == '-';
  if (i == t.size()) return Invalid(name, text, "expected an integer");
  // Digits, with single underscores between them (Python's int() grammar).
  uint64_t value = 0;
  bool last_digit = false;
  for (; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '_' && last_digit && i + 1 < t.size() && absl::ascii_isdigit(t[i + 1])) {
      last_digit = false;
      continue;
    }
    if (!absl::ascii_isdigit(c)) return Invalid(name, text, "expected an integer");
    value = value * 10 + static_cast<uint64_t>(c - '0');
    if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Invalid(name, text, "integer out of range");
    }
    last_digit = true;
  }
  const auto v = static_cast<int64_t>(value);
  return negative ? -v : v;
}

EnvLookup ProcessEnv() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

absl::StatusOr<VllmEnv> ReadVllmEnv(const EnvLookup& lookup) {
  const Reader r(lookup);
  VllmEnv e;
  r.Str("VLLM_HOST_IP", &e.host_ip);
  if (const char* v = r.Raw("VLLM_API_KEY"); v != nullptr) e.api_key = v;
  if (absl::Status s = ReadLogging(r, e); !s.ok()) return s;
  // As vLLM's CPU platform reads it: set and not empty, int(...) GiB.
  if (const char* v = r.Raw("VLLM_CPU_KVCACHE_SPACE"); v != nullptr && *v != '\0') {
    int64_t gib = 0;
    if (absl::Status s = r.Int("VLLM_CPU_KVCACHE_SPACE", 1, int64_t{1} << 20, &gib); !s.ok()) {
      return s;
    }
    e.cpu_kvcache_space_gib = gib;
  }
  constexpr int64_t kWeek = int64_t{7} * 86400;
  if (absl::Status s = r.Int("VLLM_ENGINE_READY_TIMEOUT_S", 1, kWeek, &e.engine_ready_timeout_s);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          r.Int("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", 1, kWeek, &e.execute_model_timeout_s);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          r.Int("VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS", 0, 3600, &e.worker_shutdown_timeout_s);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          r.Int("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", 0, kWeek, &e.http_timeout_keep_alive_s);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = r.Int("VLLM_HTTP_MAX_REQUEST_BODY_SIZE", 0,
                             std::numeric_limits<int64_t>::max(), &e.http_max_request_body_size);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadDataParallel(r, e); !s.ok()) return s;
  r.Str("VLLM_NIXL_SIDE_CHANNEL_HOST", &e.nixl_side_channel_host);
  if (absl::Status s = r.Int("VLLM_NIXL_SIDE_CHANNEL_PORT", 1, kMaxPort, &e.nixl_side_channel_port);
      !s.ok()) {
    return s;
  }
  r.Bool1True("VLLM_ALLOW_RUNTIME_LORA_UPDATING", &e.allow_runtime_lora_updating);
  if (absl::Status s = ReadServingLimits(r, e); !s.ok()) return s;
  return e;
}

const VllmEnv& ProcessVllmEnv() {
  static const VllmEnv* const kEnv = [] {
    absl::StatusOr<VllmEnv> read = ReadVllmEnv();
    return new VllmEnv(read.ok() ? *std::move(read) : VllmEnv{});
  }();
  return *kEnv;
}

absl::Status CheckVllmEnvRefusals(const VllmEnv& env) {
  if (env.logging_config_path.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "VLLM_LOGGING_CONFIG_PATH='", Shown(*env.logging_config_path),
        "': a Python logging configuration file is not supported by vllm-launch (its log is "
        "spdlog's); unset it (VLLM_LOGGING_LEVEL sets the level)"));
  }
  if (env.allow_runtime_lora_updating) {
    return absl::InvalidArgumentError(
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING is true: LoRA adapters are not supported by "
        "vllm-launch; unset it");
  }
  return absl::OkStatus();
}

std::optional<std::string> UnhonouredEnvWarning(const char* const* environ) {
  std::string ignored;
  std::string unknown;
  for (const char* const* p = environ; p != nullptr && *p != nullptr; ++p) {
    const std::string_view entry(*p);
    const std::string_view name = entry.substr(0, entry.find('='));
    if (name.substr(0, 5) != "VLLM_") continue;
    if (const VllmEnvVar* v = FindVllmEnv(name); v != nullptr) {
      if (v->status != EnvStatus::kNotHonoured) continue;
      const std::string_view why = v->note.empty() ? EnvWhyText(v->why) : v->note;
      absl::StrAppend(&ignored, ignored.empty() ? "" : "; ", std::string(name), " (",
                      std::string(why), ")");
    } else if (!IsOwnEnvVariable(name)) {
      absl::StrAppend(&unknown, unknown.empty() ? "" : ", ", Shown(name));
    }
  }
  if (ignored.empty() && unknown.empty()) return std::nullopt;
  std::string line = "environment variables ignored by vllm-launch:";
  if (!ignored.empty()) absl::StrAppend(&line, " vLLM's, not honoured here: ", ignored);
  if (!unknown.empty()) {
    absl::StrAppend(&line, ignored.empty() ? "" : ";", " unknown (not in ",
                    std::string(kVllmEnvsSource), " nor ours): ", unknown);
  }
  absl::StrAppend(&line, " (the table: config/vllm_envs_table.cc)");
  return line;
}

}  // namespace vllm::config
