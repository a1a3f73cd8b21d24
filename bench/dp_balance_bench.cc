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
//                (time_s,policy,engine,waiting,running), for tools/plot_dp_balance.py
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "bench/bench_util.h"
#include "frontend/engine/dp_load_balancer.h"

namespace vllm::bench {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kSampleS = 0.1;  // load sampling period (simulated seconds)

struct Config {
  int32_t engines = 4;
  int32_t requests = 2000;
  uint64_t seed = 1;
  double load = 0.85;
  int32_t max_num_seqs = 64;
  int32_t kv_tokens = 81920;  // per engine
  int32_t block = 16;
  int32_t max_batched_tokens = 8192;
  double step_base_ms = 8.0;
  double per_token_ms = 0.05;
  double long_fraction = 0.10;
  int32_t seeds = 1;     // > 1: also the mean over seeds seed..seed+seeds-1
  std::string policies;  // empty: all
  std::string markdown;
  std::string trace_csv;
};

// The trace's length distributions (inclusive ranges).
constexpr int32_t kPromptMin = 100, kPromptMax = 500;
constexpr int32_t kShortOutMin = 20, kShortOutMax = 200;
constexpr int32_t kLongOutMin = 1000, kLongOutMax = 4000;
constexpr int32_t kUnknownMaxTokens = 4096;

// Seeded and portable: std::mt19937_64's sequence is fixed by the standard; the distributions
// (implementation-defined in the standard library) are our own.
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  double Uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }  // [0, 1)
  int32_t Int(int32_t lo, int32_t hi) {                                       // [lo, hi]
    return lo + static_cast<int32_t>(Uniform() * (hi - lo + 1));
  }
  double Exponential(double rate) { return -std::log1p(-Uniform()) / rate; }

 private:
  std::mt19937_64 gen_;
};

struct TraceRequest {
  double arrival_s = 0;
  int32_t prompt = 0;
  int32_t output = 0;      // true length (the request stops there); hidden from policies
  int32_t max_tokens = 0;  // what the client knows
};

// Mean engine time one request costs at a full batch: its prompt and output tokens at
// per_token each, plus its share (1 / max_num_seqs) of step_base for each of its output steps.
// Capacity (requests/s per engine) is its inverse; the arrival rate is load × N × capacity.
double MeanRequestCostS(const Config& c) {
  const double prompt = (kPromptMin + kPromptMax) / 2.0;
  const double out = (1 - c.long_fraction) * (kShortOutMin + kShortOutMax) / 2.0 +
                     c.long_fraction * (kLongOutMin + kLongOutMax) / 2.0;
  return (c.per_token_ms * (prompt + out) + c.step_base_ms * out / c.max_num_seqs) / 1000.0;
}

double ArrivalRate(const Config& c) { return c.load * c.engines / MeanRequestCostS(c); }

std::vector<TraceRequest> MakeTrace(const Config& c) {
  Rng rng(c.seed);
  const double rate = ArrivalRate(c);
  std::vector<TraceRequest> trace(c.requests);
  double t = 0;
  for (TraceRequest& r : trace) {
    t += rng.Exponential(rate);
    r.arrival_s = t;
    r.prompt = rng.Int(kPromptMin, kPromptMax);
    r.output = rng.Uniform() < c.long_fraction ? rng.Int(kLongOutMin, kLongOutMax)
                                               : rng.Int(kShortOutMin, kShortOutMax);
    r.max_tokens = rng.Uniform() < 0.5 ? r.output : kUnknownMaxTokens;
  }
  return trace;
}

// ---------------------------------------------------------------------------------------------
// Policies. A policy sees what a frontend client sees: the request's prompt length and
// max_tokens when it is sent, each engine's figures after each of its steps, and the output
// tokens streamed back (one at a time) for the requests it sent.

struct RequestInfo {
  int32_t id = 0;
  int32_t prompt = 0;
  int32_t max_tokens = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual int32_t Pick(const RequestInfo& req) = 0;
  // An engine's figures after one of its steps.
  virtual void OnStats(int32_t /*engine*/, const frontend::EngineLoad& /*load*/) {}
  // One more output token of `req` from `engine`: `first` with its first, `finished` with its
  // last.
  virtual void OnToken(const RequestInfo& /*req*/, int32_t /*engine*/, bool /*first*/,
                       bool /*finished*/) {}
};

