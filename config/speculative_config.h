// --speculative-config (vLLM's SpeculativeConfig, vllm/config/speculative.py): the setting and
// its strict JSON parser (vLLM's keys; one we do not honour is refused by name, never ignored).
#ifndef VLLM_CONFIG_SPECULATIVE_CONFIG_H_
#define VLLM_CONFIG_SPECULATIVE_CONFIG_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/field_bounds.h"

namespace vllm::config {

// The methods --speculative-config accepts (vLLM 0.33's names plus medusa, which 0.33 dropped
// and we keep); "" is no speculation.
inline constexpr std::string_view kSpeculativeMethods[] = {
    "", "ngram", "suffix", "eagle", "eagle3", "medusa", "draft_model", "mtp"};
// The most draft tokens per request per step.
inline constexpr int32_t kMaxSpeculativeTokens = 16;
// The longest num_speculative_tokens_per_batch_size text (and so at most a few hundred ranges).
inline constexpr size_t kMaxScheduleBytes = 4096;

// --speculative-config (vLLM's SpeculativeConfig): the proposer and how many tokens it drafts
// per request per step; the target model verifies them in one forward pass. Values as resolved
// by ParseSpeculativeConfig (vLLM's defaults filled in, e.g. ngram's prompt_lookup_min/max 5).
struct SpeculativeConfig {
  std::string method;  // "" (off) or one of kSpeculativeMethods
  // k: draft tokens per request per step (suffix: the most; it proposes as many as it trusts).
  int32_t num_speculative_tokens = 0;
  // The draft: an EAGLE/EAGLE-3/Medusa head's or a draft model's directory.
  std::filesystem::path model;
  // 0: as the target's tensor_parallel_size (vLLM's default); 1: the whole draft on every
  // rank. Any other value must equal the target's (VllmConfig::Validate).
  int32_t draft_tensor_parallel_size = 0;
  // ngram: the n-gram lengths matched against the request's earlier tokens (longest first).
  int32_t prompt_lookup_min = 0;
  int32_t prompt_lookup_max = 0;
  // suffix (vLLM's suffix_decoding_*): tree depth, requests whose outputs are cached, draft
  // length per matched token, and the least probability a drafted token may have.
  int32_t suffix_decoding_max_tree_depth = 24;
  int32_t suffix_decoding_max_cached_requests = 10000;
  double suffix_decoding_max_spec_factor = 1.0;
  double suffix_decoding_min_token_prob = 0.1;
  // Dynamic speculative decoding (vLLM's num_speculative_tokens_per_batch_size): k by the
  // step's batch size, as the canonical JSON of its inclusive ranges sorted by start,
  // "[[start,end,k],...]" ("" when off; kept as text so that the config's wire form stays
  // field by field). DynamicSchedule expands it.
  std::string num_speculative_tokens_per_batch_size;

  bool enabled() const { return !method.empty(); }
  // Whether the draft runs in the worker on the target's hidden states or beside it (eagle,
  // eagle3, medusa, draft_model, mtp), its tokens coming back with each step's output; ngram
  // and suffix draft in the engine core.
  bool DraftsInWorker() const { return enabled() && method != "ngram" && method != "suffix"; }
  // KV slots the scheduler allocates past a request's scheduled tokens for the draft to write
  // its own positions (vLLM's num_lookahead_tokens): k for a draft with a KV cache (eagle,
  // eagle3, draft_model), 0 for one without (medusa) and for the engine-core proposers.
  int32_t NumLookaheadTokens() const {
    return DraftsInWorker() && method != "medusa" ? num_speculative_tokens : 0;
  }

  template <class Self, class V>
  static void Fields(Self& s, V& v) {
    v("method", s.method, OneOf(kSpeculativeMethods));
    v("num_speculative_tokens", s.num_speculative_tokens, Range(0, kMaxSpeculativeTokens));
    v("model", s.model, MaxBytes(kMaxPathBytes));
    v("draft_tensor_parallel_size", s.draft_tensor_parallel_size, Range(0, 1 << 10));
    v("prompt_lookup_min", s.prompt_lookup_min, Range(0, 1 << 20));
    v("prompt_lookup_max", s.prompt_lookup_max, Range(0, 1 << 20));
    v("suffix_decoding_max_tree_depth", s.suffix_decoding_max_tree_depth, Range(1, 1 << 16));
    v("suffix_decoding_max_cached_requests", s.suffix_decoding_max_cached_requests,
      Range(0, 1 << 30));
    v("suffix_decoding_max_spec_factor", s.suffix_decoding_max_spec_factor);
    v("suffix_decoding_min_token_prob", s.suffix_decoding_min_token_prob);
    v("num_speculative_tokens_per_batch_size", s.num_speculative_tokens_per_batch_size,
      MaxBytes(kMaxScheduleBytes));
  }
  // The rules across fields (vLLM's SpeculativeConfig.__post_init__), naming the key.
  [[nodiscard]] absl::Status Validate() const;
  // The dynamic schedule as a dense lookup (vLLM's build_dynamic_sd_schedule_lookup): entry b
  // (1..max_batch_size) is the k of a step with b requests, at most num_speculative_tokens;
  // a gap between ranges and the tail after the last take the k of the range before. Empty
  // without a schedule. Requires a validated config.
  std::vector<int32_t> DynamicSchedule(int32_t max_batch_size) const;
  friend bool operator==(const SpeculativeConfig&, const SpeculativeConfig&) = default;
};

// Parses the flag's JSON object into a SpeculativeConfig with vLLM's defaults filled in (ngram:
// prompt_lookup_min/max 5 when neither is given, else the one given for both; suffix:
// num_speculative_tokens min(suffix_decoding_max_tree_depth, kMaxSpeculativeTokens) when not
// given) and Validate()d. InvalidArgument naming the key: an unknown key, a wrong type, a
// value out of range, or a vLLM key this server does not honour.
[[nodiscard]] absl::StatusOr<SpeculativeConfig> ParseSpeculativeConfig(std::string_view json);

}  // namespace vllm::config

#endif  // VLLM_CONFIG_SPECULATIVE_CONFIG_H_
