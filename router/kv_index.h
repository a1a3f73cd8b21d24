// KvIndex: which prefixes of token ids each worker holds in its prefix cache, exactly, from
// the KV-cache events its engines publish (kv_events/kv_events.h, vLLM's format) — the state of the
// kv_aware policy.
//
// The engines' block hashes are their own (vLLM: SHA-256 or XXH3 over its own encoding; ours:
// XXH3-128), so the index does not try to recompute them: it re-hashes the token ids every
// BlockStored event carries with its own chained hash (ChainHash), per block size, and keeps
// per engine a map engine hash → chain hash (to follow a later event's parent hash and to
// apply BlockRemoved). A request's prompt tokens are hashed the same way, and a worker's match
// is the number of leading blocks whose chain hash one of its engines holds.
//
// The router also records its own guesses ("predicted" blocks): the blocks of a request it
// just sent to a worker count as cached there for `predict_ttl`, until the engine's events
// say so (or not). Without them, a burst of requests with a new shared prefix would all miss
// before the first one's events arrive.
//
// Bounded: at most `max_blocks_per_engine` stored and `max_predicted_per_worker` predicted
// blocks per worker (more are ignored and counted). Not thread-safe: the router calls it from
// its one I/O thread.
#ifndef VLLM_ROUTER_KV_INDEX_H_
#define VLLM_ROUTER_KV_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kv_events/kv_events.h"

namespace vllm::router {

// The chain hash of a block of `tokens` after the block whose chain hash is `parent`
// (kChainRoot for a sequence's first block). Stable within a process.
inline constexpr uint64_t kChainRoot = 0x243f6a8885a308d3ULL;
uint64_t ChainHash(uint64_t parent, std::span<const int32_t> tokens);

// The chain hashes of the full blocks of `tokens` (a trailing partial block has none).
std::vector<uint64_t> ChainHashes(std::span<const int32_t> tokens, int block_size);

struct KvIndexOptions {
  int default_block_size = 16;  // until a worker's events tell its block size
  size_t max_blocks_per_engine = size_t{1} << 22;
  size_t max_predicted_per_worker = size_t{1} << 20;
  absl::Duration predict_ttl = absl::Seconds(10);
};

class KvIndex {
 public:
  explicit KvIndex(const KvIndexOptions& options = {});

  // Applies one batch that engine `rank` of `worker` published.
  void Apply(const std::string& worker, int rank, const kv_events::KvEventBatch& batch);

  // The worker's block size (from its events; the default before any).
  int BlockSize(absl::string_view worker) const;
  // How many leading full blocks of `tokens` the worker holds (on any of its engines), stored
  // or predicted (unexpired at `now`).
  size_t MatchBlocks(absl::string_view worker, std::span<const int32_t> tokens,
                     absl::Time now) const;
  // The request with `tokens` went to `worker`: its full blocks count as held there until
  // `now` + predict_ttl (unless an event stores them first).
  void Predict(const std::string& worker, std::span<const int32_t> tokens, absl::Time now);
  // Blocks the worker's engines hold (sum over its engines).
  size_t StoredBlocks(absl::string_view worker) const;
  // Forget everything about the worker (it left the pool).
  void RemoveWorker(absl::string_view worker);

  struct Counters {
    int64_t batches = 0;
    int64_t events = 0;
    int64_t blocks_stored = 0;
    int64_t blocks_removed = 0;
    int64_t orphan_blocks = 0;   // stored under a parent the index never saw: skipped
    int64_t invalid_events = 0;  // token count not block_hashes × block_size, block_size ≤ 0
    int64_t over_limit = 0;      // ignored: an engine or a worker at its bound
  };
  const Counters& counters() const { return counters_; }

 private:
  struct Engine {
    absl::flat_hash_map<uint64_t, uint64_t> engine_to_chain;
    absl::flat_hash_map<uint64_t, int32_t> chains;  // chain hash -> engine blocks with it
  };
  struct Worker {
    int block_size = 0;  // 0: not known yet
    absl::flat_hash_map<int, Engine> engines;
    absl::flat_hash_map<uint64_t, absl::Time> predicted;  // chain hash -> expiry
    std::deque<std::pair<absl::Time, uint64_t>> predicted_order;
  };

  void Store(Worker& w, Engine& e, const kv_events::KvBlockStored& ev);
  void Remove(Engine& e, const kv_events::KvBlockRemoved& ev);
  void ExpirePredicted(Worker& w, absl::Time now);
  const Worker* Find(absl::string_view worker) const;

  KvIndexOptions options_;
  absl::flat_hash_map<std::string, Worker> workers_;
  Counters counters_;
};

}  // namespace vllm::router

#endif  // VLLM_ROUTER_KV_INDEX_H_
