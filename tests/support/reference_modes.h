// The engine modes the reference tests run every fixture in (frontend reference_test,
// reference_pp_test): batch 1 and 8, prefix caching on and off, chunked prefill forced,
// preemption forced; and the engine arguments of one mode at a tensor × pipeline layout.
// Header-only; needs gtest and frontend/.
#ifndef VLLM_TESTS_SUPPORT_REFERENCE_MODES_H_
#define VLLM_TESTS_SUPPORT_REFERENCE_MODES_H_

#include <cstdint>
#include <filesystem>
#include <string>

#include "config/engine_args.h"
#include "config/speculative_config.h"
#include "frontend/engine/llm_engine.h"
#include "gtest/gtest.h"
#include "tests/support/process.h"

namespace vllm::testing {

struct Mode {
  const char* name;
  int32_t batch;  // requests in flight at once (1 or all)
  bool prefix_caching;
  int32_t max_num_batched_tokens;  // 0: default
  int32_t long_prefill_token_threshold;
  int32_t num_blocks;  // 0: from the memory budget
  int32_t max_model_len;
  int32_t repeats;  // run the prompts this many times on one engine (cache hits)
};

inline constexpr Mode kModes[] = {
    {"batch1", 1, false, 0, 0, 0, 0, 1},
    {"batch8", 8, false, 0, 0, 0, 0, 1},
    {"batch8_prefix_caching", 8, true, 0, 0, 0, 0, 2},
    {"batch1_prefix_caching", 1, true, 0, 0, 0, 0, 2},
    {"chunked_prefill", 8, true, 16, 5, 0, 0, 1},
    // 14 blocks of 16 tokens hold about two of the longest requests (64 + 24 tokens): the
    // rest wait, and running ones are preempted and recomputed.
    {"preemption", 8, true, 0, 0, 14, 128, 1},
};

// n-gram and suffix drafts with short settings, so that the fixtures' greedy loops give both
// accepted and rejected drafts.
inline constexpr const char* kNgramSpec =
    R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1,
        "prompt_lookup_max": 3})";
inline constexpr const char* kSuffixSpec =
    R"({"method": "suffix", "num_speculative_tokens": 4, "suffix_decoding_min_token_prob": 0.0})";

// Sanitizer builds (~10x slower here) run fewer combinations; release builds run them all.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kEveryPair = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kEveryPair = false;
#else
inline constexpr bool kEveryPair = true;
#endif
#else
inline constexpr bool kEveryPair = true;
#endif

// The engine arguments of `mode` for the fixture at `dir` with `tp` × `pp` ranks (worker
// processes of this test's vllm-launch when more than one) and `spec` (--speculative-config
// JSON; empty: none).
inline config::EngineArgs ModeArgs(const Mode& mode, const std::filesystem::path& dir, int32_t tp,
                                   int32_t pp, const std::string& spec) {
  config::EngineArgs args;
  args.config.model.model = dir;
  args.config.parallel.tensor_parallel_size = tp;
  args.config.parallel.pipeline_parallel_size = pp;
  if (tp * pp > 1) {
    args.config.parallel.distributed_executor_backend = config::ExecutorBackend::kMp;
    args.worker_binary = BinDir() + "/vllm-launch";
  }
  args.config.cache.enable_prefix_caching = mode.prefix_caching;
  args.config.scheduler.max_num_batched_tokens = mode.max_num_batched_tokens;
  args.config.scheduler.long_prefill_token_threshold = mode.long_prefill_token_threshold;
  args.config.model.max_model_len = mode.max_model_len;
  args.config.cache.kv_cache_memory_bytes = 64 << 20;
  if (mode.num_blocks > 0) args.config.cache.num_gpu_blocks_override = mode.num_blocks;
  if (!spec.empty()) {
    auto parsed = config::ParseSpeculativeConfig(spec);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    if (parsed.ok()) args.config.speculative = *parsed;
  }
  return args;
}

// What `mode` is meant to exercise did happen on the engine whose totals these are: a
// preemption when it forces one, a prefix-cache hit when it repeats with caching on.
inline void ExpectModeExercised(const Mode& mode, const frontend::LLMEngine::Totals& totals) {
  if (mode.num_blocks > 0) {
    EXPECT_GT(totals.num_preemptions, 0) << "the mode meant to force preemption did not";
  }
  if (mode.prefix_caching && mode.repeats > 1) {
    EXPECT_GT(totals.prefix_cache_hits, 0) << "the second pass hit no cached prefix";
  }
}

}  // namespace vllm::testing

#endif  // VLLM_TESTS_SUPPORT_REFERENCE_MODES_H_
