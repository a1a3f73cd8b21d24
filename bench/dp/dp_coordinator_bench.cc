// dp_coordinator_bench: core::DpCoordinator at scale — N simulated engines pushing load reports
// to one coordinator process, 8 API-server subscribers receiving its publications.
//
//   parent (this process)                               child (re-executed, its own ZMQ context)
//     N PUSH sockets ("engines", 1+ threads) ──ipc──► PULL ┐
//                                                          ├ DpCoordinator (or a peer)
//     8 SUB sockets ("API servers", 1 thread each) ◄─ XPUB ┘
//
// Each simulated engine sends EncodeLoadReport every `--report-interval-ms` (100 ms, like an
// engine that sends on change at most every ~100 ms), phases staggered evenly over the period,
// figures changing every time (waiting = the engine's report count, so it only grows). Each
// subscriber decodes every publication, checks the sequence increases, the table has N entries
// and no engine's `waiting` goes backwards, and records latency = its CLOCK_MONOTONIC at
// receipt − publish_time_ns.
//
// coordinator-udp: the same DpCoordinator with the reports as sealed UDP datagrams, as engines
// of several nodes send them in the product (udp_stats_address; each simulated engine a
// core::ReportDatagramSender) instead of ZMQ PUSH.
//
// The peers, in the same run and with the same load: a plain PULL → XPUB relay (in the child,
// no decoding): every report goes out to every subscriber as it arrives, prefixed by the
// relay's CLOCK_MONOTONIC at send time, so its latency is the same publish-to-receive hop; and
// a sink: every report received and dropped, a 16-byte (send time, count) message at most once
// per publish interval — what receiving the reports over ZMQ costs with no work at all.
//
// Per N and peer: warm-up (`--warmup-s`, after every subscriber has its first message), then a
// window of `--measure-s`; CPU of the child = the sum of its threads' run time from
// /proc/<pid>/task/*/schedstat (the ZMQ I/O thread included; utime + stime from
// /proc/<pid>/stat as a cross-check), memory from /proc/<pid>/status (VmRSS, VmHWM) at the end
// of the window. After the window the engines stop; the run then waits until every subscriber
// has seen every engine's last report (the coordinator's table, the relayed reports, or the
// sink's count), and checks the child received every report sent.
//
// Usage: dp_coordinator_bench [--engines 64,256,1024] [--subscribers 8] [--engine-threads 1]
//          [--warmup-s 1] [--measure-s 5] [--report-interval-ms 100] [--publish-interval-ms 100]
//          [--peers coordinator,coordinator-udp,relay,sink] [--markdown FILE]
//   --markdown   rewrite the dp-coordinator section of FILE (docs/BENCHMARKS.md) with this run
//   dp_coordinator_bench --serve coordinator|relay|sink ...   (internal: the child process)
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
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
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "bench/common/bench_util.h"
#include "core/dp_coordinator.h"
#include "ipc/wait_strategy.h"

