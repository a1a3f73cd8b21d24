// ReshapeAndCache and PagedAttention against a double-precision reference that reads K/V
// from contiguous per-sequence buffers (so block tables and slot mapping are checked too),
// with and without a sliding window and a logit soft cap. With a window, the table entries
// of blocks wholly before a sequence's first visible position are pointed at a NaN block
// (as vLLM's sliding-window manager frees them), so a kernel that reads one shows NaN.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <ostream>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"

namespace vllm::kernels::cpu {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(ReshapeAndCacheTest, WritesSlotsAndSkipsPadding) {
  constexpr int32_t kKvHeads = 2, kHeadDim = 3, kBlockSize = 4, kNumBlocks = 3;
  constexpr int64_t kRow = kKvHeads * kHeadDim;
  const std::vector<int64_t> slots = {5, -1, 0, 11};
  std::vector<float> k(slots.size() * kRow), v(slots.size() * kRow);
  std::iota(k.begin(), k.end(), 1.0f);
  std::iota(v.begin(), v.end(), 1000.0f);
  std::vector<float> k_cache(kNumBlocks * kBlockSize * kRow, -7.0f);
  std::vector<float> v_cache = k_cache;
  ReshapeAndCache(k.data(), v.data(), k_cache.data(), v_cache.data(), slots.data(),
                  static_cast<int64_t>(slots.size()), kKvHeads, kHeadDim, kBlockSize);
  for (int64_t slot = 0; slot < kNumBlocks * kBlockSize; ++slot) {
    const auto it = std::find(slots.begin(), slots.end(), slot);
    for (int64_t i = 0; i < kRow; ++i) {
      // Slot s is block s / 4, offset o = s % 4. K is [block][head][dim][offset], V
      // [block][head][offset][dim], written out here rather than through KCacheIndex.
      const int64_t block = slot / kBlockSize, o = slot % kBlockSize;
      const int64_t head = i / kHeadDim, dim = i % kHeadDim;
      const int64_t k_at = ((block * kKvHeads + head) * kHeadDim + dim) * kBlockSize + o;
      const int64_t v_at = ((block * kKvHeads + head) * kBlockSize + o) * kHeadDim + dim;
      ASSERT_EQ(KCacheIndex(slot, static_cast<int32_t>(head), static_cast<int32_t>(dim), kKvHeads,
                            kHeadDim, kBlockSize),
                k_at);
      ASSERT_EQ(VCacheIndex(slot, static_cast<int32_t>(head), static_cast<int32_t>(dim), kKvHeads,
                            kHeadDim, kBlockSize),
                v_at);
      const float want_k = it == slots.end() ? -7.0f : k[(it - slots.begin()) * kRow + i];
      const float want_v = it == slots.end() ? -7.0f : v[(it - slots.begin()) * kRow + i];
      ASSERT_EQ(k_cache[k_at], want_k) << "slot " << slot << " elem " << i;
      ASSERT_EQ(v_cache[v_at], want_v) << "slot " << slot << " elem " << i;
    }
  }
}

struct SeqSpec {
  int32_t context;  // tokens cached before this step
  int32_t q_len;    // new tokens this step
};

struct AttentionCase {
  int32_t q_heads;
  int32_t kv_heads;
  int32_t head_dim;
  int32_t block_size;
  std::vector<SeqSpec> seqs;
  float q_magnitude = 1.0f;    // large values make scores large: checks the running max
  double tolerance = 2e-5;     // float scores of magnitude ~100 carry ~1e-5 absolute error
  int32_t sliding_window = 0;  // 0: none
  float soft_cap = 0.0f;       // 0: none
};

void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << c.q_heads << "q/" << c.kv_heads << "kv heads, head_dim " << c.head_dim << ", block "
      << c.block_size << ", (context, q_len):";
  for (const SeqSpec& s : c.seqs) *os << " (" << s.context << ", " << s.q_len << ")";
  if (c.sliding_window > 0) *os << ", window " << c.sliding_window;
  if (c.soft_cap > 0.0f) *os << ", soft cap " << c.soft_cap;
}

