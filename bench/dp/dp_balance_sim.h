// dp_balance_bench's model: the settings, the seeded trace, the routing policy's interface and
// the discrete-event simulation of N engines with vLLM-style continuous batching (the model is
// described in dp_balance_bench.cc).
#ifndef VLLM_BENCH_DP_DP_BALANCE_SIM_H_
#define VLLM_BENCH_DP_DP_BALANCE_SIM_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "frontend/engine/dp_load_balancer.h"

namespace vllm::bench {

// The command line of a run (defaults: the documented run).
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

// One request of the trace.
struct TraceRequest {
  double arrival_s = 0;
  int32_t prompt = 0;
  int32_t output = 0;      // true length (the request stops there); hidden from policies
  int32_t max_tokens = 0;  // what the client knows
};

// Mean engine time one request costs at a full batch: its prompt and output tokens at
// per_token each, plus its share (1 / max_num_seqs) of step_base for each of its output steps.
// Capacity (requests/s per engine) is its inverse; the arrival rate is load × N × capacity.
double MeanRequestCostS(const Config& c);

// Requests per second of the trace: load × N engines ÷ MeanRequestCostS.
double ArrivalRate(const Config& c);

// The Poisson trace of `c.seed`: c.requests arrivals at ArrivalRate(c), prompt and output
// lengths drawn from the ranges above (c.long_fraction long), max_tokens the true length for
// half of them and kUnknownMaxTokens for the rest. The same seed gives the same trace on every
// machine.
std::vector<TraceRequest> MakeTrace(const Config& c);

// ---------------------------------------------------------------------------------------------
// Policies. A policy sees what a frontend client sees: the request's prompt length and
// max_tokens when it is sent, each engine's figures after each of its steps, and the output
// tokens streamed back (one at a time) for the requests it sent.

// What a policy knows of a request when it is sent (never its true output length).
struct RequestInfo {
  int32_t id = 0;
  int32_t prompt = 0;
  int32_t max_tokens = 0;
};

// A routing policy, driven by one Simulate() call (single-threaded).
class Policy {
 public:
  virtual ~Policy() = default;
  // The engine (0 .. engines - 1) that gets `req`.
  virtual int32_t Pick(const RequestInfo& req) = 0;
  // An engine's figures after one of its steps.
  virtual void OnStats(int32_t /*engine*/, const frontend::EngineLoad& /*load*/) {}
  // One more output token of `req` from `engine`: `first` with its first, `finished` with its
  // last.
  virtual void OnToken(const RequestInfo& /*req*/, int32_t /*engine*/, bool /*first*/,
                       bool /*finished*/) {}
};

// The figures of one policy over one trace.
struct Result {
  std::string name;
  double imbalance_mean = 0;  // mean over samples of max/mean engine load
  double imbalance_p99 = 0;
  double ttft_p50 = 0, ttft_p99 = 0;
  double e2e_p50 = 0, e2e_p99 = 0;
  double makespan_s = 0;
  double preemptions = 0;
};

// Runs `trace` through engines configured by `c`, routing with `policy`; `name` labels the
// result and the CSV rows. With `csv`, writes (time_s,policy,engine,waiting,running) every
// 100 ms of simulated time. Exits the process (status 1) if the model's own invariants fail (an
// engine ends with work or blocks held, a request never finishes).
Result Simulate(const Config& c, const std::vector<TraceRequest>& trace, Policy& policy,
                std::string name, std::ostream* csv);

}  // namespace vllm::bench

#endif  // VLLM_BENCH_DP_DP_BALANCE_SIM_H_
