// ipc_bench: our shared-memory MessageQueue against ZeroMQ ipc://, Boost.Interprocess
// message_queue and the hardware limits, measured in the same run, printed as one table of
// ratios.
//
//   ipc_bench [--quick] [--markdown FILE] [--json FILE]
//     --quick      fewer sizes and iterations (a smoke run of a few seconds)
//     --markdown   replace the IPC section of FILE (docs/BENCHMARKS.md) with this run's table
//     --json       write every figure as JSON
//   ipc_bench shm-reader ...   (internal: a reader process of our queue)
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/common/bench_util.h"
#include "bench/ipc/ipc_peers.h"
#include "bench/ipc/shm_queue_bench.h"
#include "nlohmann/json.hpp"

namespace vllm::bench {
namespace {

using json = nlohmann::json;

struct Flags {
  bool quick = false;
  std::string markdown;
  std::string json_path;
};

std::string SizeName(size_t n) {
  if (n >= (1 << 20)) return absl::StrCat(n >> 20, " MiB");
  if (n >= (1 << 10)) return absl::StrCat(n >> 10, " KiB");
  return absl::StrCat(n, " B");
}

int Iterations(size_t payload, bool quick) {
  int n = payload <= 64          ? 10000
          : payload <= 4096      ? 5000
          : payload <= 65536     ? 2000
          : payload <= (1 << 20) ? 200
                                 : 20;
  return quick ? std::max(10, n / 10) : n;
}

// Runs one measurement, turning an error into a note in the table instead of aborting the run.
template <typename T, typename F>
std::optional<T> Try(const std::string& what, F&& f) {
  absl::StatusOr<T> r = f();
  if (!r.ok()) {
    std::fprintf(stderr, "ipc_bench: %s failed: %s\n", what.c_str(), r.status().ToString().c_str());
    return std::nullopt;
  }
  return std::move(*r);
}

std::string Us(const std::optional<LatencyStats>& s, bool p99 = false) {
  if (!s) return "n/a";
  return absl::StrFormat("%.2f", p99 ? s->p99_us : s->p50_us);
}

std::string Ratio(double num, double den) {
  if (den <= 0 || num <= 0) return "n/a";
  return absl::StrFormat("%.1f×", num / den);
}

json StatsJson(const std::optional<LatencyStats>& s) {
  if (!s) return nullptr;
  return {{"p50_us", s->p50_us},
          {"p99_us", s->p99_us},
          {"mean_us", s->mean_us},
          {"min_us", s->min_us},
          {"samples", s->samples}};
}

// The hardware limits: cache-line ping-pong between two processes and single-thread memcpy.
struct Limits {
  std::optional<LatencyStats> floor;  // ping-pong round trip; empty if it failed
  double memcpy_gbps = 0;             // 1 MiB blocks over a 10 MiB ring
};

Limits MeasureLimits(const Flags& flags, json& out) {
  Limits limits;
  if (auto s = Try<std::vector<double>>("cache-line ping-pong", [&] {
        return CacheLinePingPong(flags.quick ? 20000 : 200000, 2000);
      })) {
    limits.floor = Summarize(std::move(*s));
  }
  limits.memcpy_gbps = MemcpyBandwidthGBps(1 << 20, 10 << 20, flags.quick ? 0.2 : 1.0);
  out["limits"] = {{"cacheline_pingpong", StatsJson(limits.floor)},
                   {"memcpy_1MiB_gbps", limits.memcpy_gbps}};
  return limits;
}

// The round trips at 64 B and 1 reader, which the targets are about.
struct SmallRoundTrip {
  std::optional<LatencyStats> ours, zmq, boost;
};

// Round trip writer → N readers → 64 B reply each, for every size and reader count, on every
// transport; a table in `md`, the figures in `out`, and the 64 B, 1 reader line against `floor`.
SmallRoundTrip RoundTrips(const Flags& flags, const std::optional<LatencyStats>& floor,
                          const std::vector<int>& readers, std::ostringstream& md, json& out) {
  std::vector<size_t> sizes = {64, 4096, 65536, 1 << 20, 16 << 20};
  if (flags.quick) sizes = {64, 1 << 20};
  md << "### Round trip: writer → N readers → one 64 B reply each (µs)\n\n"
     << "| payload | readers | ours p50 | ours p99 | ZeroMQ ipc p50 | ZeroMQ p99 | Boost mq p50 | "
        "Boost p99 | ZeroMQ ÷ ours | Boost ÷ ours |\n"
     << "|---|---|---|---|---|---|---|---|---|---|\n";
  SmallRoundTrip small;
  for (size_t size : sizes) {
    for (int n : readers) {
      RoundTripConfig cfg{size, n, Iterations(size, flags.quick),
                          Iterations(size, flags.quick) / 5};
      std::fprintf(stderr, "round trip %s × %d readers\n", SizeName(size).c_str(), n);
      std::optional<LatencyStats> ours, zmq, boost;
      if (auto s = Try<std::vector<double>>("ours", [&] { return ShmQueueRoundTrip(cfg); }))
        ours = Summarize(*s);
      if (auto s = Try<std::vector<double>>("zmq", [&] { return ZmqIpcRoundTrip(cfg); }))
        zmq = Summarize(*s);
      if (auto s = Try<std::vector<double>>("boost", [&] { return BoostMqRoundTrip(cfg); }))
        boost = Summarize(*s);
      if (size == 64 && n == 1) small = {ours, zmq, boost};
      md << absl::StrFormat("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", SizeName(size),
                            n, Us(ours), Us(ours, true), Us(zmq), Us(zmq, true), Us(boost),
                            Us(boost, true), Ratio(zmq ? zmq->p50_us : 0, ours ? ours->p50_us : 0),
                            Ratio(boost ? boost->p50_us : 0, ours ? ours->p50_us : 0));
      out["round_trip"].push_back({{"payload_bytes", size},
                                   {"readers", n},
                                   {"ours", StatsJson(ours)},
                                   {"zmq_ipc", StatsJson(zmq)},
                                   {"boost_mq", StatsJson(boost)}});
    }
  }
  md << absl::StrFormat(
      "\nHardware floor, cache-line ping-pong between two processes: p50 %s µs, p99 %s µs; "
      "ours (64 B, 1 reader) ÷ floor = %s.\n\n",
      Us(floor), Us(floor, true),
      Ratio(small.ours ? small.ours->p50_us : 0, floor ? floor->p50_us : 0));
  return small;
}

// One-way throughput at 64 B and 1 MiB (each reader touches every byte), against the memcpy
// limit; returns ours at 1 MiB and 1 reader in GB/s (0 if it failed).
double Throughputs(const Flags& flags, double memcpy_gbps, const std::vector<int>& readers,
                   std::ostringstream& md, json& out) {
  md << "### One-way throughput (each reader touches every byte)\n\n"
     << "| payload | readers | ours msg/s | ours GB/s | ZeroMQ msg/s | ZeroMQ GB/s | Boost msg/s | "
        "Boost GB/s | ours ÷ ZeroMQ | ours ÷ Boost |\n"
     << "|---|---|---|---|---|---|---|---|---|---|\n";
  double ours_1mib_gbps = 0;
  for (size_t size : std::vector<size_t>{64, 1 << 20}) {
    for (int n : flags.quick ? std::vector<int>{1} : readers) {
      const int messages = size == 64 ? (flags.quick ? 20000 : 200000) : (flags.quick ? 200 : 2000);
      ThroughputConfig cfg{size, n, messages};
      std::fprintf(stderr, "throughput %s × %d readers\n", SizeName(size).c_str(), n);
      auto ours = Try<ThroughputResult>("ours", [&] { return ShmQueueThroughput(cfg); });
      auto zmq = Try<ThroughputResult>("zmq", [&] { return ZmqIpcThroughput(cfg); });
      auto boost = Try<ThroughputResult>("boost", [&] { return BoostMqThroughput(cfg); });
      if (size == (1 << 20) && n == 1 && ours) ours_1mib_gbps = ours->gb_per_s;
      auto f = [](const std::optional<ThroughputResult>& r, bool gb) {
        if (!r) return std::string("n/a");
        return gb ? absl::StrFormat("%.2f", r->gb_per_s)
                  : absl::StrFormat("%.0f", r->messages_per_s);
      };
      md << absl::StrFormat(
          "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", SizeName(size), n,
          f(ours, false), f(ours, true), f(zmq, false), f(zmq, true), f(boost, false),
          f(boost, true), Ratio(ours ? ours->messages_per_s : 0, zmq ? zmq->messages_per_s : 0),
          Ratio(ours ? ours->messages_per_s : 0, boost ? boost->messages_per_s : 0));
      auto tj = [](const std::optional<ThroughputResult>& r) -> json {
        if (!r) return nullptr;
        return {{"messages_per_s", r->messages_per_s}, {"gb_per_s", r->gb_per_s}};
      };
      out["throughput"].push_back({{"payload_bytes", size},
                                   {"readers", n},
                                   {"ours", tj(ours)},
                                   {"zmq_ipc", tj(zmq)},
                                   {"boost_mq", tj(boost)}});
    }
  }
  md << absl::StrFormat(
      "\nmemcpy limit (one thread, 1 MiB blocks over a 10 MiB ring): %.2f GB/s; ours at 1 MiB, 1 "
      "reader = %.0f %% of it.\n\n",
      memcpy_gbps, memcpy_gbps > 0 ? 100.0 * ours_1mib_gbps / memcpy_gbps : 0.0);
  return ours_1mib_gbps;
}

// Our waiting reader: CPU while blocked on an empty queue and while fed every 5 ms, and the
// wake-up latency; empty if the measurement failed.
std::optional<WakeupResult> Waiting(const Flags& flags, std::ostringstream& md, json& out) {
  const auto idle = absl::Seconds(1);
  const auto period = absl::Milliseconds(5);
  const int periodic_messages = flags.quick ? 100 : 400;
  std::fprintf(stderr, "wake-up and CPU\n");
  auto wake =
      Try<WakeupResult>("wake-up", [&] { return ShmQueueWakeup(idle, period, periodic_messages); });
  md << "### Waiting: reader CPU and wake-up latency (ours)\n\n"
     << "| reader state | CPU of the reader process | wake-up p50 | wake-up p99 |\n"
     << "|---|---|---|---|\n";
  if (wake) {
    md << absl::StrFormat("| blocked 1 s on an empty queue | %.1f %% | — | — |\n",
                          wake->idle_cpu_percent)
       << absl::StrFormat(
              "| one 64 B message every 5 ms (%d messages) | %.1f %% | %.1f µs | %.1f µs |\n",
              wake->messages, wake->periodic_cpu_percent, wake->wakeup.p50_us, wake->wakeup.p99_us);
    out["wakeup"] = {{"idle_cpu_percent", wake->idle_cpu_percent},
                     {"periodic_cpu_percent", wake->periodic_cpu_percent},
                     {"period_ms", 5},
                     {"wakeup", StatsJson(wake->wakeup)}};
  }
  return wake;
}

// The targets, each met or not, as a table in `md` and a list in `out`.
void Targets(const SmallRoundTrip& small, double ours_1mib_gbps, double memcpy_gbps,
             const std::optional<WakeupResult>& wake, std::ostringstream& md, json& out) {
  auto check = [&](const char* name, bool ok, const std::string& value) {
    md << absl::StrFormat("| %s | %s | %s |\n", name, value, ok ? "met" : "NOT met");
    out["targets"].push_back({{"target", name}, {"value", value}, {"met", ok}});
  };
  md << "\n### Targets\n\n| target | measured | |\n|---|---|---|\n";
  const std::optional<LatencyStats>& zmq_64_1 = small.zmq;
  const std::optional<LatencyStats>& boost_64_1 = small.boost;
  const double o = small.ours ? small.ours->p50_us : 0;
  check("64 B round trip, 1 reader: median ≤ 2 µs", o > 0 && o <= 2.0,
        absl::StrFormat("%.2f µs", o));
  check("… ≥ 20× lower than ZeroMQ ipc://", zmq_64_1 && o > 0 && zmq_64_1->p50_us >= 20 * o,
        Ratio(zmq_64_1 ? zmq_64_1->p50_us : 0, o));
  check("… ≥ 5× lower than Boost message_queue", boost_64_1 && o > 0 && boost_64_1->p50_us >= 5 * o,
        Ratio(boost_64_1 ? boost_64_1->p50_us : 0, o));
  check("1 MiB payloads ≥ 50 % of memcpy bandwidth", ours_1mib_gbps >= 0.5 * memcpy_gbps,
        absl::StrFormat("%.0f %%", memcpy_gbps > 0 ? 100 * ours_1mib_gbps / memcpy_gbps : 0.0));
  check("reader blocked 1 s: < 5 % of a core", wake && wake->idle_cpu_percent < 5,
        wake ? absl::StrFormat("%.1f %%", wake->idle_cpu_percent) : "n/a");
  check("reader fed every 5 ms: < 20 % of a core", wake && wake->periodic_cpu_percent < 20,
        wake ? absl::StrFormat("%.1f %%", wake->periodic_cpu_percent) : "n/a");
}

// Replaces the IPC section of `flags.markdown` with this run's `table` (appends it, after a
// title when the file is empty, if the section is not there).
void WriteMarkdown(const Flags& flags, const std::string& machine, const std::string& when,
                   const std::string& table) {
  const std::string begin = "<!-- ipc-bench:begin -->", end = "<!-- ipc-bench:end -->";
  std::string doc;
  {
    std::ifstream in(flags.markdown);
    std::stringstream ss;
    ss << in.rdbuf();
    doc = ss.str();
  }
  const std::string section = absl::StrCat(
      begin, "\n## IPC: MessageQueue vs ZeroMQ, Boost.Interprocess and the hardware limits\n\n",
      "Command: `build/release/bin/ipc_bench", flags.quick ? " --quick" : "",
      " --markdown docs/BENCHMARKS.md`  \nMachine: ", machine, "  \nDate: ", when, "\n\n", table,
      end);
  const size_t b = doc.find(begin), e = doc.find(end);
  if (b != std::string::npos && e != std::string::npos && e > b) {
    doc.replace(b, e + end.size() - b, section);
  } else {
    if (doc.empty())
      doc =
          "# Benchmarks\n\nEvery figure below was measured in one run against a peer in the same "
          "run.\n\n";
    doc += section + "\n";
  }
  std::ofstream(flags.markdown) << doc;
}

int Main(const Flags& flags) {
  std::ostringstream md;
  json out;
  const std::string machine = MachineLine();
  const std::string when = absl::FormatTime("%Y-%m-%d %H:%M UTC", absl::Now(), absl::UTCTimeZone());
  out["machine"] = machine;
  out["date"] = when;
  std::fprintf(stderr, "ipc_bench on %s\n", machine.c_str());

  const Limits limits = MeasureLimits(flags, out);
  const std::vector<int> readers = {1, 2, 4};
  const SmallRoundTrip small = RoundTrips(flags, limits.floor, readers, md, out);
  const double ours_1mib_gbps = Throughputs(flags, limits.memcpy_gbps, readers, md, out);
  const std::optional<WakeupResult> wake = Waiting(flags, md, out);
  Targets(small, ours_1mib_gbps, limits.memcpy_gbps, wake, md, out);

  const std::string table = md.str();
  std::printf("IPC benchmark — %s — %s\n\n%s", machine.c_str(), when.c_str(), table.c_str());
  if (!flags.json_path.empty()) {
    std::ofstream(flags.json_path) << out.dump(2) << "\n";
  }
  if (!flags.markdown.empty()) WriteMarkdown(flags, machine, when, table);
  return 0;
}

}  // namespace
}  // namespace vllm::bench

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "shm-reader") {
    return vllm::bench::RunShmQueueReader(argc, argv);
  }
  vllm::bench::Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      flags.quick = true;
    } else if ((a == "--markdown" || a == "--json") && i + 1 < argc) {
      (a == "--json" ? flags.json_path : flags.markdown) = argv[++i];
    } else if (a == "--help" || a == "-h") {
      std::printf("usage: ipc_bench [--quick] [--markdown FILE] [--json FILE]\n");
      return 0;
    } else {
      std::fprintf(stderr, "ipc_bench: unknown argument '%s' (try --help)\n", a.c_str());
      return 2;
    }
  }
  return vllm::bench::Main(flags);
}
