// Fuzzes the start-up handshake frames and the heartbeat (core/engine_handshake.h), which a
// head node decodes from any peer that reaches its data-parallel port. Every decoder runs on
// the same bytes. Invariants:
//   - no crash, throw or leak, whatever the bytes; every failure is InvalidArgument;
//   - whatever decodes round-trips: it re-encodes to bytes that decode to an equal value, and
//     re-encoding that gives the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/engine_handshake.h"
#include "tests/fuzz/fuzz_util.h"

namespace vllm::fuzz {
namespace {

template <typename T, typename Decode, typename Encode>
void RoundTrip(std::string_view bytes, Decode decode, Encode encode, const char* what) {
  absl::StatusOr<T> first = decode(bytes);
  if (!first.ok()) {
    FUZZ_CHECK(first.status().code() == absl::StatusCode::kInvalidArgument,
               std::string(what) + " failed with " + first.status().ToString());
    return;
  }
  const std::string encoded = encode(*first);
  absl::StatusOr<T> second = decode(encoded);
  FUZZ_CHECK(second.ok(),
             std::string(what) + ": re-encoding does not decode: " + second.status().ToString());
  FUZZ_CHECK(*second == *first, std::string(what) + ": value changed in a round trip");
  FUZZ_CHECK(encode(*second) == encoded, std::string(what) + ": re-encoding is not stable");
}

}  // namespace
}  // namespace vllm::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vllm;
  const std::string_view bytes = fuzz::AsText(data, size);
  fuzz::RoundTrip<core::HelloMessage>(bytes, core::DecodeHello, core::EncodeHello, "HELLO");
  fuzz::RoundTrip<core::ReadyMessage>(bytes, core::DecodeReady, core::EncodeReady, "READY");
  fuzz::RoundTrip<core::EngineAddresses>(bytes, core::DecodeAddresses, core::EncodeAddresses,
                                         "CONFIG");
  fuzz::RoundTrip<std::string>(
      bytes, core::DecodeHandshakeMessage,
      [](const std::string& m) { return core::EncodeHandshakeMessage(m); }, "message");
  fuzz::RoundTrip<int32_t>(bytes, core::DecodeHeartbeat, core::EncodeHeartbeat, "heartbeat");
  return 0;
}
