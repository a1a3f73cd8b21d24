#include "kv_transfer/codec.h"

#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace vllm::kv_transfer {
namespace {

using wire::FieldReader;
using wire::Packer;

constexpr int32_t kMaxPort = 65535;
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

void PackBlockIds(Packer& pk, const std::vector<int32_t>& ids) { wire::PackList<int32_t>(pk, ids); }

void PackIds(Packer& pk, const std::vector<std::string>& ids) {
  wire::PackList<std::string>(pk, ids);
}

// A block-id list: at most kMaxRemoteBlockIds (ResourceExhausted, checked before anything is
// read), each id >= 0. `what` names the struct for the error.
absl::Status ReadBlockIds(const FieldReader& r, std::string_view what, std::string_view field,
                          const msgpack::object& o, std::vector<int32_t>* out) {
  VLLM_ASSIGN_OR_RETURN(std::span<const msgpack::object> list, r.List(field, o));
  if (list.size() > kMaxRemoteBlockIds) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s.%s: %d block ids exceed the limit of %d", what, field, list.size(),
                        kMaxRemoteBlockIds));
  }
  out->resize(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    VLLM_RETURN_IF_ERROR(r.ReadInt(list[i], field, &(*out)[i]));
    if ((*out)[i] < 0) {
      return r.Error(field, absl::StrFormat("block id %d is negative", (*out)[i]));
    }
  }
  return absl::OkStatus();
}

// InvalidArgument naming `field` unless lo <= value <= hi.
absl::Status CheckRange(const FieldReader& r, std::string_view field, int64_t value, int64_t lo,
                        int64_t hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return r.Error(field, absl::StrFormat("%d is not in [%d, %d]", value, lo, hi));
}

absl::Status CheckOptionalRange(const FieldReader& r, std::string_view field,
                                const std::optional<int32_t>& value, int64_t lo, int64_t hi) {
  return value.has_value() ? CheckRange(r, field, *value, lo, hi) : absl::OkStatus();
}

// A list of values read with Read() (one of the structs above).
template <typename T>
absl::Status ReadList(const FieldReader& r, std::string_view field, const msgpack::object& o,
                      std::vector<T>* out) {
  VLLM_ASSIGN_OR_RETURN(std::span<const msgpack::object> list, r.List(field, o));
  out->resize(list.size());
  for (size_t i = 0; i < list.size(); ++i) VLLM_RETURN_IF_ERROR(Read(list[i], &(*out)[i]));
  return absl::OkStatus();
}

}  // namespace

void Pack(Packer& pk, const KVTransferParams& p) {
  pk.pack_array(9);
  pk.pack(p.do_remote_decode);
  pk.pack(p.do_remote_prefill);
  wire::PackOptional(pk, p.remote_engine_id);
  wire::PackOptional(pk, p.remote_request_id);
  wire::PackOptional(pk, p.remote_host);
  wire::PackOptional(pk, p.remote_port);
  PackBlockIds(pk, p.remote_block_ids);
  wire::PackOptional(pk, p.tp_size);
  wire::PackOptional(pk, p.remote_num_tokens);
}

void Pack(Packer& pk, const LoadSpec& s) {
  pk.pack_array(10);
  pk.pack(s.req_id);
  PackBlockIds(pk, s.local_block_ids);
  pk.pack(s.num_tokens);
  PackBlockIds(pk, s.remote_block_ids);
  pk.pack(s.remote_engine_id);
  pk.pack(s.remote_request_id);
  pk.pack(s.remote_host);
  pk.pack(s.remote_port);
  pk.pack(s.remote_tp_size);
  pk.pack(s.key);
}

void Pack(Packer& pk, const SaveSpec& s) {
  pk.pack_array(5);
  pk.pack(s.req_id);
  PackBlockIds(pk, s.block_ids);
  pk.pack(s.num_tokens);
  pk.pack(s.key);
  PackBlockIds(pk, s.host_slots);
}

void Pack(Packer& pk, const SendSpec& s) {
  pk.pack_array(2);
  pk.pack(s.req_id);
  PackBlockIds(pk, s.block_ids);
}

void Pack(Packer& pk, const KVConnectorMetadata& m) {
  pk.pack_array(4);
  pk.pack_array(static_cast<uint32_t>(m.loads.size()));
  for (const LoadSpec& s : m.loads) Pack(pk, s);
  pk.pack_array(static_cast<uint32_t>(m.saves.size()));
  for (const SaveSpec& s : m.saves) Pack(pk, s);
  pk.pack_array(static_cast<uint32_t>(m.sends.size()));
  for (const SendSpec& s : m.sends) Pack(pk, s);
  PackIds(pk, m.sends_released);
}

void Pack(Packer& pk, const KVConnectorOutput& o) {
  pk.pack_array(3);
  PackIds(pk, o.finished_sending);
  PackIds(pk, o.finished_recving);
  PackIds(pk, o.failed_recving);
}

