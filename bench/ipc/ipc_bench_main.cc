// ipc_bench: our shared-memory MessageQueue against Eclipse iceoryx (zero-copy publish/subscribe,
// WaitSet and busy-poll), ZeroMQ ipc://, Boost.Interprocess message_queue and the hardware
// limits, 1/2/4/8 readers, 64 B / 4 KiB / 1 MiB, measured in the same run, printed as tables of
// ratios with issue 34's targets.
//
//   ipc_bench [--quick] [--markdown FILE] [--json FILE]
//     --quick      fewer sizes and iterations (a smoke run of a few seconds)
//     --markdown   replace the IPC section of FILE (docs/BENCHMARKS.md) with this run's table
//     --json       write every figure as JSON
//     --only       measure only these transports (ours, iceoryx_waitset, iceoryx_busy,
//                  zmq_ipc, boost_mq), e.g. to check one peer; ratios need ours
//   ipc_bench shm-reader ...   (internal: a reader process of our queue)
//   ipc_bench iox-child ...    (internal: an iceoryx writer or reader process)
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/common/bench_util.h"
#include "bench/ipc/iceoryx_peer.h"
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
  std::vector<std::string> only;  // transport keys to measure (empty: all)
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

// One row of the tables: a transport and how to measure it. The first is ours.
struct Transport {
  std::string key;    // in the JSON
  std::string label;  // in the tables
  std::function<absl::StatusOr<std::vector<double>>(const RoundTripConfig&)> round_trip;
  std::function<absl::StatusOr<ThroughputResult>(const ThroughputConfig&)> throughput;
};

constexpr char kIceoryx[] = "iceoryx_waitset";  // the iceoryx row the targets compare with

std::vector<Transport> Transports(bool with_iceoryx, const std::vector<std::string>& only) {
  std::vector<Transport> t;
  t.push_back({"ours", "ours (MessageQueue)", ShmQueueRoundTrip, ShmQueueThroughput});
  if (with_iceoryx) {
    for (IceoryxWait wait : {IceoryxWait::kWaitSet, IceoryxWait::kBusyPoll}) {
      const bool ws = wait == IceoryxWait::kWaitSet;
      t.push_back({ws ? kIceoryx : "iceoryx_busy",
                   absl::StrCat("iceoryx (", IceoryxWaitName(wait), ")"),
                   [wait](const RoundTripConfig& c) { return IceoryxRoundTrip(c, wait); },
                   [wait](const ThroughputConfig& c) { return IceoryxThroughput(c, wait); }});
    }
  }
  t.push_back({"zmq_ipc", "ZeroMQ ipc://", ZmqIpcRoundTrip, ZmqIpcThroughput});
  t.push_back({"boost_mq", "Boost message_queue", BoostMqRoundTrip, BoostMqThroughput});
  if (!only.empty()) {
    std::erase_if(t, [&](const Transport& x) {
      return std::find(only.begin(), only.end(), x.key) == only.end();
    });
  }
  return t;
}

using Shape = std::pair<size_t, int>;  // payload bytes, readers

// Every figure of the run, by shape and transport key (absent or empty: it failed).
struct Results {
  std::map<Shape, std::map<std::string, std::optional<LatencyStats>>> round_trip;
  std::map<Shape, std::map<std::string, std::optional<ThroughputResult>>> throughput;
};

std::vector<size_t> Sizes(const Flags& flags) {
  if (flags.quick) return {64, 1 << 20};
  return {64, 4096, 1 << 20};
}

