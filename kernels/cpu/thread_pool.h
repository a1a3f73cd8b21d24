// A small fork-join pool for the CPU kernels: one per process (one per tensor-parallel rank,
// since CPU ranks are processes), sized by SetBlasNumThreads like OpenBLAS's, so our kernels
// and BLAS use the same number of cores and never run at the same time (every call is
// synchronous: a kernel returns only when all its tasks are done). Its users: LinearPacked,
// LinearSmallM, PagedAttention, and the row-wise ops through ForEachRow (RMSNorm,
// SiLU-and-mul, the model's per-token steps).
//
// The caller runs tasks too, and tasks are claimed one at a time, so a worker that is asleep
// or descheduled only loses its share instead of stalling the call.
//
// Idle workers spin for at most kSpinMicros after their last task, then sleep on a condition
// variable; so between decode steps, and while OpenBLAS runs, they take no CPU. OpenBLAS's
// own workers spin (sched_yield) for up to ~0.1 s after each BLAS call, but the model's
// projections never call BLAS (packed_linear.h, every m) and Linear does only above
// kLinearSmallMMaxRows rows (MoE experts, routers and shared experts in large steps), so
// most steps never wake them. Alternating an m = 128 sgemm and an m = 8 small-m call costs
// the sum of the two alone (kernels_cpu_bench LinearMixed; docs/DECISIONS.md).
#ifndef VLLM_KERNELS_CPU_THREAD_POOL_H_
#define VLLM_KERNELS_CPU_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace vllm::kernels::cpu {

class ThreadPool {
 public:
  // How long an idle worker spins (pause loop) before it sleeps: long enough to span the
  // elementwise ops between two GEMMs of one step, short against a step.
  static constexpr int64_t kSpinMicros = 50;

  // num_threads counts the caller: the pool starts num_threads - 1 workers (at least 0).
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads a ParallelFor may use (workers + the caller). Thread-safe.
  int num_threads() const { return num_threads_.load(std::memory_order_relaxed); }

  // Stops the workers and starts num_threads - 1 new ones. Blocks while a ParallelFor runs.
  void Resize(int num_threads);

  // Calls fn(task) once for every task in [0, num_tasks), on the calling thread and the
  // workers, and returns when every call has returned. Tasks are handed out one at a time
  // (dynamic), so a worker the OS deschedules delays the call by at most its current task.
  // Thread-safe: when another ParallelFor holds the pool (another thread, or a task that
  // calls ParallelFor), this one runs every task on the calling thread. fn must not throw.
  template <typename Fn>
  void ParallelFor(int64_t num_tasks, const Fn& fn) {
    Run(
        num_tasks, [](void* f, int64_t task) { (*static_cast<const Fn*>(f))(task); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using TaskFn = void (*)(void* context, int64_t task);

  void Run(int64_t num_tasks, TaskFn fn, void* context);
  void StartWorkers(int num_workers);
  void StopWorkers();
  void WorkerLoop(int index);
  // Claims tasks of the published job until none are left.
  void DrainTasks();

  std::atomic<int> num_threads_{1};
  // Held by the thread that dispatches a job (try_lock: a second caller runs serially) and
  // by Resize.
  std::mutex dispatch_mu_;
  std::vector<std::thread> workers_;

  // The published job. fn_/context_/num_tasks_ are written only while no worker is inside
  // the job (in_flight_ == 0 after the previous job was retired), before epoch_ moves.
  TaskFn fn_ = nullptr;
  void* context_ = nullptr;
  int64_t num_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
  std::atomic<uint64_t> epoch_{0};  // bumped once per job
  std::atomic<uint64_t> live_{0};   // epoch of the job still accepting workers; 0 when retired
  std::atomic<int> in_flight_{0};   // workers inside a job
  std::atomic<bool> stop_{false};

  // Sleeping workers wait here; the dispatcher notifies only when sleepers_ > 0.
  std::mutex sleep_mu_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
};

// The cores this process may run on (its affinity mask, as `taskset` sets it; the hardware's
// cores when the mask cannot be read). At least 1.
int UsableCores();

// The process's kernel pool, created on first use with the thread count OpenBLAS would pick
// by default (OPENBLAS_NUM_THREADS, else OMP_NUM_THREADS, else UsableCores());
// SetBlasNumThreads (ops.h) resizes it. Never destroyed.
ThreadPool& KernelThreadPool();

// Below this many outputs in all, a row-wise op runs on the calling thread (a decode step of
// a few rows): handing the rows out would cost more than it saves.
inline constexpr int64_t kMinParallelOutputs = 16 * 1024;

// row(r) for every r in [0, num_rows), rows of row_outputs outputs each: on the kernel pool
// when there are several rows and at least kMinParallelOutputs outputs, else in order on the
// calling thread. For rows computed alike on any thread (the same bits either way).
template <typename RowFn>
void ForEachRow(int64_t num_rows, int64_t row_outputs, const RowFn& row) {
  if (num_rows > 1 && num_rows * row_outputs >= kMinParallelOutputs) {
    KernelThreadPool().ParallelFor(num_rows, row);
  } else {
    for (int64_t r = 0; r < num_rows; ++r) row(r);
  }
}

}  // namespace vllm::kernels::cpu

#endif  // VLLM_KERNELS_CPU_THREAD_POOL_H_
