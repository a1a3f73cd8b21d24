// The kernels' fork-join pool (thread_pool.h).
//
// Protocol. A job is published by writing fn_/context_/num_tasks_, then live_ = epoch_ = e.
// A worker that sees epoch_ move to e enters (in_flight_ += 1), and claims tasks only if
// live_ is still e. The dispatcher claims tasks too; when none are left it retires the job
// (live_ = 0) and waits for in_flight_ to reach 0. All of these are seq_cst, so a worker
// that enters after the dispatcher saw in_flight_ == 0 must see live_ != e and leaves without
// touching the job; the fields are therefore never written while a worker may read them.
// Workers that never arrive (asleep, descheduled, or lost across a fork) cost nothing: the
// dispatcher runs the tasks they did not claim.
#include "kernels/cpu/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

namespace vllm::kernels::cpu {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

int EnvThreads(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return 0;
  return std::max(0, std::atoi(value));
}

// OpenBLAS's default: OPENBLAS_NUM_THREADS, else OMP_NUM_THREADS, else every core.
int DefaultThreads() {
  int n = EnvThreads("OPENBLAS_NUM_THREADS");
  if (n == 0) n = EnvThreads("OMP_NUM_THREADS");
  if (n == 0) n = UsableCores();
  return std::max(1, n);
}

}  // namespace

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int num_threads) {
  num_threads = std::max(1, num_threads);
  num_threads_.store(num_threads, std::memory_order_relaxed);
  StartWorkers(num_threads - 1);
}

ThreadPool::~ThreadPool() {
  std::lock_guard<std::mutex> lock(dispatch_mu_);
  StopWorkers();
}

void ThreadPool::Resize(int num_threads) {
  num_threads = std::max(1, num_threads);
  std::lock_guard<std::mutex> lock(dispatch_mu_);
  if (num_threads == this->num_threads()) return;
  StopWorkers();
  num_threads_.store(num_threads, std::memory_order_relaxed);
  StartWorkers(num_threads - 1);
}

void ThreadPool::StartWorkers(int num_workers) {
  stop_.store(false);
  workers_.reserve(num_workers);
  for (int i = 0; i < num_workers; ++i) {
    workers_.emplace_back([this, i] {
      const std::string name = "vllm-kern-" + std::to_string(i + 1);
      pthread_setname_np(pthread_self(), name.c_str());  // runs kernel tasks (ParallelFor)
      WorkerLoop(i);
    });
  }
}

void ThreadPool::StopWorkers() {
  stop_.store(true);
  { std::lock_guard<std::mutex> lock(sleep_mu_); }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::DrainTasks() {
  for (;;) {
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= num_tasks_) return;
    fn_(context_, task);
  }
}

void ThreadPool::WorkerLoop(int /*index*/) {
  using Clock = std::chrono::steady_clock;
  uint64_t seen = epoch_.load();
  for (;;) {
    // Spin briefly for the next job (the next GEMM of the same step), then sleep.
    const Clock::time_point spin_until = Clock::now() + std::chrono::microseconds(kSpinMicros);
    for (uint32_t spins = 1; epoch_.load() == seen && !stop_.load(); ++spins) {
      CpuRelax();
      if (spins % 64 == 0 && Clock::now() > spin_until) {
        std::unique_lock<std::mutex> lock(sleep_mu_);
        sleepers_.fetch_add(1);
        wake_.wait(lock, [&] { return epoch_.load() != seen || stop_.load(); });
        sleepers_.fetch_sub(1);
        break;
      }
    }
    if (stop_.load()) return;
    seen = epoch_.load();
    in_flight_.fetch_add(1);
    if (live_.load() == seen) DrainTasks();
    in_flight_.fetch_sub(1);
  }
}

void ThreadPool::Run(int64_t num_tasks, TaskFn fn, void* context) {
  if (num_tasks <= 0) return;
  std::unique_lock<std::mutex> lock(dispatch_mu_, std::defer_lock);
  if (num_tasks == 1 || num_threads() == 1 || !lock.try_lock()) {
    for (int64_t task = 0; task < num_tasks; ++task) fn(context, task);
    return;
  }
  fn_ = fn;
  context_ = context;
  num_tasks_ = num_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  const uint64_t epoch = epoch_.load(std::memory_order_relaxed) + 1;
  live_.store(epoch);
  epoch_.store(epoch);
  // Dekker with the worker's (sleepers_ += 1; check epoch_) under sleep_mu_: either it sees
  // the new epoch, or we see it asleep and notify after it released sleep_mu_ in wait.
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> sleep_lock(sleep_mu_); }
    wake_.notify_all();
  }
  DrainTasks();
  live_.store(0);
  for (uint32_t spins = 1; in_flight_.load() != 0; ++spins) {
    CpuRelax();
    if (spins % 1024 == 0) std::this_thread::yield();  // a worker was descheduled mid-task
  }
}

ThreadPool& KernelThreadPool() {
  static ThreadPool* const kPool = new ThreadPool(DefaultThreads());
  return *kPool;
}

}  // namespace vllm::kernels::cpu
