#include "config/vllm_config.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/json_util.h"
#include "base/status_macros.h"
#include "config/config_fields.h"

namespace vllm::config {
namespace {

// One enum's names, first name canonical: parsing accepts any, printing gives the first.
absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

template <typename E, size_t N>
struct Names {
  std::string_view flag;
  std::array<std::pair<std::string_view, E>, N> names;

  absl::StatusOr<E> Parse(std::string_view name) const {
    for (const auto& [n, e] : names) {
      if (n == name) return e;
    }
    std::string choices;
    for (const auto& [n, e] : names) absl::StrAppend(&choices, choices.empty() ? "" : ", ", A(n));
    return absl::InvalidArgumentError(
        absl::StrCat(A(flag), ": unknown value '", A(name), "' (choose from ", choices, ")"));
  }
  std::string_view Name(E e) const {
    for (const auto& [n, v] : names) {
      if (v == e) return n;
    }
    return "?";
  }
};

constexpr Names<LoadFormat, 3> kLoadFormats{"--load-format",
                                            {{{"auto", LoadFormat::kAuto},
                                              {"safetensors", LoadFormat::kSafetensors},
                                              {"dummy", LoadFormat::kDummy}}}};
constexpr Names<Device, 3> kDevices{
    "--device", {{{"auto", Device::kAuto}, {"cpu", Device::kCpu}, {"cuda", Device::kCuda}}}};
constexpr Names<ModelDType, 6> kDTypes{"--dtype",
                                       {{{"auto", ModelDType::kAuto},
                                         {"float32", ModelDType::kFloat32},
                                         {"bfloat16", ModelDType::kBFloat16},
                                         {"float16", ModelDType::kFloat16},
                                         {"half", ModelDType::kFloat16},
                                         {"float", ModelDType::kFloat32}}}};
constexpr Names<SchedulingPolicy, 2> kPolicies{
    "--scheduling-policy",
    {{{"fcfs", SchedulingPolicy::kFcfs}, {"priority", SchedulingPolicy::kPriority}}}};
constexpr Names<ExecutorBackend, 3> kBackends{"--distributed-executor-backend",
                                              {{{"auto", ExecutorBackend::kAuto},
                                                {"uni", ExecutorBackend::kUni},
                                                {"mp", ExecutorBackend::kMp}}}};
constexpr Names<CommBackend, 2> kCommBackends{
    "--comm-backend", {{{"shm", CommBackend::kShm}, {"gloo", CommBackend::kGloo}}}};

absl::Status CheckRange(std::string_view flag, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d is outside [%d, %d]", A(flag), value, lo, hi));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoadFormat> ParseLoadFormat(std::string_view name) {
  return kLoadFormats.Parse(name);
}
std::string_view LoadFormatName(LoadFormat format) { return kLoadFormats.Name(format); }
absl::StatusOr<Device> ParseDevice(std::string_view name) { return kDevices.Parse(name); }
std::string_view DeviceName(Device device) { return kDevices.Name(device); }
absl::StatusOr<ModelDType> ParseModelDType(std::string_view name) { return kDTypes.Parse(name); }
std::string_view ModelDTypeName(ModelDType dtype) { return kDTypes.Name(dtype); }
absl::StatusOr<SchedulingPolicy> ParseSchedulingPolicy(std::string_view name) {
  return kPolicies.Parse(name);
}
std::string_view SchedulingPolicyName(SchedulingPolicy policy) { return kPolicies.Name(policy); }
absl::StatusOr<ExecutorBackend> ParseExecutorBackend(std::string_view name) {
  return kBackends.Parse(name);
}
std::string_view ExecutorBackendName(ExecutorBackend backend) { return kBackends.Name(backend); }
absl::StatusOr<CommBackend> ParseCommBackend(std::string_view name) {
  return kCommBackends.Parse(name);
}
std::string_view CommBackendName(CommBackend backend) { return kCommBackends.Name(backend); }

absl::Status ModelConfig::Validate() const {
  const std::string& path = model.native();
  if (path.empty()) return absl::InvalidArgumentError("--model: no model given");
  if (path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("--model: not a usable path (it holds a NUL byte)");
  }
  return absl::OkStatus();
}

absl::Status CacheConfig::Validate() const {
  if (block_size != 1 && block_size != 8 && block_size != 16 && block_size != 32 &&
      block_size != 64 && block_size != 128) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--block-size: %d is not one of 1, 8, 16, 32, 64, 128", block_size));
  }
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--gpu-memory-utilization must be in (0, 1], got %g", gpu_memory_utilization));
  }
  // 0 is unset (vLLM's None); the flag itself refuses 0.
  if (!(std::isfinite(kv_offloading_size) && kv_offloading_size >= 0 &&
        kv_offloading_size <= kMaxKvOffloadingGiB)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--kv-offloading-size: expected GiB in (0, %.0f], got %g",
                        kMaxKvOffloadingGiB, kv_offloading_size));
  }
  if (kv_offloading_backend == "lmcache") {
    return absl::InvalidArgumentError(
        "--kv-offloading-backend lmcache: LMCache is a Python package this runtime cannot load; "
        "use native (vLLM's built-in CPU offloading, OffloadingConnector)");
  }
  if (kv_offloading_backend != "native") {
    return absl::InvalidArgumentError(absl::StrCat("--kv-offloading-backend: unknown value '",
                                                   kv_offloading_backend, "' (choose native)"));
  }
  return absl::OkStatus();
}

