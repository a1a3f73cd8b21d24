#include "structured_output/manager.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"

namespace vllm::structured_output {

// A fixed set of threads running queued tasks; ParallelFor splits a range over them and the
// caller.
class TaskPool {
 public:
  explicit TaskPool(int32_t num_threads) {
    for (int32_t i = 0; i < num_threads; ++i) threads_.emplace_back([this] { Run(); });
  }
  ~TaskPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  void Post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

  // Runs fn(i) for i in [0, n): chunks go to the pool's threads and the caller, which returns
  // when all are done.
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
    const size_t num_chunks = std::min(n, threads_.size() + 1);
    if (num_chunks <= 1) {
      for (size_t i = 0; i < n; ++i) fn(i);
      return;
    }
    std::mutex done_mu;
    std::condition_variable done_cv;
    size_t remaining = num_chunks - 1;
    auto chunk = [&](size_t c) {
      for (size_t i = c * n / num_chunks; i < (c + 1) * n / num_chunks; ++i) fn(i);
    };
    for (size_t c = 1; c < num_chunks; ++c) {
      Post([&, c] {
        chunk(c);
        std::lock_guard<std::mutex> lock(done_mu);
        if (--remaining == 0) done_cv.notify_one();
      });
    }
    chunk(0);
    std::unique_lock<std::mutex> lock(done_mu);
    done_cv.wait(lock, [&] { return remaining == 0; });
  }

