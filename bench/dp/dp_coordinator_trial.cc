// dp_coordinator_bench's parent side of a trial: the simulated engines, the API-server
// subscribers, the child's /proc readings and the measurement window.
#include "bench/dp/dp_coordinator_trial.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "bench/common/bench_util.h"
#include "bench/dp/dp_coordinator_child.h"
#include "core/dp_coordinator.h"
#include "ipc/wait_strategy.h"

namespace vllm::bench {

const char* PeerName(Peer p) {
  switch (p) {
    case Peer::kCoordinatorUdp:
      return "coordinator-udp";
    case Peer::kCoordinator:
      return "coordinator";
    case Peer::kRelay:
      return "relay";
    case Peer::kSink:
      return "sink";
  }
  return "?";
}

namespace {

using core::EngineLoadReport;
using core::LoadPublication;
using core::PublishedEngineLoad;

constexpr absl::Duration kStartTimeout = absl::Seconds(10);
constexpr absl::Duration kSettleTimeout = absl::Seconds(10);
constexpr int64_t kSendTickNs = 1'000'000;  // an engine thread wakes at most every 1 ms

// ---------------------------------------------------------------------------------------------
// /proc readings of the child.

struct CpuNs {
  int64_t total = -1;  // every thread of the process; -1 if unreadable
  int64_t main = 0;    // its main thread (the coordinator's Run loop, or the relay's)
};

// Run time of the threads of `pid`, in nanoseconds (schedstat's first field).
CpuNs ThreadsCpuNs(pid_t pid) {
  std::error_code ec;
  CpuNs cpu;
  for (const auto& entry :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"), ec)) {
    std::ifstream in(entry.path() / "schedstat");
    int64_t ns = 0;
    if (in >> ns) {
      cpu.total = std::max<int64_t>(cpu.total, 0) + ns;
      if (entry.path().filename() == std::to_string(pid)) cpu.main = ns;
    }
  }
  return cpu;
}

// utime + stime of `pid` (all threads), in seconds; -1 if unreadable.
double StatCpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(in, line)) return -1;
  const size_t paren = line.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return -1;
  std::istringstream fields(line.substr(paren + 2));
  std::string f;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {  // field 3 is the state
    if (i == 14) utime = std::strtoull(f.c_str(), nullptr, 10);
    if (i == 15) stime = std::strtoull(f.c_str(), nullptr, 10);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A "Vm...:" line of /proc/<pid>/status in MiB; -1 if absent.
double StatusMiB(pid_t pid, std::string_view key) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) == 0) {
      return static_cast<double>(std::strtoll(line.c_str() + key.size(), nullptr, 10)) / 1024.0;
    }
  }
  return -1;
}

// ---------------------------------------------------------------------------------------------
// The parent: engines, subscribers, measurement.

// Reads one line from `fd` within `timeout`.
absl::StatusOr<std::string> ReadLine(int fd, absl::Duration timeout) {
  const int64_t deadline = ipc::MonoNowNs() + absl::ToInt64Nanoseconds(timeout);
  std::string line;
  while (line.empty() || line.back() != '\n') {
    const int64_t left_ms = (deadline - ipc::MonoNowNs()) / 1'000'000;
    if (left_ms <= 0) return absl::DeadlineExceededError("no answer from the child process");
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(left_ms));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[256];
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n == 0) return absl::UnavailableError("the child process exited without an answer");
    if (n < 0 && errno != EINTR) return absl::InternalError("read from the child's pipe failed");
    if (n > 0) line.append(buf, static_cast<size_t>(n));
  }
  line.pop_back();
  return line;
}

// Engine i's j-th report (j = 1, 2, ...): every figure changes from one report to the next.
EngineLoadReport MakeReport(int32_t i, int32_t j) {
  return {.engine_index = i,
          .waiting = j,
          .running = (j * 7 + i) % 64,
          .kv_cache_usage = static_cast<double>((j * 13 + i) % 101) / 100.0};
}

