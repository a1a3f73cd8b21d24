// remote_broadcast_bench: the executor's broadcast step with its reader on this node and on
// another one (issue 32, pipeline parallelism across nodes), beside ZeroMQ and a raw TCP floor,
// measured in one run. Round trip: the writer sends S bytes, the reader touches every byte and
// replies 64 B, the writer has the reply; S = 64 B and 1 MiB.
//
//   remote_broadcast_bench [--quick] [--markdown] [--json FILE] [--rounds N] [--no-netns]
//                          [--only KEY,...]
//     --quick      a smoke run of a few seconds
//     --markdown   print the table as markdown (docs/BENCHMARKS.md)
//     --json FILE  write every figure as JSON
//     --rounds N   run every variant N times, interleaved, pooling the samples (default 10)
//     --no-netns   measure only the variants on this node
//     --only K,K   run only these variants (keys as in the JSON: mq_shm, mq_remote, zmq_veth,
//                  tcp_veth, mq_loopback, zmq_loopback, tcp_loopback)
//   remote_broadcast_bench reader ...   (internal: a reader process)
//
// "Another node" is a second network namespace joined by a veth pair (bench_netns.h): as root
// the driver creates vbench-a-<pid> (head) and vbench-b-<pid> (remote), moves itself into the
// head and starts remote readers with `ip netns exec`; it removes both on every exit path,
// SIGINT, SIGTERM and SIGHUP included. Without root, or when `ip netns` fails, it says why and
// measures the variants on this node only.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/common/bench_util.h"
#include "bench/ipc/bench_netns.h"
#include "bench/ipc/remote_broadcast.h"
#include "ipc/signal_watcher.h"
#include "nlohmann/json.hpp"

