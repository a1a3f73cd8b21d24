// Fuzzes what the KV transfer reads from other processes and from disk: the header frames of
// kv_transfer/kv_wire.h (DecodeKvMessage: what a BlockServer decodes from anyone who reaches
// its port and a BlockReader from the server), CheckDataMessage over a DATA header and the
// bytes that follow, and file_store's DecodeKvFileHeader (the first 72 bytes of a stored
// file). Invariants:
//   - nothing crashes, throws or leaks, whatever the bytes;
//   - a refused frame is DataLoss, InvalidArgument or ResourceExhausted; a refused file header
//     is DataLoss, FailedPrecondition or InvalidArgument;
//   - round trip: a decoded message re-encodes to bytes that decode to an equal message, and
//     re-encoding that gives the same bytes; a decoded file header re-encodes to one that
//     decodes to an equal header;
//   - the input as [header length: 1 byte][DATA header][data]: CheckDataMessage against the
//     READ the header names is OK or DataLoss, and OK only when the data has exactly the size
//     and the checksums (2-byte blocks).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kv_transfer/file_store.h"
#include "kv_transfer/kv_wire.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace vllm;
using namespace vllm::kv_transfer;

void CheckData(const KvDataHeader& header, std::span<const uint8_t> data) {
  // A 2-byte block (1 layer, K and V of one 1-byte element) so that small inputs carry whole
  // blocks.
  const KvLayout layout{1, 1, 1, 1, 1, 1, 0};
  KvRead read{header.read_id, header.request_id, header.first_index, {}};
  for (int32_t i = 0; i < header.num_blocks; ++i) read.block_ids.push_back(i);
  const absl::Status s = CheckDataMessage(header, read, layout, data);
  FUZZ_CHECK(s.ok() || absl::IsDataLoss(s), "CheckDataMessage failed with " + s.ToString());
  if (s.ok()) {
    FUZZ_CHECK(data.size() == static_cast<size_t>(header.num_blocks) * 2,
               "CheckDataMessage accepted data of the wrong size");
    for (int32_t i = 0; i < header.num_blocks; ++i) {
      FUZZ_CHECK(KvChecksum(data.subspan(2 * i, 2)) == header.checksums[i],
                 "CheckDataMessage accepted a wrong checksum");
    }
  }
}

void Message(std::span<const uint8_t> bytes) {
  absl::StatusOr<KvMessage> first = DecodeKvMessage(bytes);
  if (!first.ok()) {
    FUZZ_CHECK(absl::IsDataLoss(first.status()) || absl::IsInvalidArgument(first.status()) ||
                   absl::IsResourceExhausted(first.status()),
               "kv_transfer frame failed with " + first.status().ToString());
    return;
  }
  const std::string encoded = EncodeKvMessage(*first);
  absl::StatusOr<KvMessage> second = DecodeKvMessage(encoded);
  FUZZ_CHECK(second.ok(),
             "kv_transfer frame: re-encoding does not decode: " + second.status().ToString());
  FUZZ_CHECK(*second == *first, "kv_transfer frame: round trip changed a field");
  FUZZ_CHECK(EncodeKvMessage(*second) == encoded, "kv_transfer frame: re-encoding is not stable");
}

// A DATA message as a reader sees it, framed as [header length: 1 byte][header][data].
void DataMessage(std::span<const uint8_t> bytes) {
  if (bytes.empty() || bytes.size() < 1 + size_t{bytes[0]}) return;
  absl::StatusOr<KvMessage> header = DecodeKvMessage(bytes.subspan(1, bytes[0]));
  if (header.ok() && std::holds_alternative<KvDataHeader>(*header)) {
    CheckData(std::get<KvDataHeader>(*header), bytes.subspan(1 + size_t{bytes[0]}));
  }
}

void FileHeader(std::span<const uint8_t> bytes) {
  absl::StatusOr<file_store::KvFileHeader> first = file_store::DecodeKvFileHeader(bytes);
  if (!first.ok()) {
    FUZZ_CHECK(absl::IsDataLoss(first.status()) || absl::IsFailedPrecondition(first.status()) ||
                   absl::IsInvalidArgument(first.status()),
               "KV file header failed with " + first.status().ToString());
    return;
  }
  FUZZ_CHECK(first->num_blocks >= 0 && first->num_tokens >= 0 &&
                 first->num_tokens <= int64_t{first->num_blocks} * first->layout.block_size,
             "KV file header: accepted counts out of range");
  FUZZ_CHECK(ValidateKvLayout(first->layout).ok(), "KV file header: accepted a bad layout");
  const std::string encoded = file_store::EncodeKvFileHeader(*first);
  absl::StatusOr<file_store::KvFileHeader> second = file_store::DecodeKvFileHeader(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(encoded.data()), encoded.size()));
  FUZZ_CHECK(second.ok() && *second == *first, "KV file header: round trip failed");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  Message(bytes);
  DataMessage(bytes);
  FileHeader(bytes);
  return 0;
}
