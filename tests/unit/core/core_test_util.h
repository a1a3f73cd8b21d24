// Test doubles and builders shared by core/'s unit tests (tests only).
#ifndef VLLM_TESTS_UNIT_CORE_CORE_TEST_UTIL_H_
#define VLLM_TESTS_UNIT_CORE_CORE_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "config/vllm_config.h"
#include "core/codec.h"
#include "core/engine_core.h"
#include "core/engine_core_types.h"
#include "core/kv_cache_config.h"
#include "core/scheduler_output.h"
#include "gtest/gtest.h"

namespace vllm::core::testing {

inline constexpr int32_t kEos = 2;

// A resolved config for the scheduler and engine tests: a model path, the CPU, a context and
// step budget of 8192 tokens; vLLM's defaults otherwise.
inline config::VllmConfig MakeTestConfig() {
  config::VllmConfig c;
  c.model.model = "test-model";
  c.model.max_model_len = 8192;
  c.scheduler.max_num_batched_tokens = 8192;
  c.device.device = config::Device::kCpu;
  return c;
}

// The scheduler's two inputs in one value (Scheduler::Create(setup.config, setup.kv_cache)).
struct SchedulerSetup {
  config::VllmConfig config = MakeTestConfig();
  KVCacheConfig kv_cache;
};

// A prompt of `len` tokens, all >= 1000 (never EOS or a typical stop token), distinct for
// distinct `seed` strings so that unrelated requests share no prefix-cache blocks.
inline std::vector<int32_t> MakePrompt(const std::string& seed, int32_t len) {
  uint32_t h = 2166136261u;
  for (char c : seed) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < len; ++i) {
    tokens.push_back(1000 + static_cast<int32_t>((h + static_cast<uint32_t>(i) * 7919u) % 50000));
  }
  return tokens;
}

// A request with prompt MakePrompt(id, prompt_len).
inline EngineCoreRequest MakeRequest(const std::string& id, int32_t prompt_len,
                                     std::optional<int32_t> max_tokens = 16, int32_t priority = 0,
                                     double arrival_time = 0.0) {
  EngineCoreRequest r;
  r.request_id = id;
  r.prompt_token_ids = MakePrompt(id, prompt_len);
  r.sampling_params.max_tokens = max_tokens;
  r.sampling_params.ignore_eos = false;
  r.eos_token_id = kEos;
  r.priority = priority;
  r.arrival_time = arrival_time;
  return r;
}

// The token a deterministic model samples for `request_id` at `position`: depends only on
// (request, position), so preemption and recompute must reproduce it. Never below 10.
inline int32_t ScriptedToken(const std::string& request_id, int32_t position) {
  uint32_t h = 2166136261u;
  for (char c : request_id) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  h = (h ^ static_cast<uint32_t>(position)) * 16777619u;
  return 10 + static_cast<int32_t>(h % 5000);
}

// A fake worker: keeps per-request token state from SchedulerOutput deltas like a model
// runner, and samples `token_fn(request, position)` when a request's tokens are all
// computed. Each SchedulerOutput goes through the msgpack codec first, as on the wire.
class ScriptedModel {
 public:
  using TokenFn = std::function<int32_t(const std::string&, int32_t)>;
  explicit ScriptedModel(TokenFn token_fn = ScriptedToken) : token_fn_(std::move(token_fn)) {}

  ModelRunnerOutput Run(const SchedulerOutput& original) {
    auto decoded = DecodeSchedulerOutput(Encode(original));
    if (!decoded.ok()) {
      ADD_FAILURE() << decoded.status();
      return {};
    }
    const SchedulerOutput& so = *decoded;
    if (so != original) ADD_FAILURE() << "SchedulerOutput changed through the codec";
    for (const std::string& id : so.finished_req_ids) tokens_.erase(id);
    for (const std::string& id : so.preempted_req_ids) tokens_.erase(id);
    ModelRunnerOutput out;
    size_t i = 0;
    for (const NewRequestData& d : so.scheduled_new_reqs) {
      tokens_[d.req_id] = d.prompt_token_ids;
      Sample(d.req_id, d.num_computed_tokens + so.num_scheduled_tokens[i++], &out);
    }
    const CachedRequestData& c = so.scheduled_cached_reqs;
    for (size_t j = 0; j < c.size(); ++j, ++i) {
      auto ids = c.new_token_ids_of(j);
      if (c.resumed_from_preemption[j]) {
        tokens_[c.req_ids[j]].assign(ids.begin(), ids.end());
      } else if (!tokens_.contains(c.req_ids[j])) {
        ADD_FAILURE() << "cached request " << c.req_ids[j] << " unknown to the worker";
      }
      Sample(c.req_ids[j], c.num_computed_tokens[j] + so.num_scheduled_tokens[i], &out);
    }
    ++num_steps_;
    return out;
  }

  int num_steps() const { return num_steps_; }

 private:
  void Sample(const std::string& id, int32_t end, ModelRunnerOutput* out) {
    std::vector<int32_t>& tokens = tokens_[id];
    out->req_ids.push_back(id);
    auto& sampled = out->sampled_token_ids.emplace_back();
    if (end >= static_cast<int32_t>(tokens.size())) {
      const int32_t token = token_fn_(id, static_cast<int32_t>(tokens.size()));
      tokens.push_back(token);
      sampled.push_back(token);
    }
  }

  TokenFn token_fn_;
  absl::flat_hash_map<std::string, std::vector<int32_t>> tokens_;
  int num_steps_ = 0;
};

// Executor double: plays back ScriptedModel tokens. With max_concurrent_batches > 1, async
// steps run lazily when their future is waited on (in submission order).
class ScriptedExecutor : public Executor {
 public:
  struct Options {
    int64_t available_memory = int64_t{1} << 20;
    KVCacheSpec spec{/*num_layers=*/2, /*num_kv_heads=*/2, /*head_dim=*/4, /*dtype_bytes=*/2};
    int32_t max_concurrent_batches = 1;
    // ExecuteModel fails from this step on (-1 = never).
    int fail_at_step = -1;
  };
  explicit ScriptedExecutor(Options options, ScriptedModel::TokenFn token_fn = ScriptedToken)
      : options_(options), model_(std::move(token_fn)) {}

  absl::StatusOr<KVCacheSpec> GetKVCacheSpec() override { return options_.spec; }
  absl::StatusOr<int64_t> DetermineAvailableMemory() override { return options_.available_memory; }
  absl::Status InitializeKVCache(int32_t num_blocks, int32_t block_size) override {
    initialized_blocks = num_blocks;
    return absl::OkStatus();
  }
  absl::StatusOr<ModelRunnerOutput> ExecuteModel(const SchedulerOutput& so) override {
    if (options_.fail_at_step >= 0 && model_.num_steps() >= options_.fail_at_step) {
      return absl::UnavailableError("worker 0 died");
    }
    outputs.push_back(so);
    return model_.Run(so);
  }
  ModelOutputFuture ExecuteModelAsync(const SchedulerOutput& so) override {
    if (options_.max_concurrent_batches <= 1) return Executor::ExecuteModelAsync(so);
    return std::async(std::launch::deferred, [this, so] { return ExecuteModel(so); });
  }
  int32_t max_concurrent_batches() const override { return options_.max_concurrent_batches; }
  void Shutdown() override { shut_down = true; }

  int32_t initialized_blocks = 0;
  bool shut_down = false;
  std::vector<SchedulerOutput> outputs;

 private:
  Options options_;
  ScriptedModel model_;
};

}  // namespace vllm::core::testing

#endif  // VLLM_TESTS_UNIT_CORE_CORE_TEST_UTIL_H_
