// How a MessageQueue side waits: spin, then yield, then block on a futex — with the spin placed
// where a message is due. A reader learns the gap between messages (an exponential moving
// average); when the next one is predicted far ahead it blocks until shortly before it is due,
// then spins across the predicted arrival. So a worker in a steady decode loop (one step every
// few ms) spins for tens of µs per step instead of 100 % of the time, an idle one blocks, and
// a back-to-back stream never leaves the spin loop.
//
// Blocking uses one futex "channel" per direction: the waiter registers in `sleepers`, reads
// `epoch`, re-checks its condition and sleeps on `epoch`; the other side, after making the
// condition true, issues a full fence and — only if someone sleeps — bumps `epoch` and wakes.
// Both sides fence between their store and their load (Dekker), so a wake-up is never lost and
// no periodic re-check is needed for correctness. Blocked waiters still wake every
// `liveness_interval` to check deadline, cancellation and whether the peer is alive.
#ifndef VLLM_IPC_WAIT_STRATEGY_H_
#define VLLM_IPC_WAIT_STRATEGY_H_

#include <sched.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "ipc/futex.h"
#include "spdlog/spdlog.h"

namespace vllm::ipc {

// Tunables of a waiting side. The defaults suit an engine core and its workers.
struct WaitOptions {
  // Spin window around a predicted arrival: gap/8 clamped to [min, max].
  absl::Duration spin_window_min = absl::Microseconds(10);
  absl::Duration spin_window_max = absl::Microseconds(100);
  // Spin at least this long before blocking even when nothing is predicted.
  absl::Duration min_spin = absl::Microseconds(2);
  // Block early for a predicted arrival only when it is at least this far off: a shorter sleep
  // costs more (a futex wake on the writer, timer slack) than it saves.
  absl::Duration min_predicted_sleep = absl::Microseconds(200);
  // Spin without yielding for this long; then yield now and then while spinning.
  absl::Duration pure_spin = absl::Microseconds(4);
  // sched_yield() calls between spinning and blocking.
  int yields = 8;
  // A blocked waiter wakes this often to check deadline, cancellation and peer liveness.
  absl::Duration liveness_interval = absl::Milliseconds(50);
  // While waiting longer than this, log a warning naming the peer, and again at this interval.
  absl::Duration warn_interval = absl::Seconds(10);
};

// CLOCK_MONOTONIC in ns: comparable across processes on one machine.
inline int64_t MonoNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Converts an absl deadline (wall clock) into CLOCK_MONOTONIC ns; InfiniteFuture → INT64_MAX.
inline int64_t MonoDeadline(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return INT64_MAX;
  absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return MonoNowNs();
  if (left > absl::Hours(24 * 365)) return INT64_MAX;
  return MonoNowNs() + absl::ToInt64Nanoseconds(left);
}

// When a wait must end: an absolute time, or a timeout counted from the moment something first
// waits. Resolved to CLOCK_MONOTONIC ns lazily, so a call that finds its message (or its free
// chunk) at once reads no clock. Converts implicitly from both, so callers pass
// `absl::Seconds(60)` (cheapest) or `absl::Now() + ...` / absl::InfiniteFuture().
class Deadline {
 public:
  Deadline(absl::Time at) : at_(at) {}  // NOLINT(google-explicit-constructor)
  Deadline(absl::Duration timeout)      // NOLINT(google-explicit-constructor)
      : timeout_(timeout), relative_(true) {}

  // The deadline in MonoNowNs() time; the first call fixes it.
  int64_t MonoNs() const {
    if (mono_ns_ < 0) {
      if (!relative_) {
        mono_ns_ = MonoDeadline(at_);
      } else if (timeout_ == absl::InfiniteDuration() || timeout_ > absl::Hours(24 * 365)) {
        mono_ns_ = INT64_MAX;
      } else {
        mono_ns_ = MonoNowNs() + std::max<int64_t>(0, absl::ToInt64Nanoseconds(timeout_));
      }
    }
    return mono_ns_;
  }

