#include "config/kv_transfer_config.h"

#include <algorithm>
#include <iterator>
#include <span>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/json_util.h"
#include "base/status_macros.h"

namespace vllm::config {
namespace {

constexpr std::string_view kFlag = "--kv-transfer-config";
// vLLM's get_args(KVRole), as its messages print it.
constexpr std::string_view kRolesTuple = "('kv_producer', 'kv_both', 'kv_consumer')";
// vLLM's connectors' names, for messages.
constexpr std::string_view kBuiltConnectors =
    "ExampleConnector, NixlConnector, OffloadingConnector";
// The keys ParseKvTransferConfig reads (vLLM 0.33's KVTransferConfig fields).
constexpr std::string_view kKeys =
    "kv_connector, engine_id, kv_buffer_device, kv_role, kv_port, kv_connector_extra_config, "
    "kv_connector_module_path, enable_permute_local_kv, kv_load_failure_policy";

absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

absl::Status KeyError(std::string_view key, std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(A(kFlag), " ", A(key), ": ", A(problem)));
}

// `s` quoted and escaped, at most 64 bytes of it, for a message.
std::string Quoted(std::string_view s) {
  return absl::StrCat("'", absl::CEscape(A(s.substr(0, 64))), s.size() > 64 ? "...'" : "'");
}

// A string, or null (leaves `out` as it is) when `nullable`.
absl::Status ReadString(const nlohmann::json& v, std::string_view key, size_t max_bytes,
                        bool nullable, std::string* out) {
  if (nullable && v.is_null()) return absl::OkStatus();
  if (!v.is_string())
    return KeyError(key, nullable ? "expected a string or null" : "expected a string");
  const auto& s = v.get_ref<const std::string&>();
  if (s.size() > max_bytes) {
    return KeyError(key, absl::StrCat(s.size(), " bytes; at most ", max_bytes));
  }
  *out = s;
  return absl::OkStatus();
}

// `value` must be one of `choices` ("" excluded from the message).
absl::Status CheckChoice(std::string_view key, const std::string& value,
                         std::span<const std::string_view> choices) {
  if (std::find(choices.begin(), choices.end(), value) != choices.end()) return absl::OkStatus();
  std::string listed;
  for (std::string_view c : choices) {
    if (!c.empty()) absl::StrAppend(&listed, listed.empty() ? "" : ", ", A(c));
  }
  return KeyError(key, absl::StrCat(Quoted(value), " is not one of ", listed));
}

absl::Status ReadConnector(const nlohmann::json& v, std::string* out) {
  if (v.is_null()) {
    out->clear();
    return absl::OkStatus();
  }
  VLLM_RETURN_IF_ERROR(ReadString(v, "kv_connector", kMaxNameBytes, true, out));
  if (*out == "SharedStorageConnector") *out = "ExampleConnector";  // vLLM's old name
  if (out->empty()) return KeyError("kv_connector", "empty name (use null for no connector)");
  if (std::find(std::begin(kKvConnectors), std::end(kKvConnectors), *out) !=
      std::end(kKvConnectors)) {
    return absl::OkStatus();
  }
  return KeyError("kv_connector",
                  absl::StrCat("connector ", Quoted(*out),
                               " is not built in this runtime (built: ", A(kBuiltConnectors), ")"));
}

absl::Status ReadExtraConfig(const nlohmann::json& v, std::string* out) {
  if (v.is_null()) return absl::OkStatus();
  if (!v.is_object()) return KeyError("kv_connector_extra_config", "expected a JSON object");
  std::string text = v.dump();  // compact, keys sorted
  if (text.size() > kMaxKvConnectorExtraConfigBytes) {
    return KeyError(
        "kv_connector_extra_config",
        absl::StrCat(text.size(), " bytes of JSON; at most ", kMaxKvConnectorExtraConfigBytes));
  }
  *out = std::move(text);
  return absl::OkStatus();
}

// Reads one key of the object into `c`.
absl::Status ReadKey(const std::string& key, const nlohmann::json& v, KvTransferConfig& c) {
  if (key == "kv_connector") return ReadConnector(v, &c.kv_connector);
  if (key == "engine_id") return ReadString(v, key, kMaxKvEngineIdBytes, true, &c.engine_id);
  if (key == "kv_buffer_device") {
    VLLM_RETURN_IF_ERROR(ReadString(v, key, kMaxNameBytes, false, &c.kv_buffer_device));
    return CheckChoice(key, c.kv_buffer_device, kKvBufferDevices);
  }
  if (key == "kv_role") {
    if (v.is_null()) {
      c.kv_role.clear();
      return absl::OkStatus();
    }
    VLLM_RETURN_IF_ERROR(ReadString(v, key, kMaxNameBytes, true, &c.kv_role));
    if (std::find(std::begin(kKvRoles), std::end(kKvRoles), c.kv_role) == std::end(kKvRoles) ||
        c.kv_role.empty()) {
      // vLLM's message.
      return KeyError(key, absl::StrCat("Unsupported kv_role: ", Quoted(c.kv_role),
                                        ". Supported roles are ", A(kRolesTuple)));
    }
    return absl::OkStatus();
  }
  if (key == "kv_port") {
    if (!v.is_number_integer()) return KeyError(key, "expected an integer");
    const bool in_range = v.is_number_unsigned()
                              ? v.get<uint64_t>() <= 65535
                              : v.get<int64_t>() >= 1 && v.get<int64_t>() <= 65535;
    if (!in_range || v.get<int64_t>() < 1)
      return KeyError(key, "expected an integer in [1, 65535]");
    c.kv_port = static_cast<int32_t>(v.get<int64_t>());
    return absl::OkStatus();
  }
  if (key == "kv_connector_extra_config") return ReadExtraConfig(v, &c.kv_connector_extra_config);
  if (key == "kv_connector_module_path") {
    if (v.is_null()) return absl::OkStatus();
    return KeyError(key, absl::StrCat("Python connector modules cannot be loaded by this runtime "
                                      "(use null; built connectors: ",
                                      A(kBuiltConnectors), ")"));
  }
  if (key == "enable_permute_local_kv") {
    if (!v.is_boolean()) return KeyError(key, "expected true or false");
    if (v.get<bool>()) return KeyError(key, "true is not supported (the HND to NHD permute)");
    return absl::OkStatus();
  }
  if (key == "kv_load_failure_policy") {
    VLLM_RETURN_IF_ERROR(ReadString(v, key, kMaxNameBytes, false, &c.kv_load_failure_policy));
    return CheckChoice(key, c.kv_load_failure_policy, kKvLoadFailurePolicies);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(A(kFlag), ": unknown key ", Quoted(key), " (known: ", A(kKeys), ")"));
}

}  // namespace

