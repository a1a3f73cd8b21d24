#include "router/prefix_tree.h"

#include <algorithm>
#include <queue>
#include <utility>
#include <vector>

namespace vllm::router {
namespace {

size_t CommonPrefix(absl::string_view a, absl::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

PrefixTree::PrefixTree(size_t max_size) : max_size_(std::max<size_t>(max_size, 1)) {}

void PrefixTree::Insert(absl::string_view text) {
  const uint64_t now = ++clock_;
  Node* node = &root_;
  node->last_used = now;
  size_t pos = 0;
  while (pos < text.size()) {
    const absl::string_view rest = text.substr(pos);
    auto it = node->children.find(rest[0]);
    if (it == node->children.end()) {
      auto leaf = std::make_unique<Node>();
      leaf->label = std::string(rest);
      leaf->parent = node;
      leaf->last_used = now;
      size_ += rest.size();
      node->children.emplace(rest[0], std::move(leaf));
      break;
    }
    Node* child = it->second.get();
    const size_t common = CommonPrefix(child->label, rest);
    if (common < child->label.size()) {
      // Split the edge: node -> mid(label[0, common)) -> child(label[common, ...)).
      auto mid = std::make_unique<Node>();
      mid->label = child->label.substr(0, common);
      mid->parent = node;
      mid->last_used = child->last_used;
      std::unique_ptr<Node> owned = std::move(it->second);
      owned->label.erase(0, common);
      owned->parent = mid.get();
      const char key = owned->label[0];
      mid->children.emplace(key, std::move(owned));
      it->second = std::move(mid);
      child = it->second.get();
    }
    child->last_used = now;
    node = child;
    pos += common;
  }
  if (size_ > max_size_) Evict();
}

size_t PrefixTree::MatchLength(absl::string_view text) {
  const uint64_t now = ++clock_;
  Node* node = &root_;
  size_t pos = 0;
  while (pos < text.size()) {
    auto it = node->children.find(text[pos]);
    if (it == node->children.end()) break;
    Node* child = it->second.get();
    const size_t common = CommonPrefix(child->label, text.substr(pos));
    pos += common;
    child->last_used = now;
    if (common < child->label.size()) break;
    node = child;
  }
  return pos;
}

void PrefixTree::Evict() {
  const size_t target = max_size_ - max_size_ / 10;
  // Min-heap of leaves by last use; a parent that becomes a leaf joins the heap.
  using Entry = std::pair<uint64_t, Node*>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> leaves;
  std::vector<Node*> stack = {&root_};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (n != &root_ && n->children.empty()) leaves.emplace(n->last_used, n);
    for (auto& [key, child] : n->children) stack.push_back(child.get());
  }
  while (size_ > target && !leaves.empty()) {
    Node* leaf = leaves.top().second;
    leaves.pop();
    Node* parent = leaf->parent;
    size_ -= leaf->label.size();
    parent->children.erase(leaf->label[0]);  // destroys leaf
    if (parent != &root_ && parent->children.empty()) {
      leaves.emplace(parent->last_used, parent);
    }
  }
}

}  // namespace vllm::router
