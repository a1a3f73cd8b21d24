#include "kernels/comm/group_spec.h"

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "ipc/shm_segment.h"
#include "kernels/comm/gloo_communicator.h"
#include "kernels/comm/shm_communicator.h"
#include "kernels/comm/tcp_store.h"

namespace vllm::kernels::comm {
namespace {

constexpr absl::string_view kPrefix = "vllm-comm/1";
constexpr absl::string_view kShmNamePrefix = "vllm-comm-";
constexpr size_t kMaxShmName = 200;
constexpr size_t kMaxGlooPath = 1024;
constexpr absl::string_view kTcpPrefix = "tcp://";
constexpr size_t kMaxHostName = 253;

// "tcp://<host>:<port>" as CommGroupSpec::name documents.
absl::Status ValidateStoreAddress(absl::string_view name) {
  absl::string_view rest = name.substr(kTcpPrefix.size());
  const size_t colon = rest.rfind(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError("comm group spec: gloo store address lacks ':<port>'");
  }
  const absl::string_view host = rest.substr(0, colon);
  const absl::string_view port = rest.substr(colon + 1);
  int value = 0;
  if (port.empty() || port.size() > 5 || port[0] == '0' ||
      port.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(port, &value) || value < 1 || value > 65535) {
    return absl::InvalidArgumentError("comm group spec: gloo store port outside 1..65535");
  }
  if (host.empty() || host.size() > kMaxHostName) {
    return absl::InvalidArgumentError(
        absl::StrCat("comm group spec: gloo store host empty or longer than ", kMaxHostName));
  }
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']' ||
        host.substr(1, host.size() - 2).find_first_not_of("0123456789abcdefABCDEF:.") !=
            absl::string_view::npos) {
      return absl::InvalidArgumentError(
          "comm group spec: gloo store IPv6 host must be [hex digits, ':' and '.']");
    }
    return absl::OkStatus();
  }
  for (char c : host) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') {
      return absl::InvalidArgumentError(
          "comm group spec: gloo store host may hold only [A-Za-z0-9.-] (or be [IPv6])");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateName(CommGroupSpec::Backend backend, absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("comm group spec: empty name");
  if (backend == CommGroupSpec::Backend::kShm) {
    if (name.size() > kMaxShmName) {
      return absl::InvalidArgumentError(
          absl::StrCat("comm group spec: shm name longer than ", kMaxShmName));
    }
    for (char c : name) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
        return absl::InvalidArgumentError("comm group spec: shm name may hold only [A-Za-z0-9._-]");
      }
    }
    if (name == "." || name == "..") {
      return absl::InvalidArgumentError("comm group spec: bad shm name");
    }
    return absl::OkStatus();
  }
  if (absl::StartsWith(name, kTcpPrefix)) return ValidateStoreAddress(name);
  if (name.size() > kMaxGlooPath) {
    return absl::InvalidArgumentError(
        absl::StrCat("comm group spec: gloo directory longer than ", kMaxGlooPath));
  }
  if (name[0] != '/') {
    return absl::InvalidArgumentError(
        "comm group spec: gloo rendezvous must be an absolute directory or tcp://<host>:<port>");
  }
  for (char c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError("comm group spec: control character in gloo directory");
    }
  }
  return absl::OkStatus();
}

std::string UniqueSuffix() {
  static std::atomic<uint32_t> counter{0};
  std::random_device rd;
  return absl::StrFormat("%d-%u-%08x", getpid(), counter.fetch_add(1), rd());
}

}  // namespace

absl::string_view BackendName(CommGroupSpec::Backend backend) {
  return backend == CommGroupSpec::Backend::kShm ? "shm" : "gloo";
}

std::string CommGroupSpec::Encode() const {
  return absl::StrCat(kPrefix, ";", BackendName(backend), ";", world_size, ";", name);
}

absl::Status CommGroupSpec::Validate() const {
  if (world_size < 1 || world_size > kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat("comm group spec: world size ", world_size,
                                                   " outside [1, ", kMaxWorldSize, "]"));
  }
  return ValidateName(backend, name);
}

