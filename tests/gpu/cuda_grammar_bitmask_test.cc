// Structured outputs on CudaModelBackend (worker/cuda/): grammar bitmask rows applied on the
// device between the forward (or the graph replay) and the sampler. The llama_gqa fixture is
// driven step by step, eagerly and with CUDA graphs, with five rows per step: constrained
// greedy and constrained random rows sample only allowed tokens on the device; an
// unconstrained row and a row whose mask allows nothing sample transformers' greedy tokens;
// a constrained on_host row comes back as its unmasked logits (the runner masks those).
// Every test skips itself when no CUDA device is visible.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/sampling.h"
#include "kernels/cuda/cuda_probe.h"
#include "tests/support/fixtures.h"
#include "worker/cuda/cuda_model_backend.h"
#include "worker/weights.h"

namespace vllm::worker {
namespace {

using testing::LoadReference;
using testing::Reference;

constexpr int32_t kBlockSize = 16;
constexpr int32_t kBlocksPerSeq = 8;  // max_model_len 128

// A bitmask row for `vocab` tokens allowing `tokens`.
std::vector<int32_t> MaskAllowing(int64_t vocab, const std::set<int32_t>& tokens) {
  std::vector<int32_t> m((vocab + 31) / 32, 0);
  for (int32_t t : tokens) m[t / 32] |= static_cast<int32_t>(1u << (t % 32));
  return m;
}

// One step's flattened batch for sequences `seqs` of which `computed` tokens are cached, each
// sequence r in blocks [r · kBlocksPerSeq, +kBlocksPerSeq), sampled at its last token.
struct Batch {
  Batch(const std::vector<std::vector<int32_t>>& seqs, const std::vector<int32_t>& computed) {
    qsl = {0};
    int32_t width = 0;
    for (const auto& s : seqs) {
      width = std::max(width, (static_cast<int32_t>(s.size()) + kBlockSize - 1) / kBlockSize);
    }
    for (size_t r = 0; r < seqs.size(); ++r) {
      const int32_t len = static_cast<int32_t>(seqs[r].size());
      for (int32_t p = computed[r]; p < len; ++p) {
        ids.push_back(seqs[r][p]);
        positions.push_back(p);
        slots.push_back(int64_t{static_cast<int32_t>(r) * kBlocksPerSeq + p / kBlockSize} *
                            kBlockSize +
                        p % kBlockSize);
      }
      qsl.push_back(static_cast<int32_t>(ids.size()));
      seq_lens.push_back(len);
      logits_indices.push_back(static_cast<int32_t>(ids.size()) - 1);
      for (int32_t k = 0; k < width; ++k)
        tables.push_back(static_cast<int32_t>(r) * kBlocksPerSeq + k);
      in.max_query_len = std::max(in.max_query_len, len - computed[r]);
      in.max_seq_len = std::max(in.max_seq_len, len);
    }
    in.token_ids = ids;
    in.positions = positions;
    in.slot_mapping = slots;
    in.query_start_loc = qsl;
    in.seq_lens = seq_lens;
    in.block_tables = tables;
    in.max_blocks_per_seq = width;
    in.logits_indices = logits_indices;
  }
  std::vector<int32_t> ids, positions, qsl, seq_lens, tables, logits_indices;
  std::vector<int64_t> slots;
  StepInputs in;
};

TEST(CudaGrammarBitmaskTest, ConstrainedRowsSampleOnlyAllowedTokensOnTheDevice) {
  if (kernels::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const std::filesystem::path dir = testing::FixtureModels() / "llama_gqa";
  const Reference ref = LoadReference(dir);
  auto config = LoadHfConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  const int64_t vocab = config->vocab_size;
  // Rows: 0 greedy and 1 random under mask A (tokens transformers never picks for prompt 2),
  // 2 unconstrained, 3 on_host under mask A, 4 under a mask allowing nothing.
  const size_t picks[5] = {2, 4, 6, 2, 4};
  std::set<int32_t> allowed;
  for (int32_t t = 1; t < vocab && allowed.size() < 4; t += 37) {
    if (std::find(ref.greedy[2].begin(), ref.greedy[2].end(), t) == ref.greedy[2].end()) {
      allowed.insert(t);
    }
  }
  ASSERT_EQ(allowed.size(), 4u);
  const std::vector<int32_t> mask = MaskAllowing(vocab, allowed);
  const std::vector<int32_t> nothing = MaskAllowing(vocab, {});
  for (bool eager : {true, false}) {
    SCOPED_TRACE(eager ? "eager" : "graphs");
    auto weights = OpenSafetensors(dir);
    ASSERT_TRUE(weights.ok()) << weights.status();
    CudaBackendOptions o;
    o.dtype = ModelDType::kFloat32;
    o.enforce_eager = eager;
    o.max_model_len = kBlockSize * kBlocksPerSeq;
    o.max_num_batched_tokens = 256;
    o.max_num_seqs = 8;
    auto backend = CudaModelBackend::Create(*config, weights->get(), nullptr, o);
    ASSERT_TRUE(backend.ok()) << backend.status();
    CudaModelBackend& b = **backend;
    ASSERT_TRUE(b.InitializeKVCache(5 * kBlocksPerSeq, kBlockSize).ok());
    std::vector<std::vector<int32_t>> seqs;
    for (size_t p : picks) seqs.push_back(ref.prompts[p]);
    std::vector<int32_t> computed(5, 0);
    for (int32_t step = 0; step < ref.max_new_tokens; ++step) {
      SCOPED_TRACE(absl::StrCat("step ", step));
      Batch batch(seqs, computed);
      std::vector<RowSampling> rows(5);
      for (RowSampling& r : rows) r.temperature = 0.0f;
      rows[0].bitmask = mask.data();
      rows[1].temperature = 1.0f;
      rows[1].u = kernels::cpu::CounterUniform(99, step);
      rows[1].bitmask = mask.data();
      rows[3].on_host = true;
      rows[3].bitmask = mask.data();
      rows[4].bitmask = nothing.data();
      batch.in.sampling = rows;
      StepResult result;
      const absl::Status status = b.Execute(batch.in, &result);
      ASSERT_TRUE(status.ok()) << status;
      ASSERT_EQ(result.tokens.size(), 5u);
      ASSERT_EQ(result.host_logits.size(), static_cast<size_t>(vocab));
      EXPECT_TRUE(allowed.count(result.tokens[0])) << "greedy row sampled " << result.tokens[0];
      EXPECT_TRUE(allowed.count(result.tokens[1])) << "random row sampled " << result.tokens[1];
      EXPECT_EQ(result.tokens[2], ref.greedy[picks[2]][step]);
      EXPECT_EQ(result.tokens[4], ref.greedy[picks[4]][step]) << "an empty mask was applied";
      // The on_host row is left to the runner: its logits come back unmasked.
      EXPECT_EQ(std::count_if(result.host_logits.begin(), result.host_logits.end(),
                              [](float x) { return std::isinf(x); }),
                0);
      EXPECT_EQ(std::max_element(result.host_logits.begin(), result.host_logits.end()) -
                    result.host_logits.begin(),
                ref.greedy[picks[3]][step]);
      for (size_t r = 0; r < 5; ++r) {
        computed[r] = static_cast<int32_t>(seqs[r].size());
        // Constrained rows continue with their own tokens, the others with the reference's.
        seqs[r].push_back(r < 2 ? result.tokens[r] : ref.greedy[picks[r]][step]);
      }
    }
    // Decode steps of 5 rows replay the graph of 8: the mask runs outside it.
    EXPECT_EQ(b.num_graph_steps(), eager ? 0 : ref.max_new_tokens - 1);
  }
}

}  // namespace
}  // namespace vllm::worker
