// This node's engine-core processes (vLLM's CoreEngineProcManager): data-parallel ranks -dpr ..
// -dpr + -dpl - 1, each `vllm-launch engine-core` with its VllmConfig on descriptor 3 and the
// handshake address(es) of the API server(s) it joins; started, watched through their pidfds,
// restarted after a back-off (--restart-dead-engines), stopped side by side.
//
// Not thread-safe: one thread at a time (Serve's monitor thread while it supervises, the
// owner after it has been joined).
#ifndef VLLM_LAUNCHER_ENGINE_PROCESS_MANAGER_H_
#define VLLM_LAUNCHER_ENGINE_PROCESS_MANAGER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "executor/child_process.h"
#include "launcher/serve_args.h"

namespace vllm::launcher {

class EngineProcessManager {
 public:
  // `args` must outlive the manager.
  explicit EngineProcessManager(const ServeArgs& args) : args_(args) {}
  ~EngineProcessManager() { Stop(); }

  // Starts every local engine core; each joins every address of `handshake_addresses` (the
  // first: API server 0's). On an error the ones started keep running until Stop().
  [[nodiscard]] absl::Status Start(std::vector<std::string> handshake_addresses);

  // OK while every engine runs; the first one's end ("the engine core of data-parallel rank
  // R (pid P) exited with status N") once one has ended.
  absl::Status Check();
  // The engines' pidfds (readable once one has ended).
  std::vector<int> exit_fds() const;

  // Another descriptor the supervisor loop watches (an API server's or the DP coordinator's
  // pidfd): `on_readable` runs when it is readable and returns true to end the loop (it must,
  // or make the descriptor unreadable: a pidfd stays readable).
  struct Watch {
    int fd = -1;
    std::function<bool()> on_readable;
  };
  enum class SuperviseEnd { kStopRequested, kWatchEnded, kEnginesEnded };

  // The one supervisor loop (vLLM's wait_for_completion_or_failure): one poll over every
  // engine's pidfd, `watches` and `stop_fd`, until `stop_fd` becomes readable
  // (kStopRequested), a watch ends it (kWatchEnded) or, without `restart` and without
  // watches, every engine has ended (kEnginesEnded). Each engine death goes to
  // on_death(rank, why). With `restart` (--restart-dead-engines) a dead engine is started again
  // after a back-off: 1 s, doubled (up to 30 s) each time it dies within a minute of its
  // start; the new process joins the head again.
  SuperviseEnd Supervise(int stop_fd, bool restart,
                         const std::function<void(int32_t, const absl::Status&)>& on_death,
                         const std::vector<Watch>& watches = {});

  // Headless nodes (--rejoin-head): an engine that ended because its head went silent
  // (kEngineExitHeadSilent) is started again to re-join it, whatever Supervise's `restart`
  // says, and so is each re-join attempt the head did not answer (kEngineExitHeadUnanswered)
  // — after 1 s, then 2, 4 … up to 30 s between unanswered attempts, each logged. The head
  // decides whether to take the engine back (an attempt it refuses ends the engine as any
  // other failure). An engine that never joined is not retried (a start-up mistake).
  void set_rejoin(bool rejoin) { rejoin_ = rejoin; }

  // SIGTERM to every engine (they stop their workers and exit side by side), then waits up
  // to 4 s each before SIGKILL. Idempotent.
  void Stop();

 private:
  // What the supervisor loop knows of one engine.
  struct EngineState {
    bool dead = false;
    absl::Time started = absl::Now();
    absl::Time restart_at = absl::InfiniteFuture();
    absl::Duration backoff = absl::ZeroDuration();
    int32_t rejoin_attempts = 0;  // > 0: re-joining a silent head (this many started)
  };
  // A dead engine that took its head as gone: schedules its next re-join attempt. False when
  // it is not re-joining (set_rejoin off, another end, or a first join that was not answered).
  bool ScheduleRejoin(int32_t rank, int wait_status, absl::Time now, EngineState& st);
  // One engine after a poll: its death (`ended`: its pidfd is readable) or its restart.
  void HandleEngine(size_t i, bool ended, bool restart,
                    const std::function<void(int32_t, const absl::Status&)>& on_death,
                    EngineState& st);
  // Starts the engine core of data-parallel rank `rank` (again) into engines_[index].
  absl::Status StartEngine(int32_t rank, size_t index);

  const ServeArgs& args_;
  std::vector<std::string> handshake_addresses_;
  std::vector<std::unique_ptr<executor::ChildProcess>> engines_;  // null: never started
  bool rejoin_ = false;
};

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_ENGINE_PROCESS_MANAGER_H_
