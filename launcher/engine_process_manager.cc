#include "launcher/engine_process_manager.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "config/config_codec.h"
#include "launcher/engine_core_main.h"
#include "launcher/serve_env.h"
#include "spdlog/spdlog.h"

namespace vllm::launcher {
namespace {

// Spawns `vllm-launch engine-core` for `config` (its data_parallel_rank set).
// `engine_index`: its index at the API servers (its rank, unless they serve only this node's
// engines).
absl::StatusOr<std::unique_ptr<executor::ChildProcess>> SpawnEngineCore(
    const config::VllmConfig& config, const std::vector<std::string>& handshake_addresses,
    const std::string& cluster_key_file, int32_t engine_index) {
  const int32_t rank = config.parallel.data_parallel_rank;
  const std::string name = absl::StrCat("the engine core of data-parallel rank ", rank);
  absl::StatusOr<std::string> self = executor::SelfExecutable();
  if (!self.ok()) {
    return absl::Status(self.status().code(),
                        absl::StrCat("cannot start ", name, ": ", self.status().message()));
  }
  std::vector<std::string> argv = {*self,          kEngineCoreSubcommand,
                                   "--parent-pid", absl::StrCat(getpid()),
                                   "--config-fd",  absl::StrCat(config::kConfigFd)};
  for (const std::string& address : handshake_addresses) {
    argv.push_back("--handshake-address");
    argv.push_back(address);
  }
  if (engine_index != rank) {
    argv.push_back("--engine-index");
    argv.push_back(absl::StrCat(engine_index));
  }
  if (!cluster_key_file.empty()) {
    argv.push_back("--cluster-key-file");
    argv.push_back(cluster_key_file);
  }
  // The config travels whole on a pipe the engine core inherits as descriptor 3.
  VLLM_ASSIGN_OR_RETURN(const int config_fd, config::MakeConfigPipe(config));
  absl::StatusOr<std::unique_ptr<executor::ChildProcess>> child =
      executor::ChildProcess::Spawn(argv, config_fd, name);
  close(config_fd);
  return child;
}

// Milliseconds until `next` for poll (-1: never), at most a minute.
int PollTimeoutMs(absl::Time next) {
  if (next == absl::InfiniteFuture()) return -1;
  return static_cast<int>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(next - absl::Now()) + 1, 0, 60'000));
}

}  // namespace

absl::Status EngineProcessManager::Start(std::vector<std::string> handshake_addresses) {
  handshake_addresses_ = std::move(handshake_addresses);
  const config::ParallelConfig& parallel = args_.config.parallel;
  for (int32_t i = 0; i < parallel.data_parallel_size_local; ++i) {
    engines_.emplace_back();
    VLLM_RETURN_IF_ERROR(StartEngine(parallel.data_parallel_start_rank + i, engines_.size() - 1));
  }
  return absl::OkStatus();
}

absl::Status EngineProcessManager::StartEngine(int32_t rank, size_t index) {
  config::VllmConfig engine_config = args_.config;
  engine_config.parallel.data_parallel_rank = rank;
  // Hybrid / external load balancing: this node's API servers know its engines as 0 ..
  const int32_t engine_index = args_.dp_load_balancing == DpLoadBalancing::kInternal
                                   ? rank
                                   : rank - args_.config.parallel.data_parallel_start_rank;
  engines_[index].reset();
  VLLM_ASSIGN_OR_RETURN(engines_[index], SpawnEngineCore(engine_config, handshake_addresses_,
                                                         args_.cluster_key_file, engine_index));
  spdlog::info("starting the engine core of data-parallel rank {} for {} (pid {})", rank,
               args_.config.model.model.string(), engines_[index]->pid());
  return absl::OkStatus();
}

absl::Status EngineProcessManager::Check() {
  for (auto& e : engines_) {
    if (e == nullptr) return absl::UnavailableError("the engine core is not running");
    VLLM_RETURN_IF_ERROR(e->Check());
  }
  return absl::OkStatus();
}

std::vector<int> EngineProcessManager::exit_fds() const {
  std::vector<int> fds;
  for (const auto& e : engines_) fds.push_back(e != nullptr ? e->exit_fd() : -1);
  return fds;
}

EngineProcessManager::SuperviseEnd EngineProcessManager::Supervise(
    int stop_fd, bool restart, const std::function<void(int32_t, const absl::Status&)>& on_death,
    const std::vector<Watch>& watches) {
  std::vector<EngineState> state(engines_.size());
  while (true) {
    std::vector<pollfd> fds;
    for (size_t i = 0; i < engines_.size(); ++i) {
      const bool watch = !state[i].dead && engines_[i] != nullptr;
      fds.push_back({watch ? engines_[i]->exit_fd() : -1, POLLIN, 0});
    }
    for (const Watch& w : watches) fds.push_back({w.fd, POLLIN, 0});
    fds.push_back({stop_fd, POLLIN, 0});
    absl::Time next = absl::InfiniteFuture();
    for (const EngineState& st : state) {
      if (st.dead) next = std::min(next, st.restart_at);
    }
    const int timeout_ms = PollTimeoutMs(next);
    while (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno == EINTR) {
    }
    if (fds.back().revents != 0) return SuperviseEnd::kStopRequested;
    for (size_t i = 0; i < watches.size(); ++i) {
      if (fds[engines_.size() + i].revents != 0 && watches[i].on_readable()) {
        return SuperviseEnd::kWatchEnded;
      }
    }
    for (size_t i = 0; i < engines_.size(); ++i) {
      HandleEngine(i, fds[i].revents != 0, restart, on_death, state[i]);
    }
    if (!restart && watches.empty() &&
        std::all_of(state.begin(), state.end(), [](const EngineState& st) {
          return st.dead && st.restart_at == absl::InfiniteFuture();  // none re-joining
        })) {
      return SuperviseEnd::kEnginesEnded;
    }
  }
}

void EngineProcessManager::HandleEngine(
    size_t i, bool ended, bool restart,
    const std::function<void(int32_t, const absl::Status&)>& on_death, EngineState& st) {
  const absl::Time now = absl::Now();
  const int32_t rank = args_.config.parallel.data_parallel_start_rank + static_cast<int32_t>(i);
  if (!st.dead && ended) {
    st.dead = true;
    absl::Status why = engines_[i]->Check();
    if (why.ok()) why = absl::UnavailableError("the engine core ended");
    spdlog::error("{}", why.ToString());
    on_death(rank, why);
    if (ScheduleRejoin(rank, engines_[i]->wait_status().value_or(0), now, st)) return;
    st.rejoin_attempts = 0;
    if (restart) {
      st.backoff = now - st.started < absl::Minutes(1)
                       ? std::clamp(st.backoff * 2, absl::Seconds(1), absl::Seconds(30))
                       : absl::Seconds(1);
      st.restart_at = now + st.backoff;
      spdlog::info("restarting the engine core of data-parallel rank {} in {}", rank,
                   absl::FormatDuration(st.backoff));
    }
  } else if (st.dead && now >= st.restart_at) {
    st.started = now;
    if (st.rejoin_attempts > 0) {
      spdlog::info("data-parallel engine {}: re-joining the head (attempt {})", rank,
                   st.rejoin_attempts);
    }
    if (absl::Status s = StartEngine(rank, i); !s.ok()) {
      spdlog::error("{}", s.ToString());
      st.backoff = std::clamp(st.backoff * 2, absl::Seconds(1), absl::Seconds(30));
      st.restart_at = now + st.backoff;
      return;
    }
    st.dead = false;
    st.restart_at = absl::InfiniteFuture();
  }
}

bool EngineProcessManager::ScheduleRejoin(int32_t rank, int wait_status, absl::Time now,
                                          EngineState& st) {
  if (!rejoin_ || !WIFEXITED(wait_status)) return false;
  const int code = WEXITSTATUS(wait_status);
  if (code == kEngineExitHeadSilent) {
    st.rejoin_attempts = 1;  // it had joined: start over with the shortest back-off
    st.backoff = absl::Seconds(1);
    spdlog::warn(
        "data-parallel engine {}: the head went silent; re-joining it in {} (the head decides "
        "whether to take it back; --no-rejoin-head ends the node instead)",
        rank, absl::FormatDuration(st.backoff));
  } else if (code == kEngineExitHeadUnanswered && st.rejoin_attempts > 0) {
    st.backoff = std::min(absl::Seconds(1) * (int64_t{1} << std::min(st.rejoin_attempts, 5)),
                          absl::Seconds(30));
    ++st.rejoin_attempts;
    spdlog::warn(
        "data-parallel engine {}: the head did not answer re-join attempt {}; the next "
        "in {}",
        rank, st.rejoin_attempts - 1, absl::FormatDuration(st.backoff));
  } else {
    return false;
  }
  st.restart_at = now + st.backoff;
  return true;
}

void EngineProcessManager::Stop() {
  // SIGTERM to all first, so they shut down side by side.
  for (auto& e : engines_) {
    if (e != nullptr) e->Terminate();
  }
  for (auto& e : engines_) {
    if (e != nullptr) e->Stop(WorkerShutdownTimeout());  // VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS
  }
}

}  // namespace vllm::launcher
