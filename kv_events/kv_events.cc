#include "kv_events/kv_events.h"

#include <pthread.h>

#include <charconv>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "base/msgpack_fields.h"
#include "base/msgpack_util.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"

namespace vllm::kv_events {
namespace {

using wire::Packer;

// ---------------------------------------------------------------------------------------------
// Encoding

void PackStr(Packer& pk, absl::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void PackOptionalStr(Packer& pk, const std::optional<std::string>& s) {
  if (s.has_value()) {
    PackStr(pk, *s);
  } else {
    pk.pack_nil();
  }
}

template <typename T>
void PackIntList(Packer& pk, const std::vector<T>& values) {
  pk.pack_array(static_cast<uint32_t>(values.size()));
  for (T v : values) pk.pack(v);
}

void PackEvent(Packer& pk, const KvBlockStored& e) {
  pk.pack_map(8 + (e.group_idx.has_value() ? 1 : 0) + (e.kv_cache_spec_kind.has_value() ? 1 : 0));
  PackStr(pk, "type");
  PackStr(pk, "BlockStored");
  PackStr(pk, "block_hashes");
  PackIntList(pk, e.block_hashes);
  PackStr(pk, "parent_block_hash");
  wire::PackOptional(pk, e.parent_block_hash);
  PackStr(pk, "token_ids");
  PackIntList(pk, e.token_ids);
  PackStr(pk, "block_size");
  pk.pack(e.block_size);
  PackStr(pk, "lora_id");
  wire::PackOptional(pk, e.lora_id);
  PackStr(pk, "medium");
  PackOptionalStr(pk, e.medium);
  PackStr(pk, "lora_name");
  PackOptionalStr(pk, e.lora_name);
  if (e.group_idx.has_value()) {
    PackStr(pk, "group_idx");
    pk.pack(*e.group_idx);
  }
  if (e.kv_cache_spec_kind.has_value()) {
    PackStr(pk, "kv_cache_spec_kind");
    PackStr(pk, *e.kv_cache_spec_kind);
  }
}

void PackEvent(Packer& pk, const KvBlockRemoved& e) {
  pk.pack_map(3 + (e.group_idx.has_value() ? 1 : 0));
  PackStr(pk, "type");
  PackStr(pk, "BlockRemoved");
  PackStr(pk, "block_hashes");
  PackIntList(pk, e.block_hashes);
  PackStr(pk, "medium");
  PackOptionalStr(pk, e.medium);
  if (e.group_idx.has_value()) {
    PackStr(pk, "group_idx");
    pk.pack(*e.group_idx);
  }
}

void PackEvent(Packer& pk, const KvAllBlocksCleared&) {
  pk.pack_map(1);
  PackStr(pk, "type");
  PackStr(pk, "AllBlocksCleared");
}

// ---------------------------------------------------------------------------------------------
// Decoding

constexpr size_t kMaxNameBytes = 1 << 16;

absl::string_view TypeOf(msgpack::type::object_type type) {
  const std::string_view name = wire::TypeName(type);
  return absl::string_view(name.data(), name.size());
}

absl::Status Bad(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("KVEventBatch.", field, ": ", problem));
}

template <typename T>
absl::Status ReadInt(const msgpack::object& o, absl::string_view field, T* out) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      return Bad(field, absl::StrFormat("integer %d out of range", o.via.u64));
    }
    *out = static_cast<T>(o.via.u64);
    return absl::OkStatus();
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    if constexpr (std::is_signed_v<T>) {
      if (o.via.i64 >= static_cast<int64_t>(std::numeric_limits<T>::min())) {
        *out = static_cast<T>(o.via.i64);
        return absl::OkStatus();
      }
    }
    return Bad(field, absl::StrFormat("integer %d out of range", o.via.i64));
  }
  return Bad(field, absl::StrCat("expected an integer, got ", TypeOf(o.type)));
}

template <typename T>
absl::Status ReadOptionalInt(const msgpack::object& o, absl::string_view field,
                             std::optional<T>* out) {
  if (o.type == msgpack::type::NIL) {
    out->reset();
    return absl::OkStatus();
  }
  T value{};
  VLLM_RETURN_IF_ERROR(ReadInt(o, field, &value));
  *out = value;
  return absl::OkStatus();
}

