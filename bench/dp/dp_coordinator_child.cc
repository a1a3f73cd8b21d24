// dp_coordinator_bench's child process: the coordinator, the relay or the sink.
#include "bench/dp/dp_coordinator_child.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <zmq.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/dp_coordinator.h"
#include "ipc/wait_strategy.h"

namespace vllm::bench {

using core::DpCoordinator;
using core::DpCoordinatorOptions;

bool WriteAll(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    s.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

namespace {

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

}  // namespace

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

}  // namespace vllm::bench
