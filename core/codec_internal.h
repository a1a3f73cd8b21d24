// Shared between the codec's files (codec.cc, codec_recover.cc); not part of core's API.
#ifndef VLLM_CORE_CODEC_INTERNAL_H_
#define VLLM_CORE_CODEC_INTERNAL_H_

#include <msgpack.hpp>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/codec.h"

namespace vllm::core {

// wire::UnpackBounded under `limits` (no maps, no bin: no message of ours has them).
absl::StatusOr<msgpack::object_handle> UnpackFrame(std::string_view bytes,
                                                   const DecodeLimits& limits);

}  // namespace vllm::core

#endif  // VLLM_CORE_CODEC_INTERNAL_H_