ExecutorBackend ParallelConfig::executor_backend() const {
  if (distributed_executor_backend != ExecutorBackend::kAuto) return distributed_executor_backend;
  return world_size() > 1 ? ExecutorBackend::kMp : ExecutorBackend::kUni;
}

namespace {

// One engine's workers across nodes (vLLM 0.33: EngineArgs.create_engine_config and
// ParallelConfig.__post_init__), with vLLM's messages.
absl::Status ValidateNodes(const ParallelConfig& p) {
  const bool addr_ok = !p.master_addr.empty() && p.master_addr.size() <= kMaxNameBytes &&
                       std::none_of(p.master_addr.begin(), p.master_addr.end(), [](char ch) {
                         const auto u = static_cast<unsigned char>(ch);
                         return u <= 0x20 || u == 0x7f;  // control characters and whitespace
                       });
  if (!addr_ok) {
    return absl::InvalidArgumentError(
        "--master-addr: expected a host name or address of 1 to 255 characters, without "
        "whitespace or control characters");
  }
  const int64_t total_world_size = int64_t{p.data_parallel_size} * p.world_size();
  if (p.nnodes > 1 && total_world_size % p.nnodes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Invalid data-parallel launch options: `--nnodes ", p.nnodes,
                     "` must evenly divide the total world size (", total_world_size,
                     "). Adjust `--nnodes`, `--data-parallel-size`, `--pipeline-parallel-size` or "
                     "`--tensor-parallel-size`."));
  }
  // vLLM checks the rank only above one node; a rank past --nnodes 1 is a forgotten --nnodes.
  if (p.node_rank < 0 || p.node_rank >= p.nnodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Invalid data-parallel launch options: `--node-rank` must be between 0 and ", p.nnodes - 1,
        "; got `--node-rank ", p.node_rank, "`. Set it to this node's zero-based index."));
  }
  if (p.nnodes > 1 && p.distributed_executor_backend == ExecutorBackend::kUni) {
    return absl::InvalidArgumentError(absl::StrCat(
        "`--nnodes ", p.nnodes,
        "` needs `--distributed-executor-backend mp`; got `--distributed-executor-backend uni` "
        "(nnodes > 1 can only be set when distributed executor backend is mp)"));
  }
  if (p.nnodes > 1 && p.data_parallel_size > 1 && total_world_size / p.nnodes < p.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "`--nnodes ", p.nnodes, "` with `--data-parallel-size ", p.data_parallel_size,
        "`: a replica of ", p.world_size(), " ranks (-tp × -pp) would span nodes of ",
        total_world_size / p.nnodes,
        " ranks; not built yet: give each replica at most one node's share, or run one engine "
        "across the nodes without -dp (docs/MULTINODE.md)"));
  }
  return absl::OkStatus();
}

}  // namespace