absl::Status ReadOptionalString(const msgpack::object& o, absl::string_view field,
                                std::optional<std::string>* out) {
  if (o.type == msgpack::type::NIL) {
    out->reset();
    return absl::OkStatus();
  }
  if (o.type != msgpack::type::STR) {
    return Bad(field, absl::StrCat("expected a string or nil, got ", TypeOf(o.type)));
  }
  if (o.via.str.size > kMaxNameBytes) return Bad(field, "string too long");
  out->emplace(o.via.str.ptr, o.via.str.size);
  return absl::OkStatus();
}

// An ExternalBlockHash: an integer (a negative one as its two's complement), or bytes reduced
// as vLLM's maybe_convert_block_hash does: int.from_bytes(b, "big") & (2**64 - 1), i.e. the
// big-endian value of the last 8 bytes.
absl::Status ReadHash(const msgpack::object& o, absl::string_view field, uint64_t* out) {
  switch (o.type) {
    case msgpack::type::POSITIVE_INTEGER:
      *out = o.via.u64;
      return absl::OkStatus();
    case msgpack::type::NEGATIVE_INTEGER:
      *out = static_cast<uint64_t>(o.via.i64);
      return absl::OkStatus();
    case msgpack::type::BIN: {
      const uint32_t size = o.via.bin.size;
      const uint32_t from = size > 8 ? size - 8 : 0;
      uint64_t v = 0;
      for (uint32_t i = from; i < size; ++i) {
        v = (v << 8) | static_cast<uint8_t>(o.via.bin.ptr[i]);
      }
      *out = v;
      return absl::OkStatus();
    }
    default:
      return Bad(field, absl::StrCat("expected an integer or bytes hash, got ", TypeOf(o.type)));
  }
}

absl::Status ReadOptionalHash(const msgpack::object& o, absl::string_view field,
                              std::optional<uint64_t>* out) {
  if (o.type == msgpack::type::NIL) {
    out->reset();
    return absl::OkStatus();
  }
  uint64_t v = 0;
  VLLM_RETURN_IF_ERROR(ReadHash(o, field, &v));
  *out = v;
  return absl::OkStatus();
}

absl::StatusOr<std::span<const msgpack::object>> ReadArray(const msgpack::object& o,
                                                           absl::string_view field) {
  if (o.type != msgpack::type::ARRAY) {
    return Bad(field, absl::StrCat("expected an array, got ", TypeOf(o.type)));
  }
  return std::span<const msgpack::object>(o.via.array.ptr, o.via.array.size);
}

absl::Status ReadHashes(const msgpack::object& o, absl::string_view field,
                        std::vector<uint64_t>* out) {
  VLLM_ASSIGN_OR_RETURN(std::span<const msgpack::object> list, ReadArray(o, field));
  out->resize(list.size());
  for (size_t i = 0; i < list.size(); ++i)
    VLLM_RETURN_IF_ERROR(ReadHash(list[i], field, &(*out)[i]));
  return absl::OkStatus();
}

absl::Status ReadTokens(const msgpack::object& o, absl::string_view field,
                        std::vector<int32_t>* out) {
  VLLM_ASSIGN_OR_RETURN(std::span<const msgpack::object> list, ReadArray(o, field));
  out->resize(list.size());
  for (size_t i = 0; i < list.size(); ++i)
    VLLM_RETURN_IF_ERROR(ReadInt(list[i], field, &(*out)[i]));
  return absl::OkStatus();
}

absl::string_view StrOf(const msgpack::object& o) { return {o.via.str.ptr, o.via.str.size}; }

// A field of an event: by name for a map event, by position for an array event.
class EventFields {
 public:
  EventFields(const msgpack::object& event, std::string tag)
      : event_(event), tag_(std::move(tag)) {}

