// --kv-transfer-config (vLLM's KVTransferConfig, vllm/config/kv_transfer.py): which KV
// connector an engine runs (disaggregated prefill/decode, KV offloading) and its settings, and
// the flag's strict JSON parser. The connectors themselves are kv_transfer/.
#ifndef VLLM_CONFIG_KV_TRANSFER_CONFIG_H_
#define VLLM_CONFIG_KV_TRANSFER_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/field_bounds.h"

namespace vllm::config {

// The connectors this runtime builds ("" is none). vLLM's old name "SharedStorageConnector" is
// read as "ExampleConnector"; every other vLLM connector is refused by name.
inline constexpr std::string_view kKvConnectors[] = {"", "ExampleConnector", "NixlConnector",
                                                     "OffloadingConnector"};
// vLLM's KVRole ("" is unset), in the order vLLM's messages list them.
inline constexpr std::string_view kKvRoles[] = {"", "kv_producer", "kv_both", "kv_consumer"};
// vLLM also has "xpu".
inline constexpr std::string_view kKvBufferDevices[] = {"cpu", "cuda"};
inline constexpr std::string_view kKvLoadFailurePolicies[] = {"fail", "recompute"};
// Longest engine_id (as kv_transfer/types.h's kMaxEngineIdBytes).
inline constexpr size_t kMaxKvEngineIdBytes = 256;
// Longest kv_connector_extra_config text: the config codec's bound on one string
// (config_codec.h), so that every config the parser accepts reaches the engine's processes.
inline constexpr size_t kMaxKvConnectorExtraConfigBytes = kMaxPathBytes;

// vLLM's KVTransferConfig, less kv_connector_module_path (ParseKvTransferConfig refuses any but
// null: Python modules cannot be loaded here) and enable_permute_local_kv (refused when true).
struct KvTransferConfig {
  // One of kKvConnectors; "" runs no connector.
  std::string kv_connector;
  // Printable ASCII without spaces; "" until the engine factory picks a random one (vLLM: a
  // uuid4 in __post_init__).
  std::string engine_id;
  // Where the connector stages KV for transfer. vLLM's default is the platform's device; ours
  // is "cpu".
  std::string kv_buffer_device = "cpu";
  // "kv_producer", "kv_consumer", "kv_both", or "" (unset; a connector needs one).
  std::string kv_role;
  int32_t kv_port = 14579;
  // The connector's own settings as compact JSON text of an object (the connector checks its
  // keys; this config only that it is an object).
  std::string kv_connector_extra_config = "{}";
  // What a failed KV load does to its request: "fail" finishes it with an error,
  // "recompute" reschedules it to compute the blocks that failed.
  std::string kv_load_failure_policy = "fail";

  // The fields, by their JSON keys, with their bounds (field_bounds.h).
  template <class Self, class V>
  static void Fields(Self& k, V& v) {
    v("kv_connector", k.kv_connector, OneOf(kKvConnectors));
    v("engine_id", k.engine_id, MaxBytes(kMaxKvEngineIdBytes));
    v("kv_buffer_device", k.kv_buffer_device, OneOf(kKvBufferDevices));
    v("kv_role", k.kv_role, OneOf(kKvRoles));
    v("kv_port", k.kv_port, Range(1, 65535));
    v("kv_connector_extra_config", k.kv_connector_extra_config,
      MaxBytes(kMaxKvConnectorExtraConfigBytes));
    v("kv_load_failure_policy", k.kv_load_failure_policy, OneOf(kKvLoadFailurePolicies));
  }
  // The rules beyond each field's bounds (vLLM's __post_init__ with its messages): a
  // connector needs a kv_role; engine_id is printable; kv_connector_extra_config is a JSON
  // object. InvalidArgument naming "--kv-transfer-config" and the key.
  [[nodiscard]] absl::Status Validate() const;

  bool has_connector() const { return !kv_connector.empty(); }
  // vLLM's is_kv_producer / is_kv_consumer: a connector, and a role that sends / receives.
  bool is_kv_producer() const {
    return has_connector() && (kv_role == "kv_producer" || kv_role == "kv_both");
  }
  bool is_kv_consumer() const {
    return has_connector() && (kv_role == "kv_consumer" || kv_role == "kv_both");
  }
  friend bool operator==(const KvTransferConfig&, const KvTransferConfig&) = default;
};

// Parses the JSON object of `--kv-transfer-config` (vLLM's keys; null is the default for the
// keys vLLM types `| None`) and Validate()s it. Strict: an unknown key, a value of the wrong
// type or out of range, a connector this runtime does not build (named, with the three it
// does), a non-null kv_connector_module_path, or enable_permute_local_kv true is
// InvalidArgument naming "--kv-transfer-config" and the key. "SharedStorageConnector" becomes
// "ExampleConnector".
[[nodiscard]] absl::StatusOr<KvTransferConfig> ParseKvTransferConfig(std::string_view json);

}  // namespace vllm::config

#endif  // VLLM_CONFIG_KV_TRANSFER_CONFIG_H_
