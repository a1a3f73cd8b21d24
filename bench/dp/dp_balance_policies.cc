// dp_balance_bench's routing policies.
#include "bench/dp/dp_balance_policies.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "frontend/engine/dp_load_balancer.h"

namespace vllm::bench {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

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

}  // namespace

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

}  // namespace vllm::bench