class RoundRobin : public Policy {
 public:
  explicit RoundRobin(int32_t engines) : engines_(engines) {}
  int32_t Pick(const RequestInfo&) override { return next_++ % engines_; }

 private:
  int32_t engines_;
  int32_t next_ = 0;
};

// The product's class, one API-server client, driven as EngineCoreClient drives it: Pick per
// request, Update per engine step, Finished per finished request.
class Product : public Policy {
 public:
  Product(int32_t engines, frontend::DpBalancePolicy policy)
      : lb_(engines, /*client_count=*/1, /*client_index=*/0, policy) {}
  int32_t Pick(const RequestInfo&) override { return lb_.Pick().value_or(0); }
  void OnStats(int32_t engine, const frontend::EngineLoad& load) override {
    lb_.Update(engine, load);
  }
  void OnToken(const RequestInfo&, int32_t engine, bool, bool finished) override {
    if (finished) lb_.Finished(engine);
  }

 private:
  frontend::DpLoadBalancer lb_;
};

// Lowest score wins; ties go to the lowest engine index.
int32_t ArgMin(int32_t n, const std::function<double(int32_t)>& score) {
  int32_t best = 0;
  double best_score = kInf;
  for (int32_t e = 0; e < n; ++e) {
    const double s = score(e);
    if (s < best_score) {
      best_score = s;
      best = e;
    }
  }
  return best;
}

// Candidate "own-tokens": the tokens this client still expects from each engine. A request
// counts prompt + max_tokens when sent, its prompt leaves with its first token, then one per
// streamed token, and whatever is left when it finishes.
class OwnTokens : public Policy {
 public:
  explicit OwnTokens(int32_t engines) : outstanding_(engines, 0) {}
  int32_t Pick(const RequestInfo& req) override {
    const int32_t e = ArgMin(static_cast<int32_t>(outstanding_.size()),
                             [&](int32_t i) { return static_cast<double>(outstanding_[i]); });
    Left(req.id) = req.prompt + req.max_tokens;
    outstanding_[e] += Left(req.id);
    return e;
  }
  void OnToken(const RequestInfo& req, int32_t engine, bool first, bool finished) override {
    int64_t& left = Left(req.id);
    const int64_t done = finished ? left : std::min<int64_t>(left, 1 + (first ? req.prompt : 0));
    left -= done;
    outstanding_[engine] -= done;
  }

 private:
  int64_t& Left(int32_t id) {
    if (static_cast<size_t>(id) >= left_.size()) left_.resize(id + 1, 0);
    return left_[id];
  }
  std::vector<int64_t> outstanding_;
  std::vector<int64_t> left_;
};

// Candidate "outstanding+prefill": DpLoadBalancer's kOutstanding score with this client's
// requests still waiting for their first token counted three times (once as outstanding, twice
// more for the prefill each puts into that engine's next steps):
//
//   max(clients × (outstanding[e] + 2 × awaiting_first[e]), waiting[e] + running[e])
//     + waiting[e] × 6 × max(0, kv_usage[e] − 0.5)
//
// outstanding: the client's requests sent to e and not finished; awaiting_first: those of them
// with no output token yet; waiting/running/kv_usage: e's figures after its last step.
// Lowest wins, ties to the lowest index. Here clients = 1.
class OutstandingPrefill : public Policy {
 public:
  static constexpr double kPrefillWeight = 2.0;
  explicit OutstandingPrefill(int32_t engines)
      : loads_(engines), outstanding_(engines, 0), awaiting_first_(engines, 0) {}
  int32_t Pick(const RequestInfo&) override {
    const int32_t e = ArgMin(static_cast<int32_t>(loads_.size()), [&](int32_t i) {
      const frontend::EngineLoad& l = loads_[i];
      const double own = outstanding_[i] + kPrefillWeight * awaiting_first_[i];
      return std::max(own, static_cast<double>(l.waiting) + l.running) +
             l.waiting * 6.0 * std::max(0.0, l.kv_cache_usage - 0.5);
    });
    ++outstanding_[e];
    ++awaiting_first_[e];
    return e;
  }
  void OnStats(int32_t engine, const frontend::EngineLoad& load) override { loads_[engine] = load; }
  void OnToken(const RequestInfo&, int32_t engine, bool first, bool finished) override {
    if (first) --awaiting_first_[engine];
    if (finished) --outstanding_[engine];
  }

