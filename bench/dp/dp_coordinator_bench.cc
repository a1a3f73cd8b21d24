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
//
// Files: this one parses flags and prints the tables; dp_coordinator_trial.* runs one trial
// (the engines, the subscribers, the window); dp_coordinator_child.* is the child process.
#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/common/bench_util.h"
#include "bench/dp/dp_coordinator_child.h"
#include "bench/dp/dp_coordinator_trial.h"
#include "core/dp_coordinator.h"

namespace vllm::bench {
namespace {

constexpr double kGoalCpuPct = 5.0;
constexpr double kGoalP99Ms = 10.0;
constexpr int32_t kGoalEngines = 1024;

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