int32_t ParallelConfig::nnodes_within_dp() const {
  if (nnodes <= 1) return 1;
  // vLLM: the nodes split evenly over the groups of replicas that share a node
  // (data_parallel_size / data_parallel_size_local of them); Validate() checks divisibility.
  const int32_t groups = data_parallel_size_local > 0
                             ? std::max(1, data_parallel_size / data_parallel_size_local)
                             : data_parallel_size;
  return std::max(1, nnodes / groups);
}

int32_t ParallelConfig::node_rank_within_dp() const { return node_rank % nnodes_within_dp(); }

absl::Status ParallelConfig::Validate() const {
  VLLM_RETURN_IF_ERROR(
      CheckRange("--data-parallel-size-local", data_parallel_size_local, 0, data_parallel_size));
  VLLM_RETURN_IF_ERROR(CheckRange("--data-parallel-start-rank", data_parallel_start_rank, 0,
                                  data_parallel_size - data_parallel_size_local));
  VLLM_RETURN_IF_ERROR(
      CheckRange("--data-parallel-rank", data_parallel_rank, 0, data_parallel_size - 1));
  if (data_parallel_size_local > 0 &&
      (data_parallel_rank < data_parallel_start_rank ||
       data_parallel_rank >= data_parallel_start_rank + data_parallel_size_local)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data-parallel-rank ", data_parallel_rank, " is not one of this node's ranks (",
        data_parallel_start_rank, " .. ", data_parallel_start_rank + data_parallel_size_local - 1,
        " from --data-parallel-start-rank and --data-parallel-size-local)"));
  }
  if (data_parallel_address.empty()) {
    return absl::InvalidArgumentError(
        "--data-parallel-address: expected a host name or address of 1 to 255 characters");
  }
  VLLM_RETURN_IF_ERROR(ValidateNodes(*this));
  if (distributed_executor_backend == ExecutorBackend::kUni && world_size() != 1) {
    return absl::InvalidArgumentError(
        "--distributed-executor-backend uni runs one worker: use mp for tensor or pipeline "
        "parallelism");
  }
  return absl::OkStatus();
}

namespace {

// The flag of a field: --max-num-seqs for max_num_seqs; the KV-events and KV-transfer fields
// are keys of --kv-events-config and --kv-transfer-config.
std::string FlagOf(std::string_view part, std::string_view field) {
  if (part == "kv_events") return absl::StrCat("--kv-events-config ", A(field));
  if (part == "kv_transfer") return absl::StrCat("--kv-transfer-config ", A(field));
  if (part == "structured_outputs") {
    if (field == "max_compile_seconds") return "--max-structured-output-compile-seconds";
    return absl::StrCat("--structured-outputs-config ", A(field));
  }
  if (part == "speculative") return absl::StrCat("--speculative-config ", A(field));
  if (field == "kv_cache_memory_bytes") return "--kv-cache-memory";  // ours, in bytes
  std::string flag = absl::StrCat("--", A(field));
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

template <class T>
absl::Status CheckBounds(std::string_view part, std::string_view field, const T& value,
                         const FieldBounds& b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const bool below = std::is_unsigned_v<T> ? b.min > 0 && value < static_cast<T>(b.min)
                                             : static_cast<int64_t>(value) < b.min;
    // Unsigned values past INT64_MAX (a seed) are in range unless a field bounds them lower.
    const bool bounded = b.max < std::numeric_limits<int64_t>::max();
    const bool above = std::is_unsigned_v<T> ? bounded && value > static_cast<T>(b.max)
                                             : static_cast<int64_t>(value) > b.max;
    if (below || above) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %d is outside [%d, %d]", FlagOf(part, field), value, b.min, b.max));
    }
  } else if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, std::filesystem::path>) {
    const std::string& text = value;
    if (text.size() > b.max_bytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %d bytes; at most %d", FlagOf(part, field), text.size(), b.max_bytes));
    }
    if (!b.choices.empty() &&
        std::find(b.choices.begin(), b.choices.end(), text) == b.choices.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: '%s' is not one of %s", FlagOf(part, field), text,
          absl::StrJoin(b.choices, ", ",
                        [](std::string* out, std::string_view c) { absl::StrAppend(out, A(c)); })));
    }
  }
  return absl::OkStatus();  // bool, double, enum: any value of the type
}
template <class T>
absl::Status CheckBounds(std::string_view part, std::string_view field,
                         const std::optional<T>& value, const FieldBounds& b) {
  return value.has_value() ? CheckBounds(part, field, *value, b) : absl::OkStatus();
}