 private:
  std::vector<frontend::EngineLoad> loads_;
  std::vector<int32_t> outstanding_;
  std::vector<int32_t> awaiting_first_;
};

struct PolicySpec {
  std::string name;
  std::string description;
  std::function<std::unique_ptr<Policy>(const Config&)> make;
};

std::vector<PolicySpec> AllPolicies() {
  return {
      {"round-robin", "request i goes to engine i mod N",
       [](const Config& c) { return std::make_unique<RoundRobin>(c.engines); }},
      {"vllm-0.33",
       "vLLM 0.33's rule: `frontend::DpLoadBalancer` with `DpBalancePolicy::kVllm`, "
       "max(own picks since the engine's last figures, waiting + running) + waiting × 6 × "
       "max(0, kv − 0.5)",
       [](const Config& c) {
         return std::make_unique<Product>(c.engines, frontend::DpBalancePolicy::kVllm);
       }},
      {"outstanding",
       "`frontend::DpLoadBalancer` with `DpBalancePolicy::kOutstanding` (the product's default "
       "now): vLLM's rule with the client's unfinished requests in place of its picks since the "
       "engine's last figures, ties going to the engine after the one picked last",
       [](const Config& c) {
         return std::make_unique<Product>(c.engines, frontend::DpBalancePolicy::kOutstanding);
       }},
      {"own-tokens",
       "candidate: fewest tokens still expected from the client's own requests (prompt + "
       "max_tokens when sent, less the prompt at the first token and one per streamed token)",
       [](const Config& c) { return std::make_unique<OwnTokens>(c.engines); }},
      {"outstanding+prefill",
       "candidate: max(outstanding + 2 × awaiting_first_token, waiting + running) + waiting × 6 "
       "× max(0, kv − 0.5), own requests counted by the client",
       [](const Config& c) { return std::make_unique<OutstandingPrefill>(c.engines); }},
  };
}

// ---------------------------------------------------------------------------------------------
// The engines.

struct SimRequest {
  int32_t prompt = 0;
  int32_t output = 0;
  int32_t generated = 0;  // tokens sampled so far
  int32_t computed = 0;   // tokens whose KV is in the cache
  int32_t blocks = 0;
  double first_token_s = -1;
  double finish_s = -1;
};

struct Engine {
  std::deque<int32_t> inbox;  // sent, not yet seen by the scheduler
  std::deque<int32_t> waiting;
  std::vector<int32_t> running;  // in admission order
  int32_t free_blocks = 0;
  double step_end_s = kInf;  // kInf: idle
  int64_t preemptions = 0;
};

struct Result {
  std::string name;
  double imbalance_mean = 0;  // mean over samples of max/mean engine load
  double imbalance_p99 = 0;
  double ttft_p50 = 0, ttft_p99 = 0;
  double e2e_p50 = 0, e2e_p99 = 0;
  double makespan_s = 0;
  double preemptions = 0;
};

// Nearest-rank percentile of an unsorted copy.
double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * v.size()));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

class Simulation {
 public:
  Simulation(const Config& c, const std::vector<TraceRequest>& trace, Policy& policy,
             std::string name, std::ostream* csv)
      : c_(c), trace_(trace), policy_(policy), name_(std::move(name)), csv_(csv) {
    total_blocks_ = c.kv_tokens / c.block;
    engines_.resize(c.engines);
    for (Engine& e : engines_) e.free_blocks = total_blocks_;
    reqs_.resize(trace.size());
    for (size_t i = 0; i < trace.size(); ++i) {
      reqs_[i].prompt = trace[i].prompt;
      reqs_[i].output = trace[i].output;
    }
  }

