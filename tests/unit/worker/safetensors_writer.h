// Writes safetensors files for the worker tests: the 8-byte little-endian header length, the
// JSON header, the data buffer.
#ifndef VLLM_TESTS_UNIT_WORKER_SAFETENSORS_WRITER_H_
#define VLLM_TESTS_UNIT_WORKER_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace vllm::worker::testing {

// Header length prefix + header text + data; header_len may lie (corruption tests).
inline std::string Frame(const std::string& header, const std::string& data, uint64_t header_len) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header_len >> (8 * i)) & 0xff);
  return out + header + data;
}
inline std::string Frame(const std::string& header, const std::string& data = "") {
  return Frame(header, data, header.size());
}

struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// A well-formed file: tensors packed back to back in the given order, unpadded (so most
// tensor data is unaligned, as the format allows).
inline std::string BuildFile(const std::vector<RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const RawTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  header["__metadata__"] = {{"format", "pt"}};
  return Frame(header.dump(), data);
}

}  // namespace vllm::worker::testing

#endif  // VLLM_TESTS_UNIT_WORKER_SAFETENSORS_WRITER_H_