// Everything one PagedAttention call needs, built the way the model runner would.
class AttentionFixture {
 public:
  explicit AttentionFixture(const AttentionCase& c) : c_(c), rng_(1234) {
    row_ = static_cast<int64_t>(c.kv_heads) * c.head_dim;
    int32_t total_blocks = 2;  // spare blocks stay NaN and must never be read
    for (const SeqSpec& s : c.seqs) {
      const int32_t len = s.context + s.q_len;
      max_blocks_ = std::max(max_blocks_, (len + c.block_size - 1) / c.block_size + 1);
      total_blocks += (len + c.block_size - 1) / c.block_size;
    }
    // Blocks are handed out in a shuffled order so that a kernel ignoring the block table
    // (or reading the wrong row of it) cannot pass.
    std::vector<int32_t> pool(total_blocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng_);
    nan_block_ = pool.back();  // one of the two spares: never written
    // Unused table entries point far outside the cache: reading them crashes under ASan.
    block_tables_.assign(c.seqs.size() * max_blocks_, 1 << 28);
    size_t next = 0;
    for (size_t s = 0; s < c.seqs.size(); ++s) {
      const int32_t len = c.seqs[s].context + c.seqs[s].q_len;
      for (int32_t b = 0; b < (len + c.block_size - 1) / c.block_size; ++b) {
        block_tables_[s * max_blocks_ + b] = pool[next++];
      }
      keys_.push_back(Random(static_cast<int64_t>(len) * row_, 1.0f));
      values_.push_back(Random(static_cast<int64_t>(len) * row_, 1.0f));
    }
    k_cache_.assign(total_blocks * c.block_size * row_, kNaN);
    v_cache_ = k_cache_;
  }

  // Caches each sequence's context as an earlier step would have, with padding rows mixed
  // in, then this step's new tokens; returns the flattened queries.
  void FillCache() {
    WriteTokens(/*from_context=*/true);
    WriteTokens(/*from_context=*/false);
  }

  // With a window, frees what vLLM's sliding-window manager frees before this step: every
  // block wholly before the sequence's first visible position (its first query row's window
  // start); the freed table entries name the NaN block. Returns how many were freed.
  int32_t FreeBlocksBeforeWindows() {
    if (c_.sliding_window <= 0) return 0;
    int32_t freed = 0;
    for (size_t s = 0; s < c_.seqs.size(); ++s) {
      const int32_t first_visible = std::max(0, c_.seqs[s].context - c_.sliding_window + 1);
      for (int32_t b = 0; b < first_visible / c_.block_size; ++b, ++freed) {
        block_tables_[s * max_blocks_ + b] = nan_block_;
      }
    }
    return freed;
  }

  std::vector<float> Run() {
    std::vector<int32_t> query_start_loc = {0};
    std::vector<int32_t> seq_lens;
    for (const SeqSpec& s : c_.seqs) {
      query_start_loc.push_back(query_start_loc.back() + s.q_len);
      seq_lens.push_back(s.context + s.q_len);
    }
    queries_ = Random(static_cast<int64_t>(query_start_loc.back()) * c_.q_heads * c_.head_dim,
                      c_.q_magnitude);
    AttentionMetadata meta;
    meta.num_seqs = static_cast<int32_t>(c_.seqs.size());
    meta.query_start_loc = query_start_loc.data();
    meta.seq_lens = seq_lens.data();
    meta.block_tables = block_tables_.data();
    meta.max_blocks_per_seq = max_blocks_;
    meta.block_size = c_.block_size;
    std::vector<float> out(queries_.size(), kNaN);
    PagedAttention(queries_.data(), k_cache_.data(), v_cache_.data(), out.data(), meta, c_.q_heads,
                   c_.kv_heads, c_.head_dim, Scale(), c_.sliding_window, c_.soft_cap);
    return out;
  }

  // softmax(cap(q·kᵀ·scale))·v in double over contiguous K/V, causal, over the row's window
  // [max(0, pos - window + 1), pos] (the whole prefix without one); cap(s) = c·tanh(s / c).
  std::vector<double> Reference() const {
    const int32_t d = c_.head_dim, group = c_.q_heads / c_.kv_heads;
    std::vector<double> out(queries_.size());
    int64_t token = 0;
    for (size_t s = 0; s < c_.seqs.size(); ++s) {
      for (int32_t j = 0; j < c_.seqs[s].q_len; ++j, ++token) {
        const int32_t pos = c_.seqs[s].context + j;
        for (int32_t h = 0; h < c_.q_heads; ++h) {
          const float* q = queries_.data() + (token * c_.q_heads + h) * d;
          const int64_t kv_off = static_cast<int64_t>(h / group) * d;
          const int32_t first =
              c_.sliding_window > 0 ? std::max(0, pos - c_.sliding_window + 1) : 0;
          std::vector<double> scores(pos + 1 - first);
          for (int32_t t = first; t <= pos; ++t) {
            double dot = 0.0;
            for (int32_t i = 0; i < d; ++i) dot += double{q[i]} * keys_[s][t * row_ + kv_off + i];
            double x = dot * Scale();
            if (c_.soft_cap > 0.0f) x = c_.soft_cap * std::tanh(x / c_.soft_cap);
            scores[t - first] = x;
          }
          const double max = *std::max_element(scores.begin(), scores.end());
          double sum = 0.0;
          for (double& x : scores) sum += (x = std::exp(x - max));
          double* o = out.data() + (token * c_.q_heads + h) * d;
          for (int32_t t = first; t <= pos; ++t) {
            for (int32_t i = 0; i < d; ++i) {
              o[i] += scores[t - first] / sum * values_[s][t * row_ + kv_off + i];
            }
          }
        }
      }
    }
    return out;
  }