// Checks every field of every part against the bounds its part lists (the first failure).
struct BoundsChecker {
  absl::Status status;
  template <class T>
  void operator()(std::string_view part, std::string_view field, const T& value,
                  FieldBounds bounds) {
    if (status.ok()) status = CheckBounds(part, field, value, bounds);
  }
};

}  // namespace

absl::Status VllmConfig::ResolveKvOffloading() {
  if (cache.kv_offloading_size <= 0) return absl::OkStatus();
  KvTransferConfig& t = kv_transfer;
  const std::string size_flag = absl::StrCat("--kv-offloading-size ", cache.kv_offloading_size);
  if (!t.kv_connector.empty() && t.kv_connector != "OffloadingConnector") {
    return absl::InvalidArgumentError(absl::StrCat(
        size_flag, " runs OffloadingConnector, but --kv-transfer-config kv_connector is '",
        t.kv_connector, "' (vLLM would replace it): give one of the two"));
  }
  if (!t.kv_role.empty() && t.kv_role != "kv_both") {
    return absl::InvalidArgumentError(absl::StrCat(
        size_flag, " runs OffloadingConnector as kv_both, but --kv-transfer-config kv_role is '",
        t.kv_role, "' (vLLM would replace it)"));
  }
  absl::StatusOr<nlohmann::json> extra = base::ParseJson(
      t.kv_connector_extra_config, "--kv-transfer-config kv_connector_extra_config", 8);
  if (!extra.ok()) return extra.status();
  if (!extra->is_object()) {
    return absl::InvalidArgumentError(
        "--kv-transfer-config kv_connector_extra_config: expected the JSON text of an object");
  }
  // vLLM's kv_offloading_size * (1 << 30): a float.
  const double bytes = cache.kv_offloading_size * static_cast<double>(int64_t{1} << 30);
  if (const auto it = extra->find("cpu_bytes_to_use");
      it != extra->end() && !(it->is_number() && it->get<double>() == bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        size_flag, " offloads ", absl::StrFormat("%.0f", bytes),
        " bytes, but --kv-transfer-config kv_connector_extra_config cpu_bytes_to_use is ",
        it->dump(), " (vLLM would replace it)"));
  }
  (*extra)["cpu_bytes_to_use"] = bytes;
  std::string text = extra->dump();
  if (text.size() > kMaxKvConnectorExtraConfigBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-transfer-config kv_connector_extra_config: ", text.size(),
                     " bytes with cpu_bytes_to_use; at most ", kMaxKvConnectorExtraConfigBytes));
  }
  t.kv_connector = "OffloadingConnector";
  t.kv_role = "kv_both";
  t.kv_connector_extra_config = std::move(text);
  return absl::OkStatus();
}

