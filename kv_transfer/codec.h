// msgpack wire format of kv_transfer/'s values (types.h). These are not messages of their own:
// they are fields of core/'s messages (core/codec.h packs them with these functions inside its
// versioned envelope, whose kWireVersion covers them too), so there is no tag or version here.
// Built on base/msgpack_fields.h exactly as core/codec.cc is.
//
// Each value is one msgpack array whose elements are, in this order (T? = T or nil, [T] = array
// of T; every integer range-checked against its C++ type first):
//   KVTransferParams    [do_remote_decode: bool, do_remote_prefill: bool,
//                        remote_engine_id: str? (<= kMaxEngineIdBytes),
//                        remote_request_id: str? (<= kMaxRequestIdBytes),
//                        remote_host: str? (<= kMaxHostBytes), remote_port: int? (1 to 65535),
//                        remote_block_ids: [int] (each >= 0, at most kMaxRemoteBlockIds),
//                        tp_size: int? (1 to kMaxTpSize), remote_num_tokens: int? (>= 0)]
//   LoadSpec            [req_id: str, local_block_ids: [int], num_tokens: int (>= 0),
//                        remote_block_ids: [int], remote_engine_id: str, remote_request_id: str,
//                        remote_host: str, remote_port: int (0 = no network peer, else 1 to
//                        65535), remote_tp_size: int (0 = none, else 1 to kMaxTpSize),
//                        key: str (<= kMaxKeyBytes)]
//   SaveSpec            [req_id: str, block_ids: [int], num_tokens: int (>= 0), key: str,
//                        host_slots: [int] (empty, or exactly one per block id)]
//   SendSpec            [req_id: str, block_ids: [int]]
//   KVConnectorMetadata [loads: [LoadSpec], saves: [SaveSpec], sends: [SendSpec],
//                        sends_released: [str]]
//   KVConnectorOutput   [finished_sending: [str], finished_recving: [str],
//                        failed_recving: [str]]
// Request ids (req_id, the lists of ids, remote_request_id) are strings of at most
// kMaxRequestIdBytes; block-id lists (host_slots too) hold non-negative ids, at most
// kMaxRemoteBlockIds of them.
//
// Readers never throw or abort (msgpack-c's own exceptions are the caller's envelope's to
// catch, as core/codec.cc does): a wrong type, field count or range gives InvalidArgument
// naming the struct and field ("KVTransferParams.remote_port: 70000 is not in [1, 65535]"); a
// block-id list over kMaxRemoteBlockIds gives ResourceExhausted before anything is read into
// it. On an error the output value is left partly written. All functions are thread-safe.
#ifndef VLLM_KV_TRANSFER_CODEC_H_
#define VLLM_KV_TRANSFER_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "base/msgpack_fields.h"
#include "kv_transfer/types.h"

namespace vllm::kv_transfer {

// Longest request id (core::kMaxRequestIdBytes; kv_transfer/ does not depend on core/).
inline constexpr size_t kMaxRequestIdBytes = 256;
// Longest stored entry key (LoadSpec::key, SaveSpec::key).
inline constexpr size_t kMaxKeyBytes = 1024;
// Largest tensor-parallel size a peer may announce.
inline constexpr int32_t kMaxTpSize = 1024;

void Pack(wire::Packer& pk, const KVTransferParams& params);
void Pack(wire::Packer& pk, const LoadSpec& spec);
void Pack(wire::Packer& pk, const SaveSpec& spec);
void Pack(wire::Packer& pk, const SendSpec& spec);
void Pack(wire::Packer& pk, const KVConnectorMetadata& metadata);
void Pack(wire::Packer& pk, const KVConnectorOutput& output);

[[nodiscard]] absl::Status Read(const msgpack::object& o, KVTransferParams* params);
[[nodiscard]] absl::Status Read(const msgpack::object& o, LoadSpec* spec);
[[nodiscard]] absl::Status Read(const msgpack::object& o, SaveSpec* spec);
[[nodiscard]] absl::Status Read(const msgpack::object& o, SendSpec* spec);
[[nodiscard]] absl::Status Read(const msgpack::object& o, KVConnectorMetadata* metadata);
[[nodiscard]] absl::Status Read(const msgpack::object& o, KVConnectorOutput* output);

// An optional value: nil, or the value as above.
template <typename T>
void PackOptional(wire::Packer& pk, const std::optional<T>& value) {
  if (value.has_value()) {
    Pack(pk, *value);
  } else {
    pk.pack_nil();
  }
}
// Reads nil (reset) or a value into `*out`.
template <typename T>
[[nodiscard]] absl::Status ReadOptional(const msgpack::object& o, std::optional<T>* out) {
  if (o.type == msgpack::type::NIL) {
    out->reset();
    return absl::OkStatus();
  }
  return Read(o, &out->emplace());
}

}  // namespace vllm::kv_transfer

#endif  // VLLM_KV_TRANSFER_CODEC_H_
