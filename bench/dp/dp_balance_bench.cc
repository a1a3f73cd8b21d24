// dp_balance_bench: which data-parallel engine gets each new request, compared by simulation.
//
// A discrete-event simulation (simulated time only) of N engines, each running continuous
// batching like vLLM's scheduler, fed one seeded Poisson trace of a long-generation mix; the
// same trace goes through every routing policy in turn:
//
//   round-robin          engine = request number mod N
//   vllm-0.33            the product's frontend::DpLoadBalancer with vLLM 0.33's rule
//   outstanding          the product's frontend::DpLoadBalancer with kOutstanding (its default)
//   own-tokens,          candidates, defined below and kept in this file only
//   outstanding+prefill
//
// Engine model, per step: every running request decodes one token (a KV block more every
// `block` tokens; when none is free the latest-admitted running request is preempted and
// recomputed later, as vLLM's FCFS scheduler does); then, unless something was preempted,
// waiting requests are admitted first come first served while running < max_num_seqs, their
// whole prompt (prompt + generated tokens after a preemption) fits in the free KV blocks and
// in the step's token budget (no chunked prefill). A prefill costs its tokens in that step and
// samples the first token. Step time = step_base + per_token × tokens in the step. After
// every step the engine's (waiting, running, KV usage) go to the policy (DpLoadBalancer::
// Update), not counting requests that arrived during the step (they reach the scheduler at
// the start of the next one, as in vLLM's engine-core loop). Policies see output tokens as the
// step that made them ends; never a request's true output length, only its max_tokens.
//
// Usage: dp_balance_bench [--engines N] [--requests N] [--seed S] [--seeds N] [--load F]
//          [--max-num-seqs N] [--kv-tokens N] [--block N] [--max-batched-tokens N]
//          [--step-base-ms F] [--per-token-ms F] [--long-fraction F] [--policies a,b,...]
//          [--markdown FILE] [--trace-csv FILE]
//   --load       offered load as a share of the cluster's full-batch capacity
//                (MeanRequestCostS); 0.85 by default
//   --seeds N    also run seeds seed+1.. seed+N-1 and print each figure's mean over the N traces
//   --markdown   rewrite the dp-balance section of FILE (docs/BENCHMARKS.md) with this run
//   --trace-csv  per-engine load every 100 ms of the first trace
//
// Files: this one prints the tables; dp_balance_sim.* is the trace and the engines,
// dp_balance_policies.* the routing policies.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "bench/common/bench_util.h"
#include "bench/dp/dp_balance_policies.h"
#include "bench/dp/dp_balance_sim.h"

namespace vllm::bench {
namespace {

// ---------------------------------------------------------------------------------------------
// Output.

std::string Format(const char* fmt, double a) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, a);
  return buf;
}

// `text` re-flowed to lines of at most `width` columns (UTF-8 characters), breaking at spaces;
// continuation lines start with `indent`.
std::string Wrap(const std::string& text, size_t width, const std::string& indent = "") {
  const auto columns = [](std::string_view s) {
    return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char ch) {
      return (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
    }));
  };
  std::string out, line;
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    if (!line.empty() && columns(line) + 1 + columns(word) > width) {
      out += line + "\n";
      line = indent;
    }
    line += (line.empty() || line == indent ? "" : " ") + word;
  }
  return out + line;
}

std::string Table(const std::vector<Result>& results, bool means) {
  std::ostringstream md;
  md << "| policy | load max/mean, mean | load max/mean, p99 | TTFT p50 s | TTFT p99 s "
        "| e2e p50 s | e2e p99 s | makespan s | preemptions |\n"
     << "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const Result& r : results) {
    md << "| " << r.name << " | " << Format("%.3f", r.imbalance_mean) << " | "
       << Format("%.3f", r.imbalance_p99) << " | " << Format("%.3f", r.ttft_p50) << " | "
       << Format("%.3f", r.ttft_p99) << " | " << Format("%.2f", r.e2e_p50) << " | "
       << Format("%.2f", r.e2e_p99) << " | " << Format("%.1f", r.makespan_s) << " | "
       << Format(means ? "%.1f" : "%.0f", r.preemptions) << " |\n";
  }
  return md.str();
}

