// Small utilities shared by the benchmark drivers: latency summaries, a monotonic clock,
// forked child processes that cannot outlive their parent, CPU-time readings, and a
// process-shared atomic for signalling between a parent and the children it forks.
//
// None of this is used outside bench/; it favours simplicity over generality (sleeps in wait
// loops are fine here, they never sit on a measured path).
#ifndef VLLM_BENCH_COMMON_BENCH_UTIL_H_
#define VLLM_BENCH_COMMON_BENCH_UTIL_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace vllm::bench {

// "AMD EPYC ..., 2 cores, Linux 6.1.0": the machine line of the benchmark tables.
std::string MachineLine();
// "2026-11-26 08:41 UTC".
std::string UtcNow();
// Replaces the text from `begin` through `end` (two marker lines) in `doc` with `section`
// (which holds the markers itself); appends `section` when the markers are missing.
void ReplaceMarkdownSection(std::string* doc, const std::string& begin, const std::string& end,
                            const std::string& section);

// Summary of a set of latency samples, in microseconds.
struct LatencyStats {
  double p50_us = 0;
  double p99_us = 0;
  double mean_us = 0;
  double min_us = 0;
  size_t samples = 0;
};

// Summarises `samples_ns` (nanoseconds). Percentiles use the nearest-rank method on a sorted
// copy: p-th percentile = the ceil(p/100 * n)-th smallest sample. An empty input gives all
// zeros and samples == 0.
LatencyStats Summarize(std::vector<double> samples_ns);

// CLOCK_MONOTONIC in nanoseconds. The clock is system-wide, so readings taken in different
// processes on this machine are comparable.
int64_t NowNs();

// Sums the bytes at `data` as 8-byte little-endian words (any trailing n % 8 bytes are added
// one byte at a time), reading every byte once; wraps modulo 2^64. This is the work every
// benchmark reader does on each message it receives, whatever the transport, so that each one
// "touches every byte" the same way. Sum of words is linear: for n >= 8,
//   TouchBytes(p, n) == word at p[0..8) + TouchBytes(p + 8, n - 8).
// Thread-safe; `data` may be unaligned.
uint64_t TouchBytes(const void* data, size_t n);

// Tells the compiler that memory may be read or written here, so stores before this point
// cannot be removed as dead (the equivalent of benchmark::ClobberMemory()).
inline void ClobberMemory() { asm volatile("" : : : "memory"); }

// A heap buffer of `size` bytes aligned to 4096 (page) bytes, zero-filled so that every page is
// faulted in before it is used. Move-only; size 0 gives a null buffer.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t size);

  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct FreeDeleter {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t[], FreeDeleter> data_;
  size_t size_ = 0;
};

// A child process running a function, created with fork(). The child never outlives the
// parent: it asks the kernel for SIGKILL when the parent dies (PR_SET_PDEATHSIG) and exits at
// once if the parent is already gone. (PR_SET_PDEATHSIG fires when the *thread* that forked
// exits, so fork from a thread that outlives the child, e.g. the main thread.) Destroying a
// ChildProcess whose child still runs kills it (SIGKILL) and reaps it, so every error path cleans
// up.
//
// The child is a copy of the parent at the time of the fork with only the forking thread; its
// body must not use objects owning threads or sockets that were created before the fork (a
// zmq::context_t, for one): create those inside the body. The body's return value is the
// child's exit status (0 = success); an exception escaping the body exits with status 125.
// Fork() flushes stdio before forking and the child flushes it before exiting, so buffered
// output is neither lost nor printed twice.
//
// Move-only; not thread-safe (one owner).
class ChildProcess {
 public:
  // Exit status of a child that found its parent gone before its body started.
  static constexpr int kParentGoneExitCode = 124;
  // Exit status of a child whose body threw an exception.
  static constexpr int kExceptionExitCode = 125;

  // Forks and runs `body` in the child, then _exit()s with its return value (static
  // destructors and atexit handlers of the parent's image do not run in the child). Returns an
  // error if fork() fails.
  [[nodiscard]] static absl::StatusOr<ChildProcess> Fork(std::function<int()> body);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  // The child's process id; -1 for a moved-from object.
  pid_t pid() const { return pid_; }

  // Waits up to `timeout` for the child to exit (polling waitpid with WNOHANG and short
  // sleeps). Returns OK if it exited with status 0; otherwise an error naming the pid and the
  // exit status or signal, or DeadlineExceeded if it is still running (it keeps running; the
  // destructor kills it). Once the child has been reaped, later calls return the same result.
  [[nodiscard]] absl::Status Wait(absl::Duration timeout);

  // Checks without blocking: returns OK while the child is running or after it exited with
  // status 0, and the same error as Wait() once it has failed (non-zero status or signal).
  [[nodiscard]] absl::Status CheckNotFailed();

  // Sends SIGKILL to a child that is still running and reaps it. No-op otherwise.
  void Kill();

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}

  // Reaps the child if it has exited (blocking when `block`); returns true once reaped.
  bool Reap(bool block);
  absl::Status ExitStatus() const;

  pid_t pid_ = -1;
  bool reaped_ = false;
  int wait_status_ = 0;
};

// Returns the first failure among `children` (see ChildProcess::CheckNotFailed), else OK.
[[nodiscard]] absl::Status CheckChildrenNotFailed(std::vector<ChildProcess>& children);

// Waits for every child to exit successfully, each within `timeout`; returns the first error.
[[nodiscard]] absl::Status WaitForChildren(std::vector<ChildProcess>& children,
                                           absl::Duration timeout);

// CPU time consumed so far by process `pid`'s main thread, in seconds: the scheduler's exact
// run time from /proc/<pid>/schedstat (clock-tick sampling in /proc/<pid>/stat misses short
// spins), falling back to utime + stime from /proc/<pid>/stat. Returns a negative value if
// neither can be read (no such process).
double ProcessCpuSeconds(pid_t pid);

// CPU time (user + system) consumed so far by this process, all threads, in seconds
// (getrusage(RUSAGE_SELF)).
double SelfCpuSeconds();

// Pins the calling thread to CPU `cpu` (sched_setaffinity). Best effort: failures are ignored.
void PinToCpu(int cpu);

// One std::atomic<uint64_t> alone in a cache line of an anonymous MAP_SHARED mapping. Create it
// before fork() and it is shared by the parent and its children (at the same address), for
// "child is ready" flags, counters and ping-pong without sockets. The mapping is released when
// the last process holding it unmaps it or exits. Move-only; value() is thread- and
// process-safe (the atomic is always lock-free).
class SharedCounter {
 public:
  // Maps a zero-initialised counter. Fails only if mmap() fails.
  [[nodiscard]] static absl::StatusOr<SharedCounter> Create();

  SharedCounter(SharedCounter&& other) noexcept;
  SharedCounter& operator=(SharedCounter&& other) noexcept;
  SharedCounter(const SharedCounter&) = delete;
  SharedCounter& operator=(const SharedCounter&) = delete;
  ~SharedCounter();

  std::atomic<uint64_t>& value() const { return *value_; }

  // Waits (spinning briefly, then sleeping in short steps) until value() >= target with
  // acquire ordering. Returns DeadlineExceeded after `timeout`.
  [[nodiscard]] absl::Status WaitAtLeast(uint64_t target, absl::Duration timeout) const;

 private:
  explicit SharedCounter(std::atomic<uint64_t>* value) : value_(value) {}

  std::atomic<uint64_t>* value_ = nullptr;
};

}  // namespace vllm::bench

#endif  // VLLM_BENCH_COMMON_BENCH_UTIL_H_
