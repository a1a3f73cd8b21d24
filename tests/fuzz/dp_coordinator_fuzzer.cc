// Fuzzes the DP coordinator's codec (core/dp_coordinator.h): the load reports it decodes from
// every engine and the publications every API server decodes. Invariants:
//   - no crash, throw or leak, whatever the bytes; every failure is InvalidArgument;
//   - whatever decodes round-trips: it re-encodes to bytes that decode to an equal value, and
//     re-encoding that gives the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/dp_coordinator.h"
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
  fuzz::RoundTrip<core::EngineLoadReport>(bytes, core::DecodeLoadReport, core::EncodeLoadReport,
                                          "EngineLoadReport");
  fuzz::RoundTrip<core::LoadPublication>(bytes, core::DecodeLoadPublication,
                                         core::EncodeLoadPublication, "LoadPublication");
  return 0;
}