const Result* Find(const std::vector<Result>& results, std::string_view name) {
  for (const Result& r : results) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

// "Best on X: **name** (a; b for vllm-0.33, −n %; ...)." for one metric, lower being better.
std::string Best(const std::vector<Result>& results, const char* what, const char* fmt,
                 double Result::*metric) {
  const Result* best = &results.front();
  for (const Result& r : results) {
    if (r.*metric < best->*metric) best = &r;
  }
  std::string s =
      std::string("Best on ") + what + ": **" + best->name + "** (" + Format(fmt, best->*metric);
  for (const char* name : {"vllm-0.33", "outstanding"}) {
    if (const Result* base = Find(results, name); base != nullptr && base != best) {
      s += std::string("; ") + Format(fmt, base->*metric) + " for " + name + ", " +
           Format("%+.1f %%", 100.0 * (best->*metric / base->*metric - 1.0));
    }
  }
  return s + ").";
}

std::string Summary(const std::vector<Result>& results) {
  return Wrap(Best(results, "mean load max/mean", "%.3f", &Result::imbalance_mean), 98) + "  \n" +
         Wrap(Best(results, "p99 TTFT", "%.3f s", &Result::ttft_p99), 100);
}

// Every policy through the trace of `c.seed`.
std::vector<Result> RunTrace(const Config& c, const std::vector<PolicySpec>& specs,
                             std::ostream* csv) {
  const std::vector<TraceRequest> trace = MakeTrace(c);
  std::vector<Result> results;
  for (const PolicySpec& spec : specs) {
    std::unique_ptr<Policy> policy = spec.make(c);
    results.push_back(Simulate(c, trace, *policy, spec.name, csv));
  }
  return results;
}

// Each metric's mean over `c.seeds` traces: `results` (the trace of c.seed) and the traces of
// seeds c.seed + 1 .. c.seed + c.seeds - 1 through the same policies.
std::vector<Result> MeanOverSeeds(const Config& c, const std::vector<PolicySpec>& specs,
                                  const std::vector<Result>& results) {
  std::vector<Result> means = results;
  for (int32_t k = 1; k < c.seeds; ++k) {
    Config ck = c;
    ck.seed = c.seed + k;
    const std::vector<Result> more = RunTrace(ck, specs, nullptr);
    for (size_t i = 0; i < means.size(); ++i) {
      for (double Result::*m :
           {&Result::imbalance_mean, &Result::imbalance_p99, &Result::ttft_p50, &Result::ttft_p99,
            &Result::e2e_p50, &Result::e2e_p99, &Result::makespan_s, &Result::preemptions}) {
        means[i].*m += more[i].*m;
      }
    }
  }
  for (Result& r : means) {
    for (double Result::*m :
         {&Result::imbalance_mean, &Result::imbalance_p99, &Result::ttft_p50, &Result::ttft_p99,
          &Result::e2e_p50, &Result::e2e_p99, &Result::makespan_s, &Result::preemptions}) {
      r.*m /= c.seeds;
    }
  }
  return means;
}

// The settings and the trace of `c.seed`, in one paragraph.
std::string SetupText(const Config& c) {
  const std::vector<TraceRequest> trace = MakeTrace(c);
  int64_t long_count = 0, known = 0;
  for (const TraceRequest& r : trace) {
    long_count += r.output >= kLongOutMin;
    known += r.max_tokens == r.output;
  }
  std::ostringstream setup;
  setup << c.engines << " engines, max_num_seqs " << c.max_num_seqs << ", KV cache " << c.kv_tokens
        << " tokens per engine (block " << c.block << "), token budget " << c.max_batched_tokens
        << " per step, step time " << Format("%g", c.step_base_ms) << " ms + "
        << Format("%g", c.per_token_ms) << " ms × tokens. Trace (seed " << c.seed
        << "): " << c.requests << " Poisson arrivals at " << Format("%.1f", ArrivalRate(c))
        << " req/s = " << Format("%.0f", 100 * c.load) << " % of the full-batch capacity ("
        << Format("%.1f", 1 / MeanRequestCostS(c)) << " req/s per engine), last arrival at "
        << Format("%.1f", trace.back().arrival_s) << " s; prompts " << kPromptMin << "–"
        << kPromptMax << " tokens; outputs " << kShortOutMin << "–" << kShortOutMax
        << " tokens, or " << kLongOutMin << "–" << kLongOutMax << " for "
        << Format("%.0f", 100 * c.long_fraction) << " % (" << long_count
        << " requests); max_tokens = the true length for " << known << " requests, "
        << kUnknownMaxTokens << " for the rest.";
  return setup.str();
}

// Rewrites the dp-balance section of `c.markdown` with this run: `setup` (SetupText), `body`
// (the tables and summaries as printed) and the policies' descriptions.
void WriteMarkdown(const Config& c, const std::string& command, const std::string& setup,
                   const std::string& body, const std::vector<PolicySpec>& specs) {
  const std::string begin = "<!-- dp-balance:begin -->", end = "<!-- dp-balance:end -->";
  std::string doc;
  {
    std::ifstream in(c.markdown);
    std::stringstream ss;
    ss << in.rdbuf();
    doc = ss.str();
  }
  const std::string csv_path = c.trace_csv.empty() ? "FILE.csv" : c.trace_csv;
  std::ostringstream s;
  constexpr size_t kWidth = 100;
  s << begin << "\n## Data-parallel load balancing: routing policies (simulated)\n\n"
    << "Command: `" << command << "`  \nMachine: " << MachineLine() << "  \nDate: " << UtcNow()
    << "\n\n"
    << Wrap(
           "All times are simulated: the machine only runs the simulation. A discrete-event "
           "simulation of data-parallel engines with vLLM-style continuous "
           "batching (`bench/dp/dp_balance_bench.cc`, described in `bench/dp/README.md`); "
           "the same trace goes through every policy. " +
               setup +
               " Load = waiting + running (+ sent but not yet scheduled) per engine, sampled "
               "every 100 ms until the last arrival; TTFT = arrival → first token; e2e = "
               "arrival → last token; preemptions = requests evicted for lack of KV blocks "
               "(recomputed later).",
           kWidth)
    << "\n\n"
    << body << "\nPolicies (candidates live in the benchmark only):\n\n";
  for (const PolicySpec& p : specs) {
    s << Wrap("- `" + p.name + "`: " + p.description, kWidth, "  ") << "\n";
  }
  s << "\n![Per-engine load over time, one panel per policy](img/dp_balance.png)\n\n"
    << Wrap("The plot: `python3 bench/dp/plot_dp_balance.py " + csv_path +
                " docs/img/dp_balance.png` (first trace; needs matplotlib).",
            kWidth)
    << "\n\n"
    << Wrap(
           "Not modelled: chunked prefill, prefix caching, more than one API-server client "
           "(the one client sees every engine's figures after every step, with no delay), "
           "network and IPC time, engine failures, scheduler CPU time; step time is linear in "
           "the step's tokens (no attention cost that grows with context); preemption always "
           "recomputes. The trace is short: a long request lives up to ~45 s, about as long "
           "as the arrivals last, so the cluster barely reaches a steady state.",
           kWidth)
    << "\n"
    << end;
  ReplaceMarkdownSection(&doc, begin, end, s.str());
  std::ofstream(c.markdown) << doc;
}

int Main(const Config& c, const std::string& command) {
  std::vector<PolicySpec> specs;
  for (PolicySpec& p : AllPolicies()) {
    if (c.policies.empty() ||
        ("," + c.policies + ",").find("," + p.name + ",") != std::string::npos) {
      specs.push_back(std::move(p));
    }
  }
  if (specs.empty()) {
    std::fprintf(stderr, "dp_balance_bench: no policy matches '%s'\n", c.policies.c_str());
    return 2;
  }
  std::ofstream csv;
  if (!c.trace_csv.empty()) {
    csv.open(c.trace_csv);
    csv << "time_s,policy,engine,waiting,running\n";
  }
  const std::vector<Result> results = RunTrace(c, specs, csv.is_open() ? &csv : nullptr);
  const std::vector<Result> means = MeanOverSeeds(c, specs, results);

  const std::string setup = SetupText(c);
  std::ostringstream body;
  body << Table(results, false) << "\n" << Summary(results) << "\n";
  if (c.seeds > 1) {
    body << "\nMean of each figure over " << c.seeds << " traces (seeds " << c.seed << "–"
         << c.seed + c.seeds - 1 << ", same settings):\n\n"
         << Table(means, true) << "\n"
         << Summary(means) << "\n";
  }
  std::printf("DP load-balancing simulation — %s\n\n%s\n\n%s", UtcNow().c_str(), setup.c_str(),
              body.str().c_str());
  if (!c.markdown.empty()) WriteMarkdown(c, command, setup, body.str(), specs);
  return 0;
}

}  // namespace
}  // namespace vllm::bench

