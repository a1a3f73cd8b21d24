#include "kv_transfer/kv_wire.h"

#include <algorithm>
#include <exception>
#include <new>
#include <type_traits>

#include "absl/strings/str_format.h"
#include "base/msgpack_fields.h"
#include "base/msgpack_util.h"
#include "base/status_macros.h"
#include "kv_transfer/codec.h"
#include "kv_transfer/kv_cache_view.h"
#include "xxhash.h"

namespace vllm::kv_transfer {
namespace {

using wire::FieldReader;
using wire::Packer;

enum class Kind : uint8_t {
  kHello = 1,
  kWelcome = 2,
  kRefuse = 3,
  kRead = 4,
  kData = 5,
  kError = 6,
  kDone = 7,
  kAck = 8,
};

// ---- Encoding --------------------------------------------------------------------------

void PackLayout(Packer& pk, const KvLayout& l) {
  pk.pack_array(7);
  pk.pack(l.num_layers);
  pk.pack(l.num_kv_heads);
  pk.pack(l.head_dim);
  pk.pack(l.block_size);
  pk.pack(l.dtype_bytes);
  pk.pack(l.tp_size);
  pk.pack(l.tp_rank);
}

Kind KindOf(const KvHello&) { return Kind::kHello; }
Kind KindOf(const KvWelcome&) { return Kind::kWelcome; }
Kind KindOf(const KvRefuse&) { return Kind::kRefuse; }
Kind KindOf(const KvRead&) { return Kind::kRead; }
Kind KindOf(const KvDataHeader&) { return Kind::kData; }
Kind KindOf(const KvError&) { return Kind::kError; }
Kind KindOf(const KvDone&) { return Kind::kDone; }
Kind KindOf(const KvAck&) { return Kind::kAck; }

void PackBody(Packer& pk, const KvHello& m) {
  pk.pack_array(2);
  pk.pack(m.engine_id);
  PackLayout(pk, m.layout);
}
void PackBody(Packer& pk, const KvWelcome& m) {
  pk.pack_array(3);
  pk.pack(m.engine_id);
  PackLayout(pk, m.layout);
  pk.pack(m.max_inflight_reads);
}
void PackBody(Packer& pk, const KvRefuse& m) {
  pk.pack_array(1);
  pk.pack(m.reason);
}
void PackBody(Packer& pk, const KvRead& m) {
  pk.pack_array(4);
  pk.pack(m.read_id);
  pk.pack(m.request_id);
  pk.pack(m.first_index);
  wire::PackList<int32_t>(pk, m.block_ids);
}
void PackBody(Packer& pk, const KvDataHeader& m) {
  pk.pack_array(5);
  pk.pack(m.read_id);
  pk.pack(m.request_id);
  pk.pack(m.first_index);
  pk.pack(m.num_blocks);
  wire::PackList<uint64_t>(pk, m.checksums);
}
void PackBody(Packer& pk, const KvError& m) {
  pk.pack_array(2);
  pk.pack(m.read_id);
  pk.pack(m.reason);
}
void PackBody(Packer& pk, const KvDone& m) {
  pk.pack_array(1);
  pk.pack(m.request_id);
}
void PackBody(Packer& pk, const KvAck& m) {
  pk.pack_array(1);
  pk.pack(m.request_id);
}

// ---- Decoding --------------------------------------------------------------------------

absl::Status ReadLayout(const msgpack::object& o, KvLayout* out) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "KvLayout", 7));
  VLLM_RETURN_IF_ERROR(r.Int("num_layers", &out->num_layers));
  VLLM_RETURN_IF_ERROR(r.Int("num_kv_heads", &out->num_kv_heads));
  VLLM_RETURN_IF_ERROR(r.Int("head_dim", &out->head_dim));
  VLLM_RETURN_IF_ERROR(r.Int("block_size", &out->block_size));
  VLLM_RETURN_IF_ERROR(r.Int("dtype_bytes", &out->dtype_bytes));
  VLLM_RETURN_IF_ERROR(r.Int("tp_size", &out->tp_size));
  VLLM_RETURN_IF_ERROR(r.Int("tp_rank", &out->tp_rank));
  return ValidateKvLayout(*out);
}

absl::Status ReadRequestId(FieldReader& r, std::string* out) {
  VLLM_RETURN_IF_ERROR(r.String("request_id", kMaxRequestIdBytes, out));
  if (out->empty()) return r.Error("request_id", "empty");
  return absl::OkStatus();
}

absl::Status ReadFirstIndex(FieldReader& r, int32_t* out) {
  VLLM_RETURN_IF_ERROR(r.Int("first_index", out));
  if (*out < 0) return r.Error("first_index", absl::StrFormat("%d is negative", *out));
  return absl::OkStatus();
}

