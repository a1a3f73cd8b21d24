// dp_balance_bench's routing policies: round-robin, the product's frontend::DpLoadBalancer
// (vLLM 0.33's rule and kOutstanding) and the candidates kept in the benchmark only.
#ifndef VLLM_BENCH_DP_DP_BALANCE_POLICIES_H_
#define VLLM_BENCH_DP_DP_BALANCE_POLICIES_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/dp/dp_balance_sim.h"

namespace vllm::bench {

// A policy by name: `description` goes into the markdown, `make` builds a fresh one for a run.
struct PolicySpec {
  std::string name;
  std::string description;
  std::function<std::unique_ptr<Policy>(const Config&)> make;
};

// Every policy, in the order of the tables.
std::vector<PolicySpec> AllPolicies();

}  // namespace vllm::bench

#endif  // VLLM_BENCH_DP_DP_BALANCE_POLICIES_H_
