// Fuzzes every decoder of core/codec.h (the engine-core protocol: frontend <-> engine core,
// scheduler <-> workers) on the same bytes. Invariants:
//   - no decoder crashes, throws or leaks, whatever the bytes;
//   - round trip: when Decode(bytes) succeeds, e1 = Encode(result) decodes again and
//     Encode(Decode(e1)) == e1 byte for byte (the encoder's output is a fixed point);
//   - limits only ever refuse: whatever decodes under tight DecodeLimits decodes under the
//     defaults to the same encoding;
//   - RecoverOutputRequestIds never crashes, and on a frame that decodes it returns exactly
//     the outputs' request ids.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/codec.h"
#include "tests/fuzz/fuzz_util.h"

namespace vllm::fuzz {
namespace {

using core::DecodeLimits;

// Tight limits: small enough that mutated seeds hit every limit check.
constexpr DecodeLimits kTight{
    .max_message_bytes = 512, .max_array_elements = 8, .max_string_bytes = 16, .max_depth = 7};

std::string EncodeAny(const std::vector<std::string>& ids) {
  return core::EncodeAbortRequests(ids);
}
template <typename T>
std::string EncodeAny(const T& value) {
  return core::Encode(value);
}

// Decodes `bytes` with `decode` and checks the round trip and the limits invariants.
template <typename Decode>
void RoundTrip(std::string_view bytes, Decode decode, const char* what) {
  auto first = decode(bytes, DecodeLimits{});
  auto tight = decode(bytes, kTight);
  if (tight.ok()) {
    FUZZ_CHECK(first.ok(), std::string(what) +
                               ": decodes under tight limits only: " + first.status().ToString());
    FUZZ_CHECK(EncodeAny(*tight) == EncodeAny(*first),
               std::string(what) + ": tight and default limits decode differently");
  }
  if (!first.ok()) return;
  const std::string encoded = EncodeAny(*first);
  auto second = decode(encoded, DecodeLimits{});
  FUZZ_CHECK(second.ok(),
             std::string(what) + ": re-encoding does not decode: " + second.status().ToString());
  FUZZ_CHECK(EncodeAny(*second) == encoded,
             std::string(what) + ": decode -> encode -> decode -> encode changed the bytes");
}

void CheckRecoveredIds(std::string_view bytes) {
  const std::vector<std::string> recovered = core::RecoverOutputRequestIds(bytes);
  absl::StatusOr<core::EngineCoreOutputs> outputs = core::DecodeEngineCoreOutputs(bytes);
  if (!outputs.ok()) return;
  std::vector<std::string> ids;
  for (const core::EngineCoreOutput& o : outputs->outputs) ids.push_back(o.request_id);
  FUZZ_CHECK(recovered == ids, "RecoverOutputRequestIds disagrees with DecodeEngineCoreOutputs");
}

}  // namespace
}  // namespace vllm::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vllm;
  const std::string_view bytes = fuzz::AsText(data, size);
  fuzz::RoundTrip(bytes, core::DecodeSamplingParams, "SamplingParams");
  fuzz::RoundTrip(bytes, core::DecodeEngineCoreRequest, "EngineCoreRequest");
  fuzz::RoundTrip(bytes, core::DecodeEngineCoreOutputs, "EngineCoreOutputs");
  fuzz::RoundTrip(bytes, core::DecodeSchedulerStats, "SchedulerStats");
  fuzz::RoundTrip(bytes, core::DecodeSchedulerOutput, "SchedulerOutput");
  fuzz::RoundTrip(bytes, core::DecodeModelRunnerOutput, "ModelRunnerOutput");
  fuzz::RoundTrip(bytes, core::DecodeStartDpWave, "StartDpWave");
  fuzz::RoundTrip(bytes, core::DecodeAbortRequests, "AbortRequests");
  fuzz::CheckRecoveredIds(bytes);
  return 0;
}
