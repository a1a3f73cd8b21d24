// The scheduler's waiting queue (vLLM's vllm/v1/core/sched/request_queue.py).
//
// kFcfs: first come, first served; preempted requests go back to the front.
// kPriority: ordered by (priority, arrival_time, arrival order) — smallest first; preempted
// requests simply rejoin in that order.
//
// Holds non-owning pointers (the Scheduler owns requests). Not thread-safe.
#ifndef VLLM_CORE_REQUEST_QUEUE_H_
#define VLLM_CORE_REQUEST_QUEUE_H_

#include <deque>
#include <span>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "config/vllm_config.h"
#include "core/request.h"

namespace vllm::core {

// --scheduling-policy (defined with the rest of the configuration).
using config::SchedulingPolicy;

// True when `a` should be scheduled before `b` under the priority policy.
bool PriorityBefore(const Request& a, const Request& b);

class RequestQueue {
 public:
  explicit RequestQueue(SchedulingPolicy policy) : policy_(policy) {}

  bool empty() const { return size() == 0; }
  size_t size() const { return policy_ == SchedulingPolicy::kFcfs ? fifo_.size() : heap_.size(); }

  // Adds a new request (FCFS: at the back).
  void Add(Request* request);
  // Adds a preempted request (FCFS: at the front, so it resumes first).
  void Prepend(Request* request);
  // The request that should be scheduled next. Requires !empty().
  Request* Peek() const;
  // Removes Peek(). Requires !empty().
  Request* Pop();
  // Removes the given requests (those not queued are ignored). O(size).
  void Remove(const absl::flat_hash_set<const Request*>& requests);
  // All queued requests, in no particular order.
  std::vector<Request*> Snapshot() const;

 private:
  SchedulingPolicy policy_;
  std::deque<Request*> fifo_;
  // Min-heap under PriorityBefore.
  std::vector<Request*> heap_;
};

}  // namespace vllm::core

#endif  // VLLM_CORE_REQUEST_QUEUE_H_
