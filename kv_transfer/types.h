// The values that cross process boundaries for disaggregated prefill/decode and KV offload
// (vLLM's vllm/distributed/kv_transfer/): the per-request kv_transfer_params of the OpenAI API,
// the connector metadata the scheduler sends to the workers with each step, and what the
// workers report back. Plain value types; the msgpack codecs are in kv_transfer/codec.h.
#ifndef VLLM_KV_TRANSFER_TYPES_H_
#define VLLM_KV_TRANSFER_TYPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vllm::kv_transfer {

// A request's kv_transfer_params (vLLM's dict, NixlConnector's keys). Into a prefill
// instance: do_remote_decode (keep the prompt's blocks for a decode instance to read). Out of
// it, on the finished output, and then into the decode instance: do_remote_prefill and where
// the blocks are. Keys are the JSON keys.
struct KVTransferParams {
  bool do_remote_decode = false;
  bool do_remote_prefill = false;
  std::optional<std::string> remote_engine_id;
  std::optional<std::string> remote_request_id;
  std::optional<std::string> remote_host;
  std::optional<int32_t> remote_port;
  // The prefill side's block ids holding the prompt, in order (the last may be partial).
  std::vector<int32_t> remote_block_ids;
  // The prefill instance's tensor-parallel size.
  std::optional<int32_t> tp_size;
  // Prompt tokens whose KV the prefill side holds (vLLM's remote_num_tokens).
  std::optional<int32_t> remote_num_tokens;

  friend bool operator==(const KVTransferParams&, const KVTransferParams&) = default;
};

// Bounds on kv_transfer_params (a client sends them).
inline constexpr size_t kMaxRemoteBlockIds = size_t{1} << 20;
inline constexpr size_t kMaxEngineIdBytes = 256;
inline constexpr size_t kMaxHostBytes = 256;

// One request whose KV the worker loads into its cache, asynchronously (the request waits in
// WAITING_FOR_REMOTE_KVS and is not scheduled until the load finished or failed).
struct LoadSpec {
  std::string req_id;
  // Destination blocks in this worker's cache, in order; block i receives the source's block i.
  std::vector<int32_t> local_block_ids;
  // Tokens to load (from the start of local_block_ids[0]'s first slot... every block whole).
  int32_t num_tokens = 0;
  // Network (NixlConnector): the source blocks, one per local block, and where they are.
  // Host tier (OffloadingConnector): the host slots holding them, one per local block.
  std::vector<int32_t> remote_block_ids;
  std::string remote_engine_id;
  std::string remote_request_id;
  std::string remote_host;
  int32_t remote_port = 0;
  int32_t remote_tp_size = 0;
  // Files / host tier (ExampleConnector, offloading): the stored entry's key.
  std::string key;

  friend bool operator==(const LoadSpec&, const LoadSpec&) = default;
};

// One request whose KV the worker stores (ExampleConnector: a file per rank; offloading: the
// host tier), after this step's forward pass wrote it.
struct SaveSpec {
  std::string req_id;
  std::vector<int32_t> block_ids;
  int32_t num_tokens = 0;
  std::string key;
  // Host tier (OffloadingConnector): the host slot each of block_ids is copied to, one per
  // block; empty for the other connectors.
  std::vector<int32_t> host_slots{};

  friend bool operator==(const SaveSpec&, const SaveSpec&) = default;
};

// Prefill side (NixlConnector): a finished request whose blocks are held for a decode
// instance to read (the worker serves reads of exactly these blocks of this request).
struct SendSpec {
  std::string req_id;
  std::vector<int32_t> block_ids;

  friend bool operator==(const SendSpec&, const SendSpec&) = default;
};

// Sent with every SchedulerOutput when a connector is configured (vLLM's KVConnectorMetadata,
// one shape for all our connectors).
struct KVConnectorMetadata {
  std::vector<LoadSpec> loads;
  std::vector<SaveSpec> saves;
  std::vector<SendSpec> sends;
  // Held requests the scheduler freed (lease expired or the request was aborted): the worker
  // stops serving them before this step runs (their blocks may be reused in it).
  std::vector<std::string> sends_released;

  bool empty() const {
    return loads.empty() && saves.empty() && sends.empty() && sends_released.empty();
  }
  friend bool operator==(const KVConnectorMetadata&, const KVConnectorMetadata&) = default;
};

// The workers' answer (vLLM's KVConnectorOutput), with each step's ModelRunnerOutput. With
// several ranks the executor reports a request once every rank did.
struct KVConnectorOutput {
  // Held requests whose blocks the decode side has read (their blocks can be freed).
  std::vector<std::string> finished_sending;
  // Requests whose load completed.
  std::vector<std::string> finished_recving;
  // Requests whose load failed (timeout, peer gone, layout mismatch, corrupt data); the
  // scheduler recomputes or fails them (kv_load_failure_policy).
  std::vector<std::string> failed_recving;

  bool empty() const {
    return finished_sending.empty() && finished_recving.empty() && failed_recving.empty();
  }
  friend bool operator==(const KVConnectorOutput&, const KVConnectorOutput&) = default;
};

// A rank's KV-cache layout, exchanged in the network handshake and written in every stored
// file: two sides can exchange blocks only when these match (tp_rank aside).
struct KvLayout {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;  // this rank's
  int32_t head_dim = 0;
  int32_t block_size = 0;
  int32_t dtype_bytes = 0;
  int32_t tp_size = 1;
  int32_t tp_rank = 0;

  // Bytes of one block of one layer's K (and of its V).
  int64_t layer_block_bytes() const {
    return int64_t{block_size} * num_kv_heads * head_dim * dtype_bytes;
  }
  // Bytes of one block over all layers, K and V.
  int64_t block_bytes() const { return 2 * int64_t{num_layers} * layer_block_bytes(); }
  friend bool operator==(const KvLayout&, const KvLayout&) = default;
};

}  // namespace vllm::kv_transfer

#endif  // VLLM_KV_TRANSFER_TYPES_H_
