#include "ipc/handle.h"

#include <algorithm>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/msgpack_util.h"
#include "base/status_macros.h"
#include "ipc/shm_layout.h"

namespace vllm::ipc {
namespace {

using wire::ConvertAs;
using wire::UnpackBounded;
using wire::UnpackLimits;
constexpr absl::string_view kTag = "vllm-mq";
constexpr size_t kMaxReaders = 4096;
constexpr size_t kMaxString = 512;
constexpr uint32_t kFields = 10;
}  // namespace

int Handle::LocalIndex(int32_t rank) const {
  auto it = std::find(local_reader_ranks.begin(), local_reader_ranks.end(), rank);
  return it == local_reader_ranks.end() ? -1 : static_cast<int>(it - local_reader_ranks.begin());
}

std::string Handle::Encode() const {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(kFields);
  pk.pack(std::string(kTag));
  pk.pack(kVersion);
  pk.pack(n_readers);
  pk.pack(local_reader_ranks);
  pk.pack(shm_name);
  pk.pack(max_chunks);
  pk.pack(max_chunk_bytes);
  pk.pack(local_address);
  pk.pack(remote_address);
  pk.pack(remote_curve);
  return std::string(buf.data(), buf.size());
}

absl::StatusOr<Handle> Handle::Decode(absl::string_view bytes) {
  UnpackLimits limits;
  limits.max_array = kMaxReaders;
  limits.max_map = 0;
  limits.max_str = kMaxString;
  limits.max_bin = 0;
  limits.max_depth = 2;
  VLLM_ASSIGN_OR_RETURN(
      msgpack::object_handle oh,
      UnpackBounded({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, limits));
  const msgpack::object& o = oh.get();
  if (o.type != msgpack::type::ARRAY || o.via.array.size < 2) {
    return absl::InvalidArgumentError("queue handle: expected an array");
  }
  const msgpack::object* f = o.via.array.ptr;
  VLLM_ASSIGN_OR_RETURN(std::string tag, ConvertAs<std::string>(f[0], "handle tag"));
  if (tag != kTag) return absl::InvalidArgumentError("queue handle: wrong tag '" + tag + "'");
  VLLM_ASSIGN_OR_RETURN(uint32_t version, ConvertAs<uint32_t>(f[1], "handle version"));
  if (version != kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("queue handle version ", version, " (this build reads ", kVersion, ")"));
  }
  if (o.via.array.size != kFields) {
    return absl::InvalidArgumentError(
        absl::StrCat("queue handle: expected an array of ", kFields, " fields"));
  }
  Handle h;
  VLLM_ASSIGN_OR_RETURN(h.n_readers, ConvertAs<uint32_t>(f[2], "n_readers"));
  VLLM_ASSIGN_OR_RETURN(h.local_reader_ranks,
                        ConvertAs<std::vector<int32_t>>(f[3], "local_reader_ranks"));
  VLLM_ASSIGN_OR_RETURN(h.shm_name, ConvertAs<std::string>(f[4], "shm_name"));
  VLLM_ASSIGN_OR_RETURN(h.max_chunks, ConvertAs<uint64_t>(f[5], "max_chunks"));
  VLLM_ASSIGN_OR_RETURN(h.max_chunk_bytes, ConvertAs<uint64_t>(f[6], "max_chunk_bytes"));
  VLLM_ASSIGN_OR_RETURN(h.local_address, ConvertAs<std::string>(f[7], "local_address"));
  VLLM_ASSIGN_OR_RETURN(h.remote_address, ConvertAs<std::string>(f[8], "remote_address"));
  VLLM_ASSIGN_OR_RETURN(h.remote_curve, ConvertAs<bool>(f[9], "remote_curve"));

  if (h.n_readers == 0 || h.n_readers > kMaxReaders) {
    return absl::InvalidArgumentError(absl::StrCat("queue handle: n_readers ", h.n_readers));
  }
  if (h.local_reader_ranks.size() > kMaxShmReaders) {
    return absl::InvalidArgumentError("queue handle: too many local readers");
  }
  std::set<int32_t> seen;
  for (int32_t r : h.local_reader_ranks) {
    if (r < 0 || static_cast<uint32_t>(r) >= h.n_readers || !seen.insert(r).second) {
      return absl::InvalidArgumentError(absl::StrCat("queue handle: bad local reader rank ", r));
    }
  }
  const bool has_local = !h.local_reader_ranks.empty();
  const bool has_remote = h.local_reader_ranks.size() < h.n_readers;
  if (has_local && (h.shm_name.empty() || h.local_address.empty())) {
    return absl::InvalidArgumentError("queue handle: local readers but no shm name or address");
  }
  if (has_remote && h.remote_address.empty()) {
    return absl::InvalidArgumentError("queue handle: remote readers but no remote address");
  }
  if (h.remote_curve && !has_remote) {
    return absl::InvalidArgumentError("queue handle: CURVE without remote readers");
  }
  return h;
}

std::string Handle::ToText() const { return absl::Base64Escape(Encode()); }

absl::StatusOr<Handle> Handle::FromText(absl::string_view text) {
  if (text.size() > 64 * 1024) return absl::InvalidArgumentError("queue handle text too long");
  std::string bytes;
  if (!absl::Base64Unescape(text, &bytes)) {
    return absl::InvalidArgumentError("queue handle is not valid base64");
  }
  return Decode(bytes);
}

}  // namespace vllm::ipc
