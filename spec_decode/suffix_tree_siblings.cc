// SuffixTree's sibling order: each node's children in a list sorted by count, most frequent
// first, with the children of one count forming a group (its head: the first of them). How a
// changed count moves a child, and so which of equally frequent children leads, follows
// arctic-inference's SuffixTree (a new child goes last; a child whose count grows moves to the
// head of the group above when it led its own group, else to that group's tail; a shrinking one
// symmetrically), so that drafts are the same at ties too.
#include "spec_decode/suffix_tree.h"

namespace vllm::spec_decode {

int32_t SuffixTree::NewGroup(int32_t head) {
  int32_t g;
  if (free_groups_.empty()) {
    g = static_cast<int32_t>(groups_.size());
    groups_.emplace_back();
  } else {
    g = free_groups_.back();
    free_groups_.pop_back();
  }
  groups_[static_cast<size_t>(g)] = Group{head, kNone, kNone};
  return g;
}

void SuffixTree::FreeGroup(int32_t g) { free_groups_.push_back(g); }

void SuffixTree::UnlinkGroup(int32_t g) {
  const Group gr = G(g);
  if (gr.prev != kNone) G(gr.prev).next = gr.next;
  if (gr.next != kNone) G(gr.next).prev = gr.prev;
  FreeGroup(g);
}

void SuffixTree::RemoveFromSiblings(int32_t x) {
  Node& n = N(x);
  Node& p = N(n.parent);
  if (G(n.group).head == x) {
    if (n.next_sibling != kNone && N(n.next_sibling).count == n.count) {
      G(n.group).head = n.next_sibling;
    } else {
      UnlinkGroup(n.group);  // its only member
    }
  }
  n.group = kNone;
  if (n.next_sibling != kNone) {
    N(n.next_sibling).prev_sibling = n.prev_sibling;
  } else {
    p.last_child = n.prev_sibling;
  }
  if (n.prev_sibling != kNone) {
    N(n.prev_sibling).next_sibling = n.next_sibling;
  } else {
    p.first_child = n.next_sibling;
  }
  n.prev_sibling = n.next_sibling = kNone;
}

void SuffixTree::InsertBefore(int32_t x, int32_t other) {
  Node& n = N(x);
  Node& o = N(other);
  if (o.prev_sibling != kNone) {
    N(o.prev_sibling).next_sibling = x;
  } else {
    N(n.parent).first_child = x;
  }
  n.next_sibling = other;
  n.prev_sibling = o.prev_sibling;
  o.prev_sibling = x;
  const int32_t prev = n.prev_sibling;
  if (prev != kNone && N(prev).count == n.count) {
    n.group = N(prev).group;  // the tail of the group before
  } else if (n.count == o.count) {
    n.group = o.group;  // the head of the group after
    G(n.group).head = x;
  } else {
    const int32_t g = NewGroup(x);
    n.group = g;
    if (prev != kNone) {
      G(g).prev = N(prev).group;
      G(G(g).prev).next = g;
    }
    G(g).next = o.group;
    G(o.group).prev = g;
  }
}

void SuffixTree::InsertAfter(int32_t x, int32_t other) {
  Node& n = N(x);
  Node& o = N(other);
  if (o.next_sibling != kNone) {
    N(o.next_sibling).prev_sibling = x;
  } else {
    N(n.parent).last_child = x;
  }
  n.prev_sibling = other;
  n.next_sibling = o.next_sibling;
  o.next_sibling = x;
  const int32_t next = n.next_sibling;
  if (next != kNone && N(next).count == n.count) {
    n.group = N(next).group;
    if (G(n.group).head == next) G(n.group).head = x;
  } else if (n.count == o.count) {
    n.group = o.group;  // the tail of the group before
  } else {
    const int32_t g = NewGroup(x);
    n.group = g;
    if (next != kNone) {
      G(g).next = N(next).group;
      G(G(g).next).prev = g;
    }
    G(g).prev = o.group;
    G(o.group).next = g;
  }
}

void SuffixTree::ReplaceInSiblings(int32_t old_node, int32_t new_node) {
  Node& o = N(old_node);
  Node& n = N(new_node);
  Node& p = N(o.parent);
  if (o.next_sibling != kNone) {
    N(o.next_sibling).prev_sibling = new_node;
  } else {
    p.last_child = new_node;
  }
  if (o.prev_sibling != kNone) {
    N(o.prev_sibling).next_sibling = new_node;
  } else {
    p.first_child = new_node;
  }
  n.prev_sibling = o.prev_sibling;
  n.next_sibling = o.next_sibling;
  o.prev_sibling = o.next_sibling = kNone;
  if (G(o.group).head == old_node) G(o.group).head = new_node;
  n.group = o.group;
  o.group = kNone;
}

void SuffixTree::AppendChild(int32_t parent, int32_t x) {
  Node& p = N(parent);
  if (p.last_child == kNone) {
    p.first_child = p.last_child = x;
    N(x).group = NewGroup(x);
  } else {
    InsertAfter(x, p.last_child);
  }
}

void SuffixTree::Increment(int32_t x) {
  Node& n = N(x);
  const int32_t prev = n.prev_sibling;
  if (prev == kNone || N(prev).count > n.count + 1) {
    // x leads its group and stays in place.
    if (n.next_sibling != kNone && N(n.next_sibling).count == n.count) {
      // Its group continues without it; x starts a group of its own above.
      const int32_t orig = n.group;
      G(orig).head = n.next_sibling;
      const int32_t g = NewGroup(x);
      G(g).next = orig;
      if (G(orig).prev != kNone) {
        G(g).prev = G(orig).prev;
        G(G(g).prev).next = g;
      }
      G(orig).prev = g;
      N(x).group = g;
    }
    ++N(x).count;
    return;
  }
  const int32_t other = G(N(prev).group).head;
  RemoveFromSiblings(x);
  ++N(x).count;
  InsertBefore(x, other);
}

void SuffixTree::Decrement(int32_t x) {
  Node& n = N(x);
  const int32_t next = n.next_sibling;
  if (next == kNone || N(next).count < n.count - 1) {
    if (n.prev_sibling != kNone && N(n.prev_sibling).count == n.count) {
      // x ends its group; it starts a group of its own below.
      const int32_t orig = n.group;
      const int32_t g = NewGroup(x);
      G(g).prev = orig;
      if (G(orig).next != kNone) {
        G(g).next = G(orig).next;
        G(G(g).next).prev = g;
      }
      G(orig).next = g;
      N(x).group = g;
    }
    --N(x).count;
  } else if (N(next).count == n.count - 1) {
    // x joins the group below as its head.
    const int32_t below = N(next).group;
    G(below).head = x;
    if (G(n.group).head == x) UnlinkGroup(n.group);  // x was its only member
    N(x).group = below;
    --N(x).count;
  } else {
    // Equal counts follow: x moves to the head of the group below them (or the end).
    const int32_t below = G(n.group).next;
    RemoveFromSiblings(x);
    --N(x).count;
    if (below == kNone) {
      InsertAfter(x, N(N(x).parent).last_child);
    } else {
      InsertBefore(x, G(below).head);
    }
  }
}

}  // namespace vllm::spec_decode
