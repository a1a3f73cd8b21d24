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

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vllm;
  const std::string_view bytes = fuzz::AsText(data, size);
  fuzz::CheckValueRoundTrip<core::HelloMessage>(bytes, core::DecodeHello, core::EncodeHello,
                                                "HELLO");
  fuzz::CheckValueRoundTrip<core::ReadyMessage>(bytes, core::DecodeReady, core::EncodeReady,
                                                "READY");
  fuzz::CheckValueRoundTrip<core::EngineAddresses>(bytes, core::DecodeAddresses,
                                                   core::EncodeAddresses, "CONFIG");
  fuzz::CheckValueRoundTrip<std::string>(
      bytes, core::DecodeHandshakeMessage,
      [](const std::string& m) { return core::EncodeHandshakeMessage(m); }, "message");
  fuzz::CheckValueRoundTrip<int32_t>(bytes, core::DecodeHeartbeat, core::EncodeHeartbeat,
                                     "heartbeat");
  return 0;
}