namespace vllm::bench {
namespace {

using core::DpCoordinator;
using core::DpCoordinatorOptions;
using core::EngineLoadReport;
using core::LoadPublication;
using core::PublishedEngineLoad;

constexpr int kMaxSockets = 16384;    // per ZMQ context (the default is 1023)
constexpr int kRelayHwm = 1'000'000;  // relay and subscribers: never drop
constexpr absl::Duration kStartTimeout = absl::Seconds(10);
constexpr absl::Duration kSettleTimeout = absl::Seconds(10);
constexpr int64_t kSendTickNs = 1'000'000;  // an engine thread wakes at most every 1 ms
constexpr double kGoalCpuPct = 5.0;
constexpr double kGoalP99Ms = 10.0;
constexpr int32_t kGoalEngines = 1024;

enum class Peer { kCoordinator, kRelay, kSink, kCoordinatorUdp };

// The coordinator, whichever transport its reports take.
bool IsCoordinator(Peer p) { return p == Peer::kCoordinator || p == Peer::kCoordinatorUdp; }

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

struct Config {
  std::vector<int32_t> engines = {64, 256, 1024};
  int32_t subscribers = 8;
  int32_t engine_threads = 1;
  double warmup_s = 1.0;
  double measure_s = 5.0;
  double report_interval_ms = 100.0;
  double publish_interval_ms = 100.0;
  std::vector<Peer> peers = {Peer::kCoordinator, Peer::kCoordinatorUdp, Peer::kRelay, Peer::kSink};
  std::string markdown;
};

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
// The child: the coordinator or the relay, bound to the given addresses, until the stop pipe
// gets a byte (or closes). It writes "ready\n" to `out_fd` once bound and, after stopping,
// "<received> <dropped> <published>\n".

bool WriteAll(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    s.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Blocks until `fd` is readable (a byte or end of file), then runs `stop`.
std::thread StopWatcher(int fd, std::function<void()> stop) {
  return std::thread([fd, stop = std::move(stop)] {
    char c;
    while (read(fd, &c, 1) < 0 && errno == EINTR) {
    }
    stop();
  });
}

// The floor: every report forwarded to every subscriber as it arrives, no decoding.
struct Relay {
  zmq::socket_t pull, xpub;
  std::atomic<bool> stop{false};
  uint64_t forwarded = 0;

  explicit Relay(zmq::context_t& ctx)
      : pull(ctx, zmq::socket_type::pull), xpub(ctx, zmq::socket_type::xpub) {}

  void Run() {
    zmq::pollitem_t items[2] = {{pull.handle(), 0, ZMQ_POLLIN, 0},
                                {xpub.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::message_t in, sub;
    while (!stop.load(std::memory_order_relaxed)) {
      zmq::poll(items, 2, std::chrono::milliseconds(100));
      while (pull.recv(in, zmq::recv_flags::dontwait)) {
        zmq::message_t out(in.size() + sizeof(int64_t));
        const int64_t now = ipc::MonoNowNs();
        std::memcpy(out.data(), &now, sizeof(now));
        std::memcpy(out.data<char>() + sizeof(now), in.data(), in.size());
        (void)xpub.send(out, zmq::send_flags::dontwait);
        ++forwarded;
      }
      while (xpub.recv(sub, zmq::recv_flags::dontwait)) {  // subscriptions: nothing to do
      }
    }
  }
};

// The receive floor: every report received and dropped, no decoding; at most once per
// `interval_ns`, when reports came in, a 16-byte message (send time, reports received so far).
struct Sink {
  zmq::socket_t pull, xpub;
  std::atomic<bool> stop{false};
  uint64_t received = 0, published = 0;

  explicit Sink(zmq::context_t& ctx)
      : pull(ctx, zmq::socket_type::pull), xpub(ctx, zmq::socket_type::xpub) {}

  void Run(int64_t interval_ns) {
    zmq::pollitem_t items[2] = {{pull.handle(), 0, ZMQ_POLLIN, 0},
                                {xpub.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::message_t in, sub;
    int64_t last_publish_ns = 0;
    uint64_t last_count = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const int64_t now = ipc::MonoNowNs();
      int64_t wait_ns = 100'000'000;
      if (received != last_count) {
        wait_ns = std::clamp<int64_t>(last_publish_ns + interval_ns - now, 0, wait_ns);
      }
      zmq::poll(items, 2, std::chrono::milliseconds((wait_ns + 999'999) / 1'000'000));
      while (pull.recv(in, zmq::recv_flags::dontwait)) ++received;
      while (xpub.recv(sub, zmq::recv_flags::dontwait)) {
      }
      const int64_t after = ipc::MonoNowNs();
      if (received != last_count && after - last_publish_ns >= interval_ns) {
        const uint64_t out[2] = {static_cast<uint64_t>(after), received};
        (void)xpub.send(zmq::buffer(out, sizeof(out)), zmq::send_flags::dontwait);
        last_publish_ns = after;
        last_count = received;
        ++published;
      }
    }
  }
};

int ServeMain(const std::string& peer, int32_t engines, const std::string& stats,
              const std::string& publish, double publish_interval_ms, int out_fd, int stop_fd) {
  zmq::context_t ctx(1, kMaxSockets);
  if (peer == "coordinator" || peer == "coordinator-udp") {
    DpCoordinatorOptions o;
    o.num_engines = engines;
    o.stats_address = stats;
    o.publish_address = publish;
    std::string key_hex;
    if (peer == "coordinator-udp") {
      o.udp_stats_address = "127.0.0.1:0";
      absl::StatusOr<std::string> key = core::NewReportKey();
      if (!key.ok()) return 1;
      o.report_key = *key;
      key_hex = absl::BytesToHexString(*key);
    }
    o.publish_interval = absl::Microseconds(std::llround(publish_interval_ms * 1000));
    o.context = &ctx;
    absl::StatusOr<std::unique_ptr<DpCoordinator>> c = DpCoordinator::Create(o);
    if (!c.ok()) {
      std::fprintf(stderr, "coordinator: %s\n", c.status().ToString().c_str());
      return 1;
    }
    DpCoordinator& coordinator = **c;
    std::thread watcher = StopWatcher(stop_fd, [&coordinator] { coordinator.Stop(); });
    // With UDP the parent's engines need the port and the key.
    if (!WriteAll(out_fd, coordinator.udp_stats_endpoint().empty()
                              ? std::string("ready\n")
                              : absl::StrCat("ready ", coordinator.udp_stats_endpoint(), " ",
                                             key_hex, "\n"))) {
      return 1;
    }
    const absl::Status s = coordinator.Run();
    watcher.join();
    if (!s.ok()) {
      std::fprintf(stderr, "coordinator: %s\n", s.ToString().c_str());
      return 1;
    }
    return WriteAll(out_fd,
                    absl::StrCat(coordinator.reports_received(), " ", coordinator.reports_dropped(),
                                 " ", coordinator.publications_sent(), "\n"))
               ? 0
               : 1;
  }
  if (peer == "sink") {
    Sink sink(ctx);
    sink.pull.set(zmq::sockopt::linger, 0);
    sink.xpub.set(zmq::sockopt::linger, 0);
    sink.pull.bind(stats);
    sink.xpub.bind(publish);
    std::thread watcher = StopWatcher(stop_fd, [&sink] { sink.stop.store(true); });
    if (!WriteAll(out_fd, "ready\n")) return 1;
    sink.Run(std::llround(publish_interval_ms * 1e6));
    watcher.join();
    return WriteAll(out_fd, absl::StrCat(sink.received, " 0 ", sink.published, "\n")) ? 0 : 1;
  }
  Relay relay(ctx);
  relay.pull.set(zmq::sockopt::linger, 0);
  relay.xpub.set(zmq::sockopt::linger, 0);
  relay.xpub.set(zmq::sockopt::sndhwm, kRelayHwm);
  relay.pull.bind(stats);
  relay.xpub.bind(publish);
  std::thread watcher = StopWatcher(stop_fd, [&relay] { relay.stop.store(true); });
  if (!WriteAll(out_fd, "ready\n")) return 1;
  relay.Run();
  watcher.join();
  return WriteAll(out_fd, absl::StrCat(relay.forwarded, " 0 ", relay.forwarded, "\n")) ? 0 : 1;
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

struct Trial {
  int32_t engines = 0;
  Peer peer = Peer::kCoordinator;
  double window_s = 0;
  double reports_per_s = 0;
  double messages_per_s = 0;  // per subscriber: publications (coordinator), reports (relay)
  double cpu_pct = 0, main_cpu_pct = 0, cpu_stat_pct = 0, parent_cpu_pct = 0;
  double rss_mib = 0, hwm_mib = 0;
  LatencyStats latency;
  double max_ms = 0;
  uint64_t sent_total = 0, hwm_drops = 0, gaps = 0;
  uint64_t child_received = 0, child_dropped = 0, child_published = 0;
};

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
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

absl::StatusOr<Trial> RunTrial(const Config& c, int32_t n, Peer peer) {
  TempDir dir;
  if (dir.path().empty()) return absl::InternalError("mkdtemp failed");
  const std::string stats = absl::StrCat("ipc://", dir.path(), "/stats");
  const std::string publish = absl::StrCat("ipc://", dir.path(), "/publish");

  // The child: re-executed, so it starts with no ZMQ context and none of our memory.
  int out_pipe[2], stop_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  Fd out_r(out_pipe[0]), out_w(out_pipe[1]);
  if (pipe2(stop_pipe, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  Fd stop_r(stop_pipe[0]), stop_w(stop_pipe[1]);
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
  absl::StatusOr<ChildProcess> child = ChildProcess::Fork([&argv, child_out, child_stop] {
    fcntl(child_out, F_SETFD, 0);  // these two survive the exec
    fcntl(child_stop, F_SETFD, 0);
    execv("/proc/self/exe", argv.data());
    return 127;
  });
  if (!child.ok()) return child.status();
  out_w.Reset();
  stop_r.Reset();
  absl::StatusOr<std::string> ready = ReadLine(out_r.get(), kStartTimeout);
  if (!ready.ok()) return ready.status();
  std::string udp_endpoint, udp_key;  // "udp://IPv4:port" and the report key: coordinator-udp
  if (absl::StartsWith(*ready, "ready udp://")) {
    std::vector<std::string> f = absl::StrSplit(*ready, ' ');
    std::optional<std::string> key =
        f.size() == 3 ? core::ReportKeyFromHex(f[2]) : std::optional<std::string>();
    if (!key.has_value()) return absl::InternalError(absl::StrCat("child said: ", *ready));
    udp_endpoint = f[1];
    udp_key = *key;
  } else if (*ready != "ready") {
    return absl::InternalError(absl::StrCat("child said: ", *ready));
  }
  const pid_t pid = child->pid();

  Trial trial;
  trial.engines = n;
  trial.peer = peer;
  Shared shared;
  std::vector<int32_t> counts(static_cast<size_t>(n), 0);
  std::vector<EngineThreadResult> engine_results(static_cast<size_t>(c.engine_threads));
  std::vector<std::unique_ptr<SubscriberResult>> sub_results;
  absl::Status failure;
  {
    zmq::context_t ctx(1, kMaxSockets);
    std::vector<zmq::socket_t> subs;
    EngineSockets engine_sockets;
    for (int32_t s = 0; s < c.subscribers; ++s) {
      zmq::socket_t& sub = subs.emplace_back(ctx, zmq::socket_type::sub);
      sub.set(zmq::sockopt::linger, 0);
      sub.set(zmq::sockopt::rcvhwm, kRelayHwm);
      sub.set(zmq::sockopt::subscribe, "");
      sub.connect(publish);
      sub_results.push_back(std::make_unique<SubscriberResult>());
    }
    for (int32_t i = 0; i < n; ++i) {
      if (!udp_endpoint.empty()) {
        absl::StatusOr<std::unique_ptr<core::ReportDatagramSender>> sender =
            core::ReportDatagramSender::Create(udp_endpoint, udp_key);
        if (!sender.ok()) {
          failure = sender.status();
          break;
        }
        engine_sockets.udp.push_back(*std::move(sender));
        continue;
      }
      zmq::socket_t& push = engine_sockets.pushes.emplace_back(ctx, zmq::socket_type::push);
      push.set(zmq::sockopt::linger, 0);
      push.connect(stats);
    }
    std::vector<std::thread> threads;
    for (int32_t s = 0; s < c.subscribers; ++s) {
      threads.emplace_back(RunSubscriber, peer, n, std::ref(subs[s]), std::cref(shared),
                           std::ref(*sub_results[s]));
    }
    const int64_t period_ns = std::llround(c.report_interval_ms * 1e6);
    const int64_t start_ns = ipc::MonoNowNs();
    std::vector<std::thread> engine_threads;
    for (int32_t t = 0; t < c.engine_threads; ++t) {
      engine_threads.emplace_back(RunEngines, t, c.engine_threads, n, period_ns, start_ns,
                                  std::ref(engine_sockets), std::ref(counts), std::cref(shared),
                                  std::ref(engine_results[t]));
    }

    // Every subscriber connected and receiving, then the warm-up, then the window.
    if (!WaitFor(
            [&] {
              return std::all_of(sub_results.begin(), sub_results.end(), [](const auto& r) {
                return r->got_first.load(std::memory_order_acquire);
              });
            },
            kStartTimeout)) {
      failure = absl::DeadlineExceededError("a subscriber got nothing");
    }
    if (failure.ok()) {
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
        failure = absl::InternalError("cannot read the child's CPU time");
    }

    // Engines stop; every subscriber must then see every engine's last report.
    shared.stop_engines.store(true);
    for (std::thread& t : engine_threads) t.join();
    std::vector<PublishedEngineLoad> final_table(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) {
      if (counts[i] > 0) {
        const EngineLoadReport r = MakeReport(i, counts[i]);
        final_table[i] = {r.waiting, r.running, r.kv_cache_usage, true};
      }
    }
    for (const EngineThreadResult& e : engine_results) shared.final_sent += e.sent_total;
    shared.final_table.store(&final_table, std::memory_order_release);
    if (failure.ok() && !WaitFor(
                            [&] {
                              return std::all_of(
                                  sub_results.begin(), sub_results.end(), [](const auto& r) {
                                    return r->converged.load(std::memory_order_acquire);
                                  });
                            },
                            kSettleTimeout)) {
      failure = absl::DeadlineExceededError("a subscriber never saw every engine's last report");
    }
    // Stop the child (it has applied every report: each engine's last one reached the
    // subscribers, and one engine's reports arrive in order).
    (void)WriteAll(stop_w.get(), "x");
    absl::StatusOr<std::string> counters = ReadLine(out_r.get(), kStartTimeout);
    if (counters.ok()) {
      std::sscanf(counters->c_str(), "%" SCNu64 " %" SCNu64 " %" SCNu64, &trial.child_received,
                  &trial.child_dropped, &trial.child_published);
    } else if (failure.ok()) {
      failure = counters.status();
    }
    shared.stop_subscribers.store(true);
    for (std::thread& t : threads) t.join();
  }  // sockets and the context close here
  if (absl::Status s = child->Wait(kStartTimeout); !s.ok() && failure.ok()) failure = s;
  for (const auto& r : sub_results) {  // a bad message explains a failure after it
    if (r->errors > 0) {
      return absl::DataLossError(
          absl::StrCat(r->errors, " bad messages at a subscriber, first: ", r->first_error));
    }
  }
  if (!failure.ok()) return failure;

  std::vector<double> all;
  for (const EngineThreadResult& e : engine_results) {
    trial.sent_total += e.sent_total;
    trial.hwm_drops += e.hwm_drops;
    trial.reports_per_s += static_cast<double>(e.sent_in_window) / trial.window_s;
  }
  for (const auto& r : sub_results) {
    all.insert(all.end(), r->latencies_ns.begin(), r->latencies_ns.end());
    trial.max_ms = std::max(trial.max_ms, r->max_ns / 1e6);
    trial.messages_per_s += static_cast<double>(r->received_in_window) / trial.window_s;
    trial.gaps += r->gaps;
  }
  trial.messages_per_s /= static_cast<double>(c.subscribers);
  trial.latency = Summarize(std::move(all));
  if (trial.child_received != trial.sent_total || trial.child_dropped != 0) {
    return absl::DataLossError(absl::StrCat(PeerName(peer), " received ", trial.child_received,
                                            " reports (", trial.child_dropped, " dropped) of ",
                                            trial.sent_total, " sent"));
  }
  return trial;
}

// ---------------------------------------------------------------------------------------------
// Output.

// Greedy word wrap at `width` columns.
std::string Wrap(const std::string& text, size_t width) {
  // A number and its unit ("5 %", "100 ms", "1.0 s") stay on one line.
  auto is_unit = [](std::string_view w) {
    while (!w.empty() && std::string_view(",.;:)").find(w.back()) != std::string_view::npos) {
      w.remove_suffix(1);
    }
    return w == "%" || w == "ms" || w == "s" || w == "MiB";
  };
  std::vector<std::string> words = absl::StrSplit(text, ' ', absl::SkipEmpty());
  std::vector<std::string> tokens;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i + 1 < words.size() && std::isdigit(static_cast<unsigned char>(words[i][0])) &&
        is_unit(words[i + 1])) {
      tokens.push_back(words[i] + " " + words[i + 1]);
      ++i;
    } else {
      tokens.push_back(words[i]);
    }
  }
  std::string out, line;
  for (const std::string& token : tokens) {
    if (!line.empty() && line.size() + 1 + token.size() > width) {
      absl::StrAppend(&out, line, "\n");
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", token);
  }
  return out + line;
}

const Trial* Find(const std::vector<Trial>& trials, int32_t n, Peer peer) {
  for (const Trial& t : trials) {
    if (t.engines == n && t.peer == peer) return &t;
  }
  return nullptr;
}

bool GoalHolds(const Trial& t) {
  return t.cpu_pct <= kGoalCpuPct && t.latency.p99_us / 1e3 <= kGoalP99Ms;
}

std::string Tables(const Config& c, const std::vector<Trial>& trials) {
  std::string s =
      "| engines | peer | reports/s | publications/s per subscriber | CPU % of a core (stat) | "
      "main thread CPU % | RSS / HWM MiB | latency p50 ms | p99 ms | max ms | samples | bench "
      "process CPU % |\n"
      "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const Trial& t : trials) {
    absl::StrAppendFormat(&s,
                          "| %d | %s | %.0f | %.1f | %.2f (%.1f) | %.2f | %.1f / %.1f | %.3f | "
                          "%.3f | %.3f | %u | %.0f |\n",
                          t.engines, PeerName(t.peer), t.reports_per_s, t.messages_per_s, t.cpu_pct,
                          t.cpu_stat_pct, t.main_cpu_pct, t.rss_mib, t.hwm_mib,
                          t.latency.p50_us / 1e3, t.latency.p99_us / 1e3, t.max_ms,
                          static_cast<unsigned>(t.latency.samples), t.parent_cpu_pct);
  }
  bool ratios = false;
  const bool sink = std::any_of(trials.begin(), trials.end(),
                                [](const Trial& t) { return t.peer == Peer::kSink; });
  std::string r = absl::StrCat(
      "\n| engines | coordinator CPU ÷ relay | p50 ÷ relay | p99 ÷ relay | ",
      sink ? "CPU ÷ sink | " : "", "goal (≤ 5 % CPU, ≤ 10 ms p99) |\n|---:|---:|---:|---:|",
      sink ? "---:|" : "", "---|\n");
  auto ratio = [](const Trial* a, const Trial* b, double Trial::*f) -> std::string {
    if (a == nullptr || b == nullptr || b->*f <= 0) return "–";
    return absl::StrFormat("%.2f", a->*f / b->*f);
  };
  auto latency_ratio = [](const Trial* a, const Trial* b, double LatencyStats::*f) -> std::string {
    if (a == nullptr || b == nullptr || b->latency.*f <= 0) return "–";
    return absl::StrFormat("%.2f", a->latency.*f / b->latency.*f);
  };
  for (int32_t n : c.engines) {
    const Trial* co = Find(trials, n, Peer::kCoordinator);
    const Trial* re = Find(trials, n, Peer::kRelay);
    const Trial* si = Find(trials, n, Peer::kSink);
    if (co == nullptr) continue;
    absl::StrAppend(
        &r, "| ", n, " | ", ratio(co, re, &Trial::cpu_pct), " | ",
        latency_ratio(co, re, &LatencyStats::p50_us), " | ",
        latency_ratio(co, re, &LatencyStats::p99_us), " | ",
        sink ? ratio(co, si, &Trial::cpu_pct) + " | " : "",
        absl::StrFormat("%s (%.2f %%, %.3f ms)", GoalHolds(*co) ? "holds" : "**missed**",
                        co->cpu_pct, co->latency.p99_us / 1e3),
        " |\n");
    ratios = true;
  }
  if (ratios) s += r;
  for (Peer p : {Peer::kCoordinator, Peer::kCoordinatorUdp}) {
    const Trial* goal = Find(trials, kGoalEngines, p);
    if (goal == nullptr) continue;
    absl::StrAppendFormat(
        &s,
        "\nGoal at %d engines (≤ %.0f %% of a core, p99 ≤ %.0f ms), %s: **%s** (%.2f %%, "
        "%.3f ms).\n",
        kGoalEngines, kGoalCpuPct, kGoalP99Ms, PeerName(p), GoalHolds(*goal) ? "holds" : "missed",
        goal->cpu_pct, goal->latency.p99_us / 1e3);
  }
  // Where the coordinator's CPU goes, at the largest N run.
  const Trial* big = nullptr;
  for (const Trial& t : trials) {
    if (t.peer == Peer::kCoordinator && (big == nullptr || t.engines > big->engines)) big = &t;
  }
  if (big != nullptr) {
    std::string where;
    absl::StrAppendFormat(&where,
                          "At %d engines the coordinator's main thread (its Run loop: a wake-up, "
                          "recv and decode per report, and the publications) took %.2f %% of a "
                          "core, its other threads (ZMQ's I/O thread, reading %d connections) "
                          "%.2f %%.",
                          big->engines, big->main_cpu_pct, big->engines,
                          big->cpu_pct - big->main_cpu_pct);
    if (const Trial* si = Find(trials, big->engines, Peer::kSink)) {
      absl::StrAppendFormat(
          &where,
          " The sink (the same reports received and dropped) took %.2f %% (main thread %.2f %%).",
          si->cpu_pct, si->main_cpu_pct);
    }
    s += "\n" + Wrap(where, 100) + "\n";
  }
  return s;
}

std::string Setup(const Config& c) {
  return absl::StrFormat(
      "Each simulated engine (a PUSH socket; %d sending thread%s) sends one report every %.0f ms, "
      "phases staggered evenly, every figure changed (N engines: %.0f × N reports/s); %d "
      "API-server subscribers (a SUB socket and a thread each) in the same process; the "
      "coordinator (`core::DpCoordinator`, publish interval %.0f ms) or its peer runs in a "
      "child process of its own (re-executed: its own ZMQ context, none of our memory), ipc:// "
      "sockets in a private /tmp directory. Warm-up %.1f s "
      "after every subscriber has its first message, then a window of %.1f s per row.",
      c.engine_threads, c.engine_threads == 1 ? "" : "s", c.report_interval_ms,
      1000.0 / c.report_interval_ms, c.subscribers, c.publish_interval_ms, c.warmup_s, c.measure_s);
}

absl::Status WriteMarkdown(const Config& c, const std::string& command,
                           const std::vector<Trial>& trials) {
  const std::string begin = "<!-- dp-coordinator:begin -->", end = "<!-- dp-coordinator:end -->";
  std::string doc;
  {
    std::ifstream in(c.markdown);
    std::stringstream ss;
    ss << in.rdbuf();
    doc = ss.str();
  }
  constexpr size_t kWidth = 100;
  std::ostringstream s;
  s << begin << "\n## Data-parallel coordinator at scale\n\n"
    << "Command: `" << command << "`  \nMachine: " << MachineLine() << "  \nDate: " << UtcNow()
    << "\n\n"
    << Wrap(
           "`bench/dp/dp_coordinator_bench.cc` (described in `bench/dp/README.md`): N simulated "
           "engines push load reports to one `core::DpCoordinator`, which publishes the "
           "per-engine table to the API servers. " +
               Setup(c) +
               " The peers are a plain PULL → XPUB relay in the same kind of child process "
               "(no decoding: each report goes out to every subscriber as it arrives, with the "
               "relay's send time in front) and a sink (every report received and dropped, a "
               "16-byte message — send time, count — at most once per publish interval: ZMQ's "
               "receive cost alone), under the same load in the same run. coordinator-udp is the "
               "same coordinator taking the reports as UDP datagrams on 127.0.0.1 instead, as "
               "engines on several nodes send them in the product (udp_stats_address: one "
               "datagram per report sealed with a keyed BLAKE2b MAC and a sequence number, "
               "checked by the coordinator, read with recvmmsg, held in the socket until a "
               "publication is due; each engine a core::ReportDatagramSender).",
           kWidth)
    << "\n\n"
    << Wrap(
           "CPU % = the child's run time over the window, every thread (the ZMQ I/O thread "
           "included), from /proc/<pid>/task/*/schedstat; in parentheses utime + stime from "
           "/proc/<pid>/stat (clock ticks). RSS / HWM = VmRSS / VmHWM of the child at the end "
           "of the window. Latency = the subscriber's CLOCK_MONOTONIC at receipt − the "
           "publish time in the message, over every receipt of all subscribers in the window. "
           "Publications/s per subscriber: for the relay, every relayed report counts. Bench "
           "process CPU % = the engines and subscribers (this process, all its "
           "threads), which compete with the child for the same cores: a latency includes the "
           "subscriber's wait for a core when all of them wake for one publication. Checks: every "
           "publication decodes, "
           "sequences increase, no engine's figures go back; after the window every subscriber "
           "sees every engine's last report and the child received every report sent. On a "
           "small machine shared with other jobs, CPU figures move between runs (by up to 2× "
           "on the 2-core VM below): compare the rows of one run.",
           kWidth)
    << "\n\n"
    << Tables(c, trials) << "\n"
    << end;
  ReplaceMarkdownSection(&doc, begin, end, s.str());
  std::ofstream out(c.markdown);
  out << doc;
  return out ? absl::OkStatus() : absl::InternalError(absl::StrCat("cannot write ", c.markdown));
}

int BenchMain(const Config& c, const std::string& command) {
  // 1024 engines = 1024 sockets and connections here and in the child.
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  std::printf("DP coordinator at scale — %s\n%s\n\n%s\n\n", UtcNow().c_str(), MachineLine().c_str(),
              Wrap(Setup(c), 100).c_str());
  std::vector<Trial> trials;
  int rc = 0;
  for (int32_t n : c.engines) {
    for (Peer peer : c.peers) {
      absl::StatusOr<Trial> t = [&]() -> absl::StatusOr<Trial> {
        try {
          return RunTrial(c, n, peer);
        } catch (const zmq::error_t& e) {
          return absl::InternalError(absl::StrCat("ZMQ: ", e.what()));
        }
      }();
      if (!t.ok()) {
        std::fprintf(stderr, "dp_coordinator_bench: %d engines, %s: %s\n", n, PeerName(peer),
                     t.status().ToString().c_str());
        rc = 1;
        continue;
      }
      std::printf(
          "%5d engines %-11s  %6.0f reports/s  %7.1f msg/s/sub  CPU %6.2f %% (stat %5.1f, main "
          "%5.2f)  "
          "HWM %5.1f MiB  p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms  bench CPU %3.0f %%  "
          "HWM drops %" PRIu64 "  gaps %" PRIu64 "\n",
          n, PeerName(peer), t->reports_per_s, t->messages_per_s, t->cpu_pct, t->cpu_stat_pct,
          t->main_cpu_pct, t->hwm_mib, t->latency.p50_us / 1e3, t->latency.p99_us / 1e3, t->max_ms,
          t->parent_cpu_pct, t->hwm_drops, t->gaps);
      std::fflush(stdout);
      trials.push_back(*t);
    }
  }
  std::printf("\n%s", Tables(c, trials).c_str());
  if (!c.markdown.empty() && rc == 0) {
    if (absl::Status s = WriteMarkdown(c, command, trials); !s.ok()) {
      std::fprintf(stderr, "dp_coordinator_bench: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  return rc;
}

}  // namespace
}  // namespace vllm::bench

int main(int argc, char** argv) {
  using vllm::bench::Peer;
  vllm::bench::Config c;
  std::string command = "build/release/bin/dp_coordinator_bench";
  // --serve: the child process.
  std::string serve, stats, publish;
  int32_t num_engines = 0;
  int out_fd = -1, stop_fd = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: dp_coordinator_bench [--engines 64,256,1024] [--subscribers 8]\n"
          "         [--engine-threads 1] [--warmup-s 1] [--measure-s 5]\n"
          "         [--report-interval-ms 100] [--publish-interval-ms 100]\n"
          "         [--peers coordinator,coordinator-udp,relay,sink] [--markdown FILE]\n");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "dp_coordinator_bench: '%s' needs a value (try --help)\n", a.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    command += " " + a + " " + v;
    try {
      if (a == "--engines") {
        c.engines.clear();
        for (const std::string& e : std::vector<std::string>(absl::StrSplit(v, ',')))
          c.engines.push_back(std::stoi(e));
      } else if (a == "--subscribers") {
        c.subscribers = std::stoi(v);
      } else if (a == "--engine-threads") {
        c.engine_threads = std::stoi(v);
      } else if (a == "--warmup-s") {
        c.warmup_s = std::stod(v);
      } else if (a == "--measure-s") {
        c.measure_s = std::stod(v);
      } else if (a == "--report-interval-ms") {
        c.report_interval_ms = std::stod(v);
      } else if (a == "--publish-interval-ms") {
        c.publish_interval_ms = std::stod(v);
      } else if (a == "--peers") {
        c.peers.clear();
        for (const std::string& p : std::vector<std::string>(absl::StrSplit(v, ','))) {
          if (p == "coordinator") {
            c.peers.push_back(Peer::kCoordinator);
          } else if (p == "coordinator-udp") {
            c.peers.push_back(Peer::kCoordinatorUdp);
          } else if (p == "relay") {
            c.peers.push_back(Peer::kRelay);
          } else if (p == "sink") {
            c.peers.push_back(Peer::kSink);
          } else {
            throw std::invalid_argument("peer");
          }
        }
      } else if (a == "--markdown") {
        c.markdown = v;
      } else if (a == "--serve") {
        serve = v;
      } else if (a == "--num-engines") {
        num_engines = std::stoi(v);
      } else if (a == "--stats") {
        stats = v;
      } else if (a == "--publish") {
        publish = v;
      } else if (a == "--out-fd") {
        out_fd = std::stoi(v);
      } else if (a == "--stop-fd") {
        stop_fd = std::stoi(v);
      } else {
        std::fprintf(stderr, "dp_coordinator_bench: unknown argument '%s' (try --help)\n",
                     a.c_str());
        return 2;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "dp_coordinator_bench: bad value '%s' for %s\n", v.c_str(), a.c_str());
      return 2;
    }
  }
  if (!serve.empty()) {
    return vllm::bench::ServeMain(serve, num_engines, stats, publish, c.publish_interval_ms, out_fd,
                                  stop_fd);
  }
  bool bad = c.engines.empty() || c.peers.empty() || c.subscribers < 1 || c.engine_threads < 1 ||
             c.warmup_s < 0 || c.measure_s <= 0 || c.report_interval_ms <= 0 ||
             c.publish_interval_ms < 0;
  for (int32_t n : c.engines) bad |= n < 1 || n > vllm::core::kMaxDpEngines;
  if (bad) {
    std::fprintf(stderr, "dp_coordinator_bench: a value is out of range (try --help)\n");
    return 2;
  }
  return vllm::bench::BenchMain(c, command);
}
