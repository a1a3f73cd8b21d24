// Speculative decoding's verification: greedy exact match, or accept with probability
// min(1, p/q) and draw the correction from the residual max(p - q, 0), on SampleRow's filter.
#include "kernels/cpu/rejection_sampler.h"

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "kernels/cpu/sampling.h"
#include "kernels/cpu/sampling_internal.h"

namespace vllm::kernels::cpu {
namespace {

using internal::Candidate;
using internal::FilteredRow;
using internal::RankedCandidates;

bool InVocab(int32_t id, int64_t vocab_size) { return id >= 0 && id < vocab_size; }

int32_t GreedyVerify(const float* logits, int64_t vocab_size, std::span<const int32_t> draft,
                     std::vector<int32_t>* out) {
  const auto k = static_cast<int32_t>(draft.size());
  for (int32_t j = 0; j < k; ++j) {
    const int32_t target = internal::Argmax(logits + j * vocab_size, vocab_size);
    out->push_back(target);  // the draft when they match, the correction otherwise
    if (draft[j] != target) return j;
  }
  out->push_back(internal::Argmax(logits + k * vocab_size, vocab_size));
  return k;
}

// p(id) of a filtered row: the filter's float for a kept token, 0 for a dropped one (-inf).
double TargetProb(const FilteredRow& p, const float* filtered_logits, int32_t id) {
  return internal::UnnormalisedProb(filtered_logits[id], p.max_logit) / p.total;
}

// The correction after rejecting `draft` (in vocabulary): a draw from max(p - q, 0), q the
// draft row or one-hot at `draft`. Only tokens p kept can have residual mass. If rounding
// leaves no residual (q >= p everywhere, so a rejection was all but impossible), draws from p.
int32_t DrawResidual(FilteredRow& p, const float* q, int32_t draft, double u) {
  std::vector<Candidate> residual;
  residual.reserve(p.kept.unordered().size());
  for (const Candidate& c : p.kept.unordered()) {
    const double q_c = q != nullptr ? static_cast<double>(q[c.id]) : (c.id == draft ? 1.0 : 0.0);
    const double r = static_cast<double>(c.prob) / p.total - q_c;
    if (r > 0.0) residual.push_back({static_cast<float>(r), c.id});
  }
  if (residual.empty()) return internal::DrawRanked(p.kept, p.total, u);
  RankedCandidates ranked(std::move(residual));
  const double mass = ranked.Mass();
  return internal::DrawRanked(ranked, mass, u);
}

int32_t RandomVerify(float* logits, int64_t vocab_size, std::span<const int32_t> draft,
                     const float* draft_probs, const SamplingRow& row,
                     std::span<const double> u_accept, std::span<const double> u_sample,
                     std::vector<int32_t>* out) {
  const auto k = static_cast<int32_t>(draft.size());
  for (int32_t j = 0; j < k; ++j) {
    float* row_logits = logits + j * vocab_size;
    FilteredRow p = internal::FilterRow(row_logits, vocab_size, row);
    const int32_t d = draft[j];
    if (!InVocab(d, vocab_size)) {
      out->push_back(internal::DrawRanked(p.kept, p.total, u_sample[j]));
      return j;
    }
    const float* q = draft_probs != nullptr ? draft_probs + j * vocab_size : nullptr;
    const double q_d = q != nullptr ? static_cast<double>(q[d]) : 1.0;
    // q_d > 0 is false for NaN as well; u < p/q accepts with probability min(1, p/q).
    if (q_d > 0.0 && u_accept[j] < TargetProb(p, row_logits, d) / q_d) {
      out->push_back(d);
      continue;
    }
    out->push_back(DrawResidual(p, q, d, u_sample[j]));
    return j;
  }
  out->push_back(SampleRow(logits + k * vocab_size, vocab_size, row, u_sample[k]));
  return k;
}

}  // namespace

int32_t RejectionSample(float* logits, int64_t vocab_size, std::span<const int32_t> draft,
                        const float* draft_probs, const SamplingRow& row,
                        std::span<const double> u_accept, std::span<const double> u_sample,
                        std::vector<int32_t>* out) {
  VLLM_CHECK(vocab_size > 0) << "RejectionSample: empty vocabulary";
  VLLM_CHECK(out != nullptr) << "RejectionSample: no output vector";
  if (row.temperature < internal::kGreedyTemperature) {
    return GreedyVerify(logits, vocab_size, draft, out);
  }
  VLLM_CHECK(u_accept.size() == draft.size() && u_sample.size() == draft.size() + 1)
      << "RejectionSample: " << draft.size() << " drafts need as many acceptance draws and one"
      << " more sampling draw, got " << u_accept.size() << " and " << u_sample.size();
  return RandomVerify(logits, vocab_size, draft, draft_probs, row, u_accept, u_sample, out);
}

}  // namespace vllm::kernels::cpu
