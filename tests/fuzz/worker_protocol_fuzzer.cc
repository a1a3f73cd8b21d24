// Fuzzes the executor <-> worker protocol (worker/worker_protocol.h: DecodeReady, DecodeCall,
// DecodeReply, and the typed payloads DecodeKVCacheSpec, DecodeAvailableMemory,
// DecodeInitializeKVCacheArgs, DecodeStageHandles, CheckEmptyPayload), the pipeline stages'
// frames (worker/intermediate_tensors.h: DecodeStageFrame, with small limits so that the
// fuzzer reaches whole frames) and the MessageQueue handle codec (ipc/handle.h:
// Handle::Decode and FromText, which workers read from argv and ready messages), all on the same
// bytes. Invariants:
//   - no decoder crashes, throws or leaks, whatever the bytes;
//   - round trip: a decoded message re-encodes to bytes that decode to an equal message, and
//     re-encoding that gives the same bytes; a call or reply keeps its payload byte for byte;
//   - a decoded Handle is consistent (LocalIndex finds every local reader at its slot).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ipc/handle.h"
#include "tests/fuzz/fuzz_util.h"
#include "worker/intermediate_tensors.h"
#include "worker/worker_protocol.h"

namespace vllm::fuzz {
namespace {

absl::Span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

bool SameReady(const worker::ReadyMessage& a, const worker::ReadyMessage& b) {
  return a.rank == b.rank && a.pid == b.pid && a.code == b.code && a.message == b.message &&
         a.response_handle == b.response_handle && a.stage_handle == b.stage_handle;
}

void CheckReady(absl::Span<const uint8_t> bytes) {
  absl::StatusOr<worker::ReadyMessage> first = worker::DecodeReady(bytes);
  if (!first.ok()) return;
  const std::string encoded = worker::EncodeReady(*first);
  absl::StatusOr<worker::ReadyMessage> second = worker::DecodeReady(Bytes(encoded));
  FUZZ_CHECK(second.ok(), "ready: re-encoding does not decode: " + second.status().ToString());
  FUZZ_CHECK(SameReady(*first, *second), "ready: round trip changed a field");
  FUZZ_CHECK(worker::EncodeReady(*second) == encoded, "ready: re-encoding changed the bytes");
}

// Encodes a decoded call or reply as prefix + payload, as the executor sends it.
std::string Reframe(const worker::Framed<worker::CallHeader>& m) {
  return worker::EncodeCallPrefix(m.header) +
         std::string(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
}
std::string Reframe(const worker::Framed<worker::ReplyHeader>& m) {
  return worker::EncodeReplyPrefix(m.header) +
         std::string(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
}

bool SameHeader(const worker::CallHeader& a, const worker::CallHeader& b) {
  return a.call_id == b.call_id && a.method == b.method && a.reply_rank == b.reply_rank;
}
bool SameHeader(const worker::ReplyHeader& a, const worker::ReplyHeader& b) {
  return a.call_id == b.call_id && a.rank == b.rank && a.code == b.code && a.message == b.message;
}

template <typename Decode>
void CheckFramed(absl::Span<const uint8_t> bytes, Decode decode, const char* what) {
  auto first = decode(bytes);
  if (!first.ok()) return;
  FUZZ_CHECK(first->payload.data() >= bytes.data() &&
                 first->payload.data() + first->payload.size() == bytes.data() + bytes.size(),
             std::string(what) + ": the payload is not the tail of the message");
  const std::string encoded = Reframe(*first);
  auto second = decode(Bytes(encoded));
  FUZZ_CHECK(second.ok(),
             std::string(what) + ": re-encoding does not decode: " + second.status().ToString());
  FUZZ_CHECK(SameHeader(first->header, second->header),
             std::string(what) + ": round trip changed the header");
  FUZZ_CHECK(second->payload == first->payload,
             std::string(what) + ": round trip changed the payload");
  FUZZ_CHECK(Reframe(*second) == encoded, std::string(what) + ": re-encoding changed the bytes");
}

// A typed payload: whatever decodes re-encodes to bytes that decode to the same value, and
// re-encoding that is stable; failures are InvalidArgument, DataLoss or ResourceExhausted.
template <typename T, typename Decode, typename Encode, typename Same>
void CheckPayload(absl::Span<const uint8_t> bytes, Decode decode, Encode encode, Same same,
                  const char* what) {
  absl::StatusOr<T> first = decode(bytes);
  if (!first.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(first.status()) || absl::IsDataLoss(first.status()) ||
                   absl::IsResourceExhausted(first.status()),
               std::string(what) + ": failed with " + first.status().ToString());
    return;
  }
  const std::string encoded = encode(*first);
  absl::StatusOr<T> second = decode(Bytes(encoded));
  FUZZ_CHECK(second.ok(),
             std::string(what) + ": re-encoding does not decode: " + second.status().ToString());
  FUZZ_CHECK(same(*first, *second), std::string(what) + ": round trip changed the value");
  FUZZ_CHECK(encode(*second) == encoded, std::string(what) + ": re-encoding changed the bytes");
}

void CheckPayloads(absl::Span<const uint8_t> bytes) {
  CheckPayload<core::KVCacheSpec>(
      bytes, worker::DecodeKVCacheSpec, worker::EncodeKVCacheSpec,
      [](const core::KVCacheSpec& a, const core::KVCacheSpec& b) {
        return a.num_layers == b.num_layers && a.num_kv_heads == b.num_kv_heads &&
               a.head_dim == b.head_dim && a.dtype_bytes == b.dtype_bytes;
      },
      "KVCacheSpec");
  CheckPayload<int64_t>(
      bytes, worker::DecodeAvailableMemory, worker::EncodeAvailableMemory,
      [](int64_t a, int64_t b) { return a == b; }, "available memory");
  CheckPayload<worker::InitializeKVCacheArgs>(
      bytes, worker::DecodeInitializeKVCacheArgs, worker::EncodeInitializeKVCacheArgs,
      [](const worker::InitializeKVCacheArgs& a, const worker::InitializeKVCacheArgs& b) {
        return a.num_blocks == b.num_blocks && a.block_size == b.block_size;
      },
      "initialize_kv_cache args");
  CheckPayload<std::vector<std::string>>(
      bytes, worker::DecodeStageHandles, worker::EncodeStageHandles,
      [](const std::vector<std::string>& a, const std::vector<std::string>& b) { return a == b; },
      "stage handles");
  const absl::Status empty = worker::CheckEmptyPayload(bytes, "payload");
  FUZZ_CHECK(empty.ok() == bytes.empty(), "CheckEmptyPayload disagrees with the size");
}

// A stage frame that decodes re-encodes to the same bytes (a tensors frame: header, residual,
// hidden; an error frame: its code and message), and its sizes agree with its header.
void CheckStageFrame(absl::Span<const uint8_t> bytes) {
  const worker::StageFrameLimits limits{/*hidden_size=*/4, /*max_num_tokens=*/8,
                                        /*num_layers=*/6};
  worker::IntermediateTensors t;
  absl::Status stage_error;
  absl::StatusOr<uint64_t> step = worker::DecodeStageFrame(bytes, limits, &t, &stage_error);
  if (!step.ok()) {
    FUZZ_CHECK(absl::IsDataLoss(step.status()),
               "stage frame: failed with " + step.status().ToString());
    return;
  }
  std::string encoded;
  if (!stage_error.ok()) {
    encoded = worker::EncodeStageError(*step, stage_error);
  } else {
    const size_t floats = static_cast<size_t>(t.num_tokens) * t.hidden_size;
    FUZZ_CHECK(t.residual.size() == floats && (t.hidden.empty() || t.hidden.size() == floats) &&
                   t.hidden.empty() == (t.next_layer == 0),
               "stage frame: sizes disagree with the header");
    encoded = worker::EncodeStageTensorsHeader(*step, t);
    encoded.append(reinterpret_cast<const char*>(t.residual.data()), t.residual.size() * 4);
    encoded.append(reinterpret_cast<const char*>(t.hidden.data()), t.hidden.size() * 4);
  }
  // Header padding bytes are not read, so compare what the decoder reads back.
  worker::IntermediateTensors again;
  absl::Status again_error;
  absl::StatusOr<uint64_t> second =
      worker::DecodeStageFrame(Bytes(encoded), limits, &again, &again_error);
  FUZZ_CHECK(second.ok() && *second == *step, "stage frame: re-encoding does not decode");
  // Floats compared as bytes (NaN != NaN).
  auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() &&
           (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  };
  FUZZ_CHECK(again_error == stage_error && again.next_layer == t.next_layer &&
                 again.num_tokens == t.num_tokens && same_bits(again.residual, t.residual) &&
                 same_bits(again.hidden, t.hidden),
             "stage frame: round trip changed the frame");
}

void CheckHandle(const absl::StatusOr<ipc::Handle>& first, const char* what) {
  if (!first.ok()) return;
  for (size_t i = 0; i < first->local_reader_ranks.size(); ++i) {
    FUZZ_CHECK(first->LocalIndex(first->local_reader_ranks[i]) == static_cast<int>(i),
               std::string(what) + ": LocalIndex disagrees with local_reader_ranks");
  }
  const std::string encoded = first->Encode();
  absl::StatusOr<ipc::Handle> second = ipc::Handle::Decode(encoded);
  FUZZ_CHECK(second.ok(),
             std::string(what) + ": re-encoding does not decode: " + second.status().ToString());
  FUZZ_CHECK(*second == *first, std::string(what) + ": round trip changed the handle");
  FUZZ_CHECK(second->Encode() == encoded, std::string(what) + ": re-encoding changed the bytes");
  absl::StatusOr<ipc::Handle> from_text = ipc::Handle::FromText(first->ToText());
  FUZZ_CHECK(from_text.ok() && *from_text == *first,
             std::string(what) + ": ToText -> FromText changed the handle");
}

}  // namespace
}  // namespace vllm::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vllm;
  const absl::Span<const uint8_t> bytes(data, size);
  fuzz::CheckReady(bytes);
  fuzz::CheckFramed(bytes, worker::DecodeCall, "call");
  fuzz::CheckFramed(bytes, worker::DecodeReply, "reply");
  fuzz::CheckPayloads(bytes);
  fuzz::CheckStageFrame(bytes);
  // Debian's Abseil has its own string_view type.
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz::CheckHandle(ipc::Handle::Decode(text), "handle");
  fuzz::CheckHandle(ipc::Handle::FromText(text), "handle text");
  return 0;
}
