// Speculative decoding's proposers on the CPU (spec_decode/): the cost of one Propose call per
// request in steady-state decoding, for B requests of N tokens each (the prompt, then outputs).
// Each iteration appends one sampled token to every request and asks for k = 5 drafts, as the
// engine core does after each step. The token lists are text-like: a random walk over a
// 32 K vocabulary that repeats earlier spans (one token in eight starts a copy of 4..32 tokens
// from earlier in the request), so the proposers find matches.
//
// 128 steps per run. Counters: us_per_request (wall time per request per call, µs),
// cpu_per_request (the thread's CPU time per request per call: steadier on a shared machine),
// draft_len (tokens proposed per request per call). The suffix proposer's first call per request
// builds its tree; that cost is measured apart (BM_SuffixBuild: one request, its Time).
//
//   build/release/bin/spec_decode_bench --benchmark_repetitions=3
//       --benchmark_report_aggregates_only=true   (one line)
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "config/speculative_config.h"
#include "spec_decode/proposer.h"

namespace vllm::spec_decode {
namespace {

constexpr int32_t kDraftTokens = 5;

std::vector<int32_t> TextLike(size_t n, std::mt19937& rng) {
  std::vector<int32_t> t;
  t.reserve(n + 4096);
  while (t.size() < n) {
    if (t.size() > 64 && rng() % 8 == 0) {
      const size_t len = 4 + rng() % 29;
      const size_t from = rng() % (t.size() - len);
      for (size_t i = 0; i < len && t.size() < n; ++i) t.push_back(t[from + i]);
    } else {
      t.push_back(static_cast<int32_t>(rng() % 32000));
    }
  }
  return t;
}

config::SpeculativeConfig Config(const std::string& method) {
  config::SpeculativeConfig c;
  c.method = method;
  c.num_speculative_tokens = kDraftTokens;
  c.prompt_lookup_min = 2;
  c.prompt_lookup_max = 5;
  return c;  // suffix: vLLM's defaults (depth 24, 10000 cached, factor 1, min prob 0.1)
}

struct Batch {
  std::vector<std::string> ids;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<ProposeRequest> requests;
  int32_t num_prompt = 0;

  Batch(int64_t b, int64_t n) : num_prompt(static_cast<int32_t>(n * 3 / 4)) {
    std::mt19937 rng(1);
    for (int64_t i = 0; i < b; ++i) {
      ids.push_back("req-" + std::to_string(i));
      tokens.push_back(TextLike(static_cast<size_t>(n), rng));
    }
    Refresh();
  }
  void Refresh() {
    requests.clear();
    for (size_t i = 0; i < ids.size(); ++i) {
      requests.push_back({ids[i], tokens[i], num_prompt, kDraftTokens});
    }
  }
  // One sampled token per request: its first draft token when there is one (accepted), else a
  // random one.
  void Step(const std::vector<std::vector<int32_t>>& drafts, std::mt19937& rng) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i].push_back(drafts[i].empty() ? static_cast<int32_t>(rng() % 32000) : drafts[i][0]);
    }
    Refresh();
  }
};

void RunSteps(benchmark::State& state, const std::string& method) {
  const int64_t b = state.range(0);
  const int64_t n = state.range(1);
  Batch batch(b, n);
  auto proposer = MakeProposer(Config(method));
  if (!proposer.ok()) {
    state.SkipWithError(std::string(proposer.status().message()).c_str());
    return;
  }
  std::vector<std::vector<int32_t>> drafts;
  (*proposer)->Propose(batch.requests, &drafts);  // the suffix trees are built here
  std::mt19937 rng(2);
  int64_t proposed = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    batch.Step(drafts, rng);  // a push_back per request: noise next to Propose
    (*proposer)->Propose(batch.requests, &drafts);
    for (const auto& d : drafts) proposed += static_cast<int64_t>(d.size());
  }
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  const auto calls = static_cast<double>(state.iterations() * b);
  state.counters["us_per_request"] = us / calls;
  state.counters["cpu_per_request"] =
      benchmark::Counter(static_cast<double>(b), benchmark::Counter::kIsIterationInvariantRate |
                                                     benchmark::Counter::kInvert);
  state.counters["draft_len"] = static_cast<double>(proposed) / calls;
}

void BM_Ngram(benchmark::State& state) { RunSteps(state, "ngram"); }
void BM_Suffix(benchmark::State& state) { RunSteps(state, "suffix"); }

// The suffix proposer's first call per request: its local tree over N tokens.
void BM_SuffixBuild(benchmark::State& state) {
  const int64_t n = state.range(1);
  Batch batch(1, n);
  for (auto _ : state) {
    auto proposer = MakeProposer(Config("suffix"));
    std::vector<std::vector<int32_t>> drafts;
    (*proposer)->Propose(batch.requests, &drafts);
    benchmark::DoNotOptimize(drafts);
  }
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (int64_t n : {1024, 8192}) {
    for (int64_t batch : {1, 64, 256}) b->Args({batch, n});
  }
  // 128 steps: the lists grow by at most 128 tokens (an unbounded run would grow them by the
  // iteration count and measure longer lists than asked for).
  b->ArgNames({"batch", "tokens"})->Unit(benchmark::kMicrosecond)->Iterations(128);
}

BENCHMARK(BM_Ngram)->Apply(Shapes);
BENCHMARK(BM_Suffix)->Apply(Shapes);
BENCHMARK(BM_SuffixBuild)
    ->Args({1, 1024})
    ->Args({1, 8192})
    ->ArgNames({"batch", "tokens"})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace vllm::spec_decode

BENCHMARK_MAIN();
