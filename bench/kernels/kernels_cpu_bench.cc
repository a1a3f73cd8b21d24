// CPU kernel micro-benchmarks (kernels/cpu/ops.h, sampling.h).
//
//   Linear/square   2048³ sgemm: the BLAS peak on this machine, the yardstick for the rest.
//   Linear/<shape>  m ∈ {1, 4, 16, 64} (decode batches) and 512 (a prefill chunk) against
//                   Llama-3-8B's projections (hidden 4096, intermediate 14336) and a
//                   hidden-512 model's. Counter GFLOP/s (2·m·n·k per call).
//   Memcpy/floor    memcpy of 256 MiB (past any cache): the copy rate that sets the
//                   weight-streaming floor of the LinearPath rows in the same run.
//   LinearPath      the small-m kernel (path 0, gemm_small.h), OpenBLAS (path 1,
//                   LinearBlas: sgemv for m <= 2, sgemm above) and LinearPacked (path 2,
//                   packed_linear.h; the weight packed once, outside the timed loop),
//                   adjacent for each (shape, m), m ∈ {1, 4, 8, 16, 32, 64, 128}, at the
//                   bundled kjv-llama-tiny's projections and Llama-3-8B's. Counters: weight
//                   GB/s (4·n·k bytes for every path, the packed panels' zero padding not
//                   counted), the copy rate (best of 5 memcpy of 256 MiB, once per run) and
//                   floor_share = weight GB/s ÷ it (1 at the weight-streaming floor; time ÷
//                   floor = 1 / floor_share).
//   LinearMixed     an sgemm (m = 128) and a small-m call (m = 8) alone and alternating: the
//                   cost of our pool and OpenBLAS's taking turns.
//   PagedAttention  decode: 32 (and 2) sequences × 1024 cached tokens, 32 query / 8 KV heads,
//                   head_dim 128, block 16; time per call and GB/s of K+V read (every cached
//                   byte once). prefill: one 512-token sequence from scratch, GFLOP/s. Each
//                   with threads = 1 (the serial kernel) and 2 (the rank pool on 2 cores).
//                   tiny-*: the bundled model's heads (8 query / 4 KV, head_dim 32) at the
//                   serving benchmark's shapes, one thread.
//   SampleRow       one 128K-vocab row: top-k 50, top-p 0.9, unfiltered.
//   RejectionSample one request's verification (rejection_sampler.h), k = 1..5 drafts at
//                   vocab 32000 and 128256, greedy and random (temperature 0.8, top-p 0.9,
//                   one-hot q as n-gram), every draft accepted: the k + 1 rows all read,
//                   the most a request costs. Time per request; restoring the rows that
//                   random sampling filters in place is not timed.
//
// All times are wall-clock (UseRealTime): OpenBLAS runs its own threads.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/gemm_small.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/cpu/rejection_sampler.h"
#include "kernels/cpu/sampling.h"
#include "kernels/cpu/thread_pool.h"

namespace vllm::kernels::cpu {
namespace {

// Cheap deterministic fill in [-0.5, 0.5): the values do not change the speed, and a
// mersenne twister over 470 MB of weights would dominate setup.
std::vector<float> Filled(int64_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) * (1.0f / 16777216.0f) - 0.5f;
  }
  return v;
}

