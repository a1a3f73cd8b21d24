// dp_balance_bench's trace and engine simulation.
#include "bench/dp/dp_balance_sim.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "frontend/engine/dp_load_balancer.h"

namespace vllm::bench {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kSampleS = 0.1;  // load sampling period (simulated seconds)

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

}  // namespace

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

namespace {

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

}  // namespace

Result Simulate(const Config& c, const std::vector<TraceRequest>& trace, Policy& policy,
                std::string name, std::ostream* csv) {
  return Simulation(c, trace, policy, std::move(name), csv).Run();
}

}  // namespace vllm::bench
