// Causal paged attention over a flattened varlen batch (prefill and decode in one kernel).
//
// Work is split into tiles: one sequence, one KV head, up to kRowsPerTile consecutive query
// rows and every query head of that KV head's group. A tile walks the sequence's cache one
// block at a time (flash-attention style online softmax), so each K/V block is read once per
// tile and stays in L1 while all of the tile's query vectors use it. Tiles write disjoint
// output rows, so they run in parallel on the rank's kernel thread pool (thread_pool.h),
// handed out one at a time: a long sequence's tiles and short ones balance dynamically.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/status_macros.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vec.h"
#include "kernels/cpu/vec_avx512.h"

namespace vllm::kernels::cpu {
namespace {

using internal::AccumulateWeightedRows;
using internal::Dot;
using internal::Dot4Rows;
using internal::Scale;

// Query rows per tile: enough that a prefill reuses each cache block across several rows,
// few enough that the tile's accumulators (rows × group × head_dim floats) stay in L2.
constexpr int32_t kRowsPerTile = 8;

struct Shape {
  int32_t num_q_heads;
  int32_t num_kv_heads;
  int32_t group;  // query heads per KV head
  int32_t head_dim;
  int32_t block_size;
  int64_t kv_slot_stride;   // floats between consecutive slots of one block
  int64_t kv_block_stride;  // floats between consecutive blocks
  int32_t sliding_window;   // 0: none; else a row at p sees keys [p - window + 1, p]
  float soft_cap;           // 0: none; else scores become soft_cap · tanh(score / soft_cap)
};

// Per-call scratch, sized once for the largest tile; reused by every tile.
struct TileState {
  std::vector<float> q;       // [vectors, head_dim], pre-multiplied by scale
  std::vector<float> acc;     // [vectors, head_dim], Σ p·v so far
  std::vector<float> max;     // [vectors], running max of scores
  std::vector<float> sum;     // [vectors], Σ p so far
  std::vector<float> scores;  // [block_size]
};

// One tile's place in the batch.
struct Tile {
  const float* q;         // first query row of the tile (row stride num_q_heads·head_dim)
  float* out;             // same layout as q
  const int32_t* blocks;  // the sequence's block table row
  int32_t kv_head;
  int32_t rows;
  int64_t first_pos;  // cache position of the tile's first query row
};

// Folds the first n keys of one cache block into query vector `vec`'s running softmax.
// `k`/`v` point at the block's first slot for this KV head.
void AccumulateBlock(const Shape& sh, TileState& st, int32_t vec, const float* k, const float* v,
                     int32_t n) {
  const int32_t d = sh.head_dim;
  const float* qv = st.q.data() + static_cast<int64_t>(vec) * d;
  float* scores = st.scores.data();
  float block_max = -std::numeric_limits<float>::infinity();
  int32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    Dot4Rows(qv, k + i * sh.kv_slot_stride, sh.kv_slot_stride, d, scores + i);
  }
  for (; i < n; ++i) scores[i] = Dot(qv, k + i * sh.kv_slot_stride, d);
  if (sh.soft_cap > 0.0f) {
    const float inv_cap = 1.0f / sh.soft_cap;
    for (i = 0; i < n; ++i) scores[i] = sh.soft_cap * std::tanh(scores[i] * inv_cap);
  }
  for (i = 0; i < n; ++i) block_max = std::max(block_max, scores[i]);
  float* acc = st.acc.data() + static_cast<int64_t>(vec) * d;
  const float old_max = st.max[vec];
  const float new_max = std::max(old_max, block_max);
  if (new_max > old_max) {
    // exp(-inf) = 0 on the first block, which also clears nothing that was not zero.
    const float correction = std::exp(old_max - new_max);
    st.sum[vec] *= correction;
    Scale(correction, acc, d);
    st.max[vec] = new_max;
  }
  float block_sum = 0.0f;
  for (int32_t i = 0; i < n; ++i) {
    scores[i] = std::exp(scores[i] - new_max);
    block_sum += scores[i];
  }
  st.sum[vec] += block_sum;
  AccumulateWeightedRows(scores, v, sh.kv_slot_stride, n, acc, d);
}

// Folds n keys of one block into a vector's running softmax; AccumulateBlock's contract.
using BlockFn = void (*)(const Shape& sh, TileState& st, int32_t vec, const float* k,
                         const float* v, int32_t n);

#if VLLM_HAVE_AVX512_HELPERS
// AVX-512 for head_dim = 16 · DC: 16 keys at a time. Each key's dot product is DC FMAs into
// one register, and a transpose-add tree (45 shuffles and adds for 16 keys) turns the 16
// registers into one register of 16 scores, so the max, exp and sum run 16 wide; p · v is a
// broadcast and DC FMAs per key into accumulators held in registers. Same online softmax
// as AccumulateBlock; the sums run in another order and exp is a polynomial (within 2 ulp of
// expf), so results differ from the portable path in the last bits.
VLLM_AVX512_BEGIN
namespace avx512 {
#define VLLM_ATTN_TARGET VLLM_AVX512_TARGET
using internal::avx512::Exp;
using internal::avx512::ReduceAdd;
using internal::avx512::ReduceMax;
using internal::avx512::ReduceTranspose16;
using internal::avx512::SumPair;

template <int DC>
VLLM_ATTN_TARGET void AccumulateBlock(const Shape& sh, TileState& st, int32_t vec, const float* k,
                                      const float* v, int32_t n) {
  constexpr int32_t d = 16 * DC;
  const float* qv = st.q.data() + static_cast<int64_t>(vec) * d;
  float* acc_mem = st.acc.data() + static_cast<int64_t>(vec) * d;
  __m512 q[DC], acc[DC];
  for (int c = 0; c < DC; ++c) {
    q[c] = _mm512_loadu_ps(qv + 16 * c);
    acc[c] = _mm512_loadu_ps(acc_mem + 16 * c);
  }
  float max = st.max[vec], sum = st.sum[vec];
  alignas(64) float p[16];
  for (int32_t i0 = 0; i0 < n; i0 += 16) {
    const int32_t m = std::min<int32_t>(16, n - i0);
    // All 16 lanes, a short chunk repeating its last key (masked off below): the loop has a
    // constant trip count, and pairs of keys are folded at once, so all stays in registers.
    const auto key_dot = [&](int32_t i) VLLM_ATTN_TARGET {
      const float* key = k + (i0 + std::min(i, m - 1)) * sh.kv_slot_stride;
      __m512 t = _mm512_mul_ps(q[0], _mm512_loadu_ps(key));
#pragma GCC unroll 16
      for (int c = 1; c < DC; ++c) t = _mm512_fmadd_ps(q[c], _mm512_loadu_ps(key + 16 * c), t);
      return t;
    };
    __m512 s2[8];
#pragma GCC unroll 8
    for (int32_t pair = 0; pair < 8; ++pair) {
      s2[pair] = SumPair(key_dot(2 * pair), key_dot(2 * pair + 1));
    }
    const __mmask16 valid = static_cast<__mmask16>((1u << m) - 1);
    __m512 scores = ReduceTranspose16(s2);
    if (sh.soft_cap > 0.0f) {
      _mm512_store_ps(p, scores);
      const float inv_cap = 1.0f / sh.soft_cap;
      for (int32_t i = 0; i < m; ++i) p[i] = sh.soft_cap * std::tanh(p[i] * inv_cap);
      scores = _mm512_load_ps(p);
    }
    const float chunk_max = ReduceMax(_mm512_mask_blend_ps(
        valid, _mm512_set1_ps(-std::numeric_limits<float>::infinity()), scores));
    const float new_max = std::max(max, chunk_max);
    if (new_max > max) {
      // exp(-inf) = 0 on the first chunk, which also clears nothing that was not zero.
      const float correction = std::exp(max - new_max);
      sum *= correction;
      const __m512 cv = _mm512_set1_ps(correction);
      for (int c = 0; c < DC; ++c) acc[c] = _mm512_mul_ps(acc[c], cv);
      max = new_max;
    }
    const __m512 e =
        _mm512_maskz_mov_ps(valid, Exp(_mm512_sub_ps(scores, _mm512_set1_ps(new_max))));
    sum += ReduceAdd(e);
    _mm512_store_ps(p, e);
    // kSets independent accumulator sets (keys round-robin), so the FMAs do not wait on each
    // other's latency; folded into acc after the chunk.
    constexpr int kSets = DC >= 8 ? 1 : (DC >= 4 ? 2 : 4);
    __m512 part[kSets][DC];
    for (int c = 0; c < DC; ++c) {
      part[0][c] = acc[c];
      for (int set = 1; set < kSets; ++set) part[set][c] = _mm512_setzero_ps();
    }
    int32_t i = 0;
    for (; i + kSets <= m; i += kSets) {
#pragma GCC unroll 4
      for (int set = 0; set < kSets; ++set) {
        const __m512 w = _mm512_set1_ps(p[i + set]);
        const float* value = v + (i0 + i + set) * sh.kv_slot_stride;
#pragma GCC unroll 16
        for (int c = 0; c < DC; ++c) {
          part[set][c] = _mm512_fmadd_ps(w, _mm512_loadu_ps(value + 16 * c), part[set][c]);
        }
      }
    }
    for (; i < m; ++i) {
      const __m512 w = _mm512_set1_ps(p[i]);
      const float* value = v + (i0 + i) * sh.kv_slot_stride;
      for (int c = 0; c < DC; ++c) {
        part[0][c] = _mm512_fmadd_ps(w, _mm512_loadu_ps(value + 16 * c), part[0][c]);
      }
    }
    for (int c = 0; c < DC; ++c) {
      acc[c] = part[0][c];
      for (int set = 1; set < kSets; ++set) acc[c] = _mm512_add_ps(acc[c], part[set][c]);
    }
  }
  for (int c = 0; c < DC; ++c) _mm512_storeu_ps(acc_mem + 16 * c, acc[c]);
  st.max[vec] = max;
  st.sum[vec] = sum;
}

#undef VLLM_ATTN_TARGET
}  // namespace avx512
VLLM_AVX512_END
#endif  // VLLM_HAVE_AVX512_HELPERS

// The block kernel for this head_dim: AVX-512 for 16, 32, 48, 64, 80, 96, 128 and 256 (when
// UseAvx512Loops()), else portable.
BlockFn PickBlockFn(int32_t head_dim) {
#if VLLM_HAVE_AVX512_HELPERS
  if (internal::UseAvx512Loops() && head_dim % 16 == 0) {
    switch (head_dim / 16) {
      case 1:
        return &avx512::AccumulateBlock<1>;
      case 2:
        return &avx512::AccumulateBlock<2>;
      case 3:
        return &avx512::AccumulateBlock<3>;
      case 4:
        return &avx512::AccumulateBlock<4>;
      case 5:
        return &avx512::AccumulateBlock<5>;
      case 6:
        return &avx512::AccumulateBlock<6>;
      case 8:
        return &avx512::AccumulateBlock<8>;
      case 16:
        return &avx512::AccumulateBlock<16>;
      default:
        break;
    }
  }
#endif
  return &AccumulateBlock;
}

void RunTile(const Shape& sh, const Tile& tile, float scale, const float* k_cache,
             const float* v_cache, BlockFn block, TileState& st) {
  const int32_t d = sh.head_dim;
  const int64_t row_stride = static_cast<int64_t>(sh.num_q_heads) * d;
  const int32_t vectors = tile.rows * sh.group;
  // Vector r·group + g is query row r, head kv_head·group + g.
  for (int32_t r = 0; r < tile.rows; ++r) {
    for (int32_t g = 0; g < sh.group; ++g) {
      const int64_t vec = static_cast<int64_t>(r) * sh.group + g;
      const float* src = tile.q + r * row_stride + (tile.kv_head * sh.group + g) * d;
      for (int32_t i = 0; i < d; ++i) st.q[vec * d + i] = src[i] * scale;
    }
  }
  std::fill_n(st.acc.begin(), static_cast<int64_t>(vectors) * d, 0.0f);
  std::fill_n(st.max.begin(), vectors, -std::numeric_limits<float>::infinity());
  std::fill_n(st.sum.begin(), vectors, 0.0f);

  const int64_t num_keys = tile.first_pos + tile.rows;  // the last row sees [0, last_pos]
  // With a window, the first row sees nothing before first_pos - window + 1: blocks wholly
  // before that are never read (the KV manager may have freed them).
  const int64_t first_key =
      sh.sliding_window > 0 ? std::max<int64_t>(0, tile.first_pos - sh.sliding_window + 1) : 0;
  const int64_t head_offset = static_cast<int64_t>(tile.kv_head) * d;
  for (int64_t b = first_key / sh.block_size, key_begin = b * sh.block_size; key_begin < num_keys;
       key_begin += sh.block_size, ++b) {
    const int64_t block_offset = tile.blocks[b] * sh.kv_block_stride + head_offset;
    const float* k = k_cache + block_offset;
    const float* v = v_cache + block_offset;
    for (int32_t r = 0; r < tile.rows; ++r) {
      // Causal: row r (position first_pos + r) sees keys up to its own position, and with a
      // window only the last sliding_window of them.
      const int64_t pos = tile.first_pos + r;
      const int64_t visible = pos + 1 - key_begin;
      if (visible <= 0) continue;
      const int64_t lo = sh.sliding_window > 0 ? pos - sh.sliding_window + 1 - key_begin : 0;
      if (lo >= sh.block_size) continue;
      const auto start = static_cast<int32_t>(std::max<int64_t>(lo, 0));
      const auto n = static_cast<int32_t>(std::min<int64_t>(visible, sh.block_size)) - start;
      const int64_t skip = start * sh.kv_slot_stride;
      for (int32_t g = 0; g < sh.group; ++g) {
        block(sh, st, r * sh.group + g, k + skip, v + skip, n);
      }
    }
  }

  for (int32_t r = 0; r < tile.rows; ++r) {
    for (int32_t g = 0; g < sh.group; ++g) {
      const int64_t vec = static_cast<int64_t>(r) * sh.group + g;
      float* dst = tile.out + r * row_stride + (tile.kv_head * sh.group + g) * d;
      const float inv_sum = 1.0f / st.sum[vec];
      for (int32_t i = 0; i < d; ++i) dst[i] = st.acc[vec * d + i] * inv_sum;
    }
  }
}

}  // namespace

