// Fuzzes the frames between a multi-node engine's head and its worker nodes
// (executor/node_protocol.h: DecodeNodeMessage, what the head decodes from anyone who reaches
// --master-port and a worker node decodes from the head). Invariants:
//   - the decoder never crashes, throws or leaks, whatever the bytes;
//   - a refused frame is InvalidArgument, or FailedPrecondition for another protocol version;
//   - round trip: a decoded message re-encodes to bytes that decode to an equal message (of
//     the same kind), and re-encoding that gives the same bytes, no longer than the input.
#include <cstddef>
#include <cstdint>
#include <string>

#include "executor/node_protocol.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vllm;
  absl::StatusOr<executor::NodeMessage> first =
      executor::DecodeNodeMessage(fuzz::AsText(data, size));
  if (!first.ok()) {
    FUZZ_CHECK(
        absl::IsInvalidArgument(first.status()) || absl::IsFailedPrecondition(first.status()),
        "node frame failed with " + first.status().ToString());
    return 0;
  }
  const std::string encoded = executor::EncodeNodeMessage(*first);
  // The encoder writes the shortest form of every value, so it never grows a frame that fit.
  FUZZ_CHECK(encoded.size() <= size, "node frame: re-encoding is longer than the input");
  absl::StatusOr<executor::NodeMessage> second = executor::DecodeNodeMessage(encoded);
  FUZZ_CHECK(second.ok(), "node frame: re-encoding does not decode: " + second.status().ToString());
  FUZZ_CHECK(executor::NodeMessageKind(*second) == executor::NodeMessageKind(*first),
             "node frame: round trip changed the kind");
  FUZZ_CHECK(*second == *first, "node frame: round trip changed a field");
  FUZZ_CHECK(executor::EncodeNodeMessage(*second) == encoded,
             "node frame: re-encoding is not stable");
  return 0;
}
