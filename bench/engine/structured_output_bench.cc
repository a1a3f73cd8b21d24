// Structured outputs' per-step cost on the CPU (docs/BENCHMARKS.md): filling the token bitmask
// rows of B constrained requests (StructuredOutputManager::FillBitmasks, in parallel from 4
// rows) and applying one row to a row of logits (kernels/cpu ApplyTokenBitmask), for a
// 32 K and a 128 K vocabulary, with the memcpy of a logits row as the peer (the
// least any per-row pass over the logits costs).
//
// The vocabularies are synthetic: the 256 byte tokens, JSON punctuation, digits, and random
// lowercase pieces of 2..10 letters (half with a leading space), so the mask work is that of a
// real BPE vocabulary of that size. The grammar is a JSON schema of five fields; the requests
// are at its first token (state 0: XGrammar's precomputed mask) or inside the first string
// value, after `{"name": "ab` (state 1: most of the vocabulary allowed and checked).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/sampling.h"
#include "structured_output/manager.h"
#include "structured_output/xgrammar_backend.h"

namespace vllm::structured_output {
namespace {

constexpr char kSchema[] = R"({"type":"object","properties":{
  "name":{"type":"string"},"age":{"type":"integer"},"email":{"type":"string"},
  "tags":{"type":"array","items":{"type":"string"}},"active":{"type":"boolean"}},
  "required":["name","age","email","tags","active"]})";

// A raw (bytes as themselves) vocabulary of `size` tokens: id 0 is the stop token.
std::vector<std::string> SyntheticVocab(int32_t size) {
  std::vector<std::string> vocab = {""};
  for (int b = 0; b < 256; ++b) vocab.emplace_back(1, static_cast<char>(b));
  for (const char* t :
       {"{\"", "\":", "\",", "\"}", ": \"", "\", \"", "[\"", "\"]", "true", "false"}) {
    vocab.push_back(t);
  }
  std::mt19937 rng(1);
  while (static_cast<int32_t>(vocab.size()) < size) {
    std::string piece = rng() % 2 ? " " : "";
    const int len = 2 + static_cast<int>(rng() % 9);
    for (int i = 0; i < len; ++i) piece += static_cast<char>('a' + rng() % 26);
    vocab.push_back(piece);
  }
  return vocab;
}

struct Setup {
  std::unique_ptr<XgrammarBackend> backend;
  std::vector<std::unique_ptr<Grammar>> grammars;
};

// Token ids of `{"name": "ab` in single bytes (byte b is token 1 + b).
std::vector<int32_t> InsideFirstString() {
  std::vector<int32_t> ids;
  for (char c : std::string("{\"name\": \"ab")) ids.push_back(1 + c);
  return ids;
}

Setup& Get(int32_t vocab_size, int32_t batch, int32_t state = 0) {
  static std::map<std::tuple<int32_t, int32_t, int32_t>, Setup> cache;
  Setup& s = cache[{vocab_size, batch, state}];
  if (s.backend == nullptr) {
    s.backend =
        *XgrammarBackend::CreateFromVocab(SyntheticVocab(vocab_size), false, vocab_size, {0});
    auto compiled = s.backend->Compile({ConstraintKind::kJson, kSchema, true});
    for (int32_t i = 0; i < batch; ++i) {
      s.grammars.push_back(s.backend->MakeGrammar(**compiled, 0));
      if (state == 1) {
        for (int32_t id : InsideFirstString()) {
          if (!s.grammars.back()->AcceptTokens(std::span<const int32_t>(&id, 1))) {
            std::fprintf(stderr, "token %d refused\n", id);
            std::abort();
          }
        }
      }
    }
  }
  return s;
}

// One step's bitmask for `batch` constrained requests, as the scheduler fills it.
void BM_FillBitmasks(benchmark::State& state) {
  const auto vocab = static_cast<int32_t>(state.range(0));
  const auto batch = static_cast<int32_t>(state.range(1));
  Setup& s = Get(vocab, batch, static_cast<int32_t>(state.range(2)));
  StructuredOutputManager::Options options;
  options.vocab_size = vocab;
  options.num_fill_threads = 2;
  StructuredOutputManager manager(options);
  std::vector<Grammar*> grammars;
  for (auto& g : s.grammars) grammars.push_back(g.get());
  std::vector<int32_t> rows(static_cast<size_t>(BitmaskWords(vocab)) * grammars.size());
  for (auto _ : state) {
    manager.FillBitmasks(grammars, rows);
    benchmark::DoNotOptimize(rows.data());
  }
  state.counters["requests_per_s"] =
      benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_FillBitmasks)
    ->ArgsProduct({{32768, 131072}, {1, 16, 64}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Applying one row to a row of logits, and the memcpy of that row.
void BM_ApplyTokenBitmask(benchmark::State& state) {
  const auto vocab = static_cast<int32_t>(state.range(0));
  Setup& s = Get(vocab, 1, static_cast<int32_t>(state.range(1)));
  std::vector<int32_t> row(static_cast<size_t>(BitmaskWords(vocab)));
  s.grammars[0]->FillBitmask(row);
  std::vector<float> logits(static_cast<size_t>(vocab), 0.5f);
  for (auto _ : state) {
    kernels::cpu::ApplyTokenBitmask(logits.data(), vocab, row.data());
    benchmark::DoNotOptimize(logits.data());
  }
}
BENCHMARK(BM_ApplyTokenBitmask)
    ->ArgsProduct({{32768, 131072}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

void BM_MemcpyLogitsRow(benchmark::State& state) {
  const auto vocab = static_cast<size_t>(state.range(0));
  std::vector<float> a(vocab, 0.5f), b(vocab);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), vocab * sizeof(float));
    benchmark::DoNotOptimize(b.data());
  }
}
BENCHMARK(BM_MemcpyLogitsRow)->Arg(32768)->Arg(131072)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace vllm::structured_output

BENCHMARK_MAIN();
