// The OpenAI API's kv_transfer_params (vLLM's CompletionRequest / ChatCompletionRequest field
// and the responses' top-level field of the same name, for disaggregated prefill/decode): the
// request object parsed strictly into kv_transfer::KVTransferParams, and those written back as
// JSON. Pure functions; no I/O.
#ifndef VLLM_FRONTEND_OPENAI_KV_TRANSFER_PARAMS_H_
#define VLLM_FRONTEND_OPENAI_KV_TRANSFER_PARAMS_H_

#include <optional>

#include "absl/status/statusor.h"
#include "kv_transfer/types.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {

// The request body's "kv_transfer_params": nullopt when absent or null, else an object whose
// keys are NixlConnector's:
//   do_remote_decode, do_remote_prefill   booleans (null: false)
//   remote_engine_id, remote_request_id, remote_host
//                                         strings or null (at most kv_transfer's
//                                         kMaxEngineIdBytes / kMaxRequestIdBytes /
//                                         kMaxHostBytes)
//   remote_port (1..65535), tp_size (1..1024), remote_num_tokens (>= 0)
//                                         integers or null
//   remote_block_ids                      null or an array of at most kMaxRemoteBlockIds
//                                         non-negative integers
// and the keys vLLM's NixlConnector adds that have no effect here, accepted only with their
// neutral values: dcp_size and pp_size (1 or null: the peer ran neither decode-context nor
// pipeline parallelism), remote_blocks_expiry_time, remote_registration_generation and
// transfer_mode (any value; ignored). Any other key is refused ("kv_transfer_params.<key> is
// not supported"). Every failure is InvalidArgument (HTTP 400) naming the field as
// "kv_transfer_params.<key>" (base::InvalidParam).
[[nodiscard]] absl::StatusOr<std::optional<kv_transfer::KVTransferParams>> ParseKvTransferParams(
    const nlohmann::ordered_json& body);

// A response's "kv_transfer_params" object, with exactly the keys do_remote_decode,
// do_remote_prefill, remote_engine_id, remote_request_id, remote_host, remote_port,
// remote_block_ids, tp_size and remote_num_tokens: an unset optional is null, remote_block_ids
// always an array. It parses back (ParseKvTransferParams) to `params`.
nlohmann::json KvTransferParamsJson(const kv_transfer::KVTransferParams& params);

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_OPENAI_KV_TRANSFER_PARAMS_H_
