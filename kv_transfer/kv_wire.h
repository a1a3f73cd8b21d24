// The frames between a reading (decode) worker's BlockReader and a serving (prefill) worker's
// BlockServer (vLLM's NixlConnector protocol shape, over our own ZMQ/TCP transport): the reader
// is a DEALER, the server a ROUTER; each message below is one ZMQ message.
//
//   reader → server                     server → reader
//   HELLO   {engine_id, layout}         WELCOME {engine_id, layout, max_inflight_reads}
//                                       or REFUSE {reason}
//   READ    {read_id, request_id,       DATA header {read_id, request_id, first_index,
//            first_index, block_ids}      num_blocks, checksums} + one raw data frame
//                                       or ERROR {read_id, reason}
//   DONE    {request_id}                ACK {request_id}
//
// Every READ is answered by exactly one DATA or ERROR (read_id is the reader's, echoed). The
// reader asks for at most BlocksPerDataMessage(layout) blocks per READ, so every DATA message
// stays within kMaxDataBytes (16 MiB), and keeps at most the WELCOME's max_inflight_reads READs
// unanswered; a request's blocks take as many READs as they need. first_index is the position
// of the READ's first block in the request's transfer (echoed; the reader's bookkeeping).
//
// Header frame (every message has one): msgpack array [version: uint, kind: uint, body: array].
// The version is checked before anything else. Bodies (all integers range-checked; str lengths
// in bytes):
//   kind 1 HELLO    [engine_id: str (<= kMaxEngineIdBytes), layout]
//   kind 2 WELCOME  [engine_id: str, layout, max_inflight_reads: int (1..kMaxInflightReads)]
//   kind 3 REFUSE   [reason: str (<= kMaxReasonBytes)]
//   kind 4 READ     [read_id: uint64, request_id: str (1..kMaxRequestIdBytes),
//                    first_index: int (>= 0), block_ids: [int >= 0] (1..kMaxBlocksPerMessage)]
//   kind 5 DATA     [read_id: uint64, request_id: str, first_index: int (>= 0),
//                    num_blocks: int (1..kMaxBlocksPerMessage),
//                    checksums: [uint64] (exactly num_blocks)]
//   kind 6 ERROR    [read_id: uint64 (0: about the connection, not one READ), reason: str]
//   kind 7 DONE     [request_id: str]
//   kind 8 ACK      [request_id: str]
//   layout = [num_layers, num_kv_heads, head_dim, block_size, dtype_bytes, tp_size, tp_rank]
//            (ints; ValidateKvLayout's ranges)
// A DATA header is followed, in the same ZMQ message, by one raw frame of exactly
// num_blocks * layout.block_bytes() bytes: the blocks in READ order, each in wire order
// (kv_cache_view.h: every layer's K then V); checksums[i] is XXH3-64 (seed 0) of block i's bytes.
//
// Decoders never throw or abort: a header frame over kMaxHeaderBytes is ResourceExhausted;
// truncated or malformed msgpack is DataLoss (containers declaring more than the frame holds:
// ResourceExhausted); a wrong version, kind, field type, count or range is InvalidArgument
// naming the message and field. All functions are thread-safe.
#ifndef VLLM_KV_TRANSFER_KV_WIRE_H_
#define VLLM_KV_TRANSFER_KV_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv_transfer/types.h"

namespace vllm::kv_transfer {

inline constexpr uint32_t kKvWireVersion = 1;
// Largest header frame (a DATA header of kMaxBlocksPerMessage checksums is ~37 KiB).
inline constexpr size_t kMaxHeaderBytes = 64 << 10;
// Largest raw data frame of one DATA message.
inline constexpr int64_t kMaxDataBytes = int64_t{16} << 20;
// Most blocks one READ asks for (and one DATA carries).
inline constexpr int32_t kMaxBlocksPerMessage = 4096;
// Longest REFUSE / ERROR reason.
inline constexpr size_t kMaxReasonBytes = 4096;
// Largest max_inflight_reads a WELCOME may announce.
inline constexpr int32_t kMaxInflightReads = 64;

struct KvHello {
  std::string engine_id;
  KvLayout layout;
  friend bool operator==(const KvHello&, const KvHello&) = default;
};
struct KvWelcome {
  std::string engine_id;
  KvLayout layout;
  // READs one connection may keep unanswered (a reader that sends more may get ERRORs).
  int32_t max_inflight_reads = 1;
  friend bool operator==(const KvWelcome&, const KvWelcome&) = default;
};
struct KvRefuse {
  std::string reason;
  friend bool operator==(const KvRefuse&, const KvRefuse&) = default;
};
struct KvRead {
  uint64_t read_id = 0;
  std::string request_id;  // the server's request id (LoadSpec::remote_request_id)
  int32_t first_index = 0;
  std::vector<int32_t> block_ids;  // the server's block ids
  friend bool operator==(const KvRead&, const KvRead&) = default;
};
struct KvDataHeader {
  uint64_t read_id = 0;
  std::string request_id;
  int32_t first_index = 0;
  int32_t num_blocks = 0;
  std::vector<uint64_t> checksums;
  friend bool operator==(const KvDataHeader&, const KvDataHeader&) = default;
};
struct KvError {
  uint64_t read_id = 0;
  std::string reason;
  friend bool operator==(const KvError&, const KvError&) = default;
};
struct KvDone {
  std::string request_id;
  friend bool operator==(const KvDone&, const KvDone&) = default;
};
struct KvAck {
  std::string request_id;
  friend bool operator==(const KvAck&, const KvAck&) = default;
};

using KvMessage =
    std::variant<KvHello, KvWelcome, KvRefuse, KvRead, KvDataHeader, KvError, KvDone, KvAck>;

// "HELLO", "WELCOME", ... for logs.
const char* KvMessageName(const KvMessage& message);

// The header frame of `message`. Strings longer than the limits above are the caller's bug
// (the decoder would refuse them); encoders do not truncate.
std::string EncodeKvMessage(const KvMessage& message);

// Decodes one header frame (errors above).
[[nodiscard]] absl::StatusOr<KvMessage> DecodeKvMessage(std::span<const uint8_t> bytes);
[[nodiscard]] inline absl::StatusOr<KvMessage> DecodeKvMessage(std::string_view bytes) {
  return DecodeKvMessage(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

// XXH3-64 (seed 0) of `bytes`: the per-block checksum of DATA and the data checksum of
// file_store's files.
uint64_t KvChecksum(std::span<const uint8_t> bytes);

// Blocks per READ / DATA for `layout` (a valid one): as many as fit kMaxDataBytes, at most
// kMaxBlocksPerMessage, at least 1.
int32_t BlocksPerDataMessage(const KvLayout& layout);

// Checks a DATA message against the READ it answers before any of its bytes are used: same
// read_id, request_id and first_index, num_blocks == read.block_ids.size(), `data` exactly
// num_blocks * layout.block_bytes() bytes, and every block's checksum. DataLoss naming the
// first problem (and the block's index within the READ for a checksum) otherwise.
[[nodiscard]] absl::Status CheckDataMessage(const KvDataHeader& header, const KvRead& read,
                                            const KvLayout& layout, std::span<const uint8_t> data);

}  // namespace vllm::kv_transfer

#endif  // VLLM_KV_TRANSFER_KV_WIRE_H_
