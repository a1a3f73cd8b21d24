// Routing policies: which worker gets a request. Pure functions of (the candidate workers'
// loads, the request's routing keys) plus each policy's own state (a counter, a random
// generator, prefix trees, a hash ring), so they are tested without a network.
//
// Not thread-safe: the router calls a policy from its one I/O thread.
#ifndef VLLM_ROUTER_POLICY_H_
#define VLLM_ROUTER_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "router/kv_index.h"
#include "router/prefix_tree.h"

namespace vllm::router {

// One healthy worker the policy may pick.
struct Candidate {
  std::string url;
  int64_t outstanding = 0;  // requests the router has in flight on it
};

// What the router extracted from a request to route it.
struct RouteKeys {
  absl::string_view text;         // prompt / rendered messages (cache_aware)
  absl::string_view session_key;  // X-Session-Id header, else the JSON `user` (consistent_hash)
  // kv_aware: the prompt's token ids as the workers will see them (when the policy asked for
  // them, NeedsTokens(), and the router could tokenize the request), and the current time.
  bool has_tokens = false;
  absl::Span<const int32_t> tokens = {};
  absl::Time now = absl::InfinitePast();
};

struct PolicyOptions {
  double cache_threshold = 0.5;            // cache_aware: match / prompt length to follow a match
  int64_t balance_abs_threshold = 32;      // cache_aware: max - min outstanding still "balanced"
  double balance_rel_threshold = 1.0001;   // cache_aware: max <= min * rel still "balanced"
  size_t max_tree_size = size_t{1} << 26;  // cache_aware: bytes per worker's prefix tree
  int virtual_nodes = 160;                 // consistent_hash: ring points per worker
  uint64_t seed = 0;                       // random, power_of_two: 0 = from random_device
  KvIndexOptions kv;                       // kv_aware
};

class Policy {
 public:
  virtual ~Policy() = default;
  // The index in `workers` (non-empty) of the worker to send the request to. A retry calls
  // Pick again with the failed worker left out of `workers`.
  virtual size_t Pick(absl::Span<const Candidate> workers, const RouteKeys& keys) = 0;
  // The worker left the pool for good (DELETE /workers): drop its state.
  virtual void RemoveWorker(absl::string_view url) {}
  virtual absl::string_view name() const = 0;
  // Whether Pick wants RouteKeys::tokens (the router then tokenizes every request).
  virtual bool NeedsTokens() const { return false; }
  // The KV-event index the router feeds, for policies that have one.
  virtual KvIndex* kv_index() { return nullptr; }
};

// "round_robin", "random", "power_of_two", "cache_aware", "consistent_hash", "kv_aware";
// InvalidArgument for anything else.
absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(absl::string_view name,
                                                   const PolicyOptions& options);

// The policies, exposed for tests.
class RoundRobinPolicy : public Policy {
 public:
  size_t Pick(absl::Span<const Candidate> workers, const RouteKeys& keys) override;
  absl::string_view name() const override { return "round_robin"; }

 private:
  uint64_t next_ = 0;
};

class RandomPolicy : public Policy {
 public:
  explicit RandomPolicy(uint64_t seed);
  size_t Pick(absl::Span<const Candidate> workers, const RouteKeys& keys) override;
  absl::string_view name() const override { return "random"; }

 private:
  std::mt19937_64 rng_;
};

// The less loaded of two distinct random workers (ties: the first drawn).
class PowerOfTwoPolicy : public Policy {
 public:
  explicit PowerOfTwoPolicy(uint64_t seed);
  size_t Pick(absl::Span<const Candidate> workers, const RouteKeys& keys) override;
  absl::string_view name() const override { return "power_of_two"; }

 private:
  std::mt19937_64 rng_;
};

// sglang-router's cache-aware rule. While the load is balanced (max - min outstanding <=
// balance_abs_threshold, or max <= min * balance_rel_threshold), a request goes to the worker
// whose prefix tree matches the longest prefix of its text when match / length >=
// cache_threshold; otherwise (no good match, or imbalance) to the least-outstanding worker
// (ties: the smallest tree, so new prefixes spread out). The text is then inserted into the
// chosen worker's tree.
class CacheAwarePolicy : public Policy {
 public:
  explicit CacheAwarePolicy(const PolicyOptions& options);
  size_t Pick(absl::Span<const Candidate> workers, const RouteKeys& keys) override;
  void RemoveWorker(absl::string_view url) override;
  absl::string_view name() const override { return "cache_aware"; }
  // The tree of `url`'s worker, or nullptr (for tests and metrics).
  const PrefixTree* TreeOf(absl::string_view url) const;

 private:
  PrefixTree& Tree(const std::string& url);
  size_t LeastLoaded(absl::Span<const Candidate> workers);

  PolicyOptions options_;
  absl::flat_hash_map<std::string, std::unique_ptr<PrefixTree>> trees_;
};

// Routing on the workers' exact prefix caches, known from their engines' KV-cache events
// (kv_index.h). While the load is balanced (cache_aware's thresholds), the worker holding the
// most leading blocks of the prompt's tokens (ties: fewer outstanding, then fewer blocks
// held); when no worker holds any block, or the load is not balanced, or the request has no
// tokens, the least-outstanding worker (ties: fewer blocks held, so new prefixes spread).
// The chosen worker's index then predicts the request's blocks (KvIndex::Predict).
class KvAwarePolicy : public Policy {
 public:
  explicit KvAwarePolicy(const PolicyOptions& options);
  size_t Pick(absl::Span<const Candidate> workers, const RouteKeys& keys) override;
  void RemoveWorker(absl::string_view url) override { index_.RemoveWorker(url); }
  absl::string_view name() const override { return "kv_aware"; }
  bool NeedsTokens() const override { return true; }
  KvIndex* kv_index() override { return &index_; }

 private:
  size_t LeastLoaded(absl::Span<const Candidate> workers) const;

  PolicyOptions options_;
  KvIndex index_;
};

// A hash ring with `virtual_nodes` points per worker over the candidates; the session key
// goes to the first point at or after its hash, so a worker's ejection moves only its own
// sessions and its return brings them back. Requests without a key: power_of_two.
class ConsistentHashPolicy : public Policy {
 public:
  explicit ConsistentHashPolicy(const PolicyOptions& options);
  size_t Pick(absl::Span<const Candidate> workers, const RouteKeys& keys) override;
  absl::string_view name() const override { return "consistent_hash"; }

 private:
  int virtual_nodes_;
  PowerOfTwoPolicy fallback_;
  // The ring of the last candidate set (rebuilt when the set changes): (hash, url index).
  std::string ring_urls_;
  std::vector<std::pair<uint64_t, size_t>> ring_;
};

// 64-bit FNV-1a with a final mix: stable across processes and runs (router replicas agree).
uint64_t StableHash(absl::string_view data);

}  // namespace vllm::router

#endif  // VLLM_ROUTER_POLICY_H_
