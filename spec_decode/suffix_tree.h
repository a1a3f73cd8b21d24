// SuffixTree: the depth-limited suffix tree of suffix decoding (arXiv 2411.04975; the structure
// behind vLLM's method "suffix", arctic-inference's SuffixTree). It holds token sequences; every
// substring of at most max_depth tokens of each sequence is a path from the root, and a node's
// count is the number of (sequence, start) pairs whose substring of at most max_depth tokens
// passes through or ends at the node, i.e. how often the node's path occurs. A draft follows
// the most frequent child; count(child) / count(node) is the empirical probability of the step.
//
// Layout: nodes live in one vector (a free list reuses deleted ones); a node is one token,
// except a leaf of count 1, which stands for a run of tokens of its one sequence (path
// compression where it pays: unique continuations, most of a long text). Edges are one hash
// map keyed by (parent, token); a node's children also form a list sorted by count (the first
// is the draft's next step, O(1)). Each sequence keeps its tokens and its active suffixes (the
// nodes where its last max_depth suffixes end), so appending a token costs O(max_depth) hash
// look-ups; memory is O(tokens + repeated substrings of at most max_depth tokens).
//
// Speculate is arctic-inference's path speculation: for each match length m = 1, 2, ... below
// the context's length (the context's last max_depth tokens), while the context's last m tokens
// are a path, a draft grows from there by the most frequent child while the running product of
// probabilities is at least min_token_prob, at most min(max_spec_tokens,
// floor(m * max_spec_factor)) tokens; its score is the sum of its tokens' probabilities, and the
// best score wins (ties: the longer match).
//
// Ties between equally frequent children are broken as arctic-inference's sorted sibling lists
// do (suffix_tree_siblings.cc), so drafts equal its SuffixTree's: compiled side by side with
// arctic-inference's csrc/suffix_decoding, 190 K random Extend/Remove/Speculate checks gave the
// same tokens, match lengths and scores. (Its internal nodes are path-compressed too; the
// counts, and so the drafts, do not depend on that.)
//
// Thread-safety: none.
#ifndef VLLM_SPEC_DECODE_SUFFIX_TREE_H_
#define VLLM_SPEC_DECODE_SUFFIX_TREE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace vllm::spec_decode {

struct SuffixDraft {
  std::vector<int32_t> token_ids;
  float score = 0;        // the sum of the drafted tokens' probabilities
  int32_t match_len = 0;  // the context tokens matched
};

class SuffixTree {
 public:
  // max_depth >= 1 (a smaller value is taken as 1).
  explicit SuffixTree(int32_t max_depth);

  int32_t max_depth() const { return max_depth_; }
  // Appends tokens to sequence `seq_id` (created when new).
  void Extend(int64_t seq_id, std::span<const int32_t> tokens);
  // Forgets sequence `seq_id` (its counts and the nodes only it used); no-op when unknown.
  void Remove(int64_t seq_id);
  bool Contains(int64_t seq_id) const { return slot_of_.contains(seq_id); }
  size_t num_seqs() const { return slot_of_.size(); }
  // Nodes in use (the root included): the memory measure.
  size_t num_nodes() const { return nodes_.size() - free_nodes_.size(); }
  // How often `path` occurs (as above); 0 when it is not a path or is longer than max_depth.
  int64_t Count(std::span<const int32_t> path) const;

  // The best path draft for `context` (see above) into *draft. `hint_seq_id`: a sequence whose
  // tokens end as the context does (the request's own), so that the matches of up to
  // max_depth tokens come from its active suffixes instead of walks from the root (the same
  // answer, O(max_depth) fewer look-ups per match length); any id, or -1, is safe.
  void Speculate(std::span<const int32_t> context, int32_t max_spec_tokens, double max_spec_factor,
                 double min_token_prob, SuffixDraft* draft, int64_t hint_seq_id = -1);

 private:
  static constexpr int32_t kNone = -1;
  struct Node {
    int32_t token = 0;  // the first token of the node's run
    int32_t length = 1;
    int64_t count = 0;
    int32_t parent = kNone;
    // Children, most frequent first (suffix_tree_siblings.cc); `group`: this node's group of
    // equally frequent siblings.
    int32_t first_child = kNone;
    int32_t last_child = kNone;
    int32_t next_sibling = kNone;
    int32_t prev_sibling = kNone;
    int32_t group = kNone;
    // The run's tokens: seqs_[ref_slot].tokens[ref_pos, ref_pos + length) (generation-checked).
    int32_t ref_slot = kNone;
    uint32_t ref_gen = 0;
    int32_t ref_pos = 0;
  };
  // Siblings of one count: the first of them, and the groups of the next higher and lower count.
  struct Group {
    int32_t head = kNone;
    int32_t prev = kNone;
    int32_t next = kNone;
  };
  struct Seq {
    std::vector<int32_t> tokens;
    std::deque<int32_t> active;  // nodes where the last (up to max_depth) suffixes end
    uint32_t gen = 0;
    bool live = false;
  };

  static uint64_t EdgeKey(int32_t parent, int32_t token) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32) |
           static_cast<uint32_t>(token);
  }
  Node& N(int32_t i) { return nodes_[static_cast<size_t>(i)]; }
  Group& G(int32_t i) { return groups_[static_cast<size_t>(i)]; }
  int32_t FindChild(int32_t parent, int32_t token) const;
  int32_t TokenAt(const Node& node, int32_t i) const;
  int32_t NewNode();
  void Append(int32_t slot, int32_t token);
  int32_t AddChild(int32_t parent, int32_t token, int32_t slot, int32_t pos);
  int32_t Enter(int32_t child);  // count + 1 (a run split first); where the suffix now ends
  void DeleteSubtree(int32_t node);
  // Where the context's last m tokens end: (node, tokens of it consumed), node kNone if absent.
  std::pair<int32_t, int32_t> Match(std::span<const int32_t> path) const;
  void DraftFrom(int32_t node, int32_t idx, int32_t max_tokens, float min_prob, SuffixDraft* draft);
  // The sibling order (suffix_tree_siblings.cc).
  int32_t NewGroup(int32_t head);
  void FreeGroup(int32_t g);
  void UnlinkGroup(int32_t g);
  void RemoveFromSiblings(int32_t x);
  void InsertBefore(int32_t x, int32_t other);
  void InsertAfter(int32_t x, int32_t other);
  void ReplaceInSiblings(int32_t old_node, int32_t new_node);
  void AppendChild(int32_t parent, int32_t x);
  void Increment(int32_t x);  // count + 1, moving x among its siblings
  void Decrement(int32_t x);  // count - 1 (x stays above 0), likewise

  int32_t max_depth_;
  std::vector<Node> nodes_;  // nodes_[0]: the root
  std::vector<int32_t> free_nodes_;
  std::vector<Group> groups_;
  std::vector<int32_t> free_groups_;
  absl::flat_hash_map<uint64_t, int32_t> edges_;
  std::vector<Seq> seqs_;
  std::vector<int32_t> free_slots_;
  absl::flat_hash_map<int64_t, int32_t> slot_of_;
  SuffixDraft scratch_;
};

}  // namespace vllm::spec_decode

#endif  // VLLM_SPEC_DECODE_SUFFIX_TREE_H_