absl::Status ReadBody(const msgpack::object& o, KvHello* m) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "HELLO", 2));
  VLLM_RETURN_IF_ERROR(r.String("engine_id", kMaxEngineIdBytes, &m->engine_id));
  return ReadLayout(r.Next(), &m->layout);
}
absl::Status ReadBody(const msgpack::object& o, KvWelcome* m) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "WELCOME", 3));
  VLLM_RETURN_IF_ERROR(r.String("engine_id", kMaxEngineIdBytes, &m->engine_id));
  VLLM_RETURN_IF_ERROR(ReadLayout(r.Next(), &m->layout));
  VLLM_RETURN_IF_ERROR(r.Int("max_inflight_reads", &m->max_inflight_reads));
  if (m->max_inflight_reads < 1 || m->max_inflight_reads > kMaxInflightReads) {
    return r.Error("max_inflight_reads", absl::StrFormat("%d is not in [1, %d]",
                                                         m->max_inflight_reads, kMaxInflightReads));
  }
  return absl::OkStatus();
}
absl::Status ReadBody(const msgpack::object& o, KvRefuse* m) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "REFUSE", 1));
  return r.String("reason", kMaxReasonBytes, &m->reason);
}
absl::Status ReadBody(const msgpack::object& o, KvRead* m) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "READ", 4));
  VLLM_RETURN_IF_ERROR(r.Int("read_id", &m->read_id));
  VLLM_RETURN_IF_ERROR(ReadRequestId(r, &m->request_id));
  VLLM_RETURN_IF_ERROR(ReadFirstIndex(r, &m->first_index));
  VLLM_RETURN_IF_ERROR(r.IntList("block_ids", &m->block_ids));
  if (m->block_ids.empty() || m->block_ids.size() > static_cast<size_t>(kMaxBlocksPerMessage)) {
    return r.Error("block_ids", absl::StrFormat("%d ids, not in [1, %d]", m->block_ids.size(),
                                                kMaxBlocksPerMessage));
  }
  for (int32_t id : m->block_ids) {
    if (id < 0) return r.Error("block_ids", absl::StrFormat("block id %d is negative", id));
  }
  return absl::OkStatus();
}
absl::Status ReadBody(const msgpack::object& o, KvDataHeader* m) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "DATA", 5));
  VLLM_RETURN_IF_ERROR(r.Int("read_id", &m->read_id));
  VLLM_RETURN_IF_ERROR(ReadRequestId(r, &m->request_id));
  VLLM_RETURN_IF_ERROR(ReadFirstIndex(r, &m->first_index));
  VLLM_RETURN_IF_ERROR(r.Int("num_blocks", &m->num_blocks));
  if (m->num_blocks < 1 || m->num_blocks > kMaxBlocksPerMessage) {
    return r.Error("num_blocks",
                   absl::StrFormat("%d is not in [1, %d]", m->num_blocks, kMaxBlocksPerMessage));
  }
  VLLM_RETURN_IF_ERROR(r.IntList("checksums", &m->checksums));
  if (m->checksums.size() != static_cast<size_t>(m->num_blocks)) {
    return r.Error("checksums", absl::StrFormat("%d checksums for %d blocks", m->checksums.size(),
                                                m->num_blocks));
  }
  return absl::OkStatus();
}
absl::Status ReadBody(const msgpack::object& o, KvError* m) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "ERROR", 2));
  VLLM_RETURN_IF_ERROR(r.Int("read_id", &m->read_id));
  return r.String("reason", kMaxReasonBytes, &m->reason);
}
absl::Status ReadBody(const msgpack::object& o, KvDone* m) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "DONE", 1));
  return ReadRequestId(r, &m->request_id);
}
absl::Status ReadBody(const msgpack::object& o, KvAck* m) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "ACK", 1));
  return ReadRequestId(r, &m->request_id);
}

template <typename T>
absl::StatusOr<KvMessage> DecodeBody(const msgpack::object& body) {
  T value;
  VLLM_RETURN_IF_ERROR(ReadBody(body, &value));
  return KvMessage(std::move(value));
}

absl::StatusOr<KvMessage> DecodeByKind(uint8_t kind, const msgpack::object& body) {
  switch (static_cast<Kind>(kind)) {
    case Kind::kHello:
      return DecodeBody<KvHello>(body);
    case Kind::kWelcome:
      return DecodeBody<KvWelcome>(body);
    case Kind::kRefuse:
      return DecodeBody<KvRefuse>(body);
    case Kind::kRead:
      return DecodeBody<KvRead>(body);
    case Kind::kData:
      return DecodeBody<KvDataHeader>(body);
    case Kind::kError:
      return DecodeBody<KvError>(body);
    case Kind::kDone:
      return DecodeBody<KvDone>(body);
    case Kind::kAck:
      return DecodeBody<KvAck>(body);
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("kv_transfer message: unknown kind %d", static_cast<int>(kind)));
}

