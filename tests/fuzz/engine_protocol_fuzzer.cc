// Fuzzes every decoder of core/codec.h (the engine-core protocol: frontend <-> engine core,
// scheduler <-> workers) on the same bytes. Invariants:
//   - no decoder crashes, throws or leaks, whatever the bytes;
//   - round trip: when Decode(bytes) succeeds, e1 = Encode(result) decodes again and
//     Encode(Decode(e1)) == e1 byte for byte (the encoder's output is a fixed point);
//   - limits only ever refuse: whatever decodes under tight DecodeLimits decodes under the
//     defaults to the same encoding;
//   - RecoverOutputRequestIds never crashes, and on a frame that decodes it returns exactly
//     the outputs' request ids;
//   - the executor's per-step paths (codec_fast.cc) agree with the full codec: the Into
//     decoders give the same value or the same error (into one object per type reused across
//     inputs, as the executor reuses its own), under the default and the tight limits, and
//     EncodeTo writes Encode's bytes.
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

// DecodeXInto(bytes, reused) against DecodeX(bytes): the same value or the same error.
template <typename T, typename Full, typename Into>
void CheckPerStepPath(std::string_view bytes, const DecodeLimits& limits, Full full, Into into,
                      T* reused, const char* what) {
  absl::StatusOr<T> expected = full(bytes, limits);
  const absl::Status status = into(bytes, reused, limits);
  if (!expected.ok()) {
    FUZZ_CHECK(!status.ok(), std::string(what) +
                                 ": the per-step decoder accepts what the full "
                                 "one refuses: " +
                                 expected.status().ToString());
    FUZZ_CHECK(status == expected.status(),
               std::string(what) + ": the per-step decoder refuses differently: " +
                   status.ToString() + " vs " + expected.status().ToString());
    return;
  }
  FUZZ_CHECK(status.ok(), std::string(what) +
                              ": the per-step decoder refuses what the full one "
                              "accepts: " +
                              status.ToString());
  // Compared by their encodings: a logprob may be NaN, which no value equals.
  const std::string expected_bytes = core::Encode(*expected);
  FUZZ_CHECK(core::Encode(*reused) == expected_bytes,
             std::string(what) + ": the per-step decoder's value differs");
  std::string fast;
  core::EncodeTo(*expected, &fast);
  FUZZ_CHECK(fast == expected_bytes,
             std::string(what) + ": EncodeTo and Encode write different bytes");
}

void CheckPerStepPaths(std::string_view bytes) {
  static core::SchedulerOutput* const scheduler_output = new core::SchedulerOutput();
  static core::ModelRunnerOutput* const model_output = new core::ModelRunnerOutput();
  for (const DecodeLimits& limits : {DecodeLimits{}, kTight}) {
    CheckPerStepPath(bytes, limits, core::DecodeSchedulerOutput, core::DecodeSchedulerOutputInto,
                     scheduler_output, "SchedulerOutput");
    CheckPerStepPath(bytes, limits, core::DecodeModelRunnerOutput,
                     core::DecodeModelRunnerOutputInto, model_output, "ModelRunnerOutput");
  }
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
  fuzz::CheckPerStepPaths(bytes);
  return 0;
}
