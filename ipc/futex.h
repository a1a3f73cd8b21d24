// Thin wrappers over the Linux futex system call on 32-bit words in shared memory.
// The words may be shared between processes (no FUTEX_PRIVATE_FLAG).
#ifndef VLLM_IPC_FUTEX_H_
#define VLLM_IPC_FUTEX_H_

#include <atomic>
#include <cstdint>

namespace vllm::ipc {

// Blocks while *word == expected, for at most timeout_ns (< 0: no limit). Returns when woken,
// when the value differs on entry, on timeout, or on a signal; callers re-check their condition.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns);

// Wakes every waiter blocked on word.
void FutexWakeAll(std::atomic<uint32_t>* word);

// Asymmetric fences (membarrier(2), MEMBARRIER_CMD_GLOBAL_EXPEDITED). A side that stores and
// then loads on a hot path (a reader releasing a chunk, then checking whether the writer
// sleeps) may skip its CPU fence when the side that goes to sleep issues HeavyFence() instead:
// the kernel makes every running thread of every registered process execute a full barrier
// before HeavyFence() returns (a thread not running has passed one in its context switch).
//   RegisterForHeavyFences(): registers this process as one that HeavyFence() reaches; true
//                             on success (done once per process; the answer is cached).
//   HeavyFencesAvailable():   the kernel offers the command (cached).
//   HeavyFence():             issues it; false if the call failed (then the caller must treat
//                             the peers as unfenced).
bool RegisterForHeavyFences();
bool HeavyFencesAvailable();
bool HeavyFence();

}  // namespace vllm::ipc

#endif  // VLLM_IPC_FUTEX_H_