  // The field named `name` (map) or at `index` (array; the tag is index 0); nullptr when
  // absent.
  const msgpack::object* Get(absl::string_view name, uint32_t index) const {
    if (event_.type == msgpack::type::ARRAY) {
      return index < event_.via.array.size ? &event_.via.array.ptr[index] : nullptr;
    }
    for (uint32_t i = 0; i < event_.via.map.size; ++i) {
      const msgpack::object_kv& kv = event_.via.map.ptr[i];
      if (kv.key.type == msgpack::type::STR && StrOf(kv.key) == name) return &kv.val;
    }
    return nullptr;
  }
  absl::StatusOr<const msgpack::object*> Required(absl::string_view name, uint32_t index) const {
    const msgpack::object* o = Get(name, index);
    if (o == nullptr) return Bad(Name(name), "missing");
    return o;
  }
  std::string Name(absl::string_view field) const { return absl::StrCat(tag_, ".", field); }

 private:
  const msgpack::object& event_;
  std::string tag_;
};

absl::StatusOr<KvBlockStored> ReadBlockStored(const EventFields& f) {
  KvBlockStored e;
  VLLM_ASSIGN_OR_RETURN(const msgpack::object* hashes, f.Required("block_hashes", 1));
  VLLM_RETURN_IF_ERROR(ReadHashes(*hashes, f.Name("block_hashes"), &e.block_hashes));
  if (const msgpack::object* o = f.Get("parent_block_hash", 2)) {
    VLLM_RETURN_IF_ERROR(ReadOptionalHash(*o, f.Name("parent_block_hash"), &e.parent_block_hash));
  }
  VLLM_ASSIGN_OR_RETURN(const msgpack::object* tokens, f.Required("token_ids", 3));
  VLLM_RETURN_IF_ERROR(ReadTokens(*tokens, f.Name("token_ids"), &e.token_ids));
  VLLM_ASSIGN_OR_RETURN(const msgpack::object* block_size, f.Required("block_size", 4));
  VLLM_RETURN_IF_ERROR(ReadInt(*block_size, f.Name("block_size"), &e.block_size));
  if (const msgpack::object* o = f.Get("lora_id", 5)) {
    VLLM_RETURN_IF_ERROR(ReadOptionalInt(*o, f.Name("lora_id"), &e.lora_id));
  }
  if (const msgpack::object* o = f.Get("medium", 6)) {
    VLLM_RETURN_IF_ERROR(ReadOptionalString(*o, f.Name("medium"), &e.medium));
  }
  if (const msgpack::object* o = f.Get("lora_name", 7)) {
    VLLM_RETURN_IF_ERROR(ReadOptionalString(*o, f.Name("lora_name"), &e.lora_name));
  }
  // Positions 8.. of the old array form (extra_keys, then metadata appended opportunistically)
  // are not a fixed layout; group_idx and the spec kind are read from map events only.
  if (const msgpack::object* o = f.Get("group_idx", UINT32_MAX)) {
    VLLM_RETURN_IF_ERROR(ReadOptionalInt(*o, f.Name("group_idx"), &e.group_idx));
  }
  if (const msgpack::object* o = f.Get("kv_cache_spec_kind", UINT32_MAX)) {
    VLLM_RETURN_IF_ERROR(
        ReadOptionalString(*o, f.Name("kv_cache_spec_kind"), &e.kv_cache_spec_kind));
  }
  return e;
}

absl::StatusOr<KvBlockRemoved> ReadBlockRemoved(const EventFields& f) {
  KvBlockRemoved e;
  VLLM_ASSIGN_OR_RETURN(const msgpack::object* hashes, f.Required("block_hashes", 1));
  VLLM_RETURN_IF_ERROR(ReadHashes(*hashes, f.Name("block_hashes"), &e.block_hashes));
  if (const msgpack::object* o = f.Get("medium", 2)) {
    VLLM_RETURN_IF_ERROR(ReadOptionalString(*o, f.Name("medium"), &e.medium));
  }
  if (const msgpack::object* o = f.Get("group_idx", UINT32_MAX)) {
    VLLM_RETURN_IF_ERROR(ReadOptionalInt(*o, f.Name("group_idx"), &e.group_idx));
  }
  return e;
}