// The envelope: version first (any array length), then exactly [version, kind, body].
absl::StatusOr<KvMessage> DecodeEnvelope(const msgpack::object& o) {
  if (o.type != msgpack::type::ARRAY || o.via.array.size == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "kv_transfer message: expected a non-empty array, got %s", wire::TypeName(o.type)));
  }
  VLLM_ASSIGN_OR_RETURN(FieldReader r,
                        FieldReader::Open(o, "kv_transfer message", o.via.array.size));
  uint32_t version = 0;
  VLLM_RETURN_IF_ERROR(r.Int("version", &version));
  if (version != kKvWireVersion) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "kv_transfer wire version %d (this build speaks %d)", version, kKvWireVersion));
  }
  if (o.via.array.size != 3) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "kv_transfer message: %d envelope elements (expected 3)", o.via.array.size));
  }
  uint8_t kind = 0;
  VLLM_RETURN_IF_ERROR(r.Int("kind", &kind));
  return DecodeByKind(kind, r.Next());
}

}  // namespace

const char* KvMessageName(const KvMessage& message) {
  static constexpr const char* kNames[] = {"HELLO", "WELCOME", "REFUSE", "READ",
                                           "DATA",  "ERROR",   "DONE",   "ACK"};
  return kNames[message.index()];
}

std::string EncodeKvMessage(const KvMessage& message) {
  msgpack::sbuffer buffer;
  Packer pk(&buffer);
  pk.pack_array(3);
  pk.pack(kKvWireVersion);
  std::visit(
      [&](const auto& m) {
        pk.pack(static_cast<uint8_t>(KindOf(m)));
        PackBody(pk, m);
      },
      message);
  return std::string(buffer.data(), buffer.size());
}

absl::StatusOr<KvMessage> DecodeKvMessage(std::span<const uint8_t> bytes) {
  if (bytes.size() > kMaxHeaderBytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("kv_transfer message: header of %d bytes exceeds the limit of %d",
                        bytes.size(), kMaxHeaderBytes));
  }
  if (bytes.empty()) return absl::DataLossError("kv_transfer message: empty header frame");
  wire::UnpackLimits limits;
  limits.max_array = kMaxBlocksPerMessage;
  limits.max_map = 0;
  limits.max_str = std::max(kMaxReasonBytes, kMaxRequestIdBytes);
  limits.max_bin = 0;
  limits.max_depth = 4;
  auto handle = wire::UnpackBounded(absl::Span<const uint8_t>(bytes.data(), bytes.size()), limits);
  if (!handle.ok()) {
    return absl::Status(handle.status().code(),
                        absl::StrFormat("kv_transfer message: %s", handle.status().message()));
  }
  // The handle references `bytes`; every field is copied out.
  try {
    return DecodeEnvelope(handle->get());
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("kv_transfer message: out of memory decoding");
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrFormat("kv_transfer message: malformed (%s)", e.what()));
  }
}

uint64_t KvChecksum(std::span<const uint8_t> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

int32_t BlocksPerDataMessage(const KvLayout& layout) {
  const int64_t block = std::max<int64_t>(layout.block_bytes(), 1);
  return static_cast<int32_t>(
      std::clamp<int64_t>(kMaxDataBytes / block, 1, int64_t{kMaxBlocksPerMessage}));
}

absl::Status CheckDataMessage(const KvDataHeader& header, const KvRead& read,
                              const KvLayout& layout, std::span<const uint8_t> data) {
  if (header.read_id != read.read_id || header.request_id != read.request_id ||
      header.first_index != read.first_index) {
    return absl::DataLossError(absl::StrFormat(
        "DATA (read %d, request %s, first block %d) does not answer READ (read %d, request %s, "
        "first block %d)",
        header.read_id, header.request_id, header.first_index, read.read_id, read.request_id,
        read.first_index));
  }
  if (header.num_blocks < 0 || static_cast<size_t>(header.num_blocks) != read.block_ids.size() ||
      header.checksums.size() != read.block_ids.size()) {
    return absl::DataLossError(
        absl::StrFormat("DATA carries %d blocks (%d checksums), READ asked %d", header.num_blocks,
                        header.checksums.size(), read.block_ids.size()));
  }
  const int64_t block = layout.block_bytes();
  const int64_t want = block * header.num_blocks;
  if (static_cast<int64_t>(data.size()) != want) {
    return absl::DataLossError(absl::StrFormat(
        "DATA frame of %d bytes, expected %d (%d blocks of %d bytes): truncated or padded",
        data.size(), want, header.num_blocks, block));
  }
  for (int32_t i = 0; i < header.num_blocks; ++i) {
    const uint64_t got =
        KvChecksum(data.subspan(static_cast<size_t>(i * block), static_cast<size_t>(block)));
    if (got != header.checksums[i]) {
      return absl::DataLossError(absl::StrFormat(
          "checksum mismatch in block %d (server block %d) of request %s: got %016x, DATA says "
          "%016x",
          header.first_index + i, read.block_ids[i], read.request_id, got, header.checksums[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace vllm::kv_transfer
