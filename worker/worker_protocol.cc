#include "worker/worker_protocol.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string_view>

#include "absl/strings/str_format.h"
#include "base/msgpack_fields.h"
#include "base/msgpack_util.h"
#include "base/status_macros.h"
#include "core/msgpack_cursor.h"

namespace vllm::worker {
namespace {

using wire::FieldReader;
constexpr size_t kMaxMethodBytes = 64;
constexpr size_t kMaxMessageBytes = 2048;

// Unpacks one flat msgpack array (at most `max_array` elements, no maps or bins, strings up to
// `max_str` bytes) — the shape of every header and small payload here — naming `what` in errors.
absl::StatusOr<msgpack::object_handle> UnpackFlat(absl::Span<const uint8_t> bytes,
                                                  std::string_view what, size_t max_str,
                                                  size_t max_array = 8) {
  wire::UnpackLimits limits;
  limits.max_array = max_array;
  limits.max_map = 0;
  limits.max_str = max_str;
  limits.max_bin = 0;
  limits.max_depth = 2;
  auto handle = wire::UnpackBounded(bytes, limits);
  if (!handle.ok()) {
    return absl::Status(handle.status().code(),
                        absl::StrFormat("%s: %s", what, handle.status().message()));
  }
  return handle;
}

// Splits bytes into the unpacked header object and the payload.
absl::StatusOr<std::pair<msgpack::object_handle, absl::Span<const uint8_t>>> Split(
    absl::Span<const uint8_t> bytes, std::string_view what) {
  if (bytes.size() < 4) {
    return absl::DataLossError(
        absl::StrFormat("%s: %d bytes, shorter than the length prefix", what, bytes.size()));
  }
  const uint32_t n = uint32_t{bytes[0]} | uint32_t{bytes[1]} << 8 | uint32_t{bytes[2]} << 16 |
                     uint32_t{bytes[3]} << 24;
  if (n > kMaxHeaderBytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: header of %d bytes exceeds %d", what, n, kMaxHeaderBytes));
  }
  if (n > bytes.size() - 4) {
    return absl::DataLossError(
        absl::StrFormat("%s: header of %d bytes but only %d follow", what, n, bytes.size() - 4));
  }
  VLLM_ASSIGN_OR_RETURN(
      auto handle,
      UnpackFlat(bytes.subspan(4, n), absl::StrFormat("%s header", what), kMaxMessageBytes));
  return std::make_pair(std::move(handle), bytes.subspan(4 + n));
}

absl::Status CheckVersion(FieldReader& r, std::string_view what) {
  uint8_t version = 0;
  VLLM_RETURN_IF_ERROR(r.Int("version", &version));
  if (version != kWorkerProtocolVersion) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: protocol version %d, this build speaks %d", what, version, kWorkerProtocolVersion));
  }
  return absl::OkStatus();
}

absl::Status CheckRange(std::string_view what, std::string_view field, int64_t value, int64_t lo,
                        int64_t hi) {
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s is %d, outside %d..%d", what, field, value, lo, hi));
  }
  return absl::OkStatus();
}

// A msgpack stream appending to a std::string (whose capacity the caller keeps).
struct StringStream {
  std::string* out;
  void write(const char* data, size_t size) { out->append(data, size); }
};

// Frames what `pack` writes: [length: u32 little-endian][header], into `*out`.
template <typename Pack>
void FrameInto(std::string* out, Pack&& pack) {
  out->assign(4, '\0');
  StringStream stream{out};
  msgpack::packer<StringStream> pk(stream);
  pack(pk);
  const uint32_t n = static_cast<uint32_t>(out->size() - 4);
  for (int i = 0; i < 4; ++i) (*out)[i] = static_cast<char>((n >> (8 * i)) & 0xff);
}

// The fast path of DecodeCall / DecodeReply: the cursor over a well-formed header of exactly
// `fields` fields of this version, else nullopt (the full decoder then names the problem).
std::optional<core::MsgpackCursor> OpenHeader(absl::Span<const uint8_t> bytes, uint32_t fields,
                                              size_t* header_end) {
  if (bytes.size() < 4) return std::nullopt;
  const uint32_t n = uint32_t{bytes[0]} | uint32_t{bytes[1]} << 8 | uint32_t{bytes[2]} << 16 |
                     uint32_t{bytes[3]} << 24;
  if (n > kMaxHeaderBytes || n > bytes.size() - 4) return std::nullopt;
  core::MsgpackCursor c(bytes.data() + 4, n, 8, kMaxMessageBytes);
  uint8_t version = 0;
  if (!c.ArrayOf(fields) || !c.Int(&version) || version != kWorkerProtocolVersion) {
    return std::nullopt;
  }
  *header_end = 4 + n;
  return c;
}

