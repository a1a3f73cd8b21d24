#include "core/kv_connector_offload.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/json_util.h"
#include "base/status_macros.h"
#include "core/kv_cache_manager.h"
#include "core/kv_cache_utils.h"
#include "spdlog/spdlog.h"

namespace vllm::core {
namespace {

constexpr char kName[] = "OffloadingConnector";
constexpr std::string_view kKnownKeys[] = {"cpu_bytes_to_use", "offload_prompt_only",
                                           "eviction_policy", "block_size"};
// --kv-offloading-size's bound (config::kMaxKvOffloadingGiB) in bytes.
constexpr double kMaxCpuBytes = config::kMaxKvOffloadingGiB * static_cast<double>(1LL << 30);

absl::Status ExtraConfigError(absl::string_view key, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("--kv-transfer-config: kv_connector_extra_config \"", key, "\": ", problem));
}

absl::StatusOr<nlohmann::json> ExtraConfigObject(const std::string& text) {
  if (text.empty()) return nlohmann::json::object();
  VLLM_ASSIGN_OR_RETURN(nlohmann::json j,
                        base::ParseJson(text, "--kv-transfer-config kv_connector_extra_config", 8));
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        "--kv-transfer-config: kv_connector_extra_config must be a JSON object");
  }
  return j;
}

// cpu_bytes_to_use: a positive number of bytes (vLLM writes a float), floored.
absl::StatusOr<int64_t> ReadCpuBytes(const nlohmann::json& extra) {
  const auto it = extra.find("cpu_bytes_to_use");
  if (it == extra.end()) {
    return ExtraConfigError("cpu_bytes_to_use",
                            absl::StrCat("required by ", kName, " (--kv-offloading-size sets it)"));
  }
  const double v = it->is_number() ? it->get<double>() : 0.0;
  if (!it->is_number() || !std::isfinite(v) || v < 1 || v > kMaxCpuBytes) {
    return ExtraConfigError(
        "cpu_bytes_to_use",
        absl::StrFormat("expected bytes in [1, %.0f], got %s", kMaxCpuBytes, it->dump()));
  }
  return it->is_number_integer() ? it->get<int64_t>() : static_cast<int64_t>(std::floor(v));
}

// The tier's directory: block hash → host slot, least recently used first.
class HostTier {
 public:
  explicit HostTier(int32_t num_slots) : num_slots_(num_slots) {}

  bool Contains(const BlockHash& hash) const { return index_.contains(hash); }

  // The slot holding `hash`, now the most recently used; nullopt when absent.
  std::optional<int32_t> Touch(const BlockHash& hash) {
    auto it = index_.find(hash);
    if (it == index_.end()) return std::nullopt;
    lru_.splice(lru_.end(), lru_, it->second);
    return it->second->slot;
  }

  // A slot for `hash` (absent): one never used, else the least recently used entry's, which
  // is evicted.
  int32_t Insert(const BlockHash& hash) {
    int32_t slot = 0;
    if (next_unused_ < num_slots_) {
      slot = next_unused_++;
    } else {
      slot = lru_.front().slot;
      index_.erase(lru_.front().hash);
      lru_.pop_front();
    }
    lru_.push_back({hash, slot});
    index_[hash] = std::prev(lru_.end());
    return slot;
  }

 private:
  struct Entry {
    BlockHash hash;
    int32_t slot = 0;
  };
  const int32_t num_slots_;
  int32_t next_unused_ = 0;
  std::list<Entry> lru_;  // front: least recently used
  absl::flat_hash_map<BlockHash, std::list<Entry>::iterator> index_;
};

class OffloadingConnectorScheduler final : public KVConnectorScheduler {
 public:
  OffloadingConnectorScheduler(int32_t block_size, int32_t num_slots, bool offload_prompt_only)
      : block_size_(block_size), offload_prompt_only_(offload_prompt_only), tier_(num_slots) {}

  std::string_view name() const override { return kName; }

