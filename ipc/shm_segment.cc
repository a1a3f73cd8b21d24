#include "ipc/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace vllm::ipc {
namespace bip = boost::interprocess;

struct ShmSegment::Impl {
  bip::shared_memory_object shm;
  bip::mapped_region region;
};

ShmSegment::ShmSegment(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  fd_ = impl_->shm.get_mapping_handle().handle;
  addr_ = impl_->region.get_address();
  size_ = impl_->region.get_size();
  name_ = impl_->shm.get_name();
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(const std::string& name,
                                                               size_t bytes) {
  auto impl = std::make_unique<Impl>();
  try {
    // Owner only: until it is unlinked the name is in /dev/shm, and Boost's default (0644)
    // would let every local user map the queue's messages (Boost applies the mode with fchmod,
    // so the umask does not matter).
    impl->shm = bip::shared_memory_object(bip::create_only, name.c_str(), bip::read_write,
                                          bip::permissions(0600));
  } catch (const bip::interprocess_exception& e) {
    if (e.get_error_code() == bip::already_exists_error) {
      return absl::AlreadyExistsError(absl::StrCat("shared memory '", name, "' already exists"));
    }
    return absl::InternalError(absl::StrCat("shm_open('", name, "'): ", e.what()));
  }
  try {
    impl->shm.truncate(static_cast<bip::offset_t>(bytes));
    impl->region = bip::mapped_region(impl->shm, bip::read_write, 0, bytes);
  } catch (const bip::interprocess_exception& e) {
    bip::shared_memory_object::remove(name.c_str());
    return absl::ResourceExhaustedError(absl::StrCat("cannot size/map shared memory '", name,
                                                     "' to ", bytes, " bytes: ", e.what()));
  }
  auto seg = std::unique_ptr<ShmSegment>(new ShmSegment(std::move(impl)));
  seg->owner_ = true;
  return seg;
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(const std::string& name) {
  auto impl = std::make_unique<Impl>();
  try {
    impl->shm = bip::shared_memory_object(bip::open_only, name.c_str(), bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    return absl::NotFoundError(absl::StrCat("cannot open shared memory '", name,
                                            "' (the writer unlinks it once every reader has "
                                            "attached, or it died): ",
                                            e.what()));
  }
  try {
    bip::offset_t size = 0;
    if (!impl->shm.get_size(size) || size <= 0) {
      return absl::DataLossError(absl::StrCat("shared memory '", name, "' is empty"));
    }
    impl->region = bip::mapped_region(impl->shm, bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    return absl::InternalError(absl::StrCat("cannot map shared memory '", name, "': ", e.what()));
  }
  return std::unique_ptr<ShmSegment>(new ShmSegment(std::move(impl)));
}

ShmSegment::~ShmSegment() {
  if (owner_) Unlink();
  // impl_'s destructors unmap the region and close the descriptor (dropping our OFD locks).
}

void ShmSegment::Unlink() {
  if (unlinked_) return;
  unlinked_ = true;
  bip::shared_memory_object::remove(name_.c_str());
}

absl::Status ShmSegment::LockSlot(uint32_t slot) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = slot;
  fl.l_len = 1;
  if (fcntl(fd_, F_OFD_SETLK, &fl) != 0) {
    if (errno == EAGAIN || errno == EACCES) {
      return absl::FailedPreconditionError(absl::StrCat("slot ", slot, " of shared memory '", name_,
                                                        "' is taken by another process"));
    }
    return absl::InternalError(absl::StrCat("fcntl(F_OFD_SETLK): ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

bool ShmSegment::SlotHeldByOther(uint32_t slot) const {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = slot;
  fl.l_len = 1;
  // Locks held through our own open file description never conflict, so a conflict is another
  // process's. On an unexpected error report "held" rather than declaring a peer dead.
  if (fcntl(fd_, F_OFD_GETLK, &fl) != 0) return true;
  return fl.l_type != F_UNLCK;
}

void ShmSegment::RemoveStale(const std::string& prefix) {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  while (dirent* ent = readdir(dir)) {
    absl::string_view name(ent->d_name);
    if (name.substr(0, prefix.size()) != prefix) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(name.substr(prefix.size()), '-');
    int pid = 0;
    if (parts.empty() || !absl::SimpleAtoi(parts[0], &pid) || pid <= 0) continue;
    if (kill(pid, 0) != 0 && errno == ESRCH) {
      bip::shared_memory_object::remove(std::string(name).c_str());
    }
  }
  closedir(dir);
}

}  // namespace vllm::ipc