absl::StatusOr<KvEvent> ReadEvent(const msgpack::object& o, size_t index) {
  const std::string field = absl::StrCat("events[", index, "]");
  const msgpack::object* tag = nullptr;
  if (o.type == msgpack::type::MAP) {
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      const msgpack::object_kv& kv = o.via.map.ptr[i];
      if (kv.key.type == msgpack::type::STR && StrOf(kv.key) == "type") tag = &kv.val;
    }
    if (tag == nullptr) return Bad(field, "event map without a \"type\" tag");
  } else if (o.type == msgpack::type::ARRAY) {
    if (o.via.array.size == 0) return Bad(field, "empty event array (no tag)");
    tag = &o.via.array.ptr[0];
  } else {
    return Bad(field, absl::StrCat("expected an event map or array, got ", TypeOf(o.type)));
  }
  if (tag->type != msgpack::type::STR) {
    return Bad(field, absl::StrCat("event tag must be a string, got ", TypeOf(tag->type)));
  }
  const absl::string_view name = StrOf(*tag);
  const EventFields fields(o, absl::StrCat(field, ".", name.substr(0, 64)));
  if (name == "BlockStored") return ReadBlockStored(fields);
  if (name == "BlockRemoved") return ReadBlockRemoved(fields);
  if (name == "AllBlocksCleared") return KvEvent(KvAllBlocksCleared{});
  return Bad(field, absl::StrCat("unknown event tag '", absl::CEscape(name.substr(0, 64)),
                                 "' (expected BlockStored, BlockRemoved or AllBlocksCleared)"));
}

absl::Status ReadTs(const msgpack::object& o, double* out) {
  const std::optional<double> ts = wire::AsNumber(o);
  if (!ts.has_value()) return Bad("ts", absl::StrCat("expected a number, got ", TypeOf(o.type)));
  *out = *ts;
  return absl::OkStatus();
}

bool Binds(absl::string_view endpoint) {
  // vLLM's heuristic: bind what names a wildcard or a local transport, connect the rest.
  return absl::StrContains(endpoint, "*") || absl::StrContains(endpoint, "::") ||
         absl::StartsWith(endpoint, "ipc://") || absl::StartsWith(endpoint, "inproc://");
}

// Whether OffsetEndpointForRank can move `endpoint` to another rank (vLLM raises otherwise).
bool Offsettable(absl::string_view endpoint) {
  if (absl::StrContains(endpoint, "inproc")) return true;
  if (!absl::StrContains(endpoint, "tcp")) return false;
  const size_t colon = endpoint.rfind(':');
  if (colon == absl::string_view::npos) return true;  // vLLM leaves it as it is
  int port = 0;
  const absl::string_view digits = endpoint.substr(colon + 1);
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  return ec == std::errc() && ptr == digits.data() + digits.size();
}

constexpr absl::Duration kReplayPoll = absl::Milliseconds(20);
constexpr int64_t kReplayMaxFrameBytes = 64;

}  // namespace

// ---------------------------------------------------------------------------------------------

std::string EncodeKvEventBatch(const KvEventBatch& batch) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(3);
  wire::PackDouble(pk, batch.ts);
  pk.pack_array(static_cast<uint32_t>(batch.events.size()));
  for (const KvEvent& event : batch.events) {
    std::visit([&pk](const auto& e) { PackEvent(pk, e); }, event);
  }
  wire::PackOptional(pk, batch.data_parallel_rank);
  return std::string(buf.data(), buf.size());
}

