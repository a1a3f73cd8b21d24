// Fuzzes the engine config codec (config/config_codec.h: DecodeVllmConfig), which every
// engine-core and worker process runs on the bytes of its descriptor 3. Invariants:
//   - no crash, throw or leak, whatever the bytes; every failure is InvalidArgument;
//   - whatever decodes is a valid config (Validate() passes) and round-trips: it re-encodes
//     to bytes that decode to an equal config, and re-encoding that gives the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "config/config_codec.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vllm;
  absl::StatusOr<config::VllmConfig> c = config::DecodeVllmConfig(fuzz::AsText(data, size));
  if (!c.ok()) {
    FUZZ_CHECK(c.status().code() == absl::StatusCode::kInvalidArgument,
               "DecodeVllmConfig failed with " + c.status().ToString());
    return 0;
  }
  FUZZ_CHECK(c->Validate().ok(), "a decoded config does not validate");
  const std::string bytes = config::EncodeVllmConfig(*c);
  absl::StatusOr<config::VllmConfig> again = config::DecodeVllmConfig(bytes);
  FUZZ_CHECK(again.ok(), "re-encoded config does not decode: " + again.status().ToString());
  FUZZ_CHECK(*again == *c, "config changed in a round trip");
  FUZZ_CHECK(config::EncodeVllmConfig(*again) == bytes, "re-encoding is not stable");
  return 0;
}
