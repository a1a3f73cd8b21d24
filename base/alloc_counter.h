// Counts heap allocations, for benchmarks and tests that assert a code path allocates nothing.
//
// Linking the `alloc_counter` library replaces the global operator new and delete (every form)
// of the binary with ones that count per thread and allocate with malloc (which ASan still
// checks). Never link it into a product binary.
#ifndef VLLM_BASE_ALLOC_COUNTER_H_
#define VLLM_BASE_ALLOC_COUNTER_H_

#include <cstdint>

namespace vllm::base {

// operator new calls (any form) made by the calling thread since it started.
int64_t AllocationsOnThisThread();

// The allocations of `fn()` on the calling thread.
template <typename Fn>
int64_t CountAllocations(Fn&& fn) {
  const int64_t before = AllocationsOnThisThread();
  fn();
  return AllocationsOnThisThread() - before;
}

}  // namespace vllm::base

#endif  // VLLM_BASE_ALLOC_COUNTER_H_
