// One row of logits to one token: temperature, min-p, top-k, top-p, then an inverse-CDF draw
// in (probability desc, id asc) order. Also the counter-based uniform generator.
#include "kernels/cpu/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "kernels/cpu/sampling_internal.h"

namespace vllm::kernels::cpu {
namespace internal {
namespace {

// Smallest prefix sorted at once; the prefix then doubles as the walk needs more.
constexpr int64_t kMinSortedPrefix = 64;

bool RanksBefore(const Candidate& a, const Candidate& b) {
  return a.prob > b.prob || (a.prob == b.prob && a.id < b.id);
}

// Softmax numerators of the tokens min-p keeps (p >= min_p · p_max, and p > 0: a token whose
// probability underflowed can never be drawn). Sets *max_logit to the row's maximum.
std::vector<Candidate> MinPCandidates(const float* logits, int64_t vocab_size, float min_p,
                                      float* max_logit) {
  *max_logit = logits[Argmax(logits, vocab_size)];
  std::vector<Candidate> c;
  for (int64_t i = 0; i < vocab_size; ++i) {
    const float p = UnnormalisedProb(logits[i], *max_logit);
    if (p > 0.0f && p >= min_p) c.push_back({p, static_cast<int32_t>(i)});
  }
  return c;
}

// Keeps the shortest most-likely prefix whose mass reaches top_p of the total; returns the
// kept mass, summed in the order the draw will walk.
double ApplyTopP(RankedCandidates& c, float top_p, double total) {
  const double target = static_cast<double>(top_p) * total;
  double cum = 0.0;
  for (int64_t i = 0; i < c.size(); ++i) {
    cum += c.At(i).prob;
    if (cum >= target) {
      c.Truncate(i + 1);
      return cum;
    }
  }
  return cum;
}

// Leaves `kept` in the row and -inf elsewhere, so the row shows what was sampled from.
void WriteBackFilter(float* logits, int64_t vocab_size, const RankedCandidates& c) {
  if (c.size() == vocab_size) return;
  std::vector<std::pair<int32_t, float>> kept;
  kept.reserve(c.size());
  for (const Candidate& x : c.unordered()) kept.emplace_back(x.id, logits[x.id]);
  std::fill(logits, logits + vocab_size, -std::numeric_limits<float>::infinity());
  for (const auto& [id, logit] : kept) logits[id] = logit;
}

}  // namespace

double RankedCandidates::Mass() const {
  double mass = 0.0;
  for (const Candidate& x : c_) mass += x.prob;
  return mass;
}

const Candidate& RankedCandidates::At(int64_t i) {
  if (i >= sorted_) SortPrefix(std::max({i + 1, 2 * sorted_, kMinSortedPrefix}));
  return c_[i];
}

void RankedCandidates::Truncate(int64_t n) {
  if (n >= size()) return;
  SortPrefix(n);
  c_.resize(n);
}

void RankedCandidates::SortPrefix(int64_t n) {
  n = std::min(n, size());
  if (n <= sorted_) return;
  auto begin = c_.begin() + sorted_;
  if (n < size()) std::nth_element(begin, c_.begin() + n, c_.end(), RanksBefore);
  std::sort(begin, c_.begin() + n, RanksBefore);
  sorted_ = n;
}

int32_t Argmax(const float* logits, int64_t vocab_size) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab_size; ++i) {
    if (logits[i] > logits[best]) best = i;  // strict: ties stay with the lowest id
  }
  return static_cast<int32_t>(best);
}

FilteredRow FilterRow(float* logits, int64_t vocab_size, const SamplingRow& row) {
  for (int64_t i = 0; i < vocab_size; ++i) logits[i] /= row.temperature;
  float max_logit = 0.0f;
  RankedCandidates c(MinPCandidates(logits, vocab_size, row.min_p, &max_logit));
  VLLM_CHECK(c.size() > 0) << "SampleRow: no finite logit in the row";
  if (row.top_k > 0) c.Truncate(row.top_k);
  double total = c.Mass();
  if (row.top_p < 1.0f) total = ApplyTopP(c, row.top_p, total);
  WriteBackFilter(logits, vocab_size, c);
  return FilteredRow{std::move(c), total, max_logit};
}

int32_t DrawRanked(RankedCandidates& c, double total, double u) {
  // Inverse CDF in ranked order; the fallback covers the walk's sum rounding below u·total
  // when u is within an ulp or so of 1.
  const double target = u * total;
  double cum = 0.0;
  for (int64_t i = 0; i < c.size(); ++i) {
    cum += c.At(i).prob;
    if (cum > target) return c.At(i).id;
  }
  return c.At(c.size() - 1).id;
}

}  // namespace internal

bool ApplyTokenBitmask(float* logits, int64_t vocab_size, const int32_t* bitmask) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  bool any = false;
  for (int64_t w = 0; w * 32 < vocab_size && !any; ++w) {
    const int64_t end = std::min<int64_t>(32, vocab_size - w * 32);
    const uint32_t valid = end == 32 ? 0xffffffffu : (1u << end) - 1;
    any = (static_cast<uint32_t>(bitmask[w]) & valid) != 0;
  }
  if (!any) return false;
  for (int64_t w = 0; w * 32 < vocab_size; ++w) {
    const int64_t end = std::min<int64_t>(32, vocab_size - w * 32);
    const uint32_t valid = end == 32 ? 0xffffffffu : (1u << end) - 1;
    uint32_t masked = ~static_cast<uint32_t>(bitmask[w]) & valid;
    if (masked == valid) {  // none allowed: most words of a constrained row
      std::fill_n(logits + w * 32, end, kMasked);
      continue;
    }
    while (masked != 0) {  // the disallowed tokens of a mixed word, lowest first
      logits[w * 32 + __builtin_ctz(masked)] = kMasked;
      masked &= masked - 1;
    }
  }
  return true;
}

int32_t SampleRow(float* logits, int64_t vocab_size, const SamplingRow& row, double u) {
  VLLM_CHECK(vocab_size > 0) << "SampleRow: empty vocabulary";
  if (row.temperature < internal::kGreedyTemperature) {
    return internal::Argmax(logits, vocab_size);
  }
  internal::FilteredRow p = internal::FilterRow(logits, vocab_size, row);
  return internal::DrawRanked(p.kept, p.total, u);
}

double CounterUniform(uint64_t seed, uint64_t counter) {
  // SplitMix64's finaliser (Stafford's Mix13), applied to the seed and then to the seed's
  // hash plus a Weyl step of the counter: both words are fully mixed, and neighbouring
  // counters or seeds give unrelated outputs.
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  };
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
  const uint64_t h = mix(mix(seed + kGolden) + (counter + 1) * kGolden);
  return static_cast<double>(h >> 11) * 0x1.0p-53;  // top 53 bits: exact doubles in [0, 1)
}

}  // namespace vllm::kernels::cpu