void SetGflops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iteration * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Args: m, n, k.
void BM_Linear(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const std::vector<float> x = Filled(m * k, 1);
  const std::vector<float> w = Filled(n * k, 2);
  std::vector<float> y(m * n);
  for (auto _ : state) {
    Linear(x.data(), w.data(), nullptr, y.data(), m, n, k);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  SetGflops(state, 2.0 * m * n * k);
}

void SquareArgs(benchmark::internal::Benchmark* b) { b->Args({2048, 2048, 2048}); }

void ModelShapeArgs(benchmark::internal::Benchmark* b) {
  // (n, k): Llama-3-8B o_proj-sized, up/gate (one of the pair), down; hidden-512 model's
  // square projection, up and down with intermediate 1536.
  const int64_t shapes[][2] = {{4096, 4096}, {14336, 4096}, {4096, 14336},
                               {512, 512},   {1536, 512},   {512, 1536}};
  for (const auto& s : shapes) {
    for (int64_t m : {1, 4, 16, 64, 512}) b->Args({m, s[0], s[1]});
  }
}

BENCHMARK(BM_Linear)
    ->Name("Linear/square")
    ->Apply(SquareArgs)
    ->ArgNames({"m", "n", "k"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Linear)
    ->Name("Linear/model")
    ->Apply(ModelShapeArgs)
    ->ArgNames({"m", "n", "k"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// The best memcpy rate (bytes copied per second) seen so far in this run: Memcpy/floor runs
// before the LinearPath rows (registration order).
double g_copy_bytes_per_second = 0.0;

void BM_Memcpy(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  std::vector<char> src(bytes, 1), dst(bytes, 2);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_Memcpy)
    ->Name("Memcpy/floor")
    ->Arg(int64_t{256} << 20)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The floor's copy rate for the LinearPath rows: the best of 5 copies of 256 MiB, timed once
// per run just before the first row (Memcpy/floor's counter is not visible to other rows).
void MeasureCopyRateOnce() {
  if (g_copy_bytes_per_second > 0.0) return;
  const int64_t bytes = int64_t{256} << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 2);
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    g_copy_bytes_per_second = std::max(g_copy_bytes_per_second, bytes / s);
  }
}

// Args: path (0 ours, 1 OpenBLAS, 2 packed), m, n, k.
void BM_LinearPath(benchmark::State& state) {
  const int64_t path = state.range(0), m = state.range(1), n = state.range(2), k = state.range(3);
  MeasureCopyRateOnce();
  const std::vector<float> x = Filled(m * k, 1);
  std::vector<float> w = Filled(n * k, 2);
  std::vector<float> y(m * n);
  const GemmIsa isa = BestGemmIsa();
  // Path 2 packs once, as the model does at load time, and drops the [n, k] copy (Llama-3-8B's
  // gate_up is 470 MB per copy).
  PackedWeight packed;
  if (path == 2) {
    packed = PackedWeight::Pack(w.data(), n, k);
    std::vector<float>().swap(w);
  }
  for (auto _ : state) {
    if (path == 0) {
      LinearSmallM(x.data(), w.data(), nullptr, y.data(), m, n, k, isa);
    } else if (path == 1) {
      LinearBlas(x.data(), w.data(), nullptr, y.data(), m, n, k);
    } else {
      LinearPacked(x.data(), packed, nullptr, y.data(), m, isa);
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double weight_bytes = 4.0 * n * k;
  state.counters["wGB/s"] =
      benchmark::Counter(weight_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  // floor_share = weight GB/s ÷ copy GB/s: 1 at the streaming floor; time ÷ floor = 1 / it.
  state.counters["floor_share"] = benchmark::Counter(weight_bytes / g_copy_bytes_per_second,
                                                     benchmark::Counter::kIsIterationInvariantRate);
  state.counters["copyGB/s"] = g_copy_bytes_per_second * 1e-9;
  SetGflops(state, 2.0 * m * n * k);
  state.SetLabel(path == 0   ? std::string(GemmIsaName(isa))
                 : path == 1 ? std::string("openblas")
                             : std::string("packed-") + GemmIsaName(isa));
}

void LinearPathArgs(benchmark::internal::Benchmark* b) {
  // (n, k): kjv-llama-tiny (hidden 256, 8 + 2·4 heads of 32, intermediate 688, vocab 4096):
  // qkv, o, gate_up, down, lm_head; Llama-3-8B: qkv, o, gate_up, down.
  const int64_t shapes[][2] = {{512, 256},   {256, 256},   {1376, 256},   {256, 688},   {4096, 256},
                               {6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
  for (const auto& s : shapes) {
    for (int64_t m : {1, 4, 8, 16, 32, 64, 128}) {
      for (int64_t path : {0, 1, 2}) b->Args({path, m, s[0], s[1]});
    }
  }
}
BENCHMARK(BM_LinearPath)
    ->Name("LinearPath")
    ->Apply(LinearPathArgs)
    ->ArgNames({"path", "m", "n", "k"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Arg: 0 sgemm m = 128 only, 1 small-m m = 8 only, 2 both in turn; weights 4096 × 4096.
void BM_LinearMixed(benchmark::State& state) {
  constexpr int64_t kN = 4096, kK = 4096;
  const std::vector<float> x = Filled(128 * kK, 1);
  const std::vector<float> w = Filled(kN * kK, 2);
  std::vector<float> y(128 * kN);
  const int64_t mode = state.range(0);
  for (auto _ : state) {
    if (mode != 1) LinearBlas(x.data(), w.data(), nullptr, y.data(), 128, kN, kK);
    if (mode != 0) LinearSmallM(x.data(), w.data(), nullptr, y.data(), 8, kN, kK, BestGemmIsa());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_LinearMixed)
    ->Name("LinearMixed")
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->ArgName("mode")
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

struct AttentionSetup {
  int32_t num_seqs, context, q_len, q_heads, kv_heads, head_dim, block_size;
  // 0: the sequences' blocks back to back; else a cache of this many blocks, the sequences'
  // blocks spread over it (as a serving engine's block pool hands them out), and each call
  // of the loop on other blocks (8 sets in turn, as the layers of a step: more than the L3).
  int32_t cache_blocks = 0;
};

// Args: num_seqs, context (tokens cached before the step), q_len (new tokens per sequence),
// threads; heads and head_dim from `a`.
void RunPagedAttention(benchmark::State& state, AttentionSetup a) {
  a.num_seqs = static_cast<int32_t>(state.range(0));
  a.context = static_cast<int32_t>(state.range(1));
  a.q_len = static_cast<int32_t>(state.range(2));
  const int32_t seq_len = a.context + a.q_len;
  const int32_t blocks_per_seq = (seq_len + a.block_size - 1) / a.block_size;
  const int64_t row = static_cast<int64_t>(a.kv_heads) * a.head_dim;
  const int32_t used_blocks = a.num_seqs * blocks_per_seq;
  const int32_t num_blocks = std::max(used_blocks, a.cache_blocks);
  const int64_t cache_floats = static_cast<int64_t>(num_blocks) * a.block_size * row;
  const std::vector<float> k_cache = Filled(cache_floats, 3);
  const std::vector<float> v_cache = Filled(cache_floats, 4);
  const int64_t tokens = static_cast<int64_t>(a.num_seqs) * a.q_len;
  const std::vector<float> q = Filled(tokens * a.q_heads * a.head_dim, 5);
  std::vector<float> out(q.size());
  const int32_t table_sets = a.cache_blocks > 8 * used_blocks ? 8 : 1;
  std::vector<int32_t> block_tables(static_cast<size_t>(table_sets) * used_blocks);
  std::iota(block_tables.begin(), block_tables.end(), 0);
  if (table_sets > 1) {
    // A stride coprime with the cache size (7919 is prime): distinct blocks, far apart.
    for (int32_t& b : block_tables) b = static_cast<int32_t>(int64_t{b} * 7919 % num_blocks);
  }
  std::vector<int32_t> query_start_loc(a.num_seqs + 1), seq_lens(a.num_seqs, seq_len);
  for (int32_t s = 0; s <= a.num_seqs; ++s) query_start_loc[s] = s * a.q_len;
  AttentionMetadata meta;
  meta.num_seqs = a.num_seqs;
  meta.query_start_loc = query_start_loc.data();
  meta.seq_lens = seq_lens.data();
  meta.block_tables = block_tables.data();
  meta.max_blocks_per_seq = blocks_per_seq;
  meta.block_size = a.block_size;
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
  // The kernel's threads (the rank's pool, as SetBlasNumThreads sizes it): 1 is the serial
  // kernel the pool replaced.
  const int threads_before = KernelThreadPool().num_threads();
  SetBlasNumThreads(static_cast<int>(state.range(3)));
  int64_t call = 0;
  for (auto _ : state) {
    meta.block_tables = block_tables.data() + (call++ % table_sets) * used_blocks;
    PagedAttention(q.data(), k_cache.data(), v_cache.data(), out.data(), meta, a.q_heads,
                   a.kv_heads, a.head_dim, scale);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  SetBlasNumThreads(threads_before);
  // K and V of every cached token once (what a decode step must stream from memory).
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(a.num_seqs) * seq_len *
                          row * static_cast<int64_t>(sizeof(float)));
  // Causal: query row j sees context + j + 1 keys; two head_dim-long FMAs per key (q·k, p·v).
  double key_visits = 0.0;
  for (int32_t j = 0; j < a.q_len; ++j) key_visits += a.context + j + 1;
  SetGflops(state, 4.0 * a.num_seqs * a.q_heads * a.head_dim * key_visits);
}

// Llama-3-8B's heads: 32 query / 8 KV, head_dim 128.
void BM_PagedAttention(benchmark::State& state) {
  RunPagedAttention(state, {0, 0, 0, 32, 8, 128, 16});
}

// The bundled kjv-llama-tiny's heads: 8 query / 4 KV, head_dim 32.
void BM_PagedAttentionTiny(benchmark::State& state) {
  RunPagedAttention(state, {0, 0, 0, 8, 4, 32, 16});
}

// The same over a 16 K-block cache (128 MiB of K and of V).
void BM_PagedAttentionTinyScattered(benchmark::State& state) {
  RunPagedAttention(state, {0, 0, 0, 8, 4, 32, 16, 16 * 1024});
}

BENCHMARK(BM_PagedAttention)
    ->Name("PagedAttention/decode")
    ->Args({32, 1023, 1, 1})
    ->Args({32, 1023, 1, 2})
    ->Args({2, 1023, 1, 1})
    ->Args({2, 1023, 1, 2})
    ->ArgNames({"seqs", "context", "q_len", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PagedAttention)
    ->Name("PagedAttention/prefill")
    ->Args({1, 0, 512, 1})
    ->Args({1, 0, 512, 2})
    ->ArgNames({"seqs", "context", "q_len", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// The serving benchmark's shapes (128-token prompts, 64 outputs): a decode step of 64
// sequences at context 160, and one 128-token prompt.
BENCHMARK(BM_PagedAttentionTiny)
    ->Name("PagedAttention/tiny-decode")
    ->Args({64, 159, 1, 1})
    ->ArgNames({"seqs", "context", "q_len", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PagedAttentionTinyScattered)
    ->Name("PagedAttention/tiny-decode-scattered")
    ->Args({64, 159, 1, 1})
    ->ArgNames({"seqs", "context", "q_len", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PagedAttentionTiny)
    ->Name("PagedAttention/tiny-prefill")
    ->Args({1, 0, 128, 1})
    ->Args({1, 0, 512, 1})
    ->ArgNames({"seqs", "context", "q_len", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Arg: 0 top-k 50, 1 top-p 0.9, 2 unfiltered (temperature 1).
void BM_SampleRow(benchmark::State& state) {
  constexpr int64_t kVocab = 128256;  // Llama 3
  std::vector<float> logits = Filled(kVocab, 6);
  for (float& x : logits) x *= 16.0f;  // a spread like real logits: a few dominate
  SamplingRow row;
  if (state.range(0) == 0) row.top_k = 50;
  if (state.range(0) == 1) row.top_p = 0.9f;
  std::vector<float> scratch(kVocab);
  uint64_t counter = 0;
  for (auto _ : state) {
    std::copy(logits.begin(), logits.end(), scratch.begin());
    benchmark::DoNotOptimize(SampleRow(scratch.data(), kVocab, row, CounterUniform(1, counter++)));
  }
}
BENCHMARK(BM_SampleRow)
    ->Name("SampleRow/vocab128K")
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->ArgName("mode")
    ->Unit(benchmark::kMicrosecond);

// Args: vocab, k, mode (0 greedy, 1 random).
void BM_RejectionSample(benchmark::State& state) {
  const int64_t vocab = state.range(0);
  const auto k = static_cast<int32_t>(state.range(1));
  SamplingRow row;
  if (state.range(2) == 0) {
    row.temperature = 0.0f;
  } else {
    row.temperature = 0.8f;
    row.top_p = 0.9f;
  }
  std::vector<float> logits = Filled((k + 1) * vocab, 7);
  for (float& x : logits) x *= 16.0f;
  std::vector<int32_t> draft;
  for (int32_t j = 0; j < k; ++j) {  // the target all but sure of each draft: all accepted
    draft.push_back(static_cast<int32_t>((j * 7919 + 13) % vocab));
    logits[j * vocab + draft.back()] = 40.0f;
  }
  std::vector<double> u_accept(k), u_sample(k + 1);
  std::vector<float> rows = logits;
  std::vector<int32_t> out;
  uint64_t counter = 0;
  for (auto _ : state) {
    if (row.temperature > 0.0f) {
      state.PauseTiming();
      std::copy(logits.begin(), logits.end(), rows.begin());
      state.ResumeTiming();
    }
    for (double& u : u_accept) u = CounterUniform(1, counter++);
    for (double& u : u_sample) u = CounterUniform(1, counter++);
    out.clear();
    const int32_t accepted =
        RejectionSample(rows.data(), vocab, draft, nullptr, row, u_accept, u_sample, &out);
    if (accepted != k) state.SkipWithError("a draft was rejected");
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_RejectionSample)
    ->Name("RejectionSample")
    ->ArgsProduct({{32000, 128256}, {1, 2, 3, 4, 5}, {0, 1}})
    ->ArgNames({"vocab", "k", "random"})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace vllm::kernels::cpu

BENCHMARK_MAIN();