 private:
  void Run() {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stop_ and nothing left
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// One compile: written by a compile thread, read by the engine thread once `done`.
struct CompileJob {
  GrammarSpec spec;
  std::atomic<bool> done{false};
  absl::StatusOr<std::shared_ptr<const xgrammar::CompiledGrammar>> result =
      absl::UnknownError("not compiled");
  double seconds = 0;
  size_t bytes = 0;
};

// The backend (created by the first compile, off the engine thread) and the compiled
// grammars by spec key, least recently used first.
struct CompileCache {
  std::mutex mu;
  std::once_flag backend_once;
  absl::StatusOr<std::shared_ptr<XgrammarBackend>> backend = absl::UnknownError("no backend yet");
  std::condition_variable compiled;  // notified when a job is done (under mu)
  uint64_t num_done = 0;
  std::list<std::shared_ptr<CompileJob>> lru;  // front: most recently used
  absl::flat_hash_map<std::string, std::list<std::shared_ptr<CompileJob>>::iterator> by_key;
  int64_t bytes = 0;
};

RequestState::RequestState() = default;
RequestState::~RequestState() = default;

StructuredOutputManager::StructuredOutputManager(Options options)
    : options_(std::move(options)),
      cache_(std::make_shared<CompileCache>()),
      compile_pool_(std::make_unique<TaskPool>(std::max(options_.num_compile_threads, 1))),
      fill_pool_(std::make_unique<TaskPool>(std::max(options_.num_fill_threads - 1, 0))) {}

StructuredOutputManager::~StructuredOutputManager() = default;

std::unique_ptr<RequestState> StructuredOutputManager::Submit(
    const StructuredOutputsParams& params, std::optional<int32_t> eos_token_id,
    std::span<const int32_t> prompt_token_ids) {
  auto state = std::unique_ptr<RequestState>(new RequestState());
  state->eos_token_id_ = eos_token_id;
  state->reasoning_ended_ = !options_.reasoning.has_value() || options_.enable_in_reasoning ||
                            PromptEndsReasoning(*options_.reasoning, prompt_token_ids);
  state->submitted_ = absl::Now();
  GrammarSpec spec = ToGrammarSpec(params, options_.disable_any_whitespace);
  std::string key = spec.Key();
  {
    std::lock_guard<std::mutex> lock(cache_->mu);
    auto it = cache_->by_key.find(key);
    if (it != cache_->by_key.end()) {
      cache_->lru.splice(cache_->lru.begin(), cache_->lru, it->second);
      state->job_ = *it->second;
      ++stats_.cache_hits;
      return state;
    }
    auto job = std::make_shared<CompileJob>();
    job->spec = std::move(spec);
    cache_->lru.push_front(job);
    cache_->by_key.emplace(std::move(key), cache_->lru.begin());
    state->job_ = job;
  }
  ++stats_.cache_misses;
  compile_pool_->Post([cache = cache_, job = state->job_, options = options_] {
    std::call_once(cache->backend_once, [&] {
      auto backend =
          XgrammarBackend::Create(options.model_dir, options.vocab_size, options.stop_token_ids);
      if (backend.ok()) {
        cache->backend = std::shared_ptr<XgrammarBackend>(std::move(*backend));
      } else {
        cache->backend = backend.status();
      }
    });
    const absl::Time start = absl::Now();
    if (cache->backend.ok()) {
      job->result = (*cache->backend)->Compile(job->spec);
    } else {
      job->result = absl::FailedPreconditionError(absl::StrFormat(
          "structured outputs are unavailable: %s", cache->backend.status().message()));
    }
    job->seconds = absl::ToDoubleSeconds(absl::Now() - start);
    job->bytes = job->result.ok() ? XgrammarBackend::MemorySize(**job->result) : 0;
    {
      // Failed compiles leave the cache (a later request may be luckier); compiled ones count
      // against its budget, least recently used evicted first.
      std::lock_guard<std::mutex> lock(cache->mu);
      auto it = cache->by_key.find(job->spec.Key());
      if (it != cache->by_key.end() && *it->second == job) {
        if (!job->result.ok()) {
          cache->lru.erase(it->second);
          cache->by_key.erase(it);
        } else {
          cache->bytes += static_cast<int64_t>(job->bytes);
        }
      }
      while (cache->bytes > options.cache_bytes && cache->lru.size() > 1) {
        const std::shared_ptr<CompileJob>& victim = cache->lru.back();
        if (!victim->done.load(std::memory_order_acquire) && victim != job) break;
        cache->bytes -= static_cast<int64_t>(victim->bytes);
        cache->by_key.erase(victim->spec.Key());
        cache->lru.pop_back();
      }
      job->done.store(true, std::memory_order_release);
      ++cache->num_done;
    }
    cache->compiled.notify_all();
  });
  return state;
}

StructuredOutputManager::PollResult StructuredOutputManager::Poll(RequestState& state,
                                                                  std::string* error) {
  if (state.grammar_ != nullptr) return PollResult::kReady;
  CompileJob& job = *state.job_;
  if (!job.done.load(std::memory_order_acquire)) {
    const double waited = absl::ToDoubleSeconds(absl::Now() - state.submitted_);
    if (waited <= options_.max_compile_seconds) return PollResult::kCompiling;
    ++stats_.compile_timeouts;
    *error = absl::StrFormat(
        "the structured-output grammar did not compile within %g s "
        "(--max-structured-output-compile-seconds)",
        options_.max_compile_seconds);
    return PollResult::kFailed;
  }
  if (!job.result.ok()) {
    ++stats_.compile_failures;
    *error = std::string(job.result.status().message());
    return PollResult::kFailed;
  }
  if (job.seconds > 0) stats_.ObserveCompileSeconds(job.seconds);
  job.seconds = 0;  // counted once, by the first request that waited for it
  state.grammar_ = (*cache_->backend)->MakeGrammar(**job.result, state.eos_token_id_);
  if (!state.reasoning_ended_) {
    // An implicit end the grammar refuses as its first token stays masked while the request
    // reasons; one it takes is tried and undone.
    std::vector<int32_t> ends = options_.reasoning->implicit_end_ids;
    std::sort(ends.begin(), ends.end());
    for (int32_t id : ends) {
      if (state.grammar_->AcceptTokens(std::span<const int32_t>(&id, 1))) {
        state.grammar_->Rollback(1);
      } else {
        state.masked_reasoning_ends_.push_back(id);
      }
    }
  }
  return PollResult::kReady;
}

bool StructuredOutputManager::ShouldAdvance(RequestState& state, int32_t token) {
  if (state.reasoning_ended_) return true;
  if (token == options_.reasoning->end_id) {
    state.reasoning_ended_ = true;  // the think-end token itself belongs to the reasoning
    return false;
  }
  if (options_.reasoning->IsImplicitEnd(token)) {
    state.reasoning_ended_ = true;  // the implicit end is content: the grammar's first token
    return true;
  }
  return false;
}

void StructuredOutputManager::FillReasoningRow(const RequestState& state,
                                               std::span<int32_t> row) const {
  std::fill(row.begin(), row.end(), ~int32_t{0});
  for (int32_t id : state.masked_reasoning_ends_) {
    const size_t word = static_cast<size_t>(id / 32);
    if (id >= 0 && word < row.size()) row[word] &= ~static_cast<int32_t>(1u << (id % 32));
  }
}

void StructuredOutputManager::FillBitmasks(std::span<Grammar* const> grammars,
                                           std::span<int32_t> out) {
  const size_t words = static_cast<size_t>(bitmask_words());
  auto fill = [&](size_t i) {
    if (grammars[i] != nullptr) grammars[i]->FillBitmask(out.subspan(i * words, words));
  };
  // A row costs microseconds to tens of microseconds: threads pay off from a few rows on.
  if (grammars.size() < 4) {
    for (size_t i = 0; i < grammars.size(); ++i) fill(i);
  } else {
    fill_pool_->ParallelFor(grammars.size(), fill);
  }
}

void StructuredOutputManager::WaitForCompiles(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(cache_->mu);
  const uint64_t seen = cache_->num_done;
  cache_->compiled.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                            [&] { return cache_->num_done != seen; });
}

StructuredOutputStats StructuredOutputManager::TakeStats() { return std::exchange(stats_, {}); }

}  // namespace vllm::structured_output
