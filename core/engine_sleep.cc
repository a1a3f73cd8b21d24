#include "core/engine_sleep.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/msgpack_util.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"

namespace vllm::core {
namespace {

constexpr size_t kMaxTags = 8;
constexpr size_t kMaxTagBytes = 64;

absl::StatusOr<msgpack::object_handle> UnpackArgs(std::string_view bytes) {
  wire::UnpackLimits limits;
  limits.max_array = kMaxTags;
  limits.max_map = 0;
  limits.max_str = kMaxTagBytes;
  limits.max_bin = 0;
  limits.max_depth = 2;
  return wire::UnpackBounded({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()},
                             limits);
}

}  // namespace

absl::StatusOr<SleepArgs> DecodeSleepArgs(std::string_view bytes) {
  SleepArgs args;
  if (bytes.empty()) return args;
  VLLM_ASSIGN_OR_RETURN(auto oh, UnpackArgs(bytes));
  const msgpack::object& o = oh.get();
  std::string mode = "abort";
  if (o.type == msgpack::type::ARRAY) {
    if (o.via.array.size != 2) {
      return absl::InvalidArgumentError("sleep: expected [level, mode]");
    }
    VLLM_ASSIGN_OR_RETURN(args.level, wire::ConvertAs<int32_t>(o.via.array.ptr[0], "level"));
    VLLM_ASSIGN_OR_RETURN(mode, wire::ConvertAs<std::string>(o.via.array.ptr[1], "mode"));
  } else {
    VLLM_ASSIGN_OR_RETURN(args.level, wire::ConvertAs<int32_t>(o, "level"));
  }
  if (args.level < 0 || args.level > 2) {
    return absl::InvalidArgumentError(absl::StrCat("sleep level ", args.level, " (0, 1 or 2)"));
  }
  if (mode == "abort") {
    args.mode = PauseMode::kAbort;
  } else if (mode == "wait") {
    args.mode = PauseMode::kWait;
  } else if (mode == "keep") {
    args.mode = PauseMode::kKeep;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("Invalid pause mode: ", mode));
  }
  return args;
}

absl::StatusOr<std::optional<std::vector<std::string>>> DecodeWakeUpTags(std::string_view bytes) {
  if (bytes.empty()) return std::nullopt;
  VLLM_ASSIGN_OR_RETURN(auto oh, UnpackArgs(bytes));
  const msgpack::object& o = oh.get();
  if (o.type == msgpack::type::NIL) return std::nullopt;
  VLLM_ASSIGN_OR_RETURN(std::vector<std::string> tags,
                        wire::ConvertAs<std::vector<std::string>>(o, "wake_up tags"));
  if (tags.empty()) return std::nullopt;
  return tags;
}

std::optional<absl::Status> EngineSleep::Sleep(size_t frontend, uint64_t call_id,
                                               std::string_view args,
                                               const std::function<void()>& abort_all) {
  absl::StatusOr<SleepArgs> a = DecodeSleepArgs(args);
  if (!a.ok()) return a.status();
  if (pending_.has_value()) {
    return absl::FailedPreconditionError(
        "a sleep is already waiting for the engine's requests to finish");
  }
  if (a->level >= 1) {
    if (!engine_.scheduler().config().kv_transfer.kv_connector.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("sleep level ", a->level,
                       " with --kv-transfer-config is not supported (the connector holds the KV "
                       "cache); level=0 pauses scheduling"));
    }
    if (a->mode == PauseMode::kKeep && engine_.scheduler().HasUnfinishedRequests()) {
      return absl::FailedPreconditionError(
          absl::StrCat("sleep level ", a->level,
                       " with mode=keep while requests are in the engine is not supported (their "
                       "KV cache would be freed); use mode=abort or mode=wait"));
    }
  }
  if (a->mode == PauseMode::kAbort) abort_all();
  // keep at level 1-2 has no unfinished request (above): it drains like wait.
  pause_ = a->mode == PauseMode::kKeep && a->level == 0 ? Pause::kAll : Pause::kNew;
  pending_ = Pending{frontend, call_id, a->level};
  std::optional<std::pair<Pending, absl::Status>> done = MaybeFinish();
  if (!done.has_value()) {
    spdlog::info("engine {}: waiting for in-flight requests to complete before sleeping",
                 engine_.scheduler().config().parallel.data_parallel_rank);
    return std::nullopt;
  }
  return done->second;
}

std::optional<std::pair<EngineSleep::Pending, absl::Status>> EngineSleep::MaybeFinish() {
  if (!pending_.has_value()) return std::nullopt;
  const bool drained = pause_ == Pause::kAll ||
                       (!engine_.scheduler().HasRequests() && engine_.num_inflight_batches() == 0);
  if (!drained) return std::nullopt;
  const Pending p = *pending_;
  pending_.reset();
  absl::Status status;
  if (p.level >= 1) status = engine_.SleepExecutor(p.level);
  spdlog::info("engine {}: sleeping (level {}){}",
               engine_.scheduler().config().parallel.data_parallel_rank, p.level,
               status.ok() ? "" : absl::StrCat(": ", status.ToString()));
  return std::make_pair(p, status);
}

absl::StatusOr<bool> EngineSleep::WakeUp(std::string_view args, std::vector<Held>* resumed,
                                         std::optional<Pending>* cancelled) {
  VLLM_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> tags, DecodeWakeUpTags(args));
  if (tags.has_value()) {
    // "scheduling" only resumes (vLLM's level-0 tag); the others go to the executor.
    std::erase(*tags, std::string("scheduling"));
  }
  if (!tags.has_value() || !tags->empty()) {
    VLLM_RETURN_IF_ERROR(engine_.WakeUpExecutor(tags));
  }
  if (engine_.executor_sleeping()) return false;
  // Fully awake: scheduling resumes with the requests held meanwhile.
  if (pending_.has_value()) {
    *cancelled = pending_;
    pending_.reset();
  }
  pause_ = Pause::kNone;
  *resumed = std::move(held_);
  held_.clear();
  return true;
}

bool EngineSleep::Hold(size_t frontend, EngineCoreRequest& request) {
  if (pause_ == Pause::kNone && !engine_.executor_sleeping()) return false;
  held_.emplace_back(frontend, std::move(request));
  return true;
}

void EngineSleep::DropHeld(std::span<const std::string> ids) {
  if (held_.empty()) return;
  const absl::flat_hash_set<std::string> drop(ids.begin(), ids.end());
  std::erase_if(held_, [&](const Held& h) { return drop.contains(h.second.request_id); });
}

}  // namespace vllm::core