namespace {

// A config with an offloading size is one ResolveKvOffloading has made (resolving it again
// changes nothing).
absl::Status CheckKvOffloadingResolved(const VllmConfig& c) {
  if (c.cache.kv_offloading_size <= 0) return absl::OkStatus();
  VllmConfig resolved = c;
  VLLM_RETURN_IF_ERROR(resolved.ResolveKvOffloading());
  if (resolved.kv_transfer != c.kv_transfer) {
    return absl::InvalidArgumentError(
        "--kv-offloading-size: the KV-transfer config does not say OffloadingConnector, kv_both "
        "and its cpu_bytes_to_use (VllmConfig::ResolveKvOffloading was not applied)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status VllmConfig::Validate() const {
  BoundsChecker bounds;
  VisitAllFields(*this, bounds);
  VLLM_RETURN_IF_ERROR(bounds.status);
  VLLM_RETURN_IF_ERROR(model.Validate());
  VLLM_RETURN_IF_ERROR(cache.Validate());
  VLLM_RETURN_IF_ERROR(parallel.Validate());
  VLLM_RETURN_IF_ERROR(device.Validate());
  VLLM_RETURN_IF_ERROR(load.Validate());
  VLLM_RETURN_IF_ERROR(kv_transfer.Validate());
  VLLM_RETURN_IF_ERROR(speculative.Validate());
  VLLM_RETURN_IF_ERROR(CheckKvOffloadingResolved(*this));
  // vLLM's _verify_and_get_draft_tp: the draft runs sharded as the target or whole on every
  // rank.
  if (speculative.draft_tensor_parallel_size != 0 && speculative.draft_tensor_parallel_size != 1 &&
      speculative.draft_tensor_parallel_size != parallel.tensor_parallel_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--speculative-config draft_tensor_parallel_size: %d; expected 1 or the target's "
        "--tensor-parallel-size %d",
        speculative.draft_tensor_parallel_size, parallel.tensor_parallel_size));
  }
  // The drafts that run in the worker read the target's last hidden states and share its
  // embedding: one stage has neither whole. n-gram and suffix drafts come from the scheduler.
  if (parallel.pipeline_parallel_size > 1 && speculative.DraftsInWorker()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--speculative-config method '%s' does not run with --pipeline-parallel-size %d yet "
        "(methods ngram and suffix do)",
        speculative.method, parallel.pipeline_parallel_size));
  }
  if (parallel.pipeline_parallel_size > 1 && device.device == Device::kCuda) {
    return absl::InvalidArgumentError(
        "--pipeline-parallel-size above 1 runs on the CPU backend only so far (choose --device "
        "cpu, or use --tensor-parallel-size)");
  }
  // Known only once max_model_len is (resolved or given): vLLM refuses a budget that cannot
  // hold one whole prompt when prompts are not chunked.
  if (!scheduler.enable_chunked_prefill && scheduler.max_num_batched_tokens > 0 &&
      model.max_model_len > 0 && scheduler.max_num_batched_tokens < model.max_model_len) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--max-num-batched-tokens %d is smaller than --max-model-len %d: with "
                        "--no-enable-chunked-prefill every prompt must fit one step",
                        scheduler.max_num_batched_tokens, model.max_model_len));
  }
  return absl::OkStatus();
}

absl::Status VllmConfig::CheckResolved() const {
  if (model.max_model_len < 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--max-model-len: %d; the engine needs at least 2 (resolved)", model.max_model_len));
  }
  if (scheduler.max_num_batched_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--max-num-batched-tokens: %d; the engine needs at least 1 (resolved)",
                        scheduler.max_num_batched_tokens));
  }
  if (device.device == Device::kAuto) {
    return absl::InvalidArgumentError(
        "--device: auto was not resolved to a device before the engine started");
  }
  return absl::OkStatus();
}

namespace {

// vLLM's log spelling of one value: strings quoted, booleans True/False, None when unset.
template <class T>
std::string Show(const T& value) {
  if constexpr (std::is_enum_v<T>) {
    return std::string(EnumName(value));
  } else if constexpr (std::is_same_v<T, bool>) {
    return value ? "True" : "False";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return absl::StrCat("'", value, "'");
  } else if constexpr (std::is_same_v<T, std::filesystem::path>) {
    return absl::StrCat("'", value.string(), "'");
  } else {
    return absl::StrCat(value);
  }
}
template <class T>
std::string Show(const std::optional<T>& value) {
  return value.has_value() ? Show(*value) : std::string("None");
}

// Appends `name=value` for every field of every part.
struct Describer {
  std::string out;
  template <class T>
  void operator()(std::string_view part, std::string_view name, const T& value, FieldBounds) {
    // vLLM's log line calls the device "device_config", and the KV-events, KV-transfer and
    // speculative fields are its kv_events_config's, kv_transfer_config's and
    // speculative_config's.
    const std::string_view shown = name == "device" ? "device_config" : name;
    const std::string_view prefix = part == "kv_events"     ? "kv_events_config."
                                    : part == "kv_transfer" ? "kv_transfer_config."
                                    : part == "speculative" ? "speculative_config."
                                                            : "";
    absl::StrAppend(&out, out.empty() ? "" : ", ", A(prefix), A(shown), "=", Show(value));
  }
};

}  // namespace

std::string DescribeVllmConfig(const VllmConfig& c) {
  Describer describer;
  VisitAllFields(c, describer);
  return std::move(describer.out);
}

}  // namespace vllm::config
