// EngineSleep: the sleep family of one engine (vLLM 0.33's EngineCore.sleep / wake_up /
// is_sleeping over EngineCoreProc.pause_scheduler), for EngineCoreProc's main loop.
//
// "sleep" (level 0..2, mode abort | wait | keep) first pauses the engine as vLLM's
// pause_scheduler does: abort (the default) aborts every request (the main loop tells their
// frontends, finish_reason "abort") and pauses new ones; wait pauses new ones and lets the
// requests in the engine finish; keep pauses everything, the requests staying where they are
// (at level 1 and 2 that needs an engine without requests: vLLM would preempt them, which is
// refused here with FailedPrecondition). Requests that arrive while paused are held here and
// reach the scheduler on wake-up. The call is answered once the pause is complete (wait: when
// the last request finished); then, at level 1 and 2, the prefix cache is reset and the
// executor frees the workers' KV cache (level 1) or KV cache and weights (level 2)
// (EngineCore::SleepExecutor). "wake_up" (tags: every one, or some of "weights", "kv_cache",
// "scheduling") re-creates what the tags name and resumes scheduling once nothing is asleep
// (vLLM's "fully awake"), answering whether it is. "is_sleeping": paused or asleep.
//
// Differences from vLLM: requests that were waiting (not running) when a wait-mode sleep came
// are served before the sleep completes (vLLM keeps them queued); a wake_up while a sleep
// waits for its requests answers that sleep with Aborted.
//
// Thread-safety: none; the engine's main-loop thread owns it.
#ifndef VLLM_CORE_ENGINE_SLEEP_H_
#define VLLM_CORE_ENGINE_SLEEP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/engine_core.h"
#include "core/engine_core_types.h"

namespace vllm::core {

enum class PauseMode { kAbort, kWait, kKeep };

struct SleepArgs {
  int32_t level = 1;
  PauseMode mode = PauseMode::kAbort;
};
// "sleep"'s arguments: empty (level 1, abort), msgpack int (the level, abort) or
// [level, mode: "abort" | "wait" | "keep"]. InvalidArgument outside level 0..2 or those modes.
[[nodiscard]] absl::StatusOr<SleepArgs> DecodeSleepArgs(std::string_view bytes);
// "wake_up"'s arguments: empty, nil or [] (every tag: nullopt) or [tag: str, ...] (at most 8
// tags of at most 64 bytes; any string: vLLM ignores a tag that is not asleep).
[[nodiscard]] absl::StatusOr<std::optional<std::vector<std::string>>> DecodeWakeUpTags(
    std::string_view bytes);

class EngineSleep {
 public:
  // A sleep call not answered yet.
  struct Pending {
    size_t frontend = 0;
    uint64_t call_id = 0;
    int32_t level = 0;
  };
  // A request that arrived while paused, with its frontend.
  using Held = std::pair<size_t, EngineCoreRequest>;

  explicit EngineSleep(EngineCore& engine) : engine_(engine) {}

  // The "sleep" call `call_id` from `frontend`. Returns the answer when the call is answered
  // now; nullopt when it waits for the engine's requests to finish (MaybeFinish answers it).
  // `abort_all` aborts every request in the engine and tells their frontends (mode abort).
  [[nodiscard]] std::optional<absl::Status> Sleep(size_t frontend, uint64_t call_id,
                                                  std::string_view args,
                                                  const std::function<void()>& abort_all);
  // Completes the waiting sleep once the engine is drained: the call to answer and its answer.
  [[nodiscard]] std::optional<std::pair<Pending, absl::Status>> MaybeFinish();
  // The "wake_up" call: whether fully awake. When it is, the held requests move to *resumed
  // (to add, in arrival order); a sleep still waiting moves to *cancelled.
  [[nodiscard]] absl::StatusOr<bool> WakeUp(std::string_view args, std::vector<Held>* resumed,
                                            std::optional<Pending>* cancelled);

  // Paused: true when the request was held here (moved from).
  bool Hold(size_t frontend, EngineCoreRequest& request);
  // Drops held requests the client aborted.
  void DropHeld(std::span<const std::string> ids);
  // Takes every held request (a sleep with mode abort aborts them too).
  std::vector<Held> TakeHeld() { return std::exchange(held_, {}); }

  // vLLM's is_sleeping: paused, or memory asleep.
  bool sleeping() const { return pause_ != Pause::kNone || engine_.executor_sleeping(); }
  // Whether the main loop may step the engine's requests (paused new ones only, or awake).
  bool may_step() const { return pause_ != Pause::kAll && !engine_.executor_sleeping(); }

 private:
  enum class Pause { kNone, kNew, kAll };  // vLLM's UNPAUSED, PAUSED_NEW, PAUSED_ALL

  EngineCore& engine_;
  Pause pause_ = Pause::kNone;
  std::optional<Pending> pending_;
  std::vector<Held> held_;
};

}  // namespace vllm::core

#endif  // VLLM_CORE_ENGINE_SLEEP_H_
