#include "router/policy.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/hash.h"

namespace vllm::router {
namespace {

uint64_t SeedOr(uint64_t seed) {
  if (seed != 0) return seed;
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

size_t Uniform(std::mt19937_64& rng, size_t n) {
  return std::uniform_int_distribution<size_t>(0, n - 1)(rng);
}

// cache_aware's and kv_aware's rule: max - min outstanding <= the absolute threshold, or
// max <= min * the relative one.
bool Balanced(absl::Span<const Candidate> workers, const PolicyOptions& options) {
  int64_t lo = std::numeric_limits<int64_t>::max();
  int64_t hi = std::numeric_limits<int64_t>::min();
  for (const Candidate& w : workers) {
    lo = std::min(lo, w.outstanding);
    hi = std::max(hi, w.outstanding);
  }
  return hi - lo <= options.balance_abs_threshold ||
         static_cast<double>(hi) <= static_cast<double>(lo) * options.balance_rel_threshold;
}

}  // namespace

uint64_t StableHash(absl::string_view data) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return base::Mix64(h);  // FNV's low bits alone cluster for similar keys
}

absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(absl::string_view name,
                                                   const PolicyOptions& options) {
  if (name == "round_robin") return std::make_unique<RoundRobinPolicy>();
  if (name == "random") return std::make_unique<RandomPolicy>(options.seed);
  if (name == "power_of_two") return std::make_unique<PowerOfTwoPolicy>(options.seed);
  if (name == "cache_aware") return std::make_unique<CacheAwarePolicy>(options);
  if (name == "consistent_hash") return std::make_unique<ConsistentHashPolicy>(options);
  if (name == "kv_aware") return std::make_unique<KvAwarePolicy>(options);
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown policy '", name,
      "' (round_robin, random, power_of_two, cache_aware, consistent_hash, kv_aware)"));
}

size_t RoundRobinPolicy::Pick(absl::Span<const Candidate> workers, const RouteKeys&) {
  return next_++ % workers.size();
}

RandomPolicy::RandomPolicy(uint64_t seed) : rng_(SeedOr(seed)) {}

size_t RandomPolicy::Pick(absl::Span<const Candidate> workers, const RouteKeys&) {
  return Uniform(rng_, workers.size());
}

PowerOfTwoPolicy::PowerOfTwoPolicy(uint64_t seed) : rng_(SeedOr(seed)) {}

size_t PowerOfTwoPolicy::Pick(absl::Span<const Candidate> workers, const RouteKeys&) {
  if (workers.size() == 1) return 0;
  const size_t a = Uniform(rng_, workers.size());
  size_t b = Uniform(rng_, workers.size() - 1);
  if (b >= a) ++b;  // distinct from a
  return workers[b].outstanding < workers[a].outstanding ? b : a;
}

CacheAwarePolicy::CacheAwarePolicy(const PolicyOptions& options) : options_(options) {}

PrefixTree& CacheAwarePolicy::Tree(const std::string& url) {
  std::unique_ptr<PrefixTree>& tree = trees_[url];
  if (tree == nullptr) tree = std::make_unique<PrefixTree>(options_.max_tree_size);
  return *tree;
}

const PrefixTree* CacheAwarePolicy::TreeOf(absl::string_view url) const {
  auto it = trees_.find(url);
  return it == trees_.end() ? nullptr : it->second.get();
}

void CacheAwarePolicy::RemoveWorker(absl::string_view url) { trees_.erase(url); }

size_t CacheAwarePolicy::LeastLoaded(absl::Span<const Candidate> workers) {
  size_t best = 0;
  for (size_t i = 1; i < workers.size(); ++i) {
    if (workers[i].outstanding < workers[best].outstanding ||
        (workers[i].outstanding == workers[best].outstanding &&
         Tree(workers[i].url).Size() < Tree(workers[best].url).Size())) {
      best = i;
    }
  }
  return best;
}

size_t CacheAwarePolicy::Pick(absl::Span<const Candidate> workers, const RouteKeys& keys) {
  const bool balanced = Balanced(workers, options_);
  size_t chosen = 0;
  bool matched = false;
  if (balanced && !keys.text.empty()) {
    size_t best_len = 0;
    for (size_t i = 0; i < workers.size(); ++i) {
      const size_t len = Tree(workers[i].url).MatchLength(keys.text);
      if (len > best_len) {
        best_len = len;
        chosen = i;
      }
    }
    matched = static_cast<double>(best_len) >=
                  options_.cache_threshold * static_cast<double>(keys.text.size()) &&
              best_len > 0;
  }
  if (!matched) chosen = LeastLoaded(workers);
  if (!keys.text.empty()) Tree(workers[chosen].url).Insert(keys.text);
  return chosen;
}

KvAwarePolicy::KvAwarePolicy(const PolicyOptions& options)
    : options_(options), index_(options.kv) {}

size_t KvAwarePolicy::LeastLoaded(absl::Span<const Candidate> workers) const {
  size_t best = 0;
  size_t best_blocks = index_.StoredBlocks(workers[0].url);
  for (size_t i = 1; i < workers.size(); ++i) {
    const size_t blocks = index_.StoredBlocks(workers[i].url);
    if (workers[i].outstanding < workers[best].outstanding ||
        (workers[i].outstanding == workers[best].outstanding && blocks < best_blocks)) {
      best = i;
      best_blocks = blocks;
    }
  }
  return best;
}

size_t KvAwarePolicy::Pick(absl::Span<const Candidate> workers, const RouteKeys& keys) {
  if (!keys.has_tokens) return LeastLoaded(workers);
  size_t chosen = 0;
  size_t best_match = 0;
  if (Balanced(workers, options_)) {
    size_t best_blocks = 0;
    for (size_t i = 0; i < workers.size(); ++i) {
      const size_t match = index_.MatchBlocks(workers[i].url, keys.tokens, keys.now);
      if (match == 0) continue;
      const size_t blocks = index_.StoredBlocks(workers[i].url);
      const bool better =
          match > best_match ||
          (match == best_match &&
           (workers[i].outstanding < workers[chosen].outstanding ||
            (workers[i].outstanding == workers[chosen].outstanding && blocks < best_blocks)));
      if (better) {
        chosen = i;
        best_match = match;
        best_blocks = blocks;
      }
    }
  }
  if (best_match == 0) chosen = LeastLoaded(workers);
  index_.Predict(workers[chosen].url, keys.tokens, keys.now);
  return chosen;
}

ConsistentHashPolicy::ConsistentHashPolicy(const PolicyOptions& options)
    : virtual_nodes_(std::max(1, options.virtual_nodes)), fallback_(options.seed) {}

size_t ConsistentHashPolicy::Pick(absl::Span<const Candidate> workers, const RouteKeys& keys) {
  if (keys.session_key.empty()) return fallback_.Pick(workers, keys);
  std::string urls;
  for (const Candidate& w : workers) absl::StrAppend(&urls, w.url, "\n");
  if (urls != ring_urls_) {
    ring_.clear();
    for (size_t i = 0; i < workers.size(); ++i) {
      for (int v = 0; v < virtual_nodes_; ++v) {
        ring_.emplace_back(StableHash(absl::StrCat(workers[i].url, "#", v)), i);
      }
    }
    std::sort(ring_.begin(), ring_.end());
    ring_urls_ = std::move(urls);
  }
  const uint64_t h = StableHash(keys.session_key);
  auto it = std::lower_bound(ring_.begin(), ring_.end(), std::make_pair(h, size_t{0}));
  if (it == ring_.end()) it = ring_.begin();
  return it->second;
}

}  // namespace vllm::router
