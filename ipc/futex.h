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

}  // namespace vllm::ipc

#endif  // VLLM_IPC_FUTEX_H_
