#include "kernels/cpu/thread_pool.h"

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace vllm::kernels::cpu {
namespace {

// Every task runs exactly once, for task counts around the thread count, over many jobs in a
// row (workers spinning) and after the workers fell asleep.
TEST(ThreadPoolTest, RunsEveryTaskOnce) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.num_threads(), 3);
  for (int round = 0; round < 200; ++round) {
    const int64_t n = round % 17;
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(n, [&](int64_t t) { hits[t].fetch_add(1); });
    for (int64_t t = 0; t < n; ++t) ASSERT_EQ(hits[t].load(), 1) << "round " << round;
    if (round == 100) {
      std::this_thread::sleep_for(std::chrono::microseconds(10 * ThreadPool::kSpinMicros));
    }
  }
}

TEST(ThreadPoolTest, UsesSeveralThreads) {
  ThreadPool pool(2);
  std::atomic<int> other_threads{0};
  const std::thread::id caller = std::this_thread::get_id();
  // Tasks long enough that the woken worker claims some before the caller finishes them all.
  for (int round = 0; round < 50 && other_threads.load() == 0; ++round) {
    pool.ParallelFor(64, [&](int64_t) {
      if (std::this_thread::get_id() != caller) other_threads.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    });
  }
  EXPECT_GT(other_threads.load(), 0);
}

// A second caller (another thread, or a task itself) runs its tasks serially instead of
// waiting or corrupting the running job.
TEST(ThreadPoolTest, ConcurrentAndNestedCallsComplete) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  auto work = [&] {
    for (int r = 0; r < 100; ++r) {
      pool.ParallelFor(8, [&](int64_t t) {
        pool.ParallelFor(3, [&](int64_t u) { sum.fetch_add(t * 3 + u + 1); });
      });
    }
  };
  std::thread other(work);
  work();
  other.join();
  // Per job: Σ_{t<8, u<3} (3t + u + 1) = Σ_{v=1..24} v = 300.
  EXPECT_EQ(sum.load(), 2 * 100 * 300);
}

TEST(ThreadPoolTest, ResizeKeepsWorking) {
  ThreadPool pool(1);
  for (int threads : {1, 4, 2, 1, 3}) {
    pool.Resize(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    std::atomic<int> count{0};
    pool.ParallelFor(100, [&](int64_t) { count.fetch_add(1); });
    EXPECT_EQ(count.load(), 100);
  }
}

}  // namespace
}  // namespace vllm::kernels::cpu
