// What can still be read from frames the decoders refused (core/codec.h: RecoverOutputRequestIds,
// RecoverRequestId): the request ids, so that the requests whose frames were lost can be failed
// instead of waiting forever.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/codec.h"
#include "core/codec_internal.h"

namespace vllm::core {

namespace {

// Unpacks a damaged frame under `limits` for best-effort reading; nullopt when even that fails.
std::optional<msgpack::object_handle> UnpackLeniently(std::string_view bytes,
                                                      const DecodeLimits& limits) {
  if (bytes.empty() || bytes.size() > limits.max_message_bytes) return std::nullopt;
  auto handle = UnpackFrame(bytes, limits);
  if (!handle.ok()) return std::nullopt;
  return std::move(*handle);
}

// The elements of `o` when it is an array of at least `min_size`; else nullptr.
const msgpack::object* ArrayOf(const msgpack::object& o, uint32_t min_size) {
  if (o.type != msgpack::type::ARRAY || o.via.array.size < min_size) return nullptr;
  return o.via.array.ptr;
}

// `o` as a request id (a string within the id limit), if it is one.
std::optional<std::string> RequestIdOf(const msgpack::object& o) {
  if (o.type != msgpack::type::STR || o.via.str.size > kMaxRequestIdBytes) return std::nullopt;
  return std::string(o.via.str.ptr, o.via.str.size);
}

// The body of an envelope [tag, version, body] when it is an array of at least `min_size`.
const msgpack::object* EnvelopeBody(const msgpack::object& root, uint32_t min_size) {
  const msgpack::object* envelope = ArrayOf(root, 3);
  return envelope != nullptr ? ArrayOf(envelope[2], min_size) : nullptr;
}

}  // namespace

std::vector<std::string> RecoverOutputRequestIds(std::string_view bytes,
                                                 const DecodeLimits& limits) {
  std::vector<std::string> ids;
  std::optional<msgpack::object_handle> handle = UnpackLeniently(bytes, limits);
  if (!handle.has_value()) return ids;
  // [tag, version, [engine_index, [[request_id, ...], ...], ...]]
  const msgpack::object* body = EnvelopeBody(handle->get(), 2);
  if (body == nullptr || body[1].type != msgpack::type::ARRAY) return ids;
  const msgpack::object_array& outputs = body[1].via.array;
  for (uint32_t i = 0; i < outputs.size; ++i) {
    const msgpack::object* output = ArrayOf(outputs.ptr[i], 1);
    if (output == nullptr) continue;
    if (std::optional<std::string> id = RequestIdOf(output[0])) ids.push_back(std::move(*id));
  }
  return ids;
}

std::optional<std::string> RecoverRequestId(std::string_view bytes, const DecodeLimits& limits) {
  std::optional<msgpack::object_handle> handle = UnpackLeniently(bytes, limits);
  if (!handle.has_value()) return std::nullopt;
  // [tag, version, [request_id, ...]]
  const msgpack::object* body = EnvelopeBody(handle->get(), 1);
  return body != nullptr ? RequestIdOf(body[0]) : std::nullopt;
}

}  // namespace vllm::core