 private:
  float Scale() const { return 1.0f / std::sqrt(static_cast<float>(c_.head_dim)); }

  std::vector<float> Random(int64_t n, float magnitude) {
    std::uniform_real_distribution<float> dist(-magnitude, magnitude);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng_);
    return v;
  }

  int64_t Slot(size_t seq, int32_t pos) const {
    const int32_t block = block_tables_[seq * max_blocks_ + pos / c_.block_size];
    return static_cast<int64_t>(block) * c_.block_size + pos % c_.block_size;
  }

  void WriteTokens(bool from_context) {
    std::vector<float> k, v;
    std::vector<int64_t> slots;
    for (size_t s = 0; s < c_.seqs.size(); ++s) {
      const int32_t begin = from_context ? 0 : c_.seqs[s].context;
      const int32_t end = from_context ? c_.seqs[s].context : begin + c_.seqs[s].q_len;
      for (int32_t pos = begin; pos < end; ++pos) {
        k.insert(k.end(), keys_[s].begin() + pos * row_, keys_[s].begin() + (pos + 1) * row_);
        v.insert(v.end(), values_[s].begin() + pos * row_, values_[s].begin() + (pos + 1) * row_);
        slots.push_back(Slot(s, pos));
        if (pos % 3 == 0) {  // a padding row: must be skipped, never written anywhere
          k.insert(k.end(), row_, 1e30f);
          v.insert(v.end(), row_, 1e30f);
          slots.push_back(-1);
        }
      }
    }
    ReshapeAndCache(k.data(), v.data(), k_cache_.data(), v_cache_.data(), slots.data(),
                    static_cast<int64_t>(slots.size()), c_.kv_heads, c_.head_dim, c_.block_size);
  }

  AttentionCase c_;
  std::mt19937 rng_;
  int64_t row_ = 0;
  int32_t max_blocks_ = 0;
  int32_t nan_block_ = 0;  // a spare block: all NaN, never written
  std::vector<int32_t> block_tables_;
  std::vector<std::vector<float>> keys_, values_;  // per sequence, [len, kv_heads, head_dim]
  std::vector<float> k_cache_, v_cache_;
  std::vector<float> queries_;
};

class PagedAttentionTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(PagedAttentionTest, MatchesDoubleReference) {
  AttentionFixture f(GetParam());
  f.FillCache();
  f.FreeBlocksBeforeWindows();
  const std::vector<float> out = f.Run();
  const std::vector<double> ref = f.Reference();
  const int32_t d = GetParam().head_dim, heads = GetParam().q_heads;
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(out[i], ref[i], GetParam().tolerance)
        << "token " << i / (heads * d) << " head " << (i / d) % heads << " dim " << i % d;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Batches, PagedAttentionTest,
    ::testing::Values(
        // MHA; prefill from scratch, decode, chunked prefill over a block edge, one token.
        AttentionCase{4, 4, 64, 16, {{0, 5}, {37, 1}, {18, 7}, {0, 1}}},
        // GQA 2; seq_len exactly one block and one past it; more rows than one tile.
        AttentionCase{4, 2, 80, 16, {{15, 1}, {16, 1}, {3, 30}, {0, 17}}},
        // GQA 4; head_dim with a scalar tail; odd block size.
        AttentionCase{8, 2, 66, 5, {{0, 9}, {12, 1}, {4, 4}, {23, 1}, {0, 1}}},
        AttentionCase{8, 2, 128, 32, {{100, 1}, {0, 9}, {31, 2}}},
        // head_dim 32 (the bundled model's; 16-key chunks in the AVX-512 path): a prefill of
        // many tiles, decode; blocks of 32 (two chunks each) and of 5 (partial chunks).
        AttentionCase{8, 4, 32, 16, {{0, 130}, {150, 1}, {40, 3}, {17, 1}}},
        AttentionCase{4, 2, 32, 32, {{70, 1}, {0, 40}, {33, 5}}},
        AttentionCase{4, 2, 32, 5, {{23, 1}, {0, 9}, {12, 4}}},
        // Long contexts with scores ~±100: exp() without a running max would overflow.
        AttentionCase{2, 1, 64, 16, {{3000, 1}, {1000, 3}}, 300.0f, 2e-4}));

