// The processes of `vllm-launch bench sweep` (vLLM 0.33's vllm/benchmarks/sweep/server.py):
// the server under test, started from --serve-cmd in a session of its own so that it and every
// process it starts can be stopped together, and the benchmark and --after-bench-cmd commands,
// run to completion. Not thread-safe (one owner).
#ifndef VLLM_BENCH_SWEEP_SWEEP_PROCESS_H_
#define VLLM_BENCH_SWEEP_SWEEP_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace vllm::bench_sweep {

// Runs `argv` (found on PATH as Python's subprocess does) with stdout on /dev/null unless
// `show_stdout` (stderr inherited) and waits for it. Returns OK when it exits 0, else an error
// naming the command and its exit status (vLLM's check=True).
[[nodiscard]] absl::Status RunCommand(const std::vector<std::string>& argv, bool show_stdout);

// The HTTP status of `method path` at host:port (a blocking HTTP/1.1 request, empty body), or
// an error when no answer came within `timeout`.
[[nodiscard]] absl::StatusOr<int> HttpStatus(const std::string& host, int port,
                                             const std::string& method, const std::string& path,
                                             absl::Duration timeout);

class ServerProcess {
 public:
  // Starts `argv` in a new session (setsid: its own process group) with
  // VLLM_SERVER_DEV_MODE=1 in its environment (for the cache-reset routes). The address is
  // vLLM's: --host (default localhost) and -p/--port (default 8000) read from `argv`.
  [[nodiscard]] static absl::StatusOr<ServerProcess> Start(const std::vector<std::string>& argv,
                                                           bool show_stdout);
  ServerProcess(ServerProcess&& other) noexcept;
  ServerProcess& operator=(ServerProcess&&) = delete;
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  // Stops the server (Stop) if it is still running.
  ~ServerProcess();

  // Polls GET /health until it answers 200. Fails if the server exits first ("Server process
  // crashed with return code N") or `timeout` passes ("Server failed to become ready within N
  // seconds.").
  [[nodiscard]] absl::Status WaitUntilReady(absl::Duration timeout);

  // vLLM's ServerWrapper.after_bench without --after-bench-cmd: resets the server's caches.
  // Our server (argv[0] ends in "vllm-launch") has only the prefix cache (POST
  // /reset_prefix_cache); vLLM's ("vllm") also /reset_mm_cache and /reset_encoder_cache. Any
  // other server: Unimplemented, naming --after-bench-cmd.
  [[nodiscard]] absl::Status ResetCaches() const;

  // Stops the whole process group: SIGINT to the server (our server stops at once, and its
  // engine and worker processes with it), SIGKILL to the group after `grace`, then waits
  // (reaping the orphans that come to this process, a child subreaper) until no process of
  // the group is left. Idempotent. Fails if some process of the group outlives 10 s more.
  absl::Status Stop(absl::Duration grace);

  pid_t pid() const { return pid_; }
  const std::string& host() const { return host_; }
  int port() const { return port_; }

 private:
  ServerProcess(pid_t pid, std::vector<std::string> argv, std::string host, int port)
      : pid_(pid), argv_(std::move(argv)), host_(std::move(host)), port_(port) {}
  // Reaps the server if it has exited; returns true once it has.
  bool Reaped();

  pid_t pid_ = -1;
  bool reaped_ = false;
  int wait_status_ = 0;
  std::vector<std::string> argv_;
  std::string host_;
  int port_ = 8000;
};

// Installs SIGINT/SIGTERM/SIGHUP handlers that SIGKILL the running server's process group
// (the server is in a session of its own: the terminal's Ctrl-C does not reach it) and exit
// with 128 + the signal, so an interrupted sweep leaves no server behind.
void KillServerOnSignal();

// Makes this process the child subreaper (prctl PR_SET_CHILD_SUBREAPER): the server's engine
// and worker processes, orphaned when it exits, become our children and are reaped by Stop().
void BecomeSubreaper();

}  // namespace vllm::bench_sweep

#endif  // VLLM_BENCH_SWEEP_SWEEP_PROCESS_H_
