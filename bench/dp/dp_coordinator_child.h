// The child process of dp_coordinator_bench (`dp_coordinator_bench --serve PEER ...`): the
// coordinator (ZMQ or UDP reports), the relay or the sink, in a process of its own so that it
// has its own ZMQ context and its CPU time and memory can be read from /proc.
#ifndef VLLM_BENCH_DP_DP_COORDINATOR_CHILD_H_
#define VLLM_BENCH_DP_DP_COORDINATOR_CHILD_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace vllm::bench {

constexpr int kMaxSockets = 16384;    // per ZMQ context (the default is 1023)
constexpr int kRelayHwm = 1'000'000;  // relay and subscribers: never drop

// Writes all of `s` to `fd` (retrying on EINTR and short writes); false on an error.
bool WriteAll(int fd, std::string_view s);

// The child: the coordinator ("coordinator", "coordinator-udp"), the sink ("sink") or the relay
// (anything else), bound to the given addresses, until the stop pipe `stop_fd` gets a byte (or
// closes). It writes "ready\n" to `out_fd` once bound ("ready udp://IP:PORT KEY_HEX\n" for
// coordinator-udp: the engines need the port and the key) and, after stopping,
// "<received> <dropped> <published>\n". Returns the process's exit status (0 = success).
int ServeMain(const std::string& peer, int32_t engines, const std::string& stats,
              const std::string& publish, double publish_interval_ms, int out_fd, int stop_fd);

}  // namespace vllm::bench

#endif  // VLLM_BENCH_DP_DP_COORDINATOR_CHILD_H_
