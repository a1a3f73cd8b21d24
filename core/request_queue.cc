#include "core/request_queue.h"

#include <algorithm>

#include "base/status_macros.h"

namespace vllm::core {
namespace {

// std heap functions build a max-heap; invert the order to get the smallest on top.
bool HeapLess(const Request* a, const Request* b) { return PriorityBefore(*b, *a); }

}  // namespace

bool PriorityBefore(const Request& a, const Request& b) {
  if (a.priority != b.priority) return a.priority < b.priority;
  if (a.arrival_time != b.arrival_time) return a.arrival_time < b.arrival_time;
  return a.arrival_seq < b.arrival_seq;
}

void RequestQueue::Add(Request* request) {
  if (policy_ == SchedulingPolicy::kFcfs) {
    fifo_.push_back(request);
  } else {
    heap_.push_back(request);
    std::push_heap(heap_.begin(), heap_.end(), HeapLess);
  }
}

void RequestQueue::Prepend(Request* request) {
  if (policy_ == SchedulingPolicy::kFcfs) {
    fifo_.push_front(request);
  } else {
    Add(request);
  }
}

Request* RequestQueue::Peek() const {
  VLLM_CHECK(!empty()) << "Peek on an empty request queue";
  return policy_ == SchedulingPolicy::kFcfs ? fifo_.front() : heap_.front();
}

Request* RequestQueue::Pop() {
  VLLM_CHECK(!empty()) << "Pop on an empty request queue";
  Request* request;
  if (policy_ == SchedulingPolicy::kFcfs) {
    request = fifo_.front();
    fifo_.pop_front();
  } else {
    std::pop_heap(heap_.begin(), heap_.end(), HeapLess);
    request = heap_.back();
    heap_.pop_back();
  }
  return request;
}

void RequestQueue::Remove(const absl::flat_hash_set<const Request*>& requests) {
  auto doomed = [&](const Request* r) { return requests.contains(r); };
  if (policy_ == SchedulingPolicy::kFcfs) {
    fifo_.erase(std::remove_if(fifo_.begin(), fifo_.end(), doomed), fifo_.end());
  } else {
    heap_.erase(std::remove_if(heap_.begin(), heap_.end(), doomed), heap_.end());
    std::make_heap(heap_.begin(), heap_.end(), HeapLess);
  }
}

std::vector<Request*> RequestQueue::Snapshot() const {
  if (policy_ == SchedulingPolicy::kFcfs) return {fifo_.begin(), fifo_.end()};
  return heap_;
}

}  // namespace vllm::core