  Result Run() {
    size_t next_arrival = 0;
    int64_t next_sample = 0;  // index: samples are at k × kSampleS
    double last_event = 0;
    while (true) {
      const double t_arrival = next_arrival < trace_.size() ? trace_[next_arrival].arrival_s : kInf;
      int32_t engine = 0;
      for (int32_t e = 1; e < c_.engines; ++e) {
        if (engines_[e].step_end_s < engines_[engine].step_end_s) engine = e;
      }
      const double t = std::min(t_arrival, engines_[engine].step_end_s);
      if (t == kInf) break;
      for (; next_sample * kSampleS <= t; ++next_sample) Sample(next_sample * kSampleS);
      last_event = t;
      if (engines_[engine].step_end_s <= t_arrival) {
        EndStep(engine, t);
      } else {
        const int32_t id = static_cast<int32_t>(next_arrival++);
        const int32_t e = policy_.Pick(Info(id));
        engines_[e].inbox.push_back(id);
        if (engines_[e].step_end_s == kInf) StartStep(e, t);
      }
    }
    // The model's own invariants: every request ran to its end and gave its blocks back.
    for (const Engine& e : engines_) {
      if (e.free_blocks != total_blocks_ || !e.waiting.empty() || !e.running.empty()) {
        std::fprintf(stderr, "dp_balance_bench: %s: an engine ended with work or blocks held\n",
                     name_.c_str());
        std::exit(1);
      }
    }
    for (const SimRequest& q : reqs_) {
      if (q.finish_s < 0 || q.generated != q.output) {
        std::fprintf(stderr, "dp_balance_bench: %s: a request never finished\n", name_.c_str());
        std::exit(1);
      }
    }
    Result r;
    r.name = name_;
    r.imbalance_mean = ratios_.empty() ? 0 : Sum(ratios_) / ratios_.size();
    r.imbalance_p99 = Percentile(ratios_, 99);
    std::vector<double> ttft, e2e;
    for (size_t i = 0; i < reqs_.size(); ++i) {
      ttft.push_back(reqs_[i].first_token_s - trace_[i].arrival_s);
      e2e.push_back(reqs_[i].finish_s - trace_[i].arrival_s);
    }
    r.ttft_p50 = Percentile(ttft, 50);
    r.ttft_p99 = Percentile(ttft, 99);
    r.e2e_p50 = Percentile(e2e, 50);
    r.e2e_p99 = Percentile(e2e, 99);
    r.makespan_s = last_event;
    for (const Engine& e : engines_) r.preemptions += e.preemptions;
    return r;
  }

 private:
  static double Sum(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s;
  }
  RequestInfo Info(int32_t id) const { return {id, trace_[id].prompt, trace_[id].max_tokens}; }
  int32_t BlocksFor(int32_t tokens) const { return (tokens + c_.block - 1) / c_.block; }

  void Sample(double t) {
    double sum = 0, max = 0;
    for (int32_t i = 0; i < c_.engines; ++i) {
      const Engine& e = engines_[i];
      const auto waiting = static_cast<int32_t>(e.inbox.size() + e.waiting.size());
      const auto running = static_cast<int32_t>(e.running.size());
      sum += waiting + running;
      max = std::max<double>(max, waiting + running);
      if (csv_ != nullptr) {
        *csv_ << t << ',' << name_ << ',' << i << ',' << waiting << ',' << running << '\n';
      }
    }
    // Only while requests arrive: the drain after the last arrival says where the last long
    // requests landed, which no policy can change.
    if (sum > 0 && t <= trace_.back().arrival_s) ratios_.push_back(max / (sum / c_.engines));
  }

  void Preempt(Engine& e, int32_t id) {
    SimRequest& r = reqs_[id];
    e.free_blocks += r.blocks;
    r.blocks = 0;
    r.computed = 0;
    e.waiting.push_front(id);
    ++e.preemptions;
  }