 private:
  absl::Time at_ = absl::InfiniteFuture();
  absl::Duration timeout_ = absl::InfiniteDuration();
  bool relative_ = false;
  mutable int64_t mono_ns_ = -1;
};

// Polls of a waiting side before it starts pausing between them (WaitFor).
inline constexpr int kPollsWithoutPause = 64;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// One direction's futex words (both in shared memory).
struct FutexChannel {
  std::atomic<uint32_t>* epoch;
  std::atomic<uint32_t>* sleepers;
  // Asymmetric fencing (futex.h, HeavyFence): the notifying side skips its CPU fence
  // (`light_notify`, only in a process registered for heavy fences) because every waiter on
  // this channel issues a heavy fence before its last check (`heavy_fence_on_block`). Both
  // false: a CPU fence on each side.
  bool light_notify = false;
  bool heavy_fence_on_block = false;

  // Called by the side that just made the other side's condition true (after its release
  // store). Costs one fence when nobody sleeps (none with light_notify: the waiter pays
  // instead); one syscall when someone does.
  void Notify() const {
    if (light_notify) {
      std::atomic_signal_fence(std::memory_order_seq_cst);  // keeps the compiler's order only
    } else {
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    if (sleepers->load(std::memory_order_relaxed) != 0) {
      epoch->fetch_add(1, std::memory_order_seq_cst);
      FutexWakeAll(epoch);
    }
  }
  // Wakes every sleeper unconditionally (close, cancel).
  void WakeAll() const {
    epoch->fetch_add(1, std::memory_order_seq_cst);
    FutexWakeAll(epoch);
  }
};

// Learns the gap between arrivals; tells a waiter when the next one is due.
class ArrivalPredictor {
 public:
  void OnArrival(int64_t now_ns) {
    if (last_ns_ != 0) {
      const int64_t gap = std::min<int64_t>(now_ns - last_ns_, kMaxGapNs);
      // A gap off by more than 2x is a change of regime (idle → decoding, or the reverse):
      // adopt it at once instead of averaging towards it over dozens of messages.
      const bool new_regime = gap > 2 * ema_gap_ns_ || 2 * gap < ema_gap_ns_;
      ema_gap_ns_ = new_regime ? gap : ema_gap_ns_ + (gap - ema_gap_ns_) / 8;
    }
    last_ns_ = now_ns;
  }
  // A timed sleep meant to end at `target_ns` ended at `now_ns`: learn how late timers fire
  // here (timer slack, a VM's wake-up latency) so the next early sleep ends that much sooner.
  void OnTimedWake(int64_t target_ns, int64_t now_ns) {
    const int64_t late = std::clamp<int64_t>(now_ns - target_ns, 0, kMaxOversleepNs);
    oversleep_ns_ += (late - oversleep_ns_) / 4;
  }
  // Predicted arrival of the next message, or 0 when nothing is known.
  int64_t due_ns() const { return ema_gap_ns_ == 0 ? 0 : last_ns_ + ema_gap_ns_; }
  int64_t gap_ns() const { return ema_gap_ns_; }
  int64_t oversleep_ns() const { return oversleep_ns_; }