// Round trip writer → N readers → 64 B reply each, for every size and reader count, on every
// transport, as a table in `md`.
void RoundTrips(const Flags& flags, const std::vector<Transport>& transports,
                const std::optional<LatencyStats>& floor, const std::vector<int>& readers,
                Results& results, std::ostringstream& md, json& out) {
  md << "### Round trip: writer → N readers (each touches every byte) → one 64 B reply each\n\n"
     << "| payload | readers | transport | p50 µs | p99 µs | p50 ÷ ours | p99 ÷ ours |\n"
     << "|---|---|---|---|---|---|---|\n";
  for (size_t size : Sizes(flags)) {
    for (int n : readers) {
      const int iterations = Iterations(size, flags.quick);
      const RoundTripConfig cfg{size, n, iterations, iterations / 5};
      json row = {{"payload_bytes", size}, {"readers", n}};
      auto& by_key = results.round_trip[{size, n}];
      for (const Transport& t : transports) {
        std::fprintf(stderr, "round trip %s × %d readers: %s\n", SizeName(size).c_str(), n,
                     t.label.c_str());
        std::optional<LatencyStats> stats;
        if (auto s = Try<std::vector<double>>(t.key, [&] { return t.round_trip(cfg); }))
          stats = Summarize(std::move(*s));
        by_key[t.key] = stats;
        row[t.key] = StatsJson(stats);
        const std::optional<LatencyStats>& ours = by_key["ours"];
        const bool is_ours = t.key == "ours";
        md << absl::StrFormat(
            "| %s | %d | %s | %s | %s | %s | %s |\n", SizeName(size), n, t.label, Us(stats),
            Us(stats, true),
            is_ours ? "—" : Ratio(stats ? stats->p50_us : 0, ours ? ours->p50_us : 0),
            is_ours ? "—" : Ratio(stats ? stats->p99_us : 0, ours ? ours->p99_us : 0));
      }
      out["round_trip"].push_back(row);
    }
  }
  const auto& ours = results.round_trip[{64, 1}]["ours"];
  md << absl::StrFormat(
      "\nHardware floor, cache-line ping-pong between two processes: p50 %s µs, p99 %s µs; "
      "ours (64 B, 1 reader) ÷ floor = %s.\n\n",
      Us(floor), Us(floor, true), Ratio(ours ? ours->p50_us : 0, floor ? floor->p50_us : 0));
}

int ThroughputMessages(size_t size, bool quick) {
  const int n = size <= 64 ? 200000 : size <= 4096 ? 50000 : 1000;
  return quick ? std::max(100, n / 10) : n;
}