absl::StatusOr<KvEventBatch> DecodeKvEventBatch(std::span<const uint8_t> payload) {
  if (payload.size() > kMaxKvEventBatchBytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "KVEventBatch: %d bytes exceeds the limit of %d", payload.size(), kMaxKvEventBatchBytes));
  }
  wire::UnpackLimits limits;
  limits.max_array = size_t{1} << 22;
  limits.max_map = 256;
  limits.max_str = kMaxNameBytes;
  limits.max_bin = kMaxNameBytes;
  limits.max_depth = 10;
  VLLM_ASSIGN_OR_RETURN(
      msgpack::object_handle handle,
      wire::UnpackBounded(absl::MakeConstSpan(payload.data(), payload.size()), limits));
  const msgpack::object& root = handle.get();
  // The batch: [ts, events, data_parallel_rank] (vLLM); a map with those keys is read too.
  const msgpack::object* ts = nullptr;
  const msgpack::object* events = nullptr;
  const msgpack::object* rank = nullptr;
  if (root.type == msgpack::type::ARRAY) {
    if (root.via.array.size < 2) {
      return Bad("", absl::StrFormat("expected [ts, events, data_parallel_rank], got %d elements",
                                     root.via.array.size));
    }
    ts = &root.via.array.ptr[0];
    events = &root.via.array.ptr[1];
    if (root.via.array.size > 2) rank = &root.via.array.ptr[2];
  } else if (root.type == msgpack::type::MAP) {
    for (uint32_t i = 0; i < root.via.map.size; ++i) {
      const msgpack::object_kv& kv = root.via.map.ptr[i];
      if (kv.key.type != msgpack::type::STR) continue;
      const absl::string_view key = StrOf(kv.key);
      if (key == "ts") ts = &kv.val;
      if (key == "events") events = &kv.val;
      if (key == "data_parallel_rank") rank = &kv.val;
    }
    if (ts == nullptr) return Bad("ts", "missing");
    if (events == nullptr) return Bad("events", "missing");
  } else {
    return Bad("", absl::StrCat("expected an array, got ", TypeOf(root.type)));
  }
  KvEventBatch batch;
  VLLM_RETURN_IF_ERROR(ReadTs(*ts, &batch.ts));
  VLLM_ASSIGN_OR_RETURN(std::span<const msgpack::object> list, ReadArray(*events, "events"));
  batch.events.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    VLLM_ASSIGN_OR_RETURN(KvEvent event, ReadEvent(list[i], i));
    batch.events.push_back(std::move(event));
  }
  if (rank != nullptr) {
    VLLM_RETURN_IF_ERROR(ReadOptionalInt(*rank, "data_parallel_rank", &batch.data_parallel_rank));
  }
  return batch;
}

std::string OffsetEndpointForRank(std::string_view endpoint_in, int rank) {
  const absl::string_view endpoint(endpoint_in.data(), endpoint_in.size());
  if (endpoint.empty() || rank == 0) return std::string(endpoint);
  if (absl::StrContains(endpoint, "inproc")) return absl::StrCat(endpoint, "_dp", rank);
  if (!absl::StrContains(endpoint, "tcp")) return std::string(endpoint);
  const size_t colon = endpoint.rfind(':');
  if (colon == absl::string_view::npos) return std::string(endpoint);
  int64_t port = 0;
  const absl::string_view digits = endpoint.substr(colon + 1);
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (ec != std::errc() || ptr != digits.data() + digits.size()) return std::string(endpoint);
  return absl::StrCat(endpoint.substr(0, colon), ":", port + rank);
}

// ---------------------------------------------------------------------------------------------
// Publisher