// Fields after the sequences: q magnitude, tolerance, sliding window, soft cap.
INSTANTIATE_TEST_SUITE_P(
    SlidingWindow, PagedAttentionTest,
    ::testing::Values(
        // Window 1: each row sees only its own token (softmax of one: out = its value).
        AttentionCase{4, 4, 64, 16, {{0, 5}, {37, 1}, {18, 7}, {0, 1}}, 1.0f, 2e-5, 1},
        // Smaller than a block: decode rows and prefill rows whose windows start mid-block.
        AttentionCase{4, 2, 80, 16, {{40, 1}, {0, 20}, {30, 9}, {15, 1}}, 1.0f, 2e-5, 5},
        // Equal to the block size: a window ends exactly on a block edge or straddles one.
        AttentionCase{4, 2, 64, 16, {{50, 1}, {16, 1}, {15, 1}, {47, 2}, {3, 30}}, 1.0f, 2e-5, 16},
        // Spanning several blocks, odd block size, GQA 4, a scalar head_dim tail, chunked
        // prefill rows with more than one tile.
        AttentionCase{8, 2, 66, 5, {{100, 1}, {0, 60}, {45, 20}, {23, 1}}, 1.0f, 2e-5, 37},
        // Larger than every context: the same as no window.
        AttentionCase{8, 2, 128, 32, {{100, 1}, {0, 9}, {31, 2}}, 1.0f, 2e-5, 4096},
        // A long context with a short window and large scores (running max inside it).
        AttentionCase{2, 1, 64, 16, {{3000, 1}, {1000, 3}}, 300.0f, 2e-4, 700}));

INSTANTIATE_TEST_SUITE_P(
    SoftCap, PagedAttentionTest,
    ::testing::Values(
        // Scores ~±100 against cap 50 (Gemma-2's value): the cap changes the result.
        AttentionCase{4, 4, 64, 16, {{0, 5}, {37, 1}, {18, 7}, {0, 1}}, 100.0f, 2e-5, 0, 50.0f},
        // A tight cap with ordinary scores; GQA, odd block size.
        AttentionCase{8, 2, 66, 5, {{0, 9}, {12, 1}, {4, 4}, {23, 1}}, 3.0f, 2e-5, 0, 1.0f},
        // Gemma-2 style: cap with a window, long context, chunked prefill.
        AttentionCase{4, 2, 64, 16, {{3000, 1}, {500, 40}, {10, 10}}, 300.0f, 2e-5, 96, 30.0f}));

// A decode row whose keys are at most 1 / (4 · threads) of all decode rows' keys takes one
// tile for all its KV heads, a longer one a tile per KV head. This batch has both kinds
// (its decode rows have 532 keys: on 2 threads sequences of up to 66 tokens get whole-head
// tiles, those of 101 and 201 per-head ones; on 1 thread up to 133), prefill rows mixed in,
// on AVX-512 head_dims and a portable one (66).
TEST(PagedAttentionManyDecodeRowsTest, WholeHeadTilesMatchTheReference) {
  const std::vector<SeqSpec> seqs = {{0, 1},  {1, 1},  {15, 1},  {16, 1}, {17, 1}, {31, 9}, {40, 1},
                                     {63, 1}, {64, 1}, {100, 1}, {0, 20}, {5, 1},  {200, 1}};
  const std::vector<AttentionCase> cases = {
      AttentionCase{8, 4, 32, 16, seqs},
      AttentionCase{32, 8, 128, 16, seqs},
      AttentionCase{8, 2, 66, 5, seqs},
      AttentionCase{4, 4, 64, 32, seqs},
      AttentionCase{4, 2, 64, 16, seqs, 300.0f, 2e-4, 37, 30.0f},  // window and soft cap
  };
  const int threads_before = KernelThreadPool().num_threads();
  for (const int threads : {1, 2}) {
    SetBlasNumThreads(threads);
    for (const AttentionCase& c : cases) {
      SCOPED_TRACE(testing::Message() << threads << " threads, " << testing::PrintToString(c));
      AttentionFixture f(c);
      f.FillCache();
      f.FreeBlocksBeforeWindows();
      const std::vector<float> out = f.Run();
      const std::vector<double> ref = f.Reference();
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_NEAR(out[i], ref[i], c.tolerance) << "element " << i;
      }
    }
  }
  SetBlasNumThreads(threads_before);
}

// The freed blocks of a windowed batch name a NaN block: the output is finite and matches
// the reference, and the case does free blocks (so the check has teeth).
TEST(PagedAttentionWindowTest, FreedBlocksBeforeTheWindowAreNeverRead) {
  const AttentionCase c{4, 2, 64, 16, {{200, 1}, {70, 25}, {33, 3}}, 1.0f, 2e-5, 20};
  AttentionFixture f(c);
  f.FillCache();
  // Blocks before 181 (11), before 51 (3), before 14 (0).
  ASSERT_EQ(f.FreeBlocksBeforeWindows(), 14);
  const std::vector<float> out = f.Run();
  const std::vector<double> ref = f.Reference();
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_FALSE(std::isnan(out[i])) << "element " << i;
    ASSERT_NEAR(out[i], ref[i], c.tolerance) << "element " << i;
  }
}

}  // namespace
}  // namespace vllm::kernels::cpu