// One-way throughput (each reader touches every byte) for every size and reader count, on
// every transport, as a table in `md`, against the memcpy limit.
void Throughputs(const Flags& flags, const std::vector<Transport>& transports, double memcpy_gbps,
                 const std::vector<int>& readers, Results& results, std::ostringstream& md,
                 json& out) {
  md << "### One-way throughput (each reader touches every byte; GB/s delivered to each reader)"
        "\n\n| payload | readers | transport | msg/s | GB/s | ours ÷ it |\n"
     << "|---|---|---|---|---|---|\n";
  for (size_t size : Sizes(flags)) {
    for (int n : readers) {
      const ThroughputConfig cfg{size, n, ThroughputMessages(size, flags.quick)};
      json row = {{"payload_bytes", size}, {"readers", n}};
      auto& by_key = results.throughput[{size, n}];
      for (const Transport& t : transports) {
        std::fprintf(stderr, "throughput %s × %d readers: %s\n", SizeName(size).c_str(), n,
                     t.label.c_str());
        auto r = Try<ThroughputResult>(t.key, [&] { return t.throughput(cfg); });
        by_key[t.key] = r;
        row[t.key] = r ? json{{"messages_per_s", r->messages_per_s}, {"gb_per_s", r->gb_per_s}}
                       : json(nullptr);
        const std::optional<ThroughputResult>& ours = by_key["ours"];
        const bool is_ours = t.key == "ours";
        md << absl::StrFormat(
            "| %s | %d | %s | %s | %s | %s |\n", SizeName(size), n, t.label,
            r ? absl::StrFormat("%.0f", r->messages_per_s) : "n/a",
            r ? absl::StrFormat("%.2f", r->gb_per_s) : "n/a",
            is_ours ? "—" : Ratio(ours ? ours->messages_per_s : 0, r ? r->messages_per_s : 0));
      }
      out["throughput"].push_back(row);
    }
  }
  const auto& ours_1mib = results.throughput[{1 << 20, 1}]["ours"];
  const double gbps = ours_1mib ? ours_1mib->gb_per_s : 0;
  md << absl::StrFormat(
      "\nmemcpy limit (one thread, 1 MiB blocks over a 10 MiB ring): %.2f GB/s; ours streaming "
      "1 MiB to 1 reader = %.0f %% of it.\n\n",
      memcpy_gbps, memcpy_gbps > 0 ? 100.0 * gbps / memcpy_gbps : 0.0);
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

// The smallest peer ÷ ours over the sizes at `n` readers, for p99 round trip (`rt`) or
// throughput (ours ÷ peer); 0 if a figure is missing. `where` gets the payload of the minimum.
double WorstRatio(const Results& results, const std::vector<size_t>& sizes, int n,
                  const std::string& peer, bool rt, std::string& where) {
  double worst = -1;
  for (size_t size : sizes) {
    double ratio = 0;
    if (rt) {
      const auto it = results.round_trip.find({size, n});
      if (it == results.round_trip.end()) return 0;
      const auto o = it->second.find("ours"), p = it->second.find(peer);
      if (o == it->second.end() || p == it->second.end() || !o->second || !p->second) return 0;
      ratio = p->second->p99_us / o->second->p99_us;
    } else {
      const auto it = results.throughput.find({size, n});
      if (it == results.throughput.end()) return 0;
      const auto o = it->second.find("ours"), p = it->second.find(peer);
      if (o == it->second.end() || p == it->second.end() || !o->second || !p->second) return 0;
      ratio = o->second->messages_per_s / p->second->messages_per_s;
    }
    if (worst < 0 || ratio < worst) {
      worst = ratio;
      where = SizeName(size);
    }
  }
  return std::max(worst, 0.0);
}

// Issue 34's targets, each met or not, as a table in `md` and a list in `out`.
void Targets(const Flags& flags, const Results& results, const Limits& limits,
             const std::vector<int>& readers, const std::optional<WakeupResult>& wake,
             std::ostringstream& md, json& out) {
  auto check = [&](const std::string& name, bool ok, const std::string& value) {
    md << absl::StrFormat("| %s | %s | %s |\n", name, value, ok ? "met" : "NOT met");
    out["targets"].push_back({{"target", name}, {"value", value}, {"met", ok}});
  };
  md << "\n### Targets (issue 34)\n\n| target | measured | |\n|---|---|---|\n";
  const auto rt = [&](size_t size, int n) -> std::optional<LatencyStats> {
    const auto it = results.round_trip.find({size, n});
    if (it == results.round_trip.end() || !it->second.count("ours")) return std::nullopt;
    return it->second.at("ours");
  };
  const auto small = rt(64, 1);
  const double floor = limits.floor ? limits.floor->p50_us : 0;
  check("64 B round trip, 1 reader: p50 ≤ 2× the cache-line floor",
        small && floor > 0 && small->p50_us <= 2 * floor,
        absl::StrFormat("%s µs = %s the floor's %s µs", Us(small),
                        Ratio(small ? small->p50_us : 0, floor), Us(limits.floor)));
  const std::vector<size_t> sizes = Sizes(flags);
  for (int n : readers) {
    if (n < 2) continue;
    for (bool is_rt : {false, true}) {
      std::string value;
      bool ok = true;
      for (const char* peer : {"zmq_ipc", kIceoryx}) {
        std::string where;
        const double worst = WorstRatio(results, sizes, n, peer, is_rt, where);
        ok = ok && worst >= 1.0;
        absl::StrAppend(&value, value.empty() ? "" : "; ",
                        peer == std::string("zmq_ipc") ? "ZeroMQ " : "iceoryx ",
                        worst > 0 ? absl::StrFormat("%.2f× (%s)", worst, where) : "n/a");
      }
      check(absl::StrCat(n, is_rt ? " readers: p99 round trip ≤ ZeroMQ's and iceoryx's"
                                  : " readers: broadcast throughput ≥ ZeroMQ's and iceoryx's"),
            ok, value);
    }
  }
  const auto big = rt(1 << 20, 1);
  const double rt_gbps = big && big->p50_us > 0 ? (1 << 20) / (big->p50_us * 1e3) : 0;
  const double share = limits.memcpy_gbps > 0 ? rt_gbps / limits.memcpy_gbps : 0;
  check("1 MiB round trip, 1 reader: ≥ 80 % of memcpy", share >= 0.8,
        absl::StrFormat("%.0f %% (%.2f of %.2f GB/s)", 100 * share, rt_gbps, limits.memcpy_gbps));
  check("reader fed every 5 ms: ≤ 5 % of a core, wake-up p50 ≤ 20 µs",
        wake && wake->periodic_cpu_percent <= 5 && wake->wakeup.p50_us <= 20,
        wake ? absl::StrFormat("%.1f %%, %.1f µs", wake->periodic_cpu_percent, wake->wakeup.p50_us)
             : "n/a");
  md << "\nThroughput and p99 targets hold at every payload; the figure is the worst ratio "
        "(ours ÷ peer for throughput, peer ÷ ours for p99; ≥ 1.00× is met) and its payload. "
        "“iceoryx” is the WaitSet row (how iceoryx is meant to be used); the busy-poll row is for "
        "information. 1 MiB round trip as a share of memcpy: 1 MiB ÷ (round-trip p50, 1 reader), "
        "in GB/s, divided by the memcpy limit's GB/s.\n";
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
      begin,
      "\n## IPC: MessageQueue vs iceoryx, ZeroMQ, Boost.Interprocess and the hardware limits\n\n",
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
  const std::string no_iceoryx = IceoryxUnavailableReason();
  if (!no_iceoryx.empty())
    std::fprintf(stderr, "ipc_bench: no iceoryx rows: %s\n", no_iceoryx.c_str());
  out["iceoryx_unavailable"] = no_iceoryx;

  const Limits limits = MeasureLimits(flags, out);
  const std::vector<int> readers =
      flags.quick ? std::vector<int>{1, 2} : std::vector<int>{1, 2, 4, 8};
  const std::vector<Transport> transports = Transports(no_iceoryx.empty(), flags.only);
  Results results;
  if (!no_iceoryx.empty()) md << "No iceoryx rows: " << no_iceoryx << ".\n\n";
  RoundTrips(flags, transports, limits.floor, readers, results, md, out);
  Throughputs(flags, transports, limits.memcpy_gbps, readers, results, md, out);
  StopIceoryxRouDi();
  const std::optional<WakeupResult> wake = Waiting(flags, md, out);
  Targets(flags, results, limits, readers, wake, md, out);

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
  if (argc >= 2 && std::string(argv[1]) == vllm::bench::kIceoryxChildCommand) {
    return vllm::bench::RunIceoryxChild(argc, argv);
  }
  vllm::bench::Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      flags.quick = true;
    } else if ((a == "--markdown" || a == "--json") && i + 1 < argc) {
      (a == "--json" ? flags.json_path : flags.markdown) = argv[++i];
    } else if (a == "--only" && i + 1 < argc) {
      flags.only = absl::StrSplit(argv[++i], ',', absl::SkipEmpty());
    } else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: ipc_bench [--quick] [--markdown FILE] [--json FILE] [--only KEY,...]\n"
          "  KEY: ours, iceoryx_waitset, iceoryx_busy, zmq_ipc, boost_mq\n");
      return 0;
    } else {
      std::fprintf(stderr, "ipc_bench: unknown argument '%s' (try --help)\n", a.c_str());
      return 2;
    }
  }
  return vllm::bench::Main(flags);
}