void PagedAttention(const float* q, const float* k_cache, const float* v_cache, float* out,
                    const AttentionMetadata& meta, int32_t num_q_heads, int32_t num_kv_heads,
                    int32_t head_dim, float scale, int32_t sliding_window, float logits_soft_cap) {
  VLLM_CHECK(sliding_window >= 0 && logits_soft_cap >= 0.0f)
      << "PagedAttention: sliding_window " << sliding_window << ", soft cap " << logits_soft_cap;
  VLLM_CHECK(num_kv_heads > 0 && num_q_heads > 0 && num_q_heads % num_kv_heads == 0)
      << "PagedAttention: " << num_q_heads << " query heads over " << num_kv_heads << " KV heads";
  VLLM_CHECK(head_dim > 0 && meta.block_size > 0 && meta.num_seqs >= 0)
      << "PagedAttention: bad shape";
  VLLM_CHECK(meta.num_seqs == 0 || meta.query_start_loc[0] == 0)
      << "PagedAttention: query_start_loc[0] must be 0";
  Shape sh;
  sh.num_q_heads = num_q_heads;
  sh.num_kv_heads = num_kv_heads;
  sh.group = num_q_heads / num_kv_heads;
  sh.head_dim = head_dim;
  sh.block_size = meta.block_size;
  sh.kv_slot_stride = static_cast<int64_t>(num_kv_heads) * head_dim;
  sh.kv_block_stride = sh.kv_slot_stride * meta.block_size;
  sh.sliding_window = sliding_window;
  sh.soft_cap = logits_soft_cap;

  const BlockFn block = PickBlockFn(head_dim);
  const int64_t max_vectors = static_cast<int64_t>(kRowsPerTile) * sh.group;
  // The tiles of the whole batch, then run on the pool; reused across calls on this thread.
  // (A reference, not the thread_local itself, is what the pool's threads must read.)
  thread_local std::vector<Tile> caller_tiles;
  std::vector<Tile>& tiles = caller_tiles;
  tiles.clear();
  const int64_t row_stride = static_cast<int64_t>(num_q_heads) * head_dim;
  for (int32_t s = 0; s < meta.num_seqs; ++s) {
    const int32_t q_begin = meta.query_start_loc[s];
    const int32_t q_len = meta.query_start_loc[s + 1] - q_begin;
    const int32_t seq_len = meta.seq_lens[s];
    VLLM_CHECK(q_len >= 0 && q_len <= seq_len) << "PagedAttention: sequence " << s << " has "
                                               << q_len << " query rows but seq_len " << seq_len;
    VLLM_CHECK((seq_len + meta.block_size - 1) / meta.block_size <= meta.max_blocks_per_seq)
        << "PagedAttention: sequence " << s << " needs more blocks than max_blocks_per_seq";
    const int32_t* blocks = meta.block_tables + static_cast<int64_t>(s) * meta.max_blocks_per_seq;
    for (int32_t row = 0; row < q_len; row += kRowsPerTile) {
      for (int32_t h = 0; h < num_kv_heads; ++h) {
        Tile tile;
        tile.q = q + (q_begin + row) * row_stride;
        tile.out = out + (q_begin + row) * row_stride;
        tile.blocks = blocks;
        tile.kv_head = h;
        tile.rows = std::min(kRowsPerTile, q_len - row);
        tile.first_pos = seq_len - q_len + row;
        tiles.push_back(tile);
      }
    }
  }
  // Each thread's scratch, grown to the largest tile it has seen.
  auto run = [&](int64_t i) {
    thread_local TileState st;
    if (st.q.size() < static_cast<size_t>(max_vectors * head_dim)) {
      st.q.resize(max_vectors * head_dim);
      st.acc.resize(max_vectors * head_dim);
    }
    if (st.max.size() < static_cast<size_t>(max_vectors)) {
      st.max.resize(max_vectors);
      st.sum.resize(max_vectors);
    }
    if (st.scores.size() < static_cast<size_t>(meta.block_size)) st.scores.resize(meta.block_size);
    RunTile(sh, tiles[static_cast<size_t>(i)], scale, k_cache, v_cache, block, st);
  };
  const auto num_tiles = static_cast<int64_t>(tiles.size());
  if (num_tiles > 1) {
    KernelThreadPool().ParallelFor(num_tiles, run);
  } else if (num_tiles == 1) {
    run(0);
  }
}

}  // namespace vllm::kernels::cpu