// Window and stop flags shared by the parent's threads.
struct Shared {
  std::atomic<int64_t> window_start{INT64_MAX}, window_end{INT64_MAX};
  std::atomic<bool> stop_engines{false}, stop_subscribers{false};
  std::atomic<const std::vector<PublishedEngineLoad>*> final_table{nullptr};
  uint64_t final_sent = 0;  // every report sent; written before final_table
};

struct EngineThreadResult {
  uint64_t sent_total = 0, sent_in_window = 0, hwm_drops = 0;
};

// Engine i's report transport: its ZMQ PUSH socket, or (coordinator-udp) its sender of
// sealed datagrams (the product's core::ReportDatagramSender: a UDP socket connected to the
// coordinator, a keyed MAC per report). Send never blocks; false when the report was not taken.
struct EngineSockets {
  std::vector<zmq::socket_t> pushes;
  std::vector<std::unique_ptr<core::ReportDatagramSender>> udp;
  bool Send(int32_t i, const std::string& bytes) {
    if (!udp.empty()) return static_cast<size_t>(i) < udp.size() && udp[i]->Send(bytes);
    try {
      return pushes[i].send(zmq::buffer(bytes), zmq::send_flags::dontwait).has_value();
    } catch (const zmq::error_t&) {
      return false;
    }
  }
};

