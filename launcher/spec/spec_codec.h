// Internal to launcher/spec/: what its codecs share (the tag-and-version header, bounded
// unpacking, the report key).
#ifndef VLLM_LAUNCHER_SPEC_SPEC_CODEC_H_
#define VLLM_LAUNCHER_SPEC_SPEC_CODEC_H_

#include <msgpack.hpp>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "base/msgpack_fields.h"
#include "base/msgpack_util.h"

namespace vllm::launcher {

// `s` cut to kMaxSpecString bytes (what the decoders accept).
std::string CutSpecString(std::string_view s);

// UnpackBounded with `limits`, refusing more than `max_bytes`; InvalidArgument naming `what`.
absl::StatusOr<msgpack::object_handle> UnpackSpec(std::string_view bytes, std::string_view what,
                                                  size_t max_bytes,
                                                  const wire::UnpackLimits& limits);

// Opens the array [tag, version, <num_fields more>] and checks tag and version.
absl::StatusOr<wire::FieldReader> OpenSpec(const msgpack::object& o, std::string_view tag,
                                           uint8_t version, uint32_t num_fields);

// Reads a report key in hex: kReportKeyBytes bytes with a udp:// `stats` address, "" otherwise.
absl::Status ReadReportKey(wire::FieldReader& r, const std::string& stats, std::string* key);

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_SPEC_SPEC_CODEC_H_