  // Schedules engine `ei`'s next step at `t`, or leaves it idle when there is nothing to run.
  void StartStep(int32_t ei, double t) {
    Engine& e = engines_[ei];
    while (!e.inbox.empty()) {
      e.waiting.push_back(e.inbox.front());
      e.inbox.pop_front();
    }
    int64_t tokens = 0;
    bool preempted = false;
    // Running requests first, in admission order; the latest admitted make room.
    for (size_t i = 0; i < e.running.size(); ++i) {
      const int32_t id = e.running[i];
      SimRequest& r = reqs_[id];
      const int32_t need = BlocksFor(r.prompt + r.generated) - r.blocks;
      bool self = false;
      while (need > e.free_blocks) {
        const int32_t victim = e.running.back();
        e.running.pop_back();
        Preempt(e, victim);
        preempted = true;
        if (victim == id) {
          self = true;
          break;
        }
      }
      if (self) break;
      e.free_blocks -= need;
      r.blocks += need;
      tokens += r.prompt + r.generated - r.computed;
    }
    // Then waiting ones, first come first served, unless this step preempted (as vLLM).
    if (!preempted || e.running.empty()) {
      while (!e.waiting.empty() && static_cast<int32_t>(e.running.size()) < c_.max_num_seqs) {
        const int32_t id = e.waiting.front();
        SimRequest& r = reqs_[id];
        const int32_t n = r.prompt + r.generated;
        const int32_t need = BlocksFor(n);
        if (need > e.free_blocks) break;
        if (tokens > 0 && tokens + n > c_.max_batched_tokens) break;
        e.waiting.pop_front();
        e.running.push_back(id);
        e.free_blocks -= need;
        r.blocks = need;
        tokens += n - r.computed;
      }
    }
    e.step_end_s =
        e.running.empty() ? kInf : t + (c_.step_base_ms + c_.per_token_ms * tokens) / 1000.0;
  }

  void EndStep(int32_t ei, double t) {
    Engine& e = engines_[ei];
    size_t kept = 0;
    for (const int32_t id : e.running) {
      SimRequest& r = reqs_[id];
      r.computed = r.prompt + r.generated;
      ++r.generated;
      const bool first = r.first_token_s < 0;
      if (first) r.first_token_s = t;
      const bool finished = r.generated >= r.output;
      if (finished) {
        r.finish_s = t;
        e.free_blocks += r.blocks;
        r.blocks = 0;
      } else {
        e.running[kept++] = id;
      }
      policy_.OnToken(Info(id), ei, first, finished);
    }
    e.running.resize(kept);
    frontend::EngineLoad load;
    load.waiting = static_cast<int32_t>(e.waiting.size());
    load.running = static_cast<int32_t>(e.running.size());
    load.kv_cache_usage = 1.0 - static_cast<double>(e.free_blocks) / total_blocks_;
    policy_.OnStats(ei, load);
    StartStep(ei, t);
  }

  const Config& c_;
  const std::vector<TraceRequest>& trace_;
  Policy& policy_;
  const std::string name_;
  std::ostream* csv_;
  int32_t total_blocks_ = 0;
  std::vector<Engine> engines_;
  std::vector<SimRequest> reqs_;
  std::vector<double> ratios_;
};

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
    results.push_back(Simulation(c, trace, *policy, spec.name, csv).Run());
  }
  return results;
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

  // The same policies over further traces: each metric's mean over the seeds.
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
  std::ostringstream body;
  body << Table(results, false) << "\n" << Summary(results) << "\n";
  if (c.seeds > 1) {
    body << "\nMean of each figure over " << c.seeds << " traces (seeds " << c.seed << "–"
         << c.seed + c.seeds - 1 << ", same settings):\n\n"
         << Table(means, true) << "\n"
         << Summary(means) << "\n";
  }
  std::printf("DP load-balancing simulation — %s\n\n%s\n\n%s", UtcNow().c_str(),
              setup.str().c_str(), body.str().c_str());

  if (!c.markdown.empty()) {
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
             "batching (`bench/dp_balance_bench.cc`, described in `bench/README.md`); the same "
             "trace goes through every policy. " +
                 setup.str() +
                 " Load = waiting + running (+ sent but not yet scheduled) per engine, sampled "
                 "every 100 ms until the last arrival; TTFT = arrival → first token; e2e = "
                 "arrival → last token; preemptions = requests evicted for lack of KV blocks "
                 "(recomputed later).",
             kWidth)
      << "\n\n"
      << body.str() << "\nPolicies (candidates live in the benchmark only):\n\n";
    for (const PolicySpec& p : specs) {
      s << Wrap("- `" + p.name + "`: " + p.description, kWidth, "  ") << "\n";
    }
    s << "\n![Per-engine load over time, one panel per policy](img/dp_balance.png)\n\n"
      << Wrap("The plot: `python3 tools/plot_dp_balance.py " + csv_path +
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