  Match GetNumNewMatchedTokens(const Request& request, int32_t num_computed_tokens) override {
    // A request loads at most once (a failed load is not tried again; a preempted request
    // that loaded once recomputes); prompt_logprobs reads no cache.
    if (loaded_.contains(request.request_id) ||
        request.sampling_params.prompt_logprobs.has_value()) {
      return {};
    }
    const int32_t first = num_computed_tokens / block_size_;
    const int32_t n = NumTierHits(request, first);
    return {n * block_size_, n > 0};
  }

  void UpdateStateAfterAlloc(const Request& request, int32_t num_local_blocks,
                             int32_t num_external_tokens) override {
    if (num_external_tokens <= 0) return;
    VLLM_CHECK(num_external_tokens % block_size_ == 0)
        << "OffloadingConnector: a load of " << num_external_tokens
        << " tokens is not whole blocks";
    loaded_.insert(request.request_id);
    kv_transfer::LoadSpec& spec = pending_.loads.emplace_back();
    spec.req_id = request.request_id;
    spec.num_tokens = num_external_tokens;
    const int32_t n = num_external_tokens / block_size_;
    for (int32_t i = num_local_blocks; i < num_local_blocks + n; ++i) {
      // GetNumNewMatchedTokens found these just before (nothing evicts in between).
      const std::optional<int32_t> slot = tier_.Touch(request.block_hashes[i]);
      VLLM_CHECK(slot.has_value()) << "OffloadingConnector: block " << i << " of request "
                                   << request.request_id << " left the tier before its load";
      spec.local_block_ids.push_back(request.block_ids[i]);
      spec.remote_block_ids.push_back(*slot);
    }
  }

  void OnScheduled(const Request& request) override {
    const int32_t tokens = offload_prompt_only_
                               ? std::min(request.num_computed_tokens, request.num_prompt_tokens)
                               : request.num_computed_tokens;
    const auto limit =
        static_cast<int32_t>(std::min({static_cast<size_t>(tokens / block_size_),
                                       request.block_hashes.size(), request.block_ids.size()}));
    int32_t& considered = considered_[request.request_id];
    kv_transfer::SaveSpec* spec = nullptr;
    for (int32_t i = considered; i < limit; ++i) {
      const BlockHash& hash = request.block_hashes[i];
      if (tier_.Touch(hash).has_value()) continue;
      const int32_t block = request.block_ids[i];
      if (block == KVCacheManager::kNullBlock) continue;  // out of a sliding window: freed
      if (spec == nullptr) {
        spec = &pending_.saves.emplace_back();
        spec->req_id = request.request_id;
      }
      spec->block_ids.push_back(block);
      spec->host_slots.push_back(tier_.Insert(hash));
    }
    if (spec != nullptr) {
      spec->num_tokens = static_cast<int32_t>(spec->block_ids.size()) * block_size_;
    }
    considered = std::max(considered, limit);
  }

  kv_transfer::KVConnectorMetadata BuildConnectorMeta() override {
    return std::exchange(pending_, {});
  }

  Finished RequestFinished(const Request& request) override {
    considered_.erase(request.request_id);
    loaded_.erase(request.request_id);
    return {};
  }

 private:
  // Consecutive blocks from `first` whose hashes are in the tier, never the block of the last
  // token (as the local prefix cache: it is computed to sample from).
  int32_t NumTierHits(const Request& request, int32_t first) const {
    const auto max_blocks =
        static_cast<int32_t>(std::min(static_cast<size_t>((request.num_tokens() - 1) / block_size_),
                                      request.block_hashes.size()));
    int32_t n = 0;
    while (first + n < max_blocks && tier_.Contains(request.block_hashes[first + n])) ++n;
    return n;
  }

  const int32_t block_size_;
  const bool offload_prompt_only_;
  HostTier tier_;
  kv_transfer::KVConnectorMetadata pending_;
  // Per request: its leading blocks already looked at for storing.
  absl::flat_hash_map<std::string, int32_t> considered_;
  // Requests whose load was set up (never again while they live).
  absl::flat_hash_set<std::string> loaded_;
};

}  // namespace

