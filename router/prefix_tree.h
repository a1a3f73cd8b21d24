// An approximate prefix tree (radix tree over bytes) of the prompt text the router sent to one
// worker: cache_aware routing asks it how long a prefix of a new prompt that worker has seen,
// as a stand-in for what is in that worker's prefix cache. "Approximate" because the router
// cannot see the worker's evictions; it bounds its own memory instead, evicting the least
// recently used leaves once the tree holds more than `max_size` bytes.
//
// Not thread-safe: one thread owns a tree (the router's I/O thread, or a test).
#ifndef VLLM_ROUTER_PREFIX_TREE_H_
#define VLLM_ROUTER_PREFIX_TREE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace vllm::router {

class PrefixTree {
 public:
  // `max_size`: the most bytes of edge labels kept (>= 1).
  explicit PrefixTree(size_t max_size);
  PrefixTree(const PrefixTree&) = delete;
  PrefixTree& operator=(const PrefixTree&) = delete;

  // Adds `text`, marks every node on its path as just used, then evicts least recently used
  // leaves until Size() <= max_size. A text longer than max_size is kept only up to what
  // eviction leaves (possibly nothing).
  void Insert(absl::string_view text);
  // The length of the longest prefix of `text` in the tree (0 when none). Marks the matched
  // path as used, so prefixes that keep matching survive eviction.
  size_t MatchLength(absl::string_view text);
  // Bytes of edge labels stored.
  size_t Size() const { return size_; }
  size_t max_size() const { return max_size_; }

 private:
  struct Node {
    std::string label;  // the edge from the parent (empty for the root)
    Node* parent = nullptr;
    std::map<char, std::unique_ptr<Node>> children;
    uint64_t last_used = 0;
  };
  // Evicts LRU leaves down to 90% of max_size (headroom, so eviction is not run per insert).
  void Evict();

  size_t max_size_;
  size_t size_ = 0;
  uint64_t clock_ = 0;  // logical time for last_used
  Node root_;
};

}  // namespace vllm::router

#endif  // VLLM_ROUTER_PREFIX_TREE_H_