bool DecodeCallFast(absl::Span<const uint8_t> bytes, Framed<CallHeader>* out) {
  size_t end = 0;
  std::optional<core::MsgpackCursor> c = OpenHeader(bytes, 4, &end);
  std::string_view method;
  if (!c || !c->Int(&out->header.call_id) || !c->Str(kMaxMethodBytes, &method) ||
      !c->Int(&out->header.reply_rank) || !c->at_end()) {
    return false;
  }
  out->header.method.assign(method.data(), method.size());
  out->payload = bytes.subspan(end);
  return true;
}

bool DecodeReplyFast(absl::Span<const uint8_t> bytes, Framed<ReplyHeader>* out) {
  size_t end = 0;
  std::optional<core::MsgpackCursor> c = OpenHeader(bytes, 5, &end);
  int32_t code = 0;
  std::string_view message;
  if (!c || !c->Int(&out->header.call_id) || !c->Int(&out->header.rank) || !c->Int(&code) ||
      code < 0 || code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated) ||
      !c->Str(kMaxMessageBytes, &message) || !c->at_end()) {
    return false;
  }
  out->header.code = static_cast<absl::StatusCode>(code);
  out->header.message.assign(message.data(), message.size());
  out->payload = bytes.subspan(end);
  return true;
}

}  // namespace

void EncodeCallPrefixTo(const CallHeader& header, std::string* out) {
  FrameInto(out, [&](auto& pk) {
    pk.pack_array(4);
    pk.pack(kWorkerProtocolVersion);
    pk.pack(header.call_id);
    pk.pack_str(static_cast<uint32_t>(header.method.size()));
    pk.pack_str_body(header.method.data(), static_cast<uint32_t>(header.method.size()));
    pk.pack(header.reply_rank);
  });
}

void EncodeReplyPrefixTo(const ReplyHeader& header, std::string* out) {
  FrameInto(out, [&](auto& pk) {
    pk.pack_array(5);
    pk.pack(kWorkerProtocolVersion);
    pk.pack(header.call_id);
    pk.pack(header.rank);
    pk.pack(static_cast<int32_t>(header.code));
    // Keep replies decodable: an over-long error message is cut.
    const uint32_t size = static_cast<uint32_t>(std::min(header.message.size(), kMaxMessageBytes));
    pk.pack_str(size);
    pk.pack_str_body(header.message.data(), size);
  });
}

std::string EncodeCallPrefix(const CallHeader& header) {
  std::string out;
  EncodeCallPrefixTo(header, &out);
  return out;
}

std::string EncodeReplyPrefix(const ReplyHeader& header) {
  std::string out;
  EncodeReplyPrefixTo(header, &out);
  return out;
}

absl::StatusOr<Framed<CallHeader>> DecodeCall(absl::Span<const uint8_t> bytes) {
  if (Framed<CallHeader> fast; DecodeCallFast(bytes, &fast)) return fast;
  VLLM_ASSIGN_OR_RETURN(auto split, Split(bytes, "worker call"));
  try {
    VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(split.first.get(), "worker call", 4));
    VLLM_RETURN_IF_ERROR(CheckVersion(r, "worker call"));
    Framed<CallHeader> out;
    VLLM_RETURN_IF_ERROR(r.Int("call_id", &out.header.call_id));
    VLLM_RETURN_IF_ERROR(r.String("method", kMaxMethodBytes, &out.header.method));
    VLLM_RETURN_IF_ERROR(r.Int("reply_rank", &out.header.reply_rank));
    out.payload = split.second;
    return out;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("worker call: malformed (%s)", e.what()));
  }
}

absl::StatusOr<Framed<ReplyHeader>> DecodeReply(absl::Span<const uint8_t> bytes) {
  if (Framed<ReplyHeader> fast; DecodeReplyFast(bytes, &fast)) return fast;
  VLLM_ASSIGN_OR_RETURN(auto split, Split(bytes, "worker reply"));
  try {
    VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(split.first.get(), "worker reply", 5));
    VLLM_RETURN_IF_ERROR(CheckVersion(r, "worker reply"));
    Framed<ReplyHeader> out;
    int32_t code = 0;
    VLLM_RETURN_IF_ERROR(r.Int("call_id", &out.header.call_id));
    VLLM_RETURN_IF_ERROR(r.Int("rank", &out.header.rank));
    VLLM_RETURN_IF_ERROR(r.Int("code", &code));
    if (code < 0 || code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated)) {
      return absl::InvalidArgumentError(absl::StrFormat("worker reply: bad status code %d", code));
    }
    out.header.code = static_cast<absl::StatusCode>(code);
    VLLM_RETURN_IF_ERROR(r.String("message", kMaxMessageBytes, &out.header.message));
    out.payload = split.second;
    return out;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("worker reply: malformed (%s)", e.what()));
  }
}

