// The scheduler's per-step allocations: a steady-state decode step (Schedule() into a reused
// SchedulerOutput + UpdateFromOutput() into a reused EngineCoreOutputs) allocates nothing, and
// the reusing overloads give exactly what the value-returning ones give.
//
// Steady state here: every request is running and decoding one token per step; no request is
// admitted, finishes or is preempted in the counted steps (those allocate: a new request's
// NewRequestData, a finished id). Block boundaries are crossed (each request takes a new block
// every block_size tokens and registers its full blocks in the prefix cache): they must not
// allocate. A request's token list, block table and block hashes are reserved when it is
// admitted for up to 1024 generated tokens; a longer output may grow them (amortised).
//
// Counts come from base/alloc_counter (the global operator new, every form, replaced in this
// binary), which also works under ASan (it allocates with malloc, which ASan still checks).
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/alloc_counter.h"
#include "core/scheduler.h"
#include "gtest/gtest.h"
#include "tests/unit/core/core_test_util.h"

namespace vllm::core {
namespace {

using testing::kEos;
using testing::MakeRequest;
using testing::MakeTestConfig;
using testing::ScriptedToken;

// Counts the allocations of `fn()` (base/alloc_counter.h).
template <typename Fn>
int64_t CountAllocs(Fn&& fn) {
  return base::CountAllocations(fn);
}

// A request id as long as a real one (cmpl-<32 hex>-0: beyond std::string's inline buffer).
std::string LongId(int i) { return absl::StrFormat("cmpl-%032x-0", i); }

// The worker's part: one token for every scheduled request whose tokens are all computed;
// `token(id, position)` picks it. Reuses `out`'s buffers.
template <typename TokenFn>
void FakeModelOutput(const Scheduler& scheduler, const SchedulerOutput& so, TokenFn token,
                     ModelRunnerOutput* out) {
  const size_t n = so.num_scheduled_reqs();
  out->req_ids.resize(n);
  out->sampled_token_ids.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& id = so.scheduled_req_id(i);
    out->req_ids[i] = id;
    const Request* r = scheduler.GetRequest(id);
    std::vector<int32_t>& sampled = out->sampled_token_ids[i];
    sampled.clear();
    if (r != nullptr && r->num_computed_tokens >= r->num_tokens()) {
      sampled.push_back(token(id, r->num_tokens()));
    }
  }
}

// The counter works in this build (under ASan too): a zero below means no allocation.
TEST(SchedulerAllocTest, CounterSeesAllocations) {
  std::vector<int32_t> v;
  EXPECT_EQ(CountAllocs([&] { v.reserve(100); }), 1);
  auto p = std::make_unique<std::string>(100, 'x');
  EXPECT_EQ(CountAllocs([&] { p = std::make_unique<std::string>(*p); }), 2);
  EXPECT_EQ(p->size(), 100u);
  EXPECT_EQ(v.capacity(), 100u);
}

TEST(SchedulerAllocTest, SteadyStateDecodeStepAllocatesNothing) {
  constexpr int kNumRequests = 300;
  constexpr int kBlockSize = 16;
  config::VllmConfig config = MakeTestConfig();
  config.cache.block_size = kBlockSize;
  config.cache.enable_prefix_caching = true;
  config.scheduler.max_num_seqs = 512;
  KVCacheConfig kv_cache;
  kv_cache.num_blocks = kNumRequests * 20;
  std::unique_ptr<Scheduler> scheduler = std::move(Scheduler::Create(config, kv_cache)).value();
  for (int i = 0; i < kNumRequests; ++i) {
    // Staggered prompt lengths spread the block boundaries over the steps; the first two
    // blocks are shared (prefix-cache hits).
    EngineCoreRequest r = MakeRequest(LongId(i), 40 + i % kBlockSize, /*max_tokens=*/500);
    for (int j = 0; j < 2 * kBlockSize; ++j) r.prompt_token_ids[j] = 1000 + j;
    ASSERT_TRUE(scheduler->AddRequest(std::move(r)).ok());
  }
  auto token = [](const std::string& id, int32_t position) { return ScriptedToken(id, position); };
  SchedulerOutput so;
  EngineCoreOutputs outputs;
  ModelRunnerOutput model_output;
  // Warm up: every prompt computed, then enough decode steps for the reused buffers to reach
  // their steady sizes.
  for (int step = 0; step < 40; ++step) {
    scheduler->Schedule(&so);
    FakeModelOutput(*scheduler, so, token, &model_output);
    ASSERT_TRUE(scheduler->UpdateFromOutput(so, model_output, &outputs).ok());
  }
  ASSERT_EQ(scheduler->running().size(), static_cast<size_t>(kNumRequests));

  const size_t hashes_before = scheduler->kv_cache_manager().block_pool().num_cached_hashes();
  size_t new_blocks = 0;
  // 2.5 block sizes: every request crosses at least two block boundaries.
  for (int step = 0; step < 40; ++step) {
    SCOPED_TRACE(absl::StrFormat("steady step %d", step));
    const int64_t schedule_allocs = CountAllocs([&] { scheduler->Schedule(&so); });
    // Steady: every request decodes one token, none is admitted, preempted or finished.
    ASSERT_TRUE(so.scheduled_new_reqs.empty());
    ASSERT_EQ(so.scheduled_cached_reqs.size(), static_cast<size_t>(kNumRequests));
    ASSERT_EQ(so.total_num_scheduled_tokens, kNumRequests);
    ASSERT_TRUE(so.preempted_req_ids.empty());
    ASSERT_TRUE(so.finished_req_ids.empty());
    new_blocks += so.scheduled_cached_reqs.new_block_ids.size();
    FakeModelOutput(*scheduler, so, token, &model_output);
    absl::Status status;
    const int64_t update_allocs =
        CountAllocs([&] { status = scheduler->UpdateFromOutput(so, model_output, &outputs); });
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_EQ(outputs.outputs.size(), static_cast<size_t>(kNumRequests));
    ASSERT_TRUE(outputs.finished_requests.empty());
    EXPECT_EQ(schedule_allocs, 0);
    EXPECT_EQ(update_allocs, 0);
  }
  // The steps crossed block boundaries: new blocks, registered in the prefix cache.
  EXPECT_GE(new_blocks, static_cast<size_t>(2 * kNumRequests));
  EXPECT_GE(scheduler->kv_cache_manager().block_pool().num_cached_hashes(),
            hashes_before + 2 * kNumRequests);
}

// The overloads that overwrite a reused SchedulerOutput / EngineCoreOutputs give what the
// value-returning ones give, step by step, through admissions, finishes (EOS, stop tokens,
// max_tokens), preemptions (a small cache) and chunked prefills.
TEST(SchedulerAllocTest, ReusedOutputsEqualFreshOnes) {
  config::VllmConfig config = MakeTestConfig();
  config.cache.block_size = 16;
  config.cache.enable_prefix_caching = true;
  config.model.max_model_len = 512;
  config.scheduler.max_num_seqs = 24;
  config.scheduler.max_num_batched_tokens = 256;
  config.scheduler.enable_chunked_prefill = true;
  KVCacheConfig kv_cache;
  kv_cache.num_blocks = 60;
  std::unique_ptr<Scheduler> fresh = std::move(Scheduler::Create(config, kv_cache)).value();
  std::unique_ptr<Scheduler> reused = std::move(Scheduler::Create(config, kv_cache)).value();
  auto add = [&](int i) {
    for (Scheduler* s : {fresh.get(), reused.get()}) {
      EngineCoreRequest r = MakeRequest(i % 3 == 0 ? absl::StrFormat("r%d", i) : LongId(i),
                                        10 + (i * 37) % 150, /*max_tokens=*/5 + i % 40);
      if (i % 4 == 0) r.sampling_params.stop_token_ids = {17, 23};
      ASSERT_TRUE(s->AddRequest(std::move(r)).ok());
    }
  };
  // EOS or a stop token now and then.
  auto token = [](const std::string& id, int32_t position) {
    const int32_t t = ScriptedToken(id, position);
    return t % 41 == 0 ? kEos : (t % 43 == 0 ? 17 : t);
  };
  int next = 0;
  for (; next < 30; ++next) add(next);
  SchedulerOutput so;
  EngineCoreOutputs outputs;
  ModelRunnerOutput model_output;
  int64_t preemptions = 0;
  int64_t finished = 0;
  for (int step = 0; step < 300 && fresh->HasRequests(); ++step) {
    SCOPED_TRACE(absl::StrFormat("step %d", step));
    SchedulerOutput expected_so = fresh->Schedule();
    reused->Schedule(&so);
    ASSERT_EQ(so, expected_so);
    preemptions += static_cast<int64_t>(so.preempted_req_ids.size());
    FakeModelOutput(*fresh, expected_so, token, &model_output);
    absl::StatusOr<EngineCoreOutputs> expected = fresh->UpdateFromOutput(expected_so, model_output);
    ASSERT_TRUE(expected.ok()) << expected.status();
    ASSERT_TRUE(reused->UpdateFromOutput(so, model_output, &outputs).ok());
    // Events carry each scheduler's own clock: the same kinds, then the rest compared whole.
    ASSERT_EQ(outputs.outputs.size(), expected->outputs.size());
    for (size_t i = 0; i < outputs.outputs.size(); ++i) {
      ASSERT_EQ(outputs.outputs[i].events.size(), expected->outputs[i].events.size());
      for (size_t j = 0; j < outputs.outputs[i].events.size(); ++j) {
        ASSERT_EQ(outputs.outputs[i].events[j].type, expected->outputs[i].events[j].type);
      }
      outputs.outputs[i].events = expected->outputs[i].events;
    }
    ASSERT_EQ(outputs, *expected);
    finished += static_cast<int64_t>(outputs.finished_requests.size());
    if (step % 5 == 0 && next < 80) add(next++);
  }
  EXPECT_GT(preemptions, 0);
  EXPECT_GT(finished, 30);
}

}  // namespace
}  // namespace vllm::core