// Sends for engines t, t + T, t + 2T, ... (T = threads) on their sockets until stop_engines.
void RunEngines(int32_t t, int32_t threads, int32_t n, int64_t period_ns, int64_t start_ns,
                EngineSockets& sockets, std::vector<int32_t>& counts, const Shared& shared,
                EngineThreadResult& out) {
  std::vector<int32_t> mine;
  std::vector<int64_t> next;
  for (int32_t i = t; i < n; i += threads) {
    mine.push_back(i);
    next.push_back(start_ns + static_cast<int64_t>(static_cast<double>(i) * period_ns / n));
  }
  if (mine.empty()) return;
  size_t cursor = 0;  // phases are sorted: the engine due first is always at the cursor
  while (!shared.stop_engines.load(std::memory_order_relaxed)) {
    const int64_t now = ipc::MonoNowNs();
    const int64_t w0 = shared.window_start.load(std::memory_order_relaxed);
    const int64_t w1 = shared.window_end.load(std::memory_order_relaxed);
    while (next[cursor] <= now) {
      const int32_t i = mine[cursor];
      const std::string bytes = core::EncodeLoadReport(MakeReport(i, counts[i] + 1));
      if (sockets.Send(i, bytes)) {
        ++counts[i];
        ++out.sent_total;
        if (now >= w0 && now < w1) ++out.sent_in_window;
      } else {
        ++out.hwm_drops;
      }
      next[cursor] += period_ns;
      cursor = (cursor + 1) % mine.size();
    }
    const int64_t wake = std::max(next[cursor], now + kSendTickNs);
    timespec ts{static_cast<time_t>(wake / 1'000'000'000), static_cast<long>(wake % 1'000'000'000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
  }
}

struct SubscriberResult {
  std::vector<double> latencies_ns;  // receipts inside the window
  double max_ns = 0;
  uint64_t received_total = 0, received_in_window = 0;
  uint64_t errors = 0, gaps = 0;
  std::string first_error;
  std::atomic<bool> got_first{false}, converged{false};
};

// One API server: receives until stop_subscribers, checks and times every message.
void SubscriberLoop(Peer peer, int32_t n, zmq::socket_t& sock, const Shared& shared,
                    SubscriberResult& out) {
  std::vector<PublishedEngineLoad> view(static_cast<size_t>(n));
  uint64_t last_sequence = 0;
  uint64_t sink_count = 0;  // the sink's reports received, as last published
  auto error = [&out](std::string what) {
    if (out.errors++ == 0) out.first_error = std::move(what);
  };
  zmq::message_t msg;
  while (!shared.stop_subscribers.load(std::memory_order_relaxed)) {
    zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(20));
    while (sock.recv(msg, zmq::recv_flags::dontwait)) {
      const int64_t now = ipc::MonoNowNs();
      int64_t sent_ns = 0;
      if (IsCoordinator(peer)) {
        absl::StatusOr<LoadPublication> p = core::DecodeLoadPublication(msg.to_string_view());
        if (!p.ok()) {
          error(p.status().ToString());
          continue;
        }
        if (p->sequence <= last_sequence) error("sequence did not increase");
        if (p->engines.size() != view.size()) error("publication with the wrong engine count");
        last_sequence = p->sequence;
        for (size_t i = 0; i < std::min(view.size(), p->engines.size()); ++i) {
          if (p->engines[i].waiting < view[i].waiting) error("an engine's figures went back");
        }
        if (p->engines.size() == view.size()) view = std::move(p->engines);
        sent_ns = p->publish_time_ns;
      } else if (peer == Peer::kSink) {
        uint64_t in[2];
        if (msg.size() != sizeof(in)) {
          error("sink message of the wrong size");
          continue;
        }
        std::memcpy(in, msg.data(), sizeof(in));
        if (in[1] < sink_count) error("the sink's count went back");
        sink_count = in[1];
        sent_ns = static_cast<int64_t>(in[0]);
      } else {
        if (msg.size() < sizeof(int64_t)) {
          error("relayed message too short");
          continue;
        }
        std::memcpy(&sent_ns, msg.data(), sizeof(sent_ns));
        absl::StatusOr<EngineLoadReport> r =
            core::DecodeLoadReport(msg.to_string_view().substr(sizeof(int64_t)));
        if (!r.ok() || r->engine_index >= n) {
          error(r.ok() ? "engine index out of range" : r.status().ToString());
          continue;
        }
        PublishedEngineLoad& slot = view[static_cast<size_t>(r->engine_index)];
        if (slot.reported && r->waiting != slot.waiting + 1) {
          if (r->waiting <= slot.waiting) error("an engine's reports went back");
          out.gaps += static_cast<uint64_t>(std::max(0, r->waiting - slot.waiting - 1));
        }
        slot = {r->waiting, r->running, r->kv_cache_usage, true};
      }
      ++out.received_total;
      out.got_first.store(true, std::memory_order_release);
      if (now >= shared.window_start.load(std::memory_order_relaxed) &&
          now < shared.window_end.load(std::memory_order_relaxed)) {
        const double latency = static_cast<double>(now - sent_ns);
        out.latencies_ns.push_back(latency);
        out.max_ns = std::max(out.max_ns, latency);
        ++out.received_in_window;
      }
    }
    const std::vector<PublishedEngineLoad>* final_table =
        shared.final_table.load(std::memory_order_acquire);
    if (final_table != nullptr && !out.converged.load(std::memory_order_relaxed) &&
        (peer == Peer::kSink ? sink_count == shared.final_sent : view == *final_table)) {
      out.converged.store(true, std::memory_order_release);
    }
  }
}

void RunSubscriber(Peer peer, int32_t n, zmq::socket_t& sock, const Shared& shared,
                   SubscriberResult& out) {
  try {
    SubscriberLoop(peer, n, sock, shared, out);
  } catch (const zmq::error_t& e) {
    if (out.errors++ == 0) out.first_error = absl::StrCat("subscriber: ", e.what());
  }
}

// Polls `done` every 5 ms until it holds or `timeout` passes; false on timeout.
template <typename F>
bool WaitFor(F done, absl::Duration timeout) {
  const int64_t deadline = ipc::MonoNowNs() + absl::ToInt64Nanoseconds(timeout);
  while (!done()) {
    if (ipc::MonoNowNs() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

void SleepUntil(int64_t t_ns) {
  timespec ts{static_cast<time_t>(t_ns / 1'000'000'000), static_cast<long>(t_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

// A private directory for the ipc:// socket files, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/dpcb-XXXXXX";
    if (mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes the descriptor held, if any, and holds `fd` instead.
  void Reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// The child process of one trial and the parent's ends of its pipes (members destroyed in
// reverse order: the child is killed, if still running, before its pipes close).
struct TrialChild {
  Fd out_r, stop_w;
  std::optional<ChildProcess> process;
  std::string udp_endpoint, udp_key;  // "udp://IPv4:port" and the report key: coordinator-udp
};

// Starts the child (re-executed, so it starts with no ZMQ context and none of our memory) and
// waits for its "ready" line.
absl::Status StartChild(const Config& c, int32_t n, Peer peer, const std::string& stats,
                        const std::string& publish, TrialChild& child) {
  int out_pipe[2], stop_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  child.out_r.Reset(out_pipe[0]);
  Fd out_w(out_pipe[1]);
  if (pipe2(stop_pipe, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  Fd stop_r(stop_pipe[0]);
  child.stop_w.Reset(stop_pipe[1]);
  std::vector<std::string> args = {"dp_coordinator_bench",
                                   "--serve",
                                   PeerName(peer),
                                   "--num-engines",
                                   absl::StrCat(n),
                                   "--stats",
                                   stats,
                                   "--publish",
                                   publish,
                                   "--publish-interval-ms",
                                   absl::StrCat(c.publish_interval_ms),
                                   "--out-fd",
                                   absl::StrCat(out_w.get()),
                                   "--stop-fd",
                                   absl::StrCat(stop_r.get())};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int child_out = out_w.get(), child_stop = stop_r.get();
  absl::StatusOr<ChildProcess> forked = ChildProcess::Fork([&argv, child_out, child_stop] {
    fcntl(child_out, F_SETFD, 0);  // these two survive the exec
    fcntl(child_stop, F_SETFD, 0);
    execv("/proc/self/exe", argv.data());
    return 127;
  });
  if (!forked.ok()) return forked.status();
  child.process.emplace(*std::move(forked));
  out_w.Reset();
  stop_r.Reset();
  absl::StatusOr<std::string> ready = ReadLine(child.out_r.get(), kStartTimeout);
  if (!ready.ok()) return ready.status();
  if (absl::StartsWith(*ready, "ready udp://")) {
    std::vector<std::string> f = absl::StrSplit(*ready, ' ');
    std::optional<std::string> key =
        f.size() == 3 ? core::ReportKeyFromHex(f[2]) : std::optional<std::string>();
    if (!key.has_value()) return absl::InternalError(absl::StrCat("child said: ", *ready));
    child.udp_endpoint = f[1];
    child.udp_key = *key;
  } else if (*ready != "ready") {
    return absl::InternalError(absl::StrCat("child said: ", *ready));
  }
  return absl::OkStatus();
}

// What the parent's threads of one trial share and leave behind.
struct TrialState {
  Shared shared;
  std::vector<int32_t> counts;
  std::vector<EngineThreadResult> engine_results;
  std::vector<std::unique_ptr<SubscriberResult>> sub_results;
};

// The subscribers' SUB sockets (connected to `publish`) and the engines' transports: a PUSH
// socket connected to `stats` each, or a UDP sender to the child's endpoint for coordinator-udp.
// An error creating a UDP sender leaves the engines after it without one.
absl::Status ConnectSockets(zmq::context_t& ctx, const Config& c, int32_t n,
                            const std::string& stats, const std::string& publish,
                            const TrialChild& child, std::vector<zmq::socket_t>& subs,
                            EngineSockets& engine_sockets, TrialState& st) {
  for (int32_t s = 0; s < c.subscribers; ++s) {
    zmq::socket_t& sub = subs.emplace_back(ctx, zmq::socket_type::sub);
    sub.set(zmq::sockopt::linger, 0);
    sub.set(zmq::sockopt::rcvhwm, kRelayHwm);
    sub.set(zmq::sockopt::subscribe, "");
    sub.connect(publish);
    st.sub_results.push_back(std::make_unique<SubscriberResult>());
  }
  for (int32_t i = 0; i < n; ++i) {
    if (!child.udp_endpoint.empty()) {
      absl::StatusOr<std::unique_ptr<core::ReportDatagramSender>> sender =
          core::ReportDatagramSender::Create(child.udp_endpoint, child.udp_key);
      if (!sender.ok()) return sender.status();
      engine_sockets.udp.push_back(*std::move(sender));
      continue;
    }
    zmq::socket_t& push = engine_sockets.pushes.emplace_back(ctx, zmq::socket_type::push);
    push.set(zmq::sockopt::linger, 0);
    push.connect(stats);
  }
  return absl::OkStatus();
}

// The warm-up and the window: the child's CPU time (every thread, and utime + stime), this
// process's CPU time and the child's memory over `c.measure_s`.
absl::Status MeasureWindow(const Config& c, pid_t pid, Shared& shared, Trial& trial) {
  const int64_t t0 = ipc::MonoNowNs() + std::llround(c.warmup_s * 1e9);
  const int64_t t1 = t0 + std::llround(c.measure_s * 1e9);
  shared.window_start.store(t0);
  shared.window_end.store(t1);
  SleepUntil(t0);
  const CpuNs cpu0 = ThreadsCpuNs(pid);
  const double stat0 = StatCpuSeconds(pid), self0 = SelfCpuSeconds();
  const int64_t w0 = ipc::MonoNowNs();
  SleepUntil(t1);
  const CpuNs cpu1 = ThreadsCpuNs(pid);
  const double stat1 = StatCpuSeconds(pid), self1 = SelfCpuSeconds();
  const int64_t w1 = ipc::MonoNowNs();
  trial.rss_mib = StatusMiB(pid, "VmRSS:");
  trial.hwm_mib = StatusMiB(pid, "VmHWM:");
  const double wall = static_cast<double>(w1 - w0) / 1e9;
  trial.window_s = static_cast<double>(t1 - t0) / 1e9;
  trial.cpu_pct = 100.0 * static_cast<double>(cpu1.total - cpu0.total) / 1e9 / wall;
  trial.main_cpu_pct = 100.0 * static_cast<double>(cpu1.main - cpu0.main) / 1e9 / wall;
  trial.cpu_stat_pct = 100.0 * (stat1 - stat0) / wall;
  trial.parent_cpu_pct = 100.0 * (self1 - self0) / wall;
  if (cpu0.total < 0 || cpu1.total < 0)
    return absl::InternalError("cannot read the child's CPU time");
  return absl::OkStatus();
}

// True once every subscriber's `flag` is set.
bool AllSubscribers(const TrialState& st, std::atomic<bool> SubscriberResult::*flag) {
  return std::all_of(st.sub_results.begin(), st.sub_results.end(), [flag](const auto& r) {
    return ((*r).*flag).load(std::memory_order_acquire);
  });
}

// Runs the engines and the subscribers against the started child, measures the window, then
// settles (every subscriber sees every engine's last report) and stops the child, reading its
// counters into `trial`. Returns the first failure; every thread is joined before it returns.
absl::Status DriveTrial(const Config& c, int32_t n, Peer peer, const std::string& stats,
                        const std::string& publish, TrialChild& child, TrialState& st,
                        Trial& trial) {
  Shared& shared = st.shared;
  zmq::context_t ctx(1, kMaxSockets);
  std::vector<zmq::socket_t> subs;
  EngineSockets engine_sockets;
  absl::Status failure = ConnectSockets(ctx, c, n, stats, publish, child, subs, engine_sockets, st);
  std::vector<std::thread> threads;
  for (int32_t s = 0; s < c.subscribers; ++s) {
    threads.emplace_back(RunSubscriber, peer, n, std::ref(subs[s]), std::cref(shared),
                         std::ref(*st.sub_results[s]));
  }
  const int64_t period_ns = std::llround(c.report_interval_ms * 1e6);
  const int64_t start_ns = ipc::MonoNowNs();
  std::vector<std::thread> engine_threads;
  for (int32_t t = 0; t < c.engine_threads; ++t) {
    engine_threads.emplace_back(RunEngines, t, c.engine_threads, n, period_ns, start_ns,
                                std::ref(engine_sockets), std::ref(st.counts), std::cref(shared),
                                std::ref(st.engine_results[t]));
  }

  // Every subscriber connected and receiving, then the warm-up, then the window.
  if (!WaitFor([&] { return AllSubscribers(st, &SubscriberResult::got_first); }, kStartTimeout)) {
    failure = absl::DeadlineExceededError("a subscriber got nothing");
  }
  if (failure.ok()) failure = MeasureWindow(c, child.process->pid(), shared, trial);

  // Engines stop; every subscriber must then see every engine's last report.
  shared.stop_engines.store(true);
  for (std::thread& t : engine_threads) t.join();
  std::vector<PublishedEngineLoad> final_table(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    if (st.counts[i] > 0) {
      const EngineLoadReport r = MakeReport(i, st.counts[i]);
      final_table[i] = {r.waiting, r.running, r.kv_cache_usage, true};
    }
  }
  for (const EngineThreadResult& e : st.engine_results) shared.final_sent += e.sent_total;
  shared.final_table.store(&final_table, std::memory_order_release);
  if (failure.ok() &&
      !WaitFor([&] { return AllSubscribers(st, &SubscriberResult::converged); }, kSettleTimeout)) {
    failure = absl::DeadlineExceededError("a subscriber never saw every engine's last report");
  }
  // Stop the child (it has applied every report: each engine's last one reached the
  // subscribers, and one engine's reports arrive in order).
  (void)WriteAll(child.stop_w.get(), "x");
  absl::StatusOr<std::string> counters = ReadLine(child.out_r.get(), kStartTimeout);
  if (counters.ok()) {
    std::sscanf(counters->c_str(), "%" SCNu64 " %" SCNu64 " %" SCNu64, &trial.child_received,
                &trial.child_dropped, &trial.child_published);
  } else if (failure.ok()) {
    failure = counters.status();
  }
  shared.stop_subscribers.store(true);
  for (std::thread& t : threads) t.join();
  return failure;  // the sockets and the context close here
}

// The trial's totals and rates from its threads' results.
void Aggregate(const Config& c, const TrialState& st, Trial& trial) {
  std::vector<double> all;
  for (const EngineThreadResult& e : st.engine_results) {
    trial.sent_total += e.sent_total;
    trial.hwm_drops += e.hwm_drops;
    trial.reports_per_s += static_cast<double>(e.sent_in_window) / trial.window_s;
  }
  for (const auto& r : st.sub_results) {
    all.insert(all.end(), r->latencies_ns.begin(), r->latencies_ns.end());
    trial.max_ms = std::max(trial.max_ms, r->max_ns / 1e6);
    trial.messages_per_s += static_cast<double>(r->received_in_window) / trial.window_s;
    trial.gaps += r->gaps;
  }
  trial.messages_per_s /= static_cast<double>(c.subscribers);
  trial.latency = Summarize(std::move(all));
}

}  // namespace

absl::StatusOr<Trial> RunTrial(const Config& c, int32_t n, Peer peer) {
  TempDir dir;
  if (dir.path().empty()) return absl::InternalError("mkdtemp failed");
  const std::string stats = absl::StrCat("ipc://", dir.path(), "/stats");
  const std::string publish = absl::StrCat("ipc://", dir.path(), "/publish");
  TrialChild child;
  if (absl::Status s = StartChild(c, n, peer, stats, publish, child); !s.ok()) return s;

  Trial trial;
  trial.engines = n;
  trial.peer = peer;
  TrialState st;
  st.counts.assign(static_cast<size_t>(n), 0);
  st.engine_results.resize(static_cast<size_t>(c.engine_threads));
  absl::Status failure = DriveTrial(c, n, peer, stats, publish, child, st, trial);
  if (absl::Status s = child.process->Wait(kStartTimeout); !s.ok() && failure.ok()) failure = s;
  for (const auto& r : st.sub_results) {  // a bad message explains a failure after it
    if (r->errors > 0) {
      return absl::DataLossError(
          absl::StrCat(r->errors, " bad messages at a subscriber, first: ", r->first_error));
    }
  }
  if (!failure.ok()) return failure;

  Aggregate(c, st, trial);
  if (trial.child_received != trial.sent_total || trial.child_dropped != 0) {
    return absl::DataLossError(absl::StrCat(PeerName(peer), " received ", trial.child_received,
                                            " reports (", trial.child_dropped, " dropped) of ",
                                            trial.sent_total, " sent"));
  }
  return trial;
}

}  // namespace vllm::bench