absl::Status Read(const msgpack::object& o, KVTransferParams* p) {
  constexpr std::string_view kWhat = "KVTransferParams";
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, kWhat, 9));
  VLLM_RETURN_IF_ERROR(r.Bool("do_remote_decode", &p->do_remote_decode));
  VLLM_RETURN_IF_ERROR(r.Bool("do_remote_prefill", &p->do_remote_prefill));
  VLLM_RETURN_IF_ERROR(
      r.OptionalString("remote_engine_id", kMaxEngineIdBytes, &p->remote_engine_id));
  VLLM_RETURN_IF_ERROR(
      r.OptionalString("remote_request_id", kMaxRequestIdBytes, &p->remote_request_id));
  VLLM_RETURN_IF_ERROR(r.OptionalString("remote_host", kMaxHostBytes, &p->remote_host));
  VLLM_RETURN_IF_ERROR(r.OptionalInt("remote_port", &p->remote_port));
  VLLM_RETURN_IF_ERROR(CheckOptionalRange(r, "remote_port", p->remote_port, 1, kMaxPort));
  VLLM_RETURN_IF_ERROR(ReadBlockIds(r, kWhat, "remote_block_ids", r.Next(), &p->remote_block_ids));
  VLLM_RETURN_IF_ERROR(r.OptionalInt("tp_size", &p->tp_size));
  VLLM_RETURN_IF_ERROR(CheckOptionalRange(r, "tp_size", p->tp_size, 1, kMaxTpSize));
  VLLM_RETURN_IF_ERROR(r.OptionalInt("remote_num_tokens", &p->remote_num_tokens));
  return CheckOptionalRange(r, "remote_num_tokens", p->remote_num_tokens, 0, kInt32Max);
}

absl::Status Read(const msgpack::object& o, LoadSpec* s) {
  constexpr std::string_view kWhat = "LoadSpec";
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, kWhat, 10));
  VLLM_RETURN_IF_ERROR(r.String("req_id", kMaxRequestIdBytes, &s->req_id));
  VLLM_RETURN_IF_ERROR(ReadBlockIds(r, kWhat, "local_block_ids", r.Next(), &s->local_block_ids));
  VLLM_RETURN_IF_ERROR(r.Int("num_tokens", &s->num_tokens));
  VLLM_RETURN_IF_ERROR(CheckRange(r, "num_tokens", s->num_tokens, 0, kInt32Max));
  VLLM_RETURN_IF_ERROR(ReadBlockIds(r, kWhat, "remote_block_ids", r.Next(), &s->remote_block_ids));
  VLLM_RETURN_IF_ERROR(r.String("remote_engine_id", kMaxEngineIdBytes, &s->remote_engine_id));
  VLLM_RETURN_IF_ERROR(r.String("remote_request_id", kMaxRequestIdBytes, &s->remote_request_id));
  VLLM_RETURN_IF_ERROR(r.String("remote_host", kMaxHostBytes, &s->remote_host));
  VLLM_RETURN_IF_ERROR(r.Int("remote_port", &s->remote_port));
  VLLM_RETURN_IF_ERROR(CheckRange(r, "remote_port", s->remote_port, 0, kMaxPort));
  VLLM_RETURN_IF_ERROR(r.Int("remote_tp_size", &s->remote_tp_size));
  VLLM_RETURN_IF_ERROR(CheckRange(r, "remote_tp_size", s->remote_tp_size, 0, kMaxTpSize));
  return r.String("key", kMaxKeyBytes, &s->key);
}

absl::Status Read(const msgpack::object& o, SaveSpec* s) {
  constexpr std::string_view kWhat = "SaveSpec";
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, kWhat, 5));
  VLLM_RETURN_IF_ERROR(r.String("req_id", kMaxRequestIdBytes, &s->req_id));
  VLLM_RETURN_IF_ERROR(ReadBlockIds(r, kWhat, "block_ids", r.Next(), &s->block_ids));
  VLLM_RETURN_IF_ERROR(r.Int("num_tokens", &s->num_tokens));
  VLLM_RETURN_IF_ERROR(CheckRange(r, "num_tokens", s->num_tokens, 0, kInt32Max));
  VLLM_RETURN_IF_ERROR(r.String("key", kMaxKeyBytes, &s->key));
  VLLM_RETURN_IF_ERROR(ReadBlockIds(r, kWhat, "host_slots", r.Next(), &s->host_slots));
  if (!s->host_slots.empty() && s->host_slots.size() != s->block_ids.size()) {
    return r.Error("host_slots", absl::StrFormat("%d slots for %d block ids", s->host_slots.size(),
                                                 s->block_ids.size()));
  }
  return absl::OkStatus();
}

absl::Status Read(const msgpack::object& o, SendSpec* s) {
  constexpr std::string_view kWhat = "SendSpec";
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, kWhat, 2));
  VLLM_RETURN_IF_ERROR(r.String("req_id", kMaxRequestIdBytes, &s->req_id));
  return ReadBlockIds(r, kWhat, "block_ids", r.Next(), &s->block_ids);
}

absl::Status Read(const msgpack::object& o, KVConnectorMetadata* m) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "KVConnectorMetadata", 4));
  VLLM_RETURN_IF_ERROR(ReadList(r, "loads", r.Next(), &m->loads));
  VLLM_RETURN_IF_ERROR(ReadList(r, "saves", r.Next(), &m->saves));
  VLLM_RETURN_IF_ERROR(ReadList(r, "sends", r.Next(), &m->sends));
  return r.StringList("sends_released", kMaxRequestIdBytes, &m->sends_released);
}

absl::Status Read(const msgpack::object& o, KVConnectorOutput* out) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "KVConnectorOutput", 3));
  VLLM_RETURN_IF_ERROR(
      r.StringList("finished_sending", kMaxRequestIdBytes, &out->finished_sending));
  VLLM_RETURN_IF_ERROR(
      r.StringList("finished_recving", kMaxRequestIdBytes, &out->finished_recving));
  return r.StringList("failed_recving", kMaxRequestIdBytes, &out->failed_recving);
}

}  // namespace vllm::kv_transfer
