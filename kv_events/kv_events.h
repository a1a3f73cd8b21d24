// KV-cache events as vLLM publishes them (`--kv-events-config`; vLLM's
// vllm/distributed/kv_events.py): the event types, their msgpack codec, and the ZMQ publisher an
// engine core sends one batch per step through. Knows no engine types and no configuration
// (the --kv-events-config setting and its parser are config/kv_events_config.h): the engine
// (core/) fills the events and converts the setting, a router decodes them.
//
// Wire format (what vLLM 0.33 sends; msgspec, omit_defaults). One ZMQ multipart message per
// batch: [topic bytes, sequence number (8 bytes, big-endian, from 0), payload]. The payload:
//
//   batch   = array [ts: float64 (seconds since the epoch), events: array,
//                    data_parallel_rank: int | nil]         (always 3 elements: msgspec does
//                                                            not drop trailing defaults of an
//                                                            array-like struct)
//   event   = map, tag first, then the fields in this order (vLLM#42892 made events maps):
//     {"type": "BlockStored", "block_hashes": [uint64...], "parent_block_hash": uint64 | nil,
//      "token_ids": [int...], "block_size": int, "lora_id": int | nil, "medium": str | nil,
//      "lora_name": str | nil, ["group_idx": int], ["kv_cache_spec_kind": str]}
//     {"type": "BlockRemoved", "block_hashes": [uint64...], "medium": str | nil,
//      ["group_idx": int]}
//     {"type": "AllBlocksCleared"}
//   Bracketed fields have a default (None) in vLLM and are left out when unset.
//
// DecodeKvEventBatch also reads what older vLLM sent (events as tagged arrays
// ["BlockStored", block_hashes, parent, token_ids, block_size, lora_id, medium, ...]) and
// ignores fields and elements it does not know (vLLM adds some every few releases).
#ifndef VLLM_KV_EVENTS_KV_EVENTS_H_
#define VLLM_KV_EVENTS_KV_EVENTS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>
#include <zmq.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vllm::kv_events {

// Full blocks newly registered in the prefix cache, in chain order: block_hashes[i] holds
// token_ids[i * block_size, (i + 1) * block_size); its parent is block_hashes[i - 1], the
// first one's parent_block_hash (nullopt: the first blocks of a sequence).
struct KvBlockStored {
  std::vector<uint64_t> block_hashes;
  std::optional<uint64_t> parent_block_hash;
  std::vector<int32_t> token_ids;
  int32_t block_size = 0;
  std::optional<int64_t> lora_id;
  std::optional<std::string> medium;
  // vLLM 0.33's later fields. lora_name is always on the wire (nil when unset: vLLM gives it
  // no default); group_idx and kv_cache_spec_kind only when set.
  std::optional<std::string> lora_name;
  std::optional<int32_t> group_idx;
  std::optional<std::string> kv_cache_spec_kind;
};
// Blocks evicted from the prefix cache.
struct KvBlockRemoved {
  std::vector<uint64_t> block_hashes;
  std::optional<std::string> medium;
  std::optional<int32_t> group_idx;  // on the wire only when set
};
// The whole prefix cache was dropped (reset_prefix_cache).
struct KvAllBlocksCleared {};
using KvEvent = std::variant<KvBlockStored, KvBlockRemoved, KvAllBlocksCleared>;

struct KvEventBatch {
  double ts = 0;
  std::vector<KvEvent> events;
  std::optional<int32_t> data_parallel_rank;
};

// The payload bytes of `batch`, as vLLM's msgspec encoder writes them (see above).
std::string EncodeKvEventBatch(const KvEventBatch& batch);

// Largest payload DecodeKvEventBatch accepts.
inline constexpr size_t kMaxKvEventBatchBytes = size_t{64} << 20;
// Longest endpoint (publisher, replay, or a subscriber's) accepted; config/kv_events_config.h's
// kMaxKvEventsEndpointBytes is the same (checked in core/kv_event_options.h).
inline constexpr size_t kMaxEndpointBytes = 1024;