absl::StatusOr<OffloadingSettings> ParseOffloadingSettings(const config::VllmConfig& config) {
  VLLM_ASSIGN_OR_RETURN(const nlohmann::json extra,
                        ExtraConfigObject(config.kv_transfer.kv_connector_extra_config));
  for (const auto& [key, value] : extra.items()) {
    if (std::find(std::begin(kKnownKeys), std::end(kKnownKeys), key) == std::end(kKnownKeys)) {
      return ExtraConfigError(
          key, absl::StrCat("unknown key for ", kName,
                            " (known: cpu_bytes_to_use, offload_prompt_only, eviction_policy, "
                            "block_size)"));
    }
  }
  OffloadingSettings s;
  VLLM_ASSIGN_OR_RETURN(s.cpu_bytes_to_use, ReadCpuBytes(extra));
  if (const auto it = extra.find("offload_prompt_only"); it != extra.end()) {
    if (!it->is_boolean()) return ExtraConfigError("offload_prompt_only", "expected true or false");
    s.offload_prompt_only = it->get<bool>();
  }
  if (const auto it = extra.find("eviction_policy"); it != extra.end()) {
    if (!it->is_string() || it->get<std::string>() != "lru") {
      return ExtraConfigError("eviction_policy",
                              absl::StrCat(it->dump(),
                                           ": only \"lru\" is built (vLLM's \"arc\" "
                                           "is not)"));
    }
  }
  if (const auto it = extra.find("block_size"); it != extra.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() != config.cache.block_size) {
      return ExtraConfigError(
          "block_size", absl::StrFormat("%s: only --block-size (%d) is built (one device block "
                                        "per offloaded block)",
                                        it->dump(), config.cache.block_size));
    }
  }
  return s;
}

absl::StatusOr<int32_t> OffloadingNumSlots(const config::VllmConfig& config,
                                           int64_t block_bytes_all_ranks) {
  VLLM_ASSIGN_OR_RETURN(const OffloadingSettings settings, ParseOffloadingSettings(config));
  if (block_bytes_all_ranks <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: a KV-cache block of %d bytes cannot be offloaded", kName, block_bytes_all_ranks));
  }
  const int64_t slots = settings.cpu_bytes_to_use / block_bytes_all_ranks;
  if (slots < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--kv-offloading-size: %d bytes (kv_connector_extra_config cpu_bytes_to_use) hold no KV "
        "block: one block of %d tokens takes %d bytes over the %d tensor-parallel rank(s); give "
        "at least %.6f GiB",
        settings.cpu_bytes_to_use, config.cache.block_size, block_bytes_all_ranks,
        config.parallel.tensor_parallel_size,
        static_cast<double>(block_bytes_all_ranks) / static_cast<double>(1LL << 30)));
  }
  return static_cast<int32_t>(std::min<int64_t>(slots, std::numeric_limits<int32_t>::max()));
}

absl::StatusOr<std::unique_ptr<KVConnectorScheduler>> MakeOffloadingConnectorScheduler(
    const config::VllmConfig& config, const KVConnectorContext& context) {
  if (!config.cache.enable_prefix_caching) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-offloading-size (", kName,
                     ") needs prefix caching: the tier keys blocks by their prefix hash; drop "
                     "--no-enable-prefix-caching"));
  }
  VLLM_ASSIGN_OR_RETURN(const OffloadingSettings settings, ParseOffloadingSettings(config));
  VLLM_ASSIGN_OR_RETURN(const int32_t num_slots, OffloadingNumSlots(config, context.block_bytes));
  spdlog::info("{}: a host tier of {} blocks of {} tokens ({} bytes each over {} TP rank(s))",
               kName, num_slots, config.cache.block_size, context.block_bytes,
               config.parallel.tensor_parallel_size);
  return std::unique_ptr<KVConnectorScheduler>(new OffloadingConnectorScheduler(
      config.cache.block_size, num_slots, settings.offload_prompt_only));
}

}  // namespace vllm::core
