// Fuzzes what an API server process of `--api-server-count N` decodes from its launcher on
// descriptor 3, and the launcher from it (launcher/spec/api_server_spec.h): the ApiServerSpec
// (the whole serve configuration, a VllmConfig inside) and the control messages (handshake,
// ready, engine dead). Invariants:
//   - no crash, throw or leak, whatever the bytes; every failure is InvalidArgument;
//   - whatever decodes re-encodes (the spec's encoder never refuses a decoded spec) to bytes
//     that decode to an equal value, and re-encoding that gives the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "launcher/spec/api_server_spec.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vllm;
  const std::string_view bytes = fuzz::AsText(data, size);
  fuzz::CheckValueRoundTrip<launcher::ApiServerSpec>(
      bytes, launcher::DecodeApiServerSpec,
      [](const launcher::ApiServerSpec& s) {
        absl::StatusOr<std::string> encoded = launcher::EncodeApiServerSpec(s);
        FUZZ_CHECK(encoded.ok(), "a decoded spec does not encode: " + encoded.status().ToString());
        return *encoded;
      },
      "ApiServerSpec");
  fuzz::CheckValueRoundTrip<launcher::ApiServerMessage>(bytes, launcher::DecodeApiServerMessage,
                                                        launcher::EncodeApiServerMessage,
                                                        "ApiServerMessage");
  return 0;
}
