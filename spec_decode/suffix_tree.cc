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

int32_t SuffixTree::BestChild(int32_t node) {
  Node& n = nodes_[static_cast<size_t>(node)];
  if (n.best_child != kDirty) return n.best_child;
  int32_t best = kNone;
  for (int32_t c = n.first_child; c != kNone; c = nodes_[static_cast<size_t>(c)].next_sibling) {
    if (best == kNone ||
        nodes_[static_cast<size_t>(c)].count > nodes_[static_cast<size_t>(best)].count) {
      best = c;
    }
  }
  n.best_child = best;
  return best;
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

int32_t SuffixTree::AddChild(int32_t parent, int32_t token, int32_t slot, int32_t pos) {
  int32_t child;
  if (free_nodes_.empty()) {
    child = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
  } else {
    child = free_nodes_.back();
    free_nodes_.pop_back();
    nodes_[static_cast<size_t>(child)] = Node();
  }
  Node& c = nodes_[static_cast<size_t>(child)];
  Node& p = nodes_[static_cast<size_t>(parent)];
  c.token = token;
  c.count = 1;
  c.parent = parent;
  c.ref_slot = slot;
  c.ref_gen = seqs_[static_cast<size_t>(slot)].gen;
  c.ref_pos = pos;
  c.next_sibling = p.first_child;
  if (p.first_child != kNone) nodes_[static_cast<size_t>(p.first_child)].prev_sibling = child;
  p.first_child = child;
  // A new child (count 1) never displaces a known best (arctic-inference appends it last).
  if (p.best_child == kNone) p.best_child = child;
  edges_[EdgeKey(parent, token)] = child;
  return child;
}

// The suffix entering `child` adds one to its count. A run (a leaf of count 1, length > 1) is
// split first: a new one-token head takes its place under the parent and the run's rest keeps
// the node's index, so the active suffix of its owner, which ends at the run's end, stays put.
int32_t SuffixTree::Enter(int32_t child) {
  int32_t entered = child;
  if (nodes_[static_cast<size_t>(child)].length > 1) {
    const Node run = nodes_[static_cast<size_t>(child)];
    // Unlink the run from its parent's children; the head takes its place (AddChild links it
    // first and points the parent's edge at it) and the run hangs under the head.
    Node& p = nodes_[static_cast<size_t>(run.parent)];
    if (run.prev_sibling != kNone) {
      nodes_[static_cast<size_t>(run.prev_sibling)].next_sibling = run.next_sibling;
    } else {
      p.first_child = run.next_sibling;
    }
    if (run.next_sibling != kNone) {
      nodes_[static_cast<size_t>(run.next_sibling)].prev_sibling = run.prev_sibling;
    }
    const int32_t head = AddChild(run.parent, run.token, run.ref_slot, run.ref_pos);
    Node& parent = nodes_[static_cast<size_t>(run.parent)];
    if (parent.best_child == child) parent.best_child = head;
    Node& h = nodes_[static_cast<size_t>(head)];
    h.ref_gen = run.ref_gen;
    h.count = run.count;
    h.first_child = child;
    h.best_child = child;
    Node& r = nodes_[static_cast<size_t>(child)];
    r.parent = head;
    r.prev_sibling = r.next_sibling = kNone;
    r.token = TokenAt(run, 1);
    r.ref_pos = run.ref_pos + 1;
    r.length = run.length - 1;
    edges_[EdgeKey(head, r.token)] = child;
    entered = head;
  }
  Node& e = nodes_[static_cast<size_t>(entered)];
  ++e.count;
  Node& p = nodes_[static_cast<size_t>(e.parent)];
  // >=: among equal counts the one that reached it last leads.
  if (p.best_child != kDirty &&
      (p.best_child == kNone || e.count >= nodes_[static_cast<size_t>(p.best_child)].count)) {
    p.best_child = entered;
  }
  return entered;
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
  const Node& n = nodes_[static_cast<size_t>(node)];
  Node& p = nodes_[static_cast<size_t>(n.parent)];
  if (n.prev_sibling != kNone) {
    nodes_[static_cast<size_t>(n.prev_sibling)].next_sibling = n.next_sibling;
  } else {
    p.first_child = n.next_sibling;
  }
  if (n.next_sibling != kNone) {
    nodes_[static_cast<size_t>(n.next_sibling)].prev_sibling = n.prev_sibling;
  }
  if (p.best_child == node) p.best_child = p.first_child == kNone ? kNone : kDirty;
  std::vector<int32_t> stack = {node};
  while (!stack.empty()) {
    const int32_t x = stack.back();
    stack.pop_back();
    const Node& xn = nodes_[static_cast<size_t>(x)];
    for (int32_t c = xn.first_child; c != kNone; c = nodes_[static_cast<size_t>(c)].next_sibling) {
      stack.push_back(c);
    }
    edges_.erase(EdgeKey(xn.parent, xn.token));
    nodes_[static_cast<size_t>(x)] = Node();
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
      Node& cn = nodes_[static_cast<size_t>(c)];
      --cn.count;
      t += cn.length;
      if (cn.count == 0) {
        DeleteSubtree(c);
        break;
      }
      Node& an = nodes_[static_cast<size_t>(at)];
      if (an.best_child == c) an.best_child = kDirty;
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
    const int32_t c = BestChild(node);
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
