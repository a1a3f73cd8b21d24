// Scheduler micro-benchmark: the cost of one engine step's scheduling work,
// Scheduler::Schedule() + Scheduler::UpdateFromOutput(), with 256 / 1024 / 4096 running
// requests, prefix caching on.
//
//   decode:  128-token prompts (64 shared), up to 1024 generated tokens: nearly every
//            scheduled request decodes one token; a finished request is replaced at once.
//   prefill: 512-token prompts (256 shared), 32 generated tokens: every step also admits
//            and prefills the replacements of ~N/32 finished requests (chunked).
//
// Only the two scheduler calls are timed (manual time); building the fake model output
// (the worker's job) is not. The scheduler reuses one SchedulerOutput and one
// EngineCoreOutputs (the overloads that overwrite them in place). Counters: p50_us / p99_us
// per step, req_steps_per_s (scheduled requests per second of scheduler time), running (mean
// running requests), schedule_us / update_us (mean time in each call), allocs_per_step (mean
// heap allocations, operator new, inside the two calls; base/alloc_counter),
// steady_allocs_per_step (the same over the steady_steps that admitted, finished and preempted
// no request).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "base/alloc_counter.h"
#include "base/status_macros.h"
#include "benchmark/benchmark.h"
#include "core/scheduler.h"

namespace vllm::core {
namespace {

struct Workload {
  int32_t prompt_len;
  int32_t shared_prefix;
  int32_t max_tokens;
  int32_t prefill_budget;  // tokens beyond one per running request
  bool prefix_caching = true;
};

constexpr Workload kDecode{128, 64, 1024, 2048};
constexpr Workload kDecodeNoCache{128, 64, 1024, 2048, /*prefix_caching=*/false};
constexpr Workload kPrefill{512, 256, 32, 8192};

class Driver {
 public:
  Driver(int32_t num_running, const Workload& w) : workload_(w) {
    config::VllmConfig c;
    c.model.model = "bench";
    c.device.device = config::Device::kCpu;
    c.scheduler.max_num_seqs = num_running;
    c.scheduler.max_num_batched_tokens = num_running + w.prefill_budget;
    c.model.max_model_len = w.prompt_len + w.max_tokens + 16;
    c.cache.block_size = 16;
    c.cache.enable_prefix_caching = w.prefix_caching;
    KVCacheConfig kv_cache;
    kv_cache.num_blocks = (num_running + 64) * ((c.model.max_model_len + 15) / 16 + 1);
    scheduler_ = std::move(Scheduler::Create(c, kv_cache)).value();
    for (int32_t i = 0; i < num_running; ++i) {
      // Stagger lengths so that completions spread evenly over the steps.
      AddRequest(1 + (i * w.max_tokens) / num_running);
    }
    // Warm up until every request is running and past its prefill.
    for (int i = 0; i < 200; ++i) Step(nullptr);
  }

  // One step; adds the scheduler time to *elapsed (when non-null).
  void Step(std::chrono::nanoseconds* elapsed) {
    const int64_t allocs0 = vllm::base::AllocationsOnThisThread();
    auto t0 = std::chrono::steady_clock::now();
    scheduler_->Schedule(&so_);
    auto t1 = std::chrono::steady_clock::now();
    const int64_t allocs1 = vllm::base::AllocationsOnThisThread();
    FillModelOutput(so_);
    const int64_t allocs2 = vllm::base::AllocationsOnThisThread();
    auto t2 = std::chrono::steady_clock::now();
    absl::Status status = scheduler_->UpdateFromOutput(so_, model_output_, &outputs_);
    auto t3 = std::chrono::steady_clock::now();
    allocs_ += (allocs1 - allocs0) + (vllm::base::AllocationsOnThisThread() - allocs2);
    VLLM_CHECK_OK(status);
    if (elapsed != nullptr) *elapsed = (t1 - t0) + (t3 - t2);
    schedule_ns_ += (t1 - t0).count();
    update_ns_ += (t3 - t2).count();
    last_scheduled_ = static_cast<int64_t>(so_.num_scheduled_reqs());
    // Steady state: no request admitted, finished or preempted in this step.
    bool steady = so_.scheduled_new_reqs.empty() && so_.finished_req_ids.empty() &&
                  so_.preempted_req_ids.empty();
    for (const EngineCoreOutput& o : outputs_.outputs) {
      if (o.finished()) {
        steady = false;
        AddRequest(workload_.max_tokens);
      }
    }
    if (steady) {
      ++steady_steps_;
      steady_allocs_ += (allocs1 - allocs0) + (vllm::base::AllocationsOnThisThread() - allocs2);
    }
  }

  int64_t last_scheduled() const { return last_scheduled_; }
  // Total time in Schedule() / UpdateFromOutput() since construction (warm-up included).
  int64_t schedule_ns() const { return schedule_ns_; }
  int64_t update_ns() const { return update_ns_; }
  // Heap allocations inside the two scheduler calls since construction.
  int64_t allocs() const { return allocs_; }
  // Of those, in steps that admitted, finished and preempted no request, and their number.
  int64_t steady_allocs() const { return steady_allocs_; }
  int64_t steady_steps() const { return steady_steps_; }
  size_t num_running() const { return scheduler_->running().size(); }