class KvEventPublisher::Impl {
 public:
  Impl(const KvEventPublisherOptions& config, int dp_rank) : config_(config), dp_rank_(dp_rank) {}

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  absl::Status Open(zmq::context_t& context) {
    if (!config_.enable || config_.publisher == "null") return absl::OkStatus();
    for (const std::string* e :
         {&config_.endpoint,
          config_.replay_endpoint.has_value() ? &*config_.replay_endpoint : nullptr}) {
      if (e != nullptr && dp_rank_ > 0 && !Offsettable(*e)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--kv-events-config: endpoint '", *e, "' cannot be offset for data-parallel rank ",
            dp_rank_, " (use tcp://host:port or inproc://name)"));
      }
    }
    const std::string endpoint = OffsetEndpointForRank(config_.endpoint, dp_rank_);
    pub_.emplace(context, zmq::socket_type::pub);
    pub_->set(zmq::sockopt::linger, 0);
    pub_->set(zmq::sockopt::sndhwm, static_cast<int>(config_.hwm));
    // A PUB receives only subscriptions; bound them all the same.
    pub_->set(zmq::sockopt::maxmsgsize, int64_t{4096});
    VLLM_ASSIGN_OR_RETURN(endpoint_, Attach(*pub_, endpoint, "endpoint"));
    if (config_.replay_endpoint.has_value()) {
      const std::string replay = OffsetEndpointForRank(*config_.replay_endpoint, dp_rank_);
      replay_.emplace(context, zmq::socket_type::router);
      replay_->set(zmq::sockopt::linger, 0);
      replay_->set(zmq::sockopt::maxmsgsize, kReplayMaxFrameBytes);
      // A client that stops reading must not hold our memory: drop its replies at the HWM.
      replay_->set(zmq::sockopt::sndhwm, static_cast<int>(std::max<int64_t>(config_.hwm, 1)));
      try {
        replay_->bind(replay);
      } catch (const zmq::error_t& e) {
        return absl::UnavailableError(absl::StrCat(
            "--kv-events-config: cannot bind replay_endpoint '", replay, "': ", e.what()));
      }
      replay_endpoint_ = replay_->get(zmq::sockopt::last_endpoint);
    }
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "vllm-kv-events");  // batches → PUB; replay requests
      Loop();
    });
    return absl::OkStatus();
  }

  void Publish(KvEventBatch batch) {
    if (!pub_.has_value()) return;
    if (!batch.data_parallel_rank.has_value()) batch.data_parallel_rank = dp_rank_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (static_cast<int64_t>(queue_.size()) >= config_.max_queue_size) {
        if (dropped_++ % 1000 == 0) {
          spdlog::warn("KV events: queue full ({} batches), dropped {} batch(es) so far",
                       queue_.size(), dropped_);
        }
        return;
      }
      queue_.push_back(std::move(batch));
    }
    cv_.notify_one();
  }

  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  int64_t dropped() const {
    std::lock_guard<std::mutex> lock(mu_);
    return dropped_;
  }

 private:
  absl::StatusOr<std::string> Attach(zmq::socket_t& socket, const std::string& endpoint,
                                     absl::string_view key) {
    const bool bind = Binds(endpoint);
    try {
      if (bind) {
        socket.bind(endpoint);
        return socket.get(zmq::sockopt::last_endpoint);
      }
      socket.connect(endpoint);
      return endpoint;
    } catch (const zmq::error_t& e) {
      const std::string what =
          absl::StrCat("--kv-events-config: cannot ", bind ? "bind" : "connect", " ", key, " '",
                       endpoint, "': ", e.what());
      return e.num() == EADDRINUSE ? absl::UnavailableError(what)
                                   : absl::InvalidArgumentError(what);
    }
  }

  bool HasWork() const { return stop_ || !queue_.empty(); }  // under mu_

  void Loop() {
    std::deque<KvEventBatch> batches;
    for (;;) {
      {
        // std::mutex, not absl::Mutex: the TSan build sees pthread's, not Debian's absl's.
        std::unique_lock<std::mutex> lock(mu_);
        if (replay_.has_value()) {
          cv_.wait_for(lock, absl::ToChronoMilliseconds(kReplayPoll), [this] { return HasWork(); });
        } else {
          cv_.wait(lock, [this] { return HasWork(); });
        }
        if (stop_) return;
        batches.swap(queue_);
      }
      for (KvEventBatch& batch : batches) Send(batch);
      batches.clear();
      if (replay_.has_value()) ServeReplay();
    }
  }

  void Send(const KvEventBatch& batch) {
    std::string payload = EncodeKvEventBatch(batch);
    char seq[8];
    for (int i = 0; i < 8; ++i) seq[i] = static_cast<char>(next_seq_ >> (8 * (7 - i)));
    try {
      // A PUB never blocks: at the high-water mark ZMQ drops the message for that subscriber.
      pub_->send(zmq::buffer(config_.topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      pub_->send(zmq::buffer(seq, 8), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      pub_->send(zmq::buffer(payload), zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      spdlog::warn("KV events: send failed: {}", e.what());
    }
    if (replay_.has_value() && config_.buffer_steps > 0) {
      buffer_.emplace_back(next_seq_, std::move(payload));
      while (static_cast<int64_t>(buffer_.size()) > config_.buffer_steps) buffer_.pop_front();
    }
    ++next_seq_;
  }

  // Answers every waiting replay request (vLLM's _service_replay).
  void ServeReplay() {
    for (;;) {
      std::vector<zmq::message_t> frames;
      try {
        zmq::message_t m;
        if (!replay_->recv(m, zmq::recv_flags::dontwait)) return;
        frames.push_back(std::move(m));
        while (frames.back().more() && frames.size() < 8) {
          zmq::message_t part;
          if (!replay_->recv(part, zmq::recv_flags::dontwait)) break;
          frames.push_back(std::move(part));
        }
        // Drain what is left of an over-long request.
        while (frames.back().more()) {
          zmq::message_t part;
          if (!replay_->recv(part, zmq::recv_flags::dontwait)) break;
          if (!part.more()) break;
        }
      } catch (const zmq::error_t& e) {
        spdlog::warn("KV events: replay receive failed: {}", e.what());
        return;
      }
      if (frames.size() != 3 || frames[1].size() != 0 || frames[2].size() > 8) {
        spdlog::warn("KV events: ignored an invalid replay request ({} frames)", frames.size());
        continue;
      }
      uint64_t start = 0;
      const auto* bytes = static_cast<const uint8_t*>(frames[2].data());
      for (size_t i = 0; i < frames[2].size(); ++i) start = (start << 8) | bytes[i];
      const std::string identity = frames[0].to_string();
      try {
        for (const auto& [seq, payload] : buffer_) {
          if (seq < start) continue;
          char seq_bytes[8];
          for (int i = 0; i < 8; ++i) seq_bytes[i] = static_cast<char>(seq >> (8 * (7 - i)));
          SendReply(identity, absl::string_view(seq_bytes, 8), payload);
        }
        SendReply(identity, absl::string_view("\xff\xff\xff\xff\xff\xff\xff\xff", 8), "");
      } catch (const zmq::error_t& e) {
        spdlog::warn("KV events: replay send failed: {}", e.what());
      }
    }
  }

  // [identity, "", topic, seq, payload] (the ROUTER strips the identity, a REQ the delimiter).
  void SendReply(const std::string& identity, absl::string_view seq, absl::string_view payload) {
    const auto more = zmq::send_flags::sndmore | zmq::send_flags::dontwait;
    replay_->send(zmq::buffer(identity), more);
    replay_->send(zmq::message_t(), more);
    replay_->send(zmq::buffer(config_.topic), more);
    replay_->send(zmq::buffer(seq.data(), seq.size()), more);
    replay_->send(zmq::buffer(payload.data(), payload.size()), zmq::send_flags::dontwait);
  }

  const KvEventPublisherOptions config_;
  const int dp_rank_;
  std::optional<zmq::socket_t> pub_;     // publisher thread only, after Open
  std::optional<zmq::socket_t> replay_;  // publisher thread only, after Open
  std::string endpoint_;
  std::string replay_endpoint_;
  uint64_t next_seq_ = 0;                                // publisher thread only
  std::deque<std::pair<uint64_t, std::string>> buffer_;  // publisher thread only
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<KvEventBatch> queue_;  // under mu_
  int64_t dropped_ = 0;             // under mu_
  bool stop_ = false;               // under mu_
};

KvEventPublisher::KvEventPublisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KvEventPublisher::~KvEventPublisher() = default;

absl::StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Create(
    zmq::context_t& context, const KvEventPublisherOptions& config, int dp_rank) {
  auto impl = std::make_unique<Impl>(config, dp_rank);
  VLLM_RETURN_IF_ERROR(impl->Open(context));
  return std::unique_ptr<KvEventPublisher>(new KvEventPublisher(std::move(impl)));
}

void KvEventPublisher::Publish(const KvEventBatch& batch) { impl_->Publish(batch); }
void KvEventPublisher::Publish(KvEventBatch&& batch) { impl_->Publish(std::move(batch)); }
std::string KvEventPublisher::BoundEndpoint() const { return impl_->endpoint(); }
std::string KvEventPublisher::BoundReplayEndpoint() const { return impl_->replay_endpoint(); }
int64_t KvEventPublisher::num_dropped() const { return impl_->dropped(); }

}  // namespace vllm::kv_events
