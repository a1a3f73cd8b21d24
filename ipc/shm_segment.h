// A named POSIX shared-memory segment (Boost.Interprocess shared_memory_object + mapped_region)
// with liveness slots: one-byte OFD (open file description) locks on the segment's file. A
// process holds the lock of its slot for as long as it has the segment open; the kernel drops
// it when the process dies (kill -9 included), so any peer can tell whether a slot's owner is
// alive with one fcntl(), with no pid reuse races and no heartbeat traffic.
#ifndef VLLM_IPC_SHM_SEGMENT_H_
#define VLLM_IPC_SHM_SEGMENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vllm::ipc {

class ShmSegment {
 public:
  // Creates a new segment of `bytes` zero-filled bytes named `name` (no leading '/'; it shows up
  // as /dev/shm/<name>, mode 0600: only this user's processes can open it). Fails with
  // AlreadyExists if the name is taken. The creator unlinks the name in its destructor unless
  // Unlink() ran before.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ShmSegment>> Create(const std::string& name,
                                                                          size_t bytes);
  // Opens an existing segment read-write and maps all of it. NotFound if there is none.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ShmSegment>> Open(const std::string& name);

  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  uint8_t* data() const { return static_cast<uint8_t*>(addr_); }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

  // Removes the name from /dev/shm; the mapping stays valid for everyone who has it. Idempotent.
  void Unlink();

  // Takes the liveness lock of `slot` for this process (held until destruction or death).
  // FailedPrecondition if another process holds it.
  [[nodiscard]] absl::Status LockSlot(uint32_t slot);
  // True if a process other than this one holds the lock of `slot`.
  bool SlotHeldByOther(uint32_t slot) const;

  // Removes segments named "<prefix><pid>-..." whose pid is not a live process: leftovers of a
  // writer killed before its readers attached (after that the name is unlinked anyway).
  static void RemoveStale(const std::string& prefix);

 private:
  struct Impl;  // the Boost.Interprocess objects
  explicit ShmSegment(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
  std::string name_;
  int fd_ = -1;
  void* addr_ = nullptr;
  size_t size_ = 0;
  bool owner_ = false;
  bool unlinked_ = false;
};

}  // namespace vllm::ipc

#endif  // VLLM_IPC_SHM_SEGMENT_H_