std::string EncodeReady(const ReadyMessage& ready) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(7);
  pk.pack(kWorkerProtocolVersion);
  pk.pack(ready.rank);
  pk.pack(ready.pid);
  pk.pack(static_cast<int32_t>(ready.code));
  pk.pack(ready.message.size() > kMaxMessageBytes ? ready.message.substr(0, kMaxMessageBytes)
                                                  : ready.message);
  pk.pack(ready.response_handle);
  pk.pack(ready.stage_handle);
  return std::string(buffer.data(), buffer.size());
}

absl::StatusOr<ReadyMessage> DecodeReady(absl::Span<const uint8_t> bytes) {
  VLLM_ASSIGN_OR_RETURN(auto handle, UnpackFlat(bytes, "worker ready message", 64 << 10));
  try {
    VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(handle.get(), "worker ready", 7));
    VLLM_RETURN_IF_ERROR(CheckVersion(r, "worker ready"));
    ReadyMessage out;
    int32_t code = 0;
    VLLM_RETURN_IF_ERROR(r.Int("rank", &out.rank));
    VLLM_RETURN_IF_ERROR(r.Int("pid", &out.pid));
    VLLM_RETURN_IF_ERROR(r.Int("code", &code));
    if (code < 0 || code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated)) {
      return absl::InvalidArgumentError(absl::StrFormat("worker ready: bad status code %d", code));
    }
    out.code = static_cast<absl::StatusCode>(code);
    VLLM_RETURN_IF_ERROR(r.String("message", kMaxMessageBytes, &out.message));
    VLLM_RETURN_IF_ERROR(r.String("response_handle", 64 << 10, &out.response_handle));
    VLLM_RETURN_IF_ERROR(r.String("stage_handle", 64 << 10, &out.stage_handle));
    return out;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("worker ready: malformed (%s)", e.what()));
  }
}

std::string EncodeStageHandles(const std::vector<std::string>& handles) {
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, handles);
  return std::string(buffer.data(), buffer.size());
}

absl::StatusOr<std::vector<std::string>> DecodeStageHandles(absl::Span<const uint8_t> bytes) {
  constexpr uint32_t kMaxRanks = 4096;
  constexpr size_t kMaxHandleBytes = 64 << 10;
  VLLM_ASSIGN_OR_RETURN(auto handle,
                        UnpackFlat(bytes, "stage handles", kMaxHandleBytes, kMaxRanks));
  const msgpack::object& o = handle.get();
  if (o.type != msgpack::type::ARRAY || o.via.array.size > kMaxRanks) {
    return absl::InvalidArgumentError(
        absl::StrFormat("stage handles: expected an array of at most %d strings", kMaxRanks));
  }
  std::vector<std::string> out;
  out.reserve(o.via.array.size);
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    const msgpack::object& e = o.via.array.ptr[i];
    if (e.type != msgpack::type::STR || e.via.str.size > kMaxHandleBytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("stage handles: entry %d is not a string of at most 64 KiB", i));
    }
    out.emplace_back(e.via.str.ptr, e.via.str.size);
  }
  return out;
}

std::string EncodeKVCacheSpec(const core::KVCacheSpec& spec) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(5);
  pk.pack(spec.num_layers);
  pk.pack(spec.num_kv_heads);
  pk.pack(spec.head_dim);
  pk.pack(spec.dtype_bytes);
  pk.pack(spec.draft_bytes_per_token);
  return std::string(buffer.data(), buffer.size());
}

absl::StatusOr<core::KVCacheSpec> DecodeKVCacheSpec(absl::Span<const uint8_t> bytes) {
  constexpr std::string_view kWhat = "KV cache spec";
  VLLM_ASSIGN_OR_RETURN(auto handle, UnpackFlat(bytes, kWhat, 0));
  try {
    VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(handle.get(), kWhat, 5));
    core::KVCacheSpec spec;
    VLLM_RETURN_IF_ERROR(r.Int("num_layers", &spec.num_layers));
    VLLM_RETURN_IF_ERROR(r.Int("num_kv_heads", &spec.num_kv_heads));
    VLLM_RETURN_IF_ERROR(r.Int("head_dim", &spec.head_dim));
    VLLM_RETURN_IF_ERROR(r.Int("dtype_bytes", &spec.dtype_bytes));
    VLLM_RETURN_IF_ERROR(r.Int("draft_bytes_per_token", &spec.draft_bytes_per_token));
    constexpr int64_t kMax = int64_t{1} << 20;
    // 0: a pipeline stage without layers (the engine sizes the cache by the most loaded rank).
    VLLM_RETURN_IF_ERROR(CheckRange(kWhat, "num_layers", spec.num_layers, 0, kMax));
    VLLM_RETURN_IF_ERROR(CheckRange(kWhat, "num_kv_heads", spec.num_kv_heads, 1, kMax));
    VLLM_RETURN_IF_ERROR(CheckRange(kWhat, "head_dim", spec.head_dim, 1, kMax));
    VLLM_RETURN_IF_ERROR(CheckRange(kWhat, "dtype_bytes", spec.dtype_bytes, 1, 8));
    VLLM_RETURN_IF_ERROR(CheckRange(kWhat, "draft_bytes_per_token", spec.draft_bytes_per_token, 0,
                                    int64_t{1} << 40));
    return spec;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: malformed (%s)", kWhat, e.what()));
  }
}