// Decodes a payload (bounded: at most kMaxKvEventBatchBytes, 4 Mi elements per array, nesting
// 10). Block hashes may be integers (vLLM's default; a negative one is taken as its 64-bit
// two's complement) or bytes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0), which become the
// big-endian value of their last 8 bytes, as vLLM's own int conversion does. Never throws.
// DataLoss / ResourceExhausted for malformed or oversized msgpack, InvalidArgument for a
// well-formed payload of the wrong shape (naming the field) or an unknown event tag (naming it).
[[nodiscard]] absl::StatusOr<KvEventBatch> DecodeKvEventBatch(std::span<const uint8_t> payload);

// What a publisher does: vLLM's KVEventsConfig less the parsing (config::KvEventsConfig is the
// setting; core/ converts it). `enable` false or `publisher` "null": nothing is sent.
struct KvEventPublisherOptions {
  bool enable = false;
  std::string publisher = "null";  // "null" or "zmq"
  std::string endpoint = "tcp://*:5557";
  std::optional<std::string> replay_endpoint;
  int64_t buffer_steps = 10000;
  int64_t hwm = 100000;
  int64_t max_queue_size = 100000;
  std::string topic;
};

// The endpoint data-parallel rank `rank` uses, as vLLM's offset_endpoint_port: unchanged for
// rank 0; "inproc://x" → "inproc://x_dp<rank>"; a tcp endpoint's port plus rank. Anything
// else (or a tcp endpoint whose port is not a number) is returned unchanged;
// KvEventPublisher::Create refuses it for rank > 0, as vLLM does.
std::string OffsetEndpointForRank(std::string_view endpoint, int rank);

// Publishes batches on a ZMQ PUB socket (and answers replay requests on a ROUTER socket when
// replay_endpoint is set), from its own thread "vllm-kv-events". As vLLM: the endpoints are
// offset by the DP rank; an endpoint with "*" or "::", or ipc:// / inproc://, is bound, any
// other connected; sequence numbers count the batches sent, from 0.
//
// Replay (vLLM's protocol): a client (REQ, or DEALER sending an empty delimiter first) sends
// one frame, the first sequence number it wants (big-endian, at most 8 bytes); the publisher
// answers with [topic, seq, payload] for each of the last `buffer_steps` batches from that
// number on, then [topic, -1 as 8 bytes, ""] (for a REQ client the frames arrive as separate
// replies). The ROUTER accepts frames of at most 64 bytes; other requests are ignored.
class KvEventPublisher {
 public:
  // Binds or connects the sockets on `context`, which must outlive the publisher (a bound PUB uses
  // `config.hwm` as its send high-water mark) and starts the thread. A config that is disabled or
  // has publisher "null" gives a publisher that drops everything and has no socket. InvalidArgument
  // for an endpoint ZMQ refuses or one vLLM cannot offset for rank > 0; Unavailable when a bind
  // fails (address in use).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<KvEventPublisher>> Create(
      zmq::context_t& context, const KvEventPublisherOptions& config, int dp_rank);
  ~KvEventPublisher();  // stops the thread; batches not yet sent are dropped
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // Queues `batch` for the publisher thread (a data_parallel_rank left unset is set to this
  // publisher's rank, as vLLM does). Never blocks on the network: a batch that finds
  // `max_queue_size` batches queued is dropped (counted, logged every 1000), and the PUB
  // socket drops what a slow subscriber cannot take at its high-water mark (the sequence
  // gap tells the subscriber). Thread-safe.
  void Publish(const KvEventBatch& batch);
  void Publish(KvEventBatch&& batch);

  // The PUB endpoint after binding ("tcp://0.0.0.0:5557" for "tcp://*:5557"), or the offset
  // endpoint it connected to; "" for a null publisher.
  std::string BoundEndpoint() const;
  // The replay ROUTER's bound endpoint, "" without replay.
  std::string BoundReplayEndpoint() const;
  // Batches dropped because the queue was full.
  int64_t num_dropped() const;

 private:
  class Impl;
  explicit KvEventPublisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vllm::kv_events

#endif  // VLLM_KV_EVENTS_KV_EVENTS_H_
