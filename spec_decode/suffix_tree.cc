#include "spec_decode/suffix_tree.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "base/status_macros.h"

namespace vllm::spec_decode {

SuffixTree::SuffixTree(int32_t max_depth) : max_depth_(std::max(max_depth, 1)) {
  nodes_.emplace_back();
  nodes_[0].length = 0;  // the root stands for the empty path
}

int32_t SuffixTree::FindChild(int32_t parent, int32_t token) const {
  auto it = edges_.find(EdgeKey(parent, token));
  return it == edges_.end() ? kNone : it->second;
}

int32_t SuffixTree::TokenAt(const Node& node, int32_t i) const {
  if (i == 0) return node.token;
  return seqs_[static_cast<size_t>(node.ref_slot)].tokens[static_cast<size_t>(node.ref_pos + i)];
}

void SuffixTree::Extend(int64_t seq_id, std::span<const int32_t> tokens) {
  auto [it, inserted] = slot_of_.try_emplace(seq_id, kNone);
  if (inserted) {
    if (free_slots_.empty()) {
      it->second = static_cast<int32_t>(seqs_.size());
      seqs_.emplace_back();
    } else {
      it->second = free_slots_.back();
      free_slots_.pop_back();
    }
    seqs_[static_cast<size_t>(it->second)].live = true;
  }
  const int32_t slot = it->second;
  for (int32_t token : tokens) Append(slot, token);
}

int32_t SuffixTree::NewNode() {
  if (free_nodes_.empty()) {
    nodes_.emplace_back();
    return static_cast<int32_t>(nodes_.size() - 1);
  }
  const int32_t x = free_nodes_.back();
  free_nodes_.pop_back();
  N(x) = Node();
  return x;
}

int32_t SuffixTree::AddChild(int32_t parent, int32_t token, int32_t slot, int32_t pos) {
  const int32_t child = NewNode();
  Node& c = N(child);
  c.token = token;
  c.count = 1;
  c.parent = parent;
  c.ref_slot = slot;
  c.ref_gen = seqs_[static_cast<size_t>(slot)].gen;
  c.ref_pos = pos;
  AppendChild(parent, child);
  edges_[EdgeKey(parent, token)] = child;
  return child;
}

// The suffix entering `child` adds one to its count. A run (a leaf of count 1, length > 1) is
// split first: a new one-token head takes its place among the parent's children and the run's
// rest keeps the node's index, so its owner's active suffix, which ends at the run's end, stays.
int32_t SuffixTree::Enter(int32_t child) {
  if (N(child).length == 1) {
    Increment(child);
    return child;
  }
  const int32_t head = NewNode();
  Node& h = N(head);
  const Node& r = N(child);
  h.token = r.token;
  h.count = r.count;
  h.parent = r.parent;
  h.ref_slot = r.ref_slot;
  h.ref_gen = r.ref_gen;
  h.ref_pos = r.ref_pos;
  ReplaceInSiblings(child, head);
  edges_[EdgeKey(h.parent, h.token)] = head;
  Node& run = N(child);
  run.token = TokenAt(run, 1);
  run.ref_pos += 1;
  run.length -= 1;
  run.parent = head;
  N(head).first_child = N(head).last_child = child;
  run.group = NewGroup(child);
  edges_[EdgeKey(head, run.token)] = child;
  Increment(head);
  return head;
}

void SuffixTree::Append(int32_t slot, int32_t token) {
  Seq& s = seqs_[static_cast<size_t>(slot)];
  s.active.push_back(0);
  ++nodes_[0].count;
  if (s.active.size() > static_cast<size_t>(max_depth_)) s.active.pop_front();
  const auto old_len = static_cast<int32_t>(s.tokens.size());
  s.tokens.push_back(token);
  for (int32_t& at : s.active) {
    if (at != 0) {
      Node& n = nodes_[static_cast<size_t>(at)];
      // This sequence's own run, ending where the sequence ended: it grows in place.
      if (n.first_child == kNone && n.count == 1 && n.ref_slot == slot && n.ref_gen == s.gen &&
          n.ref_pos + n.length == old_len) {
        ++n.length;
        continue;
      }
    }
    const int32_t child = FindChild(at, token);
    at = child == kNone ? AddChild(at, token, slot, old_len) : Enter(child);
  }
}

void SuffixTree::DeleteSubtree(int32_t node) {
  RemoveFromSiblings(node);
  std::vector<int32_t> stack = {node};
  while (!stack.empty()) {
    const int32_t x = stack.back();
    stack.pop_back();
    const Node& xn = N(x);
    for (int32_t c = xn.first_child; c != kNone; c = N(c).next_sibling) {
      stack.push_back(c);
      if (G(N(c).group).head == c) FreeGroup(N(c).group);
    }
    edges_.erase(EdgeKey(xn.parent, xn.token));
    N(x) = Node();
    free_nodes_.push_back(x);
  }
}

void SuffixTree::Remove(int64_t seq_id) {
  auto it = slot_of_.find(seq_id);
  if (it == slot_of_.end()) return;
  const int32_t slot = it->second;
  slot_of_.erase(it);
  Seq& s = seqs_[static_cast<size_t>(slot)];
  const auto n = static_cast<int32_t>(s.tokens.size());
  nodes_[0].count -= n;
  // Each start's path loses one count; a node that reaches 0 was only on this path (counts
  // never grow with depth), so it goes with everything below it.
  for (int32_t j = 0; j < n; ++j) {
    const int32_t end = j + std::min(max_depth_, n - j);
    int32_t at = 0;
    for (int32_t t = j; t < end;) {
      const int32_t c = FindChild(at, s.tokens[static_cast<size_t>(t)]);
      VLLM_CHECK(c != kNone) << "suffix tree: a removed sequence's path is missing";
      if (N(c).count == 1) {
        DeleteSubtree(c);
        break;
      }
      Decrement(c);
      t += N(c).length;
      at = c;
    }
  }
  s.tokens = {};
  s.active = {};
  ++s.gen;
  s.live = false;
  free_slots_.push_back(slot);
}

std::pair<int32_t, int32_t> SuffixTree::Match(std::span<const int32_t> path) const {
  int32_t at = 0;
  int32_t idx = 0;
  for (int32_t token : path) {
    if (idx >= nodes_[static_cast<size_t>(at)].length) {
      at = FindChild(at, token);
      if (at == kNone) return {kNone, 0};
      idx = 0;
    }
    if (TokenAt(nodes_[static_cast<size_t>(at)], idx) != token) return {kNone, 0};
    ++idx;
  }
  return {at, idx};
}

int64_t SuffixTree::Count(std::span<const int32_t> path) const {
  if (path.size() > static_cast<size_t>(max_depth_)) return 0;
  const auto [node, idx] = Match(path);
  return node == kNone ? 0 : nodes_[static_cast<size_t>(node)].count;
}

void SuffixTree::DraftFrom(int32_t node, int32_t idx, int32_t max_tokens, float min_prob,
                           SuffixDraft* draft) {
  draft->token_ids.clear();
  draft->score = 0;
  float prob = 1.0f;
  while (static_cast<int32_t>(draft->token_ids.size()) < max_tokens && prob >= min_prob) {
    const Node& n = nodes_[static_cast<size_t>(node)];
    if (idx < n.length) {
      draft->token_ids.push_back(TokenAt(n, idx));
      draft->score += prob;
      ++idx;
      continue;
    }
    const int32_t c = nodes_[static_cast<size_t>(node)].first_child;  // the most frequent
    if (c == kNone) break;
    prob *= static_cast<float>(nodes_[static_cast<size_t>(c)].count) /
            static_cast<float>(nodes_[static_cast<size_t>(node)].count);
    node = c;
    idx = 0;
  }
}

void SuffixTree::Speculate(std::span<const int32_t> context, int32_t max_spec_tokens,
                           double max_spec_factor, double min_token_prob, SuffixDraft* draft,
                           int64_t hint_seq_id) {
  draft->token_ids.clear();
  draft->score = 0;
  draft->match_len = 0;
  if (context.size() > static_cast<size_t>(max_depth_)) {
    context = context.last(static_cast<size_t>(max_depth_));
  }
  const auto factor = static_cast<float>(max_spec_factor);
  const auto min_prob = static_cast<float>(min_token_prob);
  // The hint sequence's active suffixes end where the context's last m tokens do, for every m
  // up to the tail they share: no walk from the root for those.
  const std::deque<int32_t>* active = nullptr;
  size_t shared = 0;
  if (auto it = slot_of_.find(hint_seq_id); it != slot_of_.end()) {
    const Seq& seq = seqs_[static_cast<size_t>(it->second)];
    active = &seq.active;
    const size_t most = std::min(seq.active.size(), context.size());
    while (shared < most &&
           seq.tokens[seq.tokens.size() - 1 - shared] == context[context.size() - 1 - shared]) {
      ++shared;
    }
  }
  // As arctic-inference: match lengths below the context's length, shortest first, until the
  // context's suffix is no longer a path.
  for (size_t m = 1; m < context.size(); ++m) {
    int32_t node;
    int32_t idx;
    if (m <= shared) {
      node = (*active)[active->size() - m];
      idx = nodes_[static_cast<size_t>(node)].length;
    } else {
      std::tie(node, idx) = Match(context.last(m));
      if (node == kNone) break;
    }
    const double limit = static_cast<double>(static_cast<float>(m) * factor) + 1e-6;
    const int32_t max_tokens =
        std::max(0, std::min(max_spec_tokens, static_cast<int32_t>(std::min(limit, 1e9))));
    DraftFrom(node, idx, max_tokens, min_prob, &scratch_);
    if (scratch_.score >= draft->score) {
      std::swap(draft->token_ids, scratch_.token_ids);
      draft->score = scratch_.score;
      draft->match_len = static_cast<int32_t>(m);
    }
  }
}

}  // namespace vllm::spec_decode