 private:
  static constexpr int64_t kMaxGapNs = 1'000'000'000;
  static constexpr int64_t kMaxOversleepNs = 1'000'000;
  int64_t last_ns_ = 0;
  int64_t ema_gap_ns_ = 0;
  int64_t oversleep_ns_ = 0;
};

// Waits until ready() returns true. Without a predictor (the writer waiting for readers to
// free a chunk: they are busy reading, so it comes soon) it spins for spin_window_max first.
//   check():    called while blocked, every liveness_interval; a non-OK status (peer died,
//               queue closed, cancelled) ends the wait with that status. Called once more
//               after ready() failed on the deadline.
//   describe(): who we wait for, for the periodic warning.
// Returns OK, DeadlineExceeded (naming describe()), or check()'s error.
// `ready_ns`, when given, receives a clock reading taken at most ~16 polls before ready()
// turned true (no clock read is added to the path after the arrival).
template <typename Ready, typename Check, typename Describe>
absl::Status WaitFor(Ready&& ready, Check&& check, Describe&& describe, const FutexChannel& ch,
                     const WaitOptions& opt, ArrivalPredictor* predictor, int64_t deadline_ns,
                     int64_t* ready_ns = nullptr) {
  if (ready()) {
    if (ready_ns != nullptr) *ready_ns = MonoNowNs();
    return absl::OkStatus();
  }
  const int64_t start = MonoNowNs();
  int64_t last_clock = start;
  auto done = [&](int64_t at) {
    if (ready_ns != nullptr) *ready_ns = at;
    return absl::OkStatus();
  };
  const int64_t window_min = absl::ToInt64Nanoseconds(opt.spin_window_min);
  const int64_t window_max = absl::ToInt64Nanoseconds(opt.spin_window_max);
  int64_t spin_until =
      start + absl::ToInt64Nanoseconds(predictor == nullptr ? opt.spin_window_max : opt.min_spin);
  int64_t sleep_until = 0;  // predicted early sleep: block (wakeable) until this time
  if (predictor != nullptr && predictor->due_ns() != 0) {
    const int64_t window = std::clamp(predictor->gap_ns() / 8, window_min, window_max);
    const int64_t due = predictor->due_ns();
    const int64_t wake = due - window - predictor->oversleep_ns();
    if (wake - start >= absl::ToInt64Nanoseconds(opt.min_predicted_sleep)) {
      sleep_until =
          std::min({wake, deadline_ns, start + absl::ToInt64Nanoseconds(opt.liveness_interval)});
    }
    spin_until = std::max(spin_until, due + window);
  }
  // Blocks on the channel until woken, `until_ns`, or ready. Returns ready().
  auto block = [&](int64_t until_ns) {
    ch.sleepers->fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // A light notifier did not fence between its store and its load of `sleepers`: make
    // every running thread fence now, so either it sees us sleeping or we see its store.
    if (ch.heavy_fence_on_block) HeavyFence();
    const uint32_t epoch = ch.epoch->load(std::memory_order_acquire);
    bool ok = ready();
    if (!ok) {
      const int64_t now = MonoNowNs();
      if (until_ns > now) FutexWait(ch.epoch, epoch, until_ns - now);
      ok = ready();
    }
    ch.sleepers->fetch_sub(1, std::memory_order_relaxed);
    return ok;
  };

  if (sleep_until != 0) {
    // The default 50 µs timer slack would make every early wake-up late; 1 ns for this thread.
    thread_local bool slack_set = false;
    if (!slack_set) {
      prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
      slack_set = true;
    }
    if (block(sleep_until)) return done(MonoNowNs());
    last_clock = MonoNowNs();
    predictor->OnTimedWake(sleep_until, last_clock);
  }
  // Spin across the predicted arrival (bounded by max window + min spin past now).
  spin_until = std::min({spin_until, MonoNowNs() + 2 * window_max, deadline_ns});
  // Pure spinning for the first `pure_spin`; after that a sched_yield() every 64 pauses, which
  // costs little on an idle core and hands an oversubscribed core to the peer we wait for.
  const int64_t pure_until = start + absl::ToInt64Nanoseconds(opt.pure_spin);
  // The first polls go without a pause instruction (tens of cycles each on recent x86), so a
  // message due now is seen the moment its cache line arrives.
  for (int i = 0;; ++i) {
    if (ready()) return done(last_clock);
    if (i >= kPollsWithoutPause) CpuRelax();
    if ((i & 15) == 15) {
      last_clock = MonoNowNs();
      if (last_clock >= spin_until) break;
      if ((i & 63) == 63 && last_clock >= pure_until) sched_yield();
    }
  }
  for (int i = 0; i < opt.yields; ++i) {
    sched_yield();
    if (ready()) return done(MonoNowNs());
  }
  const int64_t slice = absl::ToInt64Nanoseconds(opt.liveness_interval);
  const int64_t warn_every = absl::ToInt64Nanoseconds(opt.warn_interval);
  int64_t next_warn = start + warn_every;
  while (true) {
    if (absl::Status st = check(); !st.ok()) {
      // The peer may have made us ready just before it died or closed: drain first.
      if (ready()) return done(MonoNowNs());
      return st;
    }
    const int64_t now = MonoNowNs();
    if (now >= deadline_ns) {
      if (ready()) return done(now);
      return absl::DeadlineExceededError(
          absl::StrCat("timed out after ", absl::FormatDuration(absl::Nanoseconds(now - start)),
                       " waiting for ", describe()));
    }
    if (now >= next_warn) {
      spdlog::warn("still waiting after {} for {}",
                   absl::FormatDuration(absl::Nanoseconds(now - start)), describe());
      next_warn += warn_every;
    }
    if (block(std::min({now + slice, deadline_ns, next_warn}))) return done(MonoNowNs());
  }
}

}  // namespace vllm::ipc

#endif  // VLLM_IPC_WAIT_STRATEGY_H_
