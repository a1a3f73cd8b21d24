#include "router/kv_index.h"

#include <algorithm>
#include <variant>

#include "base/hash.h"

namespace vllm::router {

uint64_t ChainHash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = base::Mix64(parent ^ (0x9e3779b97f4a7c15ULL * (tokens.size() + 1)));
  for (const int32_t t : tokens) {
    h = base::Mix64(h ^ static_cast<uint32_t>(t)) + 0x9e3779b97f4a7c15ULL;
  }
  return base::Mix64(h);
}

std::vector<uint64_t> ChainHashes(std::span<const int32_t> tokens, int block_size) {
  std::vector<uint64_t> out;
  if (block_size <= 0) return out;
  const size_t b = static_cast<size_t>(block_size);
  out.reserve(tokens.size() / b);
  uint64_t parent = kChainRoot;
  for (size_t i = 0; i + b <= tokens.size(); i += b) {
    parent = ChainHash(parent, tokens.subspan(i, b));
    out.push_back(parent);
  }
  return out;
}

KvIndex::KvIndex(const KvIndexOptions& options) : options_(options) {}

void KvIndex::Apply(const std::string& worker, int rank, const kv_events::KvEventBatch& batch) {
  ++counters_.batches;
  Worker& w = workers_[worker];
  Engine& e = w.engines[rank];
  for (const kv_events::KvEvent& event : batch.events) {
    ++counters_.events;
    if (const auto* stored = std::get_if<kv_events::KvBlockStored>(&event)) {
      Store(w, e, *stored);
    } else if (const auto* removed = std::get_if<kv_events::KvBlockRemoved>(&event)) {
      Remove(e, *removed);
    } else {
      e.engine_to_chain.clear();
      e.chains.clear();
    }
  }
}

void KvIndex::Store(Worker& w, Engine& e, const kv_events::KvBlockStored& ev) {
  const size_t n = ev.block_hashes.size();
  if (ev.block_size <= 0 || ev.token_ids.size() != n * static_cast<size_t>(ev.block_size)) {
    ++counters_.invalid_events;
    return;
  }
  if (w.block_size == 0) w.block_size = ev.block_size;
  if (ev.block_size != w.block_size) {  // engines of one worker disagree: keep the first
    ++counters_.invalid_events;
    return;
  }
  uint64_t parent = kChainRoot;
  if (ev.parent_block_hash.has_value()) {
    auto it = e.engine_to_chain.find(*ev.parent_block_hash);
    if (it == e.engine_to_chain.end()) {  // joined after the parent was stored
      counters_.orphan_blocks += static_cast<int64_t>(n);
      return;
    }
    parent = it->second;
  }
  const std::span<const int32_t> tokens(ev.token_ids);
  for (size_t i = 0; i < n; ++i) {
    parent = ChainHash(parent, tokens.subspan(i * ev.block_size, ev.block_size));
    auto [it, inserted] = e.engine_to_chain.try_emplace(ev.block_hashes[i], parent);
    if (!inserted) {
      if (it->second == parent) continue;  // stored again: already counted
      // The engine reused the hash for other tokens (never for the same engine in vLLM):
      // the newer event wins.
      if (--e.chains[it->second] <= 0) e.chains.erase(it->second);
      it->second = parent;
    } else if (e.engine_to_chain.size() > options_.max_blocks_per_engine) {
      e.engine_to_chain.erase(it);
      ++counters_.over_limit;
      return;
    }
    ++e.chains[parent];
    ++counters_.blocks_stored;
    w.predicted.erase(parent);  // confirmed: the event now speaks for it
  }
}

void KvIndex::Remove(Engine& e, const kv_events::KvBlockRemoved& ev) {
  for (const uint64_t h : ev.block_hashes) {
    auto it = e.engine_to_chain.find(h);
    if (it == e.engine_to_chain.end()) continue;
    auto c = e.chains.find(it->second);
    if (c != e.chains.end() && --c->second <= 0) e.chains.erase(c);
    e.engine_to_chain.erase(it);
    ++counters_.blocks_removed;
  }
}

const KvIndex::Worker* KvIndex::Find(absl::string_view worker) const {
  auto it = workers_.find(worker);
  return it == workers_.end() ? nullptr : &it->second;
}

int KvIndex::BlockSize(absl::string_view worker) const {
  const Worker* w = Find(worker);
  return w != nullptr && w->block_size > 0 ? w->block_size : options_.default_block_size;
}

size_t KvIndex::MatchBlocks(absl::string_view worker, std::span<const int32_t> tokens,
                            absl::Time now) const {
  const Worker* w = Find(worker);
  if (w == nullptr) return 0;
  const size_t b = static_cast<size_t>(BlockSize(worker));
  size_t matched = 0;
  uint64_t parent = kChainRoot;
  for (size_t i = 0; i + b <= tokens.size(); i += b) {
    parent = ChainHash(parent, tokens.subspan(i, b));
    bool held = false;
    for (const auto& [rank, e] : w->engines) {
      if (e.chains.contains(parent)) {
        held = true;
        break;
      }
    }
    if (!held) {
      auto p = w->predicted.find(parent);
      held = p != w->predicted.end() && p->second > now;
    }
    if (!held) break;
    ++matched;
  }
  return matched;
}

void KvIndex::ExpirePredicted(Worker& w, absl::Time now) {
  while (!w.predicted_order.empty() && w.predicted_order.front().first <= now) {
    const uint64_t h = w.predicted_order.front().second;
    auto it = w.predicted.find(h);
    if (it != w.predicted.end() && it->second <= now) w.predicted.erase(it);
    w.predicted_order.pop_front();
  }
}

void KvIndex::Predict(const std::string& worker, std::span<const int32_t> tokens, absl::Time now) {
  Worker& w = workers_[worker];
  ExpirePredicted(w, now);
  const absl::Time expiry = now + options_.predict_ttl;
  for (const uint64_t h : ChainHashes(tokens, BlockSize(worker))) {
    bool stored = false;
    for (const auto& [rank, e] : w.engines) stored = stored || e.chains.contains(h);
    if (stored) continue;
    if (w.predicted_order.size() >= options_.max_predicted_per_worker) {
      ++counters_.over_limit;
      return;
    }
    w.predicted[h] = expiry;
    w.predicted_order.emplace_back(expiry, h);
  }
}

size_t KvIndex::StoredBlocks(absl::string_view worker) const {
  const Worker* w = Find(worker);
  if (w == nullptr) return 0;
  size_t n = 0;
  for (const auto& [rank, e] : w->engines) n += e.engine_to_chain.size();
  return n;
}

void KvIndex::RemoveWorker(absl::string_view worker) {
  auto it = workers_.find(worker);
  if (it != workers_.end()) workers_.erase(it);
}

}  // namespace vllm::router