absl::Status KvTransferConfig::Validate() const {
  VLLM_RETURN_IF_ERROR(CheckChoice("kv_connector", kv_connector, kKvConnectors));
  VLLM_RETURN_IF_ERROR(CheckChoice("kv_role", kv_role, kKvRoles));
  VLLM_RETURN_IF_ERROR(CheckChoice("kv_buffer_device", kv_buffer_device, kKvBufferDevices));
  VLLM_RETURN_IF_ERROR(
      CheckChoice("kv_load_failure_policy", kv_load_failure_policy, kKvLoadFailurePolicies));
  if (engine_id.size() > kMaxKvEngineIdBytes ||
      !std::all_of(engine_id.begin(), engine_id.end(), [](char ch) {
        const auto u = static_cast<unsigned char>(ch);
        return u > 0x20 && u < 0x7f;
      })) {
    return KeyError("engine_id", absl::StrCat("expected at most ", kMaxKvEngineIdBytes,
                                              " printable ASCII characters without spaces, got ",
                                              Quoted(engine_id)));
  }
  if (kv_port < 1 || kv_port > 65535) {
    return KeyError("kv_port", absl::StrCat(kv_port, " is outside [1, 65535]"));
  }
  if (kv_connector_extra_config.size() > kMaxKvConnectorExtraConfigBytes) {
    return KeyError("kv_connector_extra_config",
                    absl::StrCat(kv_connector_extra_config.size(), " bytes; at most ",
                                 kMaxKvConnectorExtraConfigBytes));
  }
  absl::StatusOr<nlohmann::json> extra =
      base::ParseJson(kv_connector_extra_config, "kv_connector_extra_config", 8);
  if (!extra.ok() || !extra->is_object()) {
    return KeyError("kv_connector_extra_config", "expected the JSON text of an object");
  }
  if (has_connector() && kv_role.empty()) {
    // vLLM's message.
    return KeyError("kv_role", absl::StrCat("Please specify kv_role when kv_connector is set, "
                                            "supported roles are ",
                                            A(kRolesTuple)));
  }
  return absl::OkStatus();
}

absl::StatusOr<KvTransferConfig> ParseKvTransferConfig(std::string_view json) {
  VLLM_ASSIGN_OR_RETURN(nlohmann::json parsed, base::ParseJson(json, A(kFlag), 8));
  if (!parsed.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(A(kFlag), ": expected a JSON object"));
  }
  KvTransferConfig c;
  for (const auto& [key, v] : parsed.items()) VLLM_RETURN_IF_ERROR(ReadKey(key, v, c));
  VLLM_RETURN_IF_ERROR(c.Validate());
  return c;
}

}  // namespace vllm::config