absl::StatusOr<CommGroupSpec> CommGroupSpec::Decode(absl::string_view text) {
  if (text.size() > kMaxEncodedBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("comm group spec: longer than ", kMaxEncodedBytes, " bytes"));
  }
  // Three ';'-separated fields, then the name (which may itself contain ';').
  absl::string_view fields[3];
  absl::string_view rest = text;
  for (absl::string_view& field : fields) {
    const size_t semi = rest.find(';');
    if (semi == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          "comm group spec: expected 'vllm-comm/1;<backend>;<world_size>;<name>'");
    }
    field = rest.substr(0, semi);
    rest.remove_prefix(semi + 1);
  }
  if (fields[0] != kPrefix) {
    return absl::InvalidArgumentError(absl::StrCat("comm group spec: unknown format '",
                                                   fields[0].substr(0, 32), "' (expected '",
                                                   kPrefix, "')"));
  }
  CommGroupSpec spec;
  if (fields[1] == "shm") {
    spec.backend = Backend::kShm;
  } else if (fields[1] == "gloo") {
    spec.backend = Backend::kGloo;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("comm group spec: unknown backend '", fields[1].substr(0, 32), "'"));
  }
  // SimpleAtoi accepts a leading '+' and whitespace; the canonical form is digits only.
  if (fields[2].empty() || fields[2].size() > 3 ||
      fields[2].find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(fields[2], &spec.world_size)) {
    return absl::InvalidArgumentError("comm group spec: world size is not a small number");
  }
  spec.name = std::string(rest);
  VLLM_RETURN_IF_ERROR(spec.Validate());
  return spec;
}

absl::StatusOr<std::unique_ptr<CommGroup>> CommGroup::Create(CommGroupSpec::Backend backend,
                                                             int32_t world_size,
                                                             const CommGroupOptions& options) {
  auto group = std::unique_ptr<CommGroup>(new CommGroup());
  group->spec_.backend = backend;
  group->spec_.world_size = world_size;
  if (world_size < 1 || world_size > CommGroupSpec::kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "comm group: world size ", world_size, " outside [1, ", CommGroupSpec::kMaxWorldSize, "]"));
  }
  if (backend == CommGroupSpec::Backend::kShm && !options.store_host.empty()) {
    return absl::InvalidArgumentError(
        "comm group: a shm group is node-local; store_host applies to gloo groups only");
  }
  if (backend == CommGroupSpec::Backend::kShm) {
    // Segments of creators that died before their ranks joined (and unlinked) are garbage.
    ipc::ShmSegment::RemoveStale(std::string(kShmNamePrefix));
    group->spec_.name = absl::StrCat(kShmNamePrefix, UniqueSuffix());
    VLLM_ASSIGN_OR_RETURN(group->segment_, CreateShmCommSegment(group->spec_.name, world_size,
                                                                options.shm_slot_bytes));
  } else if (!options.store_host.empty()) {
    VLLM_ASSIGN_OR_RETURN(group->store_, StoreServer::Start(options.store_host, options.curve));
    group->spec_.name = group->store_->address();
  } else {
    const char* tmp = getenv("TMPDIR");
    std::string dir = absl::StrCat(tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp",
                                   "/vllm-comm-gloo-", getpid(), "-XXXXXX");
    if (mkdtemp(dir.data()) == nullptr) {
      return absl::InternalError(
          absl::StrCat("comm group: mkdtemp(", dir, "): ", std::strerror(errno)));
    }
    group->spec_.name = dir;
  }
  VLLM_RETURN_IF_ERROR(group->spec_.Validate());
  return group;
}

CommGroup::~CommGroup() {
  if (spec_.backend == CommGroupSpec::Backend::kGloo && store_ == nullptr && !spec_.name.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(spec_.name, ec);
  }
  // segment_'s destructor unlinks the shm name if the ranks did not (not all of them joined);
  // store_'s stops its serving thread.
}

absl::StatusOr<std::unique_ptr<Communicator>> JoinGroup(const CommGroupSpec& spec, int32_t rank,
                                                        absl::Duration join_timeout,
                                                        const CommOptions& options) {
  VLLM_RETURN_IF_ERROR(spec.Validate());
  if (rank < 0 || rank >= spec.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("comm group: rank ", rank, " outside [0, ", spec.world_size, ")"));
  }
  if (spec.backend == CommGroupSpec::Backend::kShm) {
    VLLM_ASSIGN_OR_RETURN(
        auto comm, ShmCommunicator::Join(spec.name, spec.world_size, rank, join_timeout, options));
    return std::unique_ptr<Communicator>(std::move(comm));
  }
  VLLM_ASSIGN_OR_RETURN(
      auto comm, GlooCommunicator::Join(spec.name, spec.world_size, rank, join_timeout, options));
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace vllm::kernels::comm
