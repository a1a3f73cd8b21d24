// ipc_peers_smoke: runs every peer and limit measurement of bench/ipc/ipc_peers.h once with small
// iteration counts and prints the results, to sanity-check them by eye. Also checks that no
// "vllm-bench-*" entry is left behind in /dev/shm, and runs the iceoryx peer (bench/ipc/
// iceoryx_peer.h) once per wait strategy, or says why it cannot. Exits non-zero if anything
// failed.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/common/bench_util.h"
#include "bench/ipc/iceoryx_peer.h"
#include "bench/ipc/ipc_peers.h"

namespace vllm::bench {
namespace {

std::set<std::string> BenchShmEntries() {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("vllm-bench-", 0) == 0) names.insert(std::move(name));
  }
  return names;
}

bool PrintLatency(const char* what, size_t bytes, int readers,
                  const absl::StatusOr<std::vector<double>>& samples) {
  if (!samples.ok()) {
    std::printf("%-22s %9zu B  %d reader(s)  FAILED: %s\n", what, bytes, readers,
                std::string(samples.status().message()).c_str());
    return false;
  }
  const LatencyStats s = Summarize(*samples);
  std::printf("%-22s %9zu B  %d reader(s)  p50 %9.2f us  p99 %9.2f us  min %9.2f us  (n=%zu)\n",
              what, bytes, readers, s.p50_us, s.p99_us, s.min_us, s.samples);
  return true;
}

bool PrintThroughput(const char* what, size_t bytes, int readers,
                     const absl::StatusOr<ThroughputResult>& result) {
  if (!result.ok()) {
    std::printf("%-22s %9zu B  %d reader(s)  FAILED: %s\n", what, bytes, readers,
                std::string(result.status().message()).c_str());
    return false;
  }
  std::printf("%-22s %9zu B  %d reader(s)  %12.0f msg/s  %8.3f GB/s per reader\n", what, bytes,
              readers, result->messages_per_s, result->gb_per_s);
  return true;
}

int Main() {
  const std::set<std::string> shm_before = BenchShmEntries();
  bool ok = true;
  for (const size_t bytes : {size_t{64}, size_t{1} << 20}) {
    for (const int readers : {1, 2}) {
      const int iterations = bytes > 4096 ? 200 : 2000;
      const RoundTripConfig rt{bytes, readers, iterations, /*warmup=*/200};
      ok &= PrintLatency("zmq ipc round trip", bytes, readers, ZmqIpcRoundTrip(rt));
      ok &= PrintLatency("boost mq round trip", bytes, readers, BoostMqRoundTrip(rt));
      const ThroughputConfig tp{bytes, readers, bytes > 4096 ? 500 : 20000};
      ok &= PrintThroughput("zmq ipc throughput", bytes, readers, ZmqIpcThroughput(tp));
      ok &= PrintThroughput("boost mq throughput", bytes, readers, BoostMqThroughput(tp));
    }
  }
  if (const std::string why = IceoryxUnavailableReason(); !why.empty()) {
    std::printf("iceoryx: skipped (%s)\n", why.c_str());
  } else {
    for (const IceoryxWait wait : {IceoryxWait::kWaitSet, IceoryxWait::kBusyPoll}) {
      const std::string what = std::string("iceoryx ") + IceoryxWaitName(wait);
      const RoundTripConfig rt{4096, 2, 2000, 200};
      ok &= PrintLatency((what + " rt").c_str(), rt.payload_bytes, 2, IceoryxRoundTrip(rt, wait));
      const ThroughputConfig tp{size_t{1} << 20, 2, 500};
      ok &=
          PrintThroughput((what + " tp").c_str(), tp.payload_bytes, 2, IceoryxThroughput(tp, wait));
    }
    StopIceoryxRouDi();
  }
  ok &= PrintLatency("cache-line ping-pong", 8, 1, CacheLinePingPong(100000, 1000));
  for (const size_t block : {size_t{64}, size_t{1} << 20}) {
    std::printf("%-22s %9zu B  ring 160 MiB  %8.2f GB/s\n", "memcpy", block,
                MemcpyBandwidthGBps(block, size_t{160} << 20, 0.3));
    std::printf("%-22s %9zu B  ring   4 MiB  %8.2f GB/s\n", "memcpy", block,
                MemcpyBandwidthGBps(block, size_t{4} << 20, 0.3));
  }

  std::printf("cpu seconds: self (getrusage) %.2f, self (/proc) %.2f\n", SelfCpuSeconds(),
              ProcessCpuSeconds(getpid()));

  const std::set<std::string> shm_after = BenchShmEntries();
  for (const std::string& name : shm_after) {
    if (shm_before.count(name) == 0) {
      std::printf("left behind in /dev/shm: %s\n", name.c_str());
      ok = false;
    }
  }
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace vllm::bench

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == vllm::bench::kIceoryxChildCommand) {
    return vllm::bench::RunIceoryxChild(argc, argv);
  }
  return vllm::bench::Main();
}