namespace vllm::bench {
namespace {

using json = nlohmann::json;

struct Flags {
  bool quick = false;
  bool markdown = false;
  std::string json_path;
  int rounds = 0;  // 0: 10, or 1 with --quick
  bool no_netns = false;
  std::vector<std::string> only;  // variant keys to run; empty: all
};

// One line of the table: a transport, where its reader runs, and how the reply comes back.
struct Variant {
  std::string key;        // JSON name
  std::string transport;  // first column
  std::string path;       // what the request crosses
  std::string reply;      // what the reply crosses
  BroadcastTransport kind;
  ReaderPlacement placement;
  std::string floor_key;  // key of the raw TCP variant this one is divided by
};

struct Stats {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0, min = 0, msgs_per_s = 0;  // µs, and round trips/s
  size_t n = 0;                                                         // 0: no samples
};

// Samples of one variant at one size, pooled over the rounds, and each round's own figures
// (n == 0 for a round that failed), to pair them with the floor's of the same round.
struct Cell {
  std::vector<double> samples_ns;
  std::vector<Stats> rounds;
  std::string error;  // the last failure, if any round failed
};

// Nearest-rank percentiles (as bench_util's Summarize), plus p90 and round trips per second.
Stats Summarise(std::vector<double> ns) {
  Stats s;
  if (ns.empty()) return s;
  std::sort(ns.begin(), ns.end());
  auto rank = [&](double p) {
    const auto r = static_cast<size_t>(std::ceil(p * static_cast<double>(ns.size())));
    return ns[std::clamp<size_t>(r, 1, ns.size()) - 1] / 1e3;
  };
  const double sum = std::accumulate(ns.begin(), ns.end(), 0.0);
  s.n = ns.size();
  s.p50 = rank(0.50);
  s.p90 = rank(0.90);
  s.p99 = rank(0.99);
  s.mean = sum / static_cast<double>(s.n) / 1e3;
  s.min = ns.front() / 1e3;
  s.msgs_per_s = static_cast<double>(s.n) * 1e9 / sum;
  return s;
}

std::string SizeName(size_t n) {
  return n >= (1 << 20) ? absl::StrCat(n >> 20, " MiB") : absl::StrCat(n, " B");
}

RemoteRoundTripConfig ConfigFor(size_t size, bool quick) {
  RemoteRoundTripConfig c;
  c.payload_bytes = size;
  const bool small = size <= 4096;
  c.warmup = quick ? (small ? 50 : 5) : (small ? 500 : 50);
  c.max_iterations = quick ? (small ? 300 : 30) : (small ? 20000 : 2000);
  c.budget = quick ? absl::Milliseconds(250) : absl::Milliseconds(500);
  return c;
}

std::string SelfExe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Our queue with its reader on this node: shared memory both ways.
Variant SharedMemoryVariant(const std::string& exe) {
  return {"mq_shm",
          "MessageQueue, 1 local reader",
          "shared memory",
          "MessageQueue (shm)",
          BroadcastTransport::kMessageQueue,
          {exe, "", false, "", ""},
          "tcp_loopback"};
}

// The TCP variants on this node, over the loopback of the writer's namespace.
void AddLoopbackVariants(const std::string& exe, std::vector<Variant>& out) {
  const std::string lo = "127.0.0.1", path = "TCP loopback, same netns";
  const ReaderPlacement here{exe, "", true, lo, lo};
  out.push_back({"mq_loopback", "MessageQueue, 1 TCP reader", path, "MessageQueue (TCP)",
                 BroadcastTransport::kMessageQueue, here, "tcp_loopback"});
  out.push_back({"zmq_loopback", "ZeroMQ PUB/SUB", path, "ZeroMQ PUSH/PULL",
                 BroadcastTransport::kZmq, here, "tcp_loopback"});
  out.push_back({"tcp_loopback", "raw TCP ping-pong (floor)", path, "same socket",
                 BroadcastTransport::kRawTcp, here, "tcp_loopback"});
}

// The variants whose reader runs in the remote namespace, across the veth pair.
void AddRemoteVariants(const std::string& exe, const BenchNetns& ns, std::vector<Variant>& out) {
  const ReaderPlacement remote{exe, ns.remote(), true, ns.head_address(), ns.remote_address()};
  const std::string veth = "TCP, veth to 2nd netns";
  out.push_back({"mq_remote", "MessageQueue, 1 remote reader", veth,
                 "MessageQueue (TCP, writer = remote reader)", BroadcastTransport::kMessageQueue,
                 remote, "tcp_veth"});
  out.push_back({"zmq_veth", "ZeroMQ PUB/SUB", veth, "ZeroMQ PUSH/PULL", BroadcastTransport::kZmq,
                 remote, "tcp_veth"});
  out.push_back({"tcp_veth", "raw TCP ping-pong (floor)", veth, "same socket",
                 BroadcastTransport::kRawTcp, remote, "tcp_veth"});
}

// Every variant at every size, `rounds` times, interleaved so that a slow stretch of the
// machine spreads over all of them; cells[v][s] pools the samples.
std::vector<std::vector<Cell>> Measure(const std::vector<Variant>& variants,
                                       const std::vector<size_t>& sizes, const Flags& flags,
                                       int rounds) {
  std::vector<std::vector<Cell>> cells(variants.size(), std::vector<Cell>(sizes.size()));
  for (auto& row : cells) {
    for (Cell& cell : row) cell.rounds.resize(static_cast<size_t>(rounds));
  }
  for (int r = 0; r < rounds; ++r) {
    for (size_t s = 0; s < sizes.size(); ++s) {
      for (size_t v = 0; v < variants.size(); ++v) {
        std::fprintf(stderr, "round %d/%d: %s, %s, %s\n", r + 1, rounds,
                     variants[v].transport.c_str(), variants[v].path.c_str(),
                     SizeName(sizes[s]).c_str());
        auto samples = RemoteBroadcastRoundTrip(variants[v].kind, variants[v].placement,
                                                ConfigFor(sizes[s], flags.quick));
        Cell& cell = cells[v][s];
        if (!samples.ok()) {
          cell.error = samples.status().ToString();
          std::fprintf(stderr, "  failed: %s\n", cell.error.c_str());
          continue;
        }
        cell.rounds[static_cast<size_t>(r)] = Summarise(*samples);
        cell.samples_ns.insert(cell.samples_ns.end(), samples->begin(), samples->end());
      }
    }
  }
  return cells;
}

// The ratio of a variant to its floor, paired round by round (both measured seconds apart, so
// a change in the machine's load between rounds does not skew it): the median over the rounds
// where both have samples of (variant's figure ÷ floor's figure); 0 when there is none.
double PairedRatio(const Cell& cell, const Cell& floor, double Stats::*figure) {
  std::vector<double> ratios;
  for (size_t r = 0; r < cell.rounds.size() && r < floor.rounds.size(); ++r) {
    if (cell.rounds[r].n && floor.rounds[r].n && floor.rounds[r].*figure > 0) {
      ratios.push_back(cell.rounds[r].*figure / (floor.rounds[r].*figure));
    }
  }
  if (ratios.empty()) return 0;
  std::sort(ratios.begin(), ratios.end());
  const size_t mid = ratios.size() / 2;
  return ratios.size() % 2 ? ratios[mid] : (ratios[mid - 1] + ratios[mid]) / 2;
}

std::string RatioText(double ratio) { return ratio > 0 ? absl::StrFormat("%.2f×", ratio) : "n/a"; }

// One table line: markdown ("| a | b |"), or text with every column padded to kWidths
// (counting UTF-8 code points; the first kLeft columns left-aligned, the rest right-aligned).
std::string Line(const std::vector<std::string>& cols, bool markdown) {
  static const std::vector<size_t> kWidths = {30, 24, 42, 7, 8, 8, 8, 8, 11, 11, 13};
  constexpr size_t kLeft = 4;
  std::string line = markdown ? "|" : "";
  for (size_t i = 0; i < cols.size(); ++i) {
    if (markdown) {
      absl::StrAppend(&line, " ", cols[i], " |");
      continue;
    }
    size_t chars = 0;
    for (unsigned char c : cols[i]) chars += (c & 0xc0) != 0x80;
    const std::string pad(kWidths[i] > chars ? kWidths[i] - chars : 0, ' ');
    absl::StrAppend(&line, i ? " " : "", i < kLeft ? cols[i] + pad : pad + cols[i]);
  }
  return line + "\n";
}

// The lowest and highest of the rounds' medians, "a–b" (µs).
std::string RoundRange(const Cell& cell) {
  double lo = 0, hi = 0;
  for (const Stats& st : cell.rounds) {
    if (!st.n) continue;
    lo = lo > 0 ? std::min(lo, st.p50) : st.p50;
    hi = std::max(hi, st.p50);
  }
  return hi > 0 ? absl::StrFormat("%.1f–%.1f", lo, hi) : "n/a";
}

json RowJson(const Variant& var, size_t size, const Cell& cell, const Cell& floor) {
  const Stats st = Summarise(cell.samples_ns);
  json row = {{"variant", var.key},    {"transport", var.transport}, {"path", var.path},
              {"reply", var.reply},    {"payload_bytes", size},      {"samples", st.n},
              {"floor", var.floor_key}};
  if (st.n) {
    json round_p50 = json::array(), round_p99 = json::array();
    for (const Stats& r : cell.rounds) {
      round_p50.push_back(r.n ? json(r.p50) : json(nullptr));
      round_p99.push_back(r.n ? json(r.p99) : json(nullptr));
    }
    row.update({{"p50_us", st.p50},
                {"p90_us", st.p90},
                {"p99_us", st.p99},
                {"mean_us", st.mean},
                {"min_us", st.min},
                {"msgs_per_s", st.msgs_per_s},
                {"round_p50_us", round_p50},
                {"round_p99_us", round_p99},
                {"p50_over_floor", PairedRatio(cell, floor, &Stats::p50)},
                {"p99_over_floor", PairedRatio(cell, floor, &Stats::p99)}});
  }
  if (!cell.error.empty()) row["error"] = cell.error;
  return row;
}

// The table (markdown or aligned text) and the JSON rows.
std::string Table(const std::vector<Variant>& variants, const std::vector<size_t>& sizes,
                  const std::vector<std::vector<Cell>>& cells, bool markdown, json& out) {
  auto floor_of = [&](const std::string& key, size_t s) -> const Cell& {
    for (size_t v = 0; v < variants.size(); ++v) {
      if (variants[v].key == key) return cells[v][s];
    }
    static const Cell kNone;
    return kNone;
  };
  std::string table = Line({"transport", "request path", "reply", "payload", "p50 µs", "p90 µs",
                            "p99 µs", "msgs/s", "p50 ÷ floor", "p99 ÷ floor", "round p50s µs"},
                           markdown);
  if (markdown) table += "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (size_t s = 0; s < sizes.size(); ++s) {
    for (size_t v = 0; v < variants.size(); ++v) {
      const Variant& var = variants[v];
      const Cell& cell = cells[v][s];
      const Cell& floor = floor_of(var.floor_key, s);
      const Stats st = Summarise(cell.samples_ns);
      auto us = [&](double x) { return st.n ? absl::StrFormat("%.1f", x) : std::string("n/a"); };
      table += Line({var.transport, var.path, var.reply, SizeName(sizes[s]), us(st.p50), us(st.p90),
                     us(st.p99), st.n ? absl::StrFormat("%.0f", st.msgs_per_s) : "n/a",
                     RatioText(PairedRatio(cell, floor, &Stats::p50)),
                     RatioText(PairedRatio(cell, floor, &Stats::p99)), RoundRange(cell)},
                    markdown);
      out["rows"].push_back(RowJson(var, sizes[s], cell, floor));
    }
  }
  return table;
}

// The namespaces while they exist, for the signal watcher.
std::atomic<BenchNetns*> g_netns{nullptr};

// Creates the namespaces and enters the head; on failure says why and returns null.
std::unique_ptr<BenchNetns> SetUpNetns(std::string& why_not) {
  auto ns = BenchNetns::Create();
  if (!ns.ok()) {
    why_not = std::string(ns.status().message());
    return nullptr;
  }
  g_netns.store(ns->get());
  if (absl::Status st = (*ns)->EnterHead(); !st.ok()) {
    why_not = std::string(st.message());
    g_netns.store(nullptr);
    return nullptr;
  }
  return std::move(*ns);
}

int Main(const Flags& flags) {
  const std::string exe = SelfExe();
  if (exe.empty()) {
    std::fprintf(stderr, "remote_broadcast_bench: cannot resolve /proc/self/exe\n");
    return 1;
  }
  std::unique_ptr<BenchNetns> netns;  // outlives the watcher, which may still use it
  auto watcher = ipc::SignalWatcher::Start({SIGINT, SIGTERM, SIGHUP}, [](int sig) {
    if (BenchNetns* ns = g_netns.load()) ns->Remove();
    std::fprintf(stderr, "remote_broadcast_bench: signal %d: namespaces removed, exiting\n", sig);
    _exit(128 + sig);
  });
  if (!watcher.ok()) {
    std::fprintf(stderr, "remote_broadcast_bench: %s\n", watcher.status().ToString().c_str());
    return 1;
  }
  std::string why_not = "--no-netns";
  if (!flags.no_netns) netns = SetUpNetns(why_not);
  if (!netns) {
    std::fprintf(stderr,
                 "remote_broadcast_bench: no second network namespace (%s): measuring only the "
                 "variants on this node; run as root for the remote ones\n",
                 why_not.c_str());
  }

  std::vector<Variant> variants = {SharedMemoryVariant(exe)};
  if (netns) AddRemoteVariants(exe, *netns, variants);
  AddLoopbackVariants(exe, variants);
  if (!flags.only.empty()) {
    std::erase_if(variants, [&](const Variant& v) {
      return std::find(flags.only.begin(), flags.only.end(), v.key) == flags.only.end();
    });
  }
  const std::vector<size_t> sizes = {64, size_t{1} << 20};
  const int rounds = flags.rounds > 0 ? flags.rounds : (flags.quick ? 1 : 10);
  const std::string machine = MachineLine(), when = UtcNow();
  std::fprintf(stderr, "remote_broadcast_bench on %s, %d round(s)\n", machine.c_str(), rounds);
  const std::vector<std::vector<Cell>> cells = Measure(variants, sizes, flags, rounds);

  json out;
  out["machine"] = machine;
  out["date"] = when;
  out["rounds"] = rounds;
  out["quick"] = flags.quick;
  out["netns"] = netns ? json{{"head", netns->head()},
                              {"remote", netns->remote()},
                              {"head_address", netns->head_address()},
                              {"remote_address", netns->remote_address()}}
                       : json{{"skipped", why_not}};
  const std::string table = Table(variants, sizes, cells, flags.markdown, out);
  std::printf("%s\n\nMachine: %s  \nDate: %s  \nRounds: %d (samples pooled)%s\n\n%s\n",
              "Executor broadcast round trip: writer → 1 reader (touches every byte) → 64 B reply",
              machine.c_str(), when.c_str(), rounds,
              netns ? "" : absl::StrCat("  \nRemote variants skipped: ", why_not).c_str(),
              table.c_str());
  std::printf(
      "p50, p90, p99: over the samples of every round. floor: raw TCP ping-pong over the same "
      "path (veth rows: across the veth; shared memory and loopback rows: TCP loopback); "
      "÷ floor: median over the rounds of (this row's figure ÷ the floor's in the same round). "
      "msgs/s: serial round trips per second. round p50s: the lowest and highest round's p50.\n");
  if (!flags.json_path.empty()) std::ofstream(flags.json_path) << out.dump(2) << "\n";
  bool any_failed = false;
  for (const auto& row : out["rows"]) any_failed |= row.contains("error");
  watcher->reset();  // no signal handling past this point: the namespaces go next
  g_netns.store(nullptr);
  return any_failed ? 1 : 0;
}

}  // namespace
}  // namespace vllm::bench

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "reader") {
    return vllm::bench::RunRemoteBroadcastReader(argc, argv);
  }
  vllm::bench::Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      flags.quick = true;
    } else if (a == "--markdown") {
      flags.markdown = true;
    } else if (a == "--no-netns") {
      flags.no_netns = true;
    } else if (a == "--only" && i + 1 < argc) {
      flags.only = absl::StrSplit(argv[++i], ',', absl::SkipEmpty());
    } else if (a == "--json" && i + 1 < argc) {
      flags.json_path = argv[++i];
    } else if (a == "--rounds" && i + 1 < argc && absl::SimpleAtoi(argv[i + 1], &flags.rounds) &&
               flags.rounds > 0) {
      ++i;
    } else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: remote_broadcast_bench [--quick] [--markdown] [--json FILE] [--rounds N] "
          "[--no-netns] [--only KEY,...]\n");
      return 0;
    } else {
      std::fprintf(stderr, "remote_broadcast_bench: unknown argument '%s' (try --help)\n",
                   a.c_str());
      return 2;
    }
  }
  return vllm::bench::Main(flags);
}