int main(int argc, char** argv) {
  vllm::bench::Config c;
  std::string command = "build/release/bin/dp_balance_bench";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: dp_balance_bench [--engines N] [--requests N] [--seed S] [--load F]\n"
          "         [--max-num-seqs N] [--kv-tokens N] [--block N] [--max-batched-tokens N]\n"
          "         [--step-base-ms F] [--per-token-ms F] [--long-fraction F]\n"
          "         [--seeds N] [--policies a,b,...] [--markdown FILE] [--trace-csv FILE]\n");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "dp_balance_bench: '%s' needs a value (try --help)\n", a.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    command += " " + a + " " + v;
    try {
      if (a == "--engines") {
        c.engines = std::stoi(v);
      } else if (a == "--requests") {
        c.requests = std::stoi(v);
      } else if (a == "--seed") {
        c.seed = std::stoull(v);
      } else if (a == "--load") {
        c.load = std::stod(v);
      } else if (a == "--max-num-seqs") {
        c.max_num_seqs = std::stoi(v);
      } else if (a == "--kv-tokens") {
        c.kv_tokens = std::stoi(v);
      } else if (a == "--block") {
        c.block = std::stoi(v);
      } else if (a == "--max-batched-tokens") {
        c.max_batched_tokens = std::stoi(v);
      } else if (a == "--step-base-ms") {
        c.step_base_ms = std::stod(v);
      } else if (a == "--per-token-ms") {
        c.per_token_ms = std::stod(v);
      } else if (a == "--long-fraction") {
        c.long_fraction = std::stod(v);
      } else if (a == "--seeds") {
        c.seeds = std::stoi(v);
      } else if (a == "--policies") {
        c.policies = v;
      } else if (a == "--markdown") {
        c.markdown = v;
      } else if (a == "--trace-csv") {
        c.trace_csv = v;
      } else {
        std::fprintf(stderr, "dp_balance_bench: unknown argument '%s' (try --help)\n", a.c_str());
        return 2;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "dp_balance_bench: bad value '%s' for %s\n", v.c_str(), a.c_str());
      return 2;
    }
  }
  // A request at its longest must fit in an empty engine's KV cache and token budget.
  const int32_t longest = vllm::bench::kPromptMax + vllm::bench::kUnknownMaxTokens;
  if (c.engines < 1 || c.requests < 1 || c.seeds < 1 || c.load <= 0 || c.max_num_seqs < 1 ||
      c.block < 1 || c.kv_tokens < longest + c.block || c.max_batched_tokens < 1 ||
      c.step_base_ms < 0 || c.per_token_ms < 0 || c.long_fraction < 0 || c.long_fraction > 1) {
    std::fprintf(stderr,
                 "dp_balance_bench: bad configuration (--kv-tokens must be >= %d; counts >= 1)\n",
                 longest + c.block);
    return 2;
  }
  return vllm::bench::Main(c, command);
}