std::string EncodeAvailableMemory(int64_t bytes) {
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, bytes);
  return std::string(buffer.data(), buffer.size());
}

absl::StatusOr<int64_t> DecodeAvailableMemory(absl::Span<const uint8_t> bytes) {
  constexpr std::string_view kWhat = "available memory";
  VLLM_ASSIGN_OR_RETURN(auto handle, UnpackFlat(bytes, kWhat, 0));
  const msgpack::object& o = handle.get();
  if (o.type != msgpack::type::POSITIVE_INTEGER && o.type != msgpack::type::NEGATIVE_INTEGER) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: expected an integer, got %s", kWhat, wire::TypeName(o.type)));
  }
  return wire::ConvertAs<int64_t>(o, "available memory");
}

std::string EncodeInitializeKVCacheArgs(const InitializeKVCacheArgs& args) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(2);
  pk.pack(args.num_blocks);
  pk.pack(args.block_size);
  return std::string(buffer.data(), buffer.size());
}

absl::StatusOr<InitializeKVCacheArgs> DecodeInitializeKVCacheArgs(absl::Span<const uint8_t> bytes) {
  constexpr std::string_view kWhat = "initialize_kv_cache arguments";
  VLLM_ASSIGN_OR_RETURN(auto handle, UnpackFlat(bytes, kWhat, 0));
  try {
    VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(handle.get(), kWhat, 2));
    InitializeKVCacheArgs args;
    VLLM_RETURN_IF_ERROR(r.Int("num_blocks", &args.num_blocks));
    VLLM_RETURN_IF_ERROR(r.Int("block_size", &args.block_size));
    VLLM_RETURN_IF_ERROR(CheckRange(kWhat, "num_blocks", args.num_blocks, 1, INT32_MAX));
    VLLM_RETURN_IF_ERROR(CheckRange(kWhat, "block_size", args.block_size, 1, INT32_MAX));
    return args;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: malformed (%s)", kWhat, e.what()));
  }
}

std::string EncodeSleepLevel(int32_t level) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(1);
  pk.pack(level);
  return std::string(buffer.data(), buffer.size());
}

absl::StatusOr<int32_t> DecodeSleepLevel(absl::Span<const uint8_t> bytes) {
  constexpr std::string_view kWhat = "sleep arguments";
  VLLM_ASSIGN_OR_RETURN(auto handle, UnpackFlat(bytes, kWhat, 0));
  try {
    VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(handle.get(), kWhat, 1));
    int32_t level = 0;
    VLLM_RETURN_IF_ERROR(r.Int("level", &level));
    VLLM_RETURN_IF_ERROR(CheckRange(kWhat, "level", level, 1, 2));
    return level;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: malformed (%s)", kWhat, e.what()));
  }
}

std::string EncodeWakeUpArgs(const WakeUpArgs& args) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(2);
  pk.pack(args.weights);
  pk.pack(args.kv_cache);
  return std::string(buffer.data(), buffer.size());
}

absl::StatusOr<WakeUpArgs> DecodeWakeUpArgs(absl::Span<const uint8_t> bytes) {
  constexpr std::string_view kWhat = "wake_up arguments";
  VLLM_ASSIGN_OR_RETURN(auto handle, UnpackFlat(bytes, kWhat, 0));
  try {
    VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(handle.get(), kWhat, 2));
    WakeUpArgs args;
    VLLM_RETURN_IF_ERROR(r.Bool("weights", &args.weights));
    VLLM_RETURN_IF_ERROR(r.Bool("kv_cache", &args.kv_cache));
    return args;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: malformed (%s)", kWhat, e.what()));
  }
}

absl::Status CheckEmptyPayload(absl::Span<const uint8_t> bytes, std::string_view what) {
  if (bytes.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: expected no payload, got %d bytes", what, bytes.size()));
}

}  // namespace vllm::worker
