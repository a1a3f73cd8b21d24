// Fuzzes the safetensors header validation (worker::ParseSafetensorsHeader, which
// SafetensorsFile::Open runs on the mapped file) with the input as the whole file image.
// Invariants, for every header it accepts (the guarantees worker/weights.h relies on):
//   - no crash, throw or leak, whatever the bytes;
//   - every tensor's [begin, begin + nbytes) lies within the data buffer (the bytes after the
//     header), nbytes == product(shape) * dtype size, and no two tensors overlap;
//   - the dtype's name is one the format defines and maps back to the same size.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include "worker/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vllm;
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  auto tensors = worker::ParseSafetensorsHeader(file, "fuzz.safetensors");
  if (!tensors.ok()) return 0;
  FUZZ_CHECK(size >= 8, "accepted a file shorter than its header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  FUZZ_CHECK(header_len <= size - 8, "accepted a header longer than the file");
  const uint64_t buffer = size - 8 - header_len;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, info] : *tensors) {
    FUZZ_CHECK(info.begin <= buffer && info.nbytes <= buffer - info.begin,
               "tensor '" + name + "' lies outside the data buffer");
    uint64_t count = 1;
    for (int64_t d : info.shape) {
      FUZZ_CHECK(d >= 0, "tensor '" + name + "' has a negative dimension");
      FUZZ_CHECK(!__builtin_mul_overflow(count, static_cast<uint64_t>(d), &count),
                 "tensor '" + name + "' has an element count that overflows");
    }
    const int64_t dtype_size = worker::SafetensorsDtypeSize(info.dtype);
    FUZZ_CHECK(dtype_size == 1 || dtype_size == 2 || dtype_size == 4 || dtype_size == 8,
               "tensor '" + name + "' has a dtype of odd size");
    FUZZ_CHECK(!worker::SafetensorsDtypeName(info.dtype).empty(), "dtype without a name");
    uint64_t nbytes = 0;
    FUZZ_CHECK(!__builtin_mul_overflow(count, static_cast<uint64_t>(dtype_size), &nbytes) &&
                   nbytes == info.nbytes,
               "tensor '" + name + "': nbytes != product(shape) * dtype size");
    ranges.emplace_back(info.begin, info.nbytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    FUZZ_CHECK(ranges[i - 1].first + ranges[i - 1].second <= ranges[i].first,
               "two tensors overlap in the data buffer");
  }
  return 0;
}
