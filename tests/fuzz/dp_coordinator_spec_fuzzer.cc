// Fuzzes what the DP coordinator process decodes from its launcher on descriptor 3 and the
// launcher from it (launcher/spec/coordinator_spec.h): the DpCoordinatorSpec and the
// DpCoordinatorAddresses. Invariants:
//   - no crash, throw or leak, whatever the bytes; every failure is InvalidArgument;
//   - whatever decodes re-encodes to bytes that decode to an equal value, and re-encoding
//     that gives the same bytes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "launcher/spec/coordinator_spec.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vllm;
  const std::string_view bytes = fuzz::AsText(data, size);
  fuzz::CheckValueRoundTrip<launcher::DpCoordinatorSpec>(bytes, launcher::DecodeDpCoordinatorSpec,
                                                         launcher::EncodeDpCoordinatorSpec,
                                                         "DpCoordinatorSpec");
  fuzz::CheckValueRoundTrip<launcher::DpCoordinatorAddresses>(
      bytes, launcher::DecodeDpCoordinatorAddresses, launcher::EncodeDpCoordinatorAddresses,
      "DpCoordinatorAddresses");
  return 0;
}