 private:
  void AddRequest(int32_t max_tokens) {
    EngineCoreRequest r;
    r.request_id = "req-" + std::to_string(next_id_++);
    r.prompt_token_ids.resize(workload_.prompt_len);
    for (int32_t i = 0; i < workload_.prompt_len; ++i) {
      r.prompt_token_ids[i] = i < workload_.shared_prefix ? 100 + i : 1000 + next_id_ * 7 + i;
    }
    r.sampling_params.max_tokens = max_tokens;
    r.sampling_params.ignore_eos = true;
    VLLM_CHECK_OK(scheduler_->AddRequest(std::move(r)));
  }

  // The worker's part: one token for each request whose prompt is fully computed.
  void FillModelOutput(const SchedulerOutput& so) {
    const size_t n = so.num_scheduled_reqs();
    model_output_.req_ids.resize(n);
    model_output_.sampled_token_ids.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const std::string& id = so.scheduled_req_id(i);
      model_output_.req_ids[i] = id;
      const Request* r = scheduler_->GetRequest(id);
      auto& sampled = model_output_.sampled_token_ids[i];
      sampled.clear();
      if (r->num_computed_tokens >= r->num_tokens())
        sampled.push_back(7 + (r->num_tokens() & 1023));
    }
  }

  Workload workload_;
  std::unique_ptr<Scheduler> scheduler_;
  SchedulerOutput so_;
  EngineCoreOutputs outputs_;
  ModelRunnerOutput model_output_;
  int64_t allocs_ = 0;
  int64_t steady_allocs_ = 0;
  int64_t steady_steps_ = 0;
  int64_t next_id_ = 0;
  int64_t last_scheduled_ = 0;
  int64_t schedule_ns_ = 0;
  int64_t update_ns_ = 0;
};

void Run(benchmark::State& state, const Workload& workload) {
  Driver driver(static_cast<int32_t>(state.range(0)), workload);
  std::vector<double> step_us;
  step_us.reserve(1 << 16);
  int64_t scheduled = 0;
  double running = 0;
  const int64_t schedule_ns0 = driver.schedule_ns();
  const int64_t update_ns0 = driver.update_ns();
  const int64_t allocs0 = driver.allocs();
  const int64_t steady_allocs0 = driver.steady_allocs();
  const int64_t steady_steps0 = driver.steady_steps();
  double total_seconds = 0;
  for (auto _ : state) {
    std::chrono::nanoseconds elapsed{0};
    driver.Step(&elapsed);
    const double seconds = std::chrono::duration<double>(elapsed).count();
    state.SetIterationTime(seconds);
    total_seconds += seconds;
    step_us.push_back(seconds * 1e6);
    scheduled += driver.last_scheduled();
    running += static_cast<double>(driver.num_running());
  }
  std::sort(step_us.begin(), step_us.end());
  const size_t n = step_us.size();
  state.counters["p50_us"] = step_us[n / 2];
  state.counters["p99_us"] = step_us[std::min(n - 1, n * 99 / 100)];
  state.counters["req_steps_per_s"] = static_cast<double>(scheduled) / total_seconds;
  state.counters["running"] = running / static_cast<double>(n);
  state.counters["schedule_us"] =
      static_cast<double>(driver.schedule_ns() - schedule_ns0) / 1e3 / static_cast<double>(n);
  state.counters["update_us"] =
      static_cast<double>(driver.update_ns() - update_ns0) / 1e3 / static_cast<double>(n);
  state.counters["allocs_per_step"] =
      static_cast<double>(driver.allocs() - allocs0) / static_cast<double>(n);
  const int64_t steady_steps = driver.steady_steps() - steady_steps0;
  state.counters["steady_steps"] = static_cast<double>(steady_steps);
  state.counters["steady_allocs_per_step"] =
      steady_steps == 0 ? 0.0
                        : static_cast<double>(driver.steady_allocs() - steady_allocs0) /
                              static_cast<double>(steady_steps);
}

void BM_SchedulerStepDecode(benchmark::State& state) { Run(state, kDecode); }
void BM_SchedulerStepPrefill(benchmark::State& state) { Run(state, kPrefill); }
// Reference point: the decode mix without prefix caching (no block hashing / cache map).
void BM_SchedulerStepDecodeNoPrefixCache(benchmark::State& state) { Run(state, kDecodeNoCache); }

BENCHMARK(BM_SchedulerStepDecode)
    ->Arg(256)
    ->Arg(1024)
    ->Arg(4096)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SchedulerStepPrefill)
    ->Arg(256)
    ->Arg(1024)
    ->Arg(4096)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SchedulerStepDecodeNoPrefixCache)
    ->Arg(1024)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace vllm::core

BENCHMARK_MAIN();
