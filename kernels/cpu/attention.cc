// Causal paged attention over a flattened varlen batch (prefill and decode in one kernel).
//
// Work is split into tiles: one sequence, one KV head, up to kRowsPerTile consecutive query
// rows and every query head of that KV head's group. A tile walks the sequence's cache one
// block at a time (flash-attention style online softmax), so each K/V block is read once per
// tile and stays in L1 while all of the tile's query vectors use it. Tiles write disjoint
// output rows, so they run in parallel on the rank's kernel thread pool (thread_pool.h),
// handed out one at a time: a long sequence's tiles and short ones balance dynamically.
//
// The cache layout (ops.h, KCacheIndex / VCacheIndex) keeps one KV head's part of a block
// contiguous, with K transposed: [head][dim][slot]. q·k for 16 keys is then head_dim
// broadcast FMAs into one register of 16 scores, shared by every query head of the group.
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
using internal::Scale;
using internal::ScaleInto;

// Query rows per tile: enough that a prefill reuses each cache block across several rows,
// few enough that the tile's accumulators (rows × group × head_dim floats) stay in L2.
constexpr int32_t kRowsPerTile = 8;

struct Shape {
  int32_t num_q_heads;
  int32_t num_kv_heads;
  int32_t group;  // query heads per KV head
  int32_t head_dim;
  int32_t block_size;       // also the floats between a key's consecutive dims (K is [dim][slot])
  int64_t kv_head_stride;   // floats between one block's consecutive KV heads, K and V alike
  int64_t kv_block_stride;  // floats between consecutive blocks, K and V alike
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
  int32_t kv_head;        // the first KV head of the tile
  int32_t kv_heads;       // KV heads [kv_head, kv_head + kv_heads)
  int32_t rows;
  int64_t first_pos;  // cache position of the tile's first query row
};

// Folds n keys of one cache block into the running softmax of query vectors [vec0, vec0 +
// nvec) (one query row's heads of a group, which see the same keys). `k` points at the
// first key's dim 0 in the block's [dim][slot] K (dim i of key j at k[i · block_size + j]);
// `v` at its value row ([slot][dim], rows head_dim apart). next_k / next_v (the next block,
// for the AVX-512 path's prefetch) are not used here.
void AccumulateBlock(const Shape& sh, TileState& st, int32_t vec0, int32_t nvec, const float* k,
                     const float* v, int32_t n, const float* /*next_k*/, const float* /*next_v*/) {
  const int32_t d = sh.head_dim;
  float* scores = st.scores.data();
  for (int32_t vec = vec0; vec < vec0 + nvec; ++vec) {
    const float* qv = st.q.data() + static_cast<int64_t>(vec) * d;
    std::fill_n(scores, n, 0.0f);
    for (int32_t i = 0; i < d; ++i) {
      const float qi = qv[i];
      const float* key_dim = k + static_cast<int64_t>(i) * sh.block_size;
      for (int32_t j = 0; j < n; ++j) scores[j] += qi * key_dim[j];
    }
    if (sh.soft_cap > 0.0f) {
      const float inv_cap = 1.0f / sh.soft_cap;
      for (int32_t j = 0; j < n; ++j) scores[j] = sh.soft_cap * std::tanh(scores[j] * inv_cap);
    }
    float block_max = -std::numeric_limits<float>::infinity();
    for (int32_t j = 0; j < n; ++j) block_max = std::max(block_max, scores[j]);
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
    for (int32_t j = 0; j < n; ++j) {
      scores[j] = std::exp(scores[j] - new_max);
      block_sum += scores[j];
    }
    st.sum[vec] += block_sum;
    AccumulateWeightedRows(scores, v, d, n, acc, d);
  }
}

// Folds n keys of one block into vectors [vec0, vec0 + nvec); AccumulateBlock's contract.
using BlockFn = void (*)(const Shape& sh, TileState& st, int32_t vec0, int32_t nvec, const float* k,
                         const float* v, int32_t n, const float* next_k, const float* next_v);

#if VLLM_HAVE_AVX512_HELPERS
// AVX-512 for head_dim = 16 · DC: 16 keys at a time. The scores of up to 4 query vectors
// come from one pass over the chunk's K rows ([dim][16 slots]): per dim one load and one
// broadcast FMA per vector, in independent chains, so the 16 scores land in one register
// with no horizontal sums; slots past the chunk are masked off in the load. Then per vector
// the max, exp and sum run 16 wide, and p · v is a broadcast and DC FMAs per key into
// accumulators held in registers. Same online softmax as AccumulateBlock; the sums run in
// another order and exp is a polynomial (within 2 ulp of expf), so results differ from the
// portable path in the last bits. Every K and V line the chunk loads has its twin in the
// tile's next block prefetched into L2 (`prefetcht1`; into L1 it gained nothing), issued by
// the first group of vectors only.
VLLM_AVX512_BEGIN
namespace avx512 {
#define VLLM_ATTN_TARGET VLLM_AVX512_TARGET
using internal::avx512::Exp;
using internal::avx512::ReduceAdd;
using internal::avx512::ReduceMax;

// Scores of NV (1-4) query vectors (q[j]: head_dim floats) against the `valid` keys of one
// chunk (K rows `k_stride` floats apart): s[j] lane i = q[j] · key i, 0 in masked lanes.
// `pk`: the same offset in the block to prefetch (k itself when there is none).
// Four FMA chains in all: for NV < 3 each vector's dims are split over 4 / NV chains. Named
// registers, not arrays, so nothing spills to the stack.
template <int DC, int NV>
VLLM_ATTN_TARGET inline void ChunkScores(const float* const* q, const float* k, int32_t k_stride,
                                         __mmask16 valid, const float* pk, __m512* s) {
  static_assert(NV >= 1 && NV <= 4);
  constexpr int32_t kD = 16 * DC;
  const auto key = [&](int32_t i) VLLM_ATTN_TARGET {
    _mm_prefetch(reinterpret_cast<const char*>(pk + static_cast<int64_t>(i) * k_stride),
                 _MM_HINT_T1);
    return _mm512_maskz_loadu_ps(valid, k + static_cast<int64_t>(i) * k_stride);
  };
  const auto fma = [&](const float* qv, int32_t i, __m512 kv, __m512 acc)
                       VLLM_ATTN_TARGET { return _mm512_fmadd_ps(_mm512_set1_ps(qv[i]), kv, acc); };
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  if constexpr (NV == 1) {
#pragma GCC unroll 2
    for (int32_t i = 0; i < kD; i += 4) {
      s0 = fma(q[0], i, key(i), s0);
      s1 = fma(q[0], i + 1, key(i + 1), s1);
      s2 = fma(q[0], i + 2, key(i + 2), s2);
      s3 = fma(q[0], i + 3, key(i + 3), s3);
    }
    s[0] = _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3));
  } else if constexpr (NV == 2) {
#pragma GCC unroll 4
    for (int32_t i = 0; i < kD; i += 2) {
      const __m512 k0 = key(i), k1 = key(i + 1);
      s0 = fma(q[0], i, k0, s0);
      s1 = fma(q[0], i + 1, k1, s1);
      s2 = fma(q[1], i, k0, s2);
      s3 = fma(q[1], i + 1, k1, s3);
    }
    s[0] = _mm512_add_ps(s0, s1);
    s[1] = _mm512_add_ps(s2, s3);
  } else {
#pragma GCC unroll 8
    for (int32_t i = 0; i < kD; ++i) {
      const __m512 k0 = key(i);
      s0 = fma(q[0], i, k0, s0);
      s1 = fma(q[1], i, k0, s1);
      s2 = fma(q[2], i, k0, s2);
      if constexpr (NV == 4) s3 = fma(q[3], i, k0, s3);
    }
    s[0] = s0;
    s[1] = s1;
    s[2] = s2;
    if constexpr (NV == 4) s[3] = s3;
  }
}

// One vector's online-softmax step over a chunk: `scores` (16 lanes, `valid` of them keys
// i0.., values at v rows i0..) folded into acc_mem / *max / *sum. `pv`: the same rows of the
// block to prefetch (v itself when there is none).
template <int DC>
VLLM_ATTN_TARGET inline void ChunkSoftmaxPv(const Shape& sh, __m512 scores, __mmask16 valid,
                                            int32_t m, const float* v, const float* pv,
                                            float* acc_mem, float* max, float* sum) {
  constexpr int32_t kD = 16 * DC;
  alignas(64) float p[16];
  if (sh.soft_cap > 0.0f) {
    _mm512_store_ps(p, scores);
    const float inv_cap = 1.0f / sh.soft_cap;
    for (int32_t i = 0; i < m; ++i) p[i] = sh.soft_cap * std::tanh(p[i] * inv_cap);
    scores = _mm512_load_ps(p);
  }
  __m512 acc[DC];
  for (int c = 0; c < DC; ++c) acc[c] = _mm512_loadu_ps(acc_mem + 16 * c);
  const float chunk_max = ReduceMax(
      _mm512_mask_blend_ps(valid, _mm512_set1_ps(-std::numeric_limits<float>::infinity()), scores));
  const float new_max = std::max(*max, chunk_max);
  if (new_max > *max) {
    // exp(-inf) = 0 on the first chunk, which also clears nothing that was not zero.
    const float correction = std::exp(*max - new_max);
    *sum *= correction;
    const __m512 cv = _mm512_set1_ps(correction);
    for (int c = 0; c < DC; ++c) acc[c] = _mm512_mul_ps(acc[c], cv);
    *max = new_max;
  }
  const __m512 e = _mm512_maskz_mov_ps(valid, Exp(_mm512_sub_ps(scores, _mm512_set1_ps(new_max))));
  *sum += ReduceAdd(e);
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
      const float* value = v + static_cast<int64_t>(i + set) * kD;
      const float* pf = pv + static_cast<int64_t>(i + set) * kD;
#pragma GCC unroll 16
      for (int c = 0; c < DC; ++c) {
        _mm_prefetch(reinterpret_cast<const char*>(pf + 16 * c), _MM_HINT_T1);
        part[set][c] = _mm512_fmadd_ps(w, _mm512_loadu_ps(value + 16 * c), part[set][c]);
      }
    }
  }
  for (; i < m; ++i) {
    const __m512 w = _mm512_set1_ps(p[i]);
    const float* value = v + static_cast<int64_t>(i) * kD;
    for (int c = 0; c < DC; ++c) {
      part[0][c] = _mm512_fmadd_ps(w, _mm512_loadu_ps(value + 16 * c), part[0][c]);
    }
  }
  for (int c = 0; c < DC; ++c) {
    __m512 a = part[0][c];
    for (int set = 1; set < kSets; ++set) a = _mm512_add_ps(a, part[set][c]);
    _mm512_storeu_ps(acc_mem + 16 * c, a);
  }
}

template <int DC, int NV>
VLLM_ATTN_TARGET void ChunkVectors(const Shape& sh, TileState& st, int32_t vec0, const float* k,
                                   const float* v, int32_t m, const float* pk, const float* pv) {
  constexpr int32_t kD = 16 * DC;
  const float* q[NV];
  for (int j = 0; j < NV; ++j) q[j] = st.q.data() + static_cast<int64_t>(vec0 + j) * kD;
  const auto valid = static_cast<__mmask16>((1u << m) - 1);
  __m512 s[NV];
  ChunkScores<DC, NV>(q, k, sh.block_size, valid, pk, s);
  for (int j = 0; j < NV; ++j) {
    const int64_t vec = vec0 + j;
    ChunkSoftmaxPv<DC>(sh, s[j], valid, m, v, j == 0 ? pv : v, st.acc.data() + vec * kD,
                       &st.max[vec], &st.sum[vec]);
  }
}

template <int DC>
VLLM_ATTN_TARGET void AccumulateBlock(const Shape& sh, TileState& st, int32_t vec0, int32_t nvec,
                                      const float* k, const float* v, int32_t n,
                                      const float* next_k, const float* next_v) {
  constexpr int32_t kD = 16 * DC;
  for (int32_t i0 = 0; i0 < n; i0 += 16) {
    const int32_t m = std::min<int32_t>(16, n - i0);
    const float* kc = k + i0;
    const float* vc = v + static_cast<int64_t>(i0) * kD;
    // The first group of vectors prefetches the next block; the others pass this chunk
    // (already in L1) so they prefetch nothing new.
    const float* pk = next_k + i0;
    const float* pv = next_v + static_cast<int64_t>(i0) * kD;
    int32_t j = 0;
    for (; j + 4 <= nvec; j += 4) {
      ChunkVectors<DC, 4>(sh, st, vec0 + j, kc, vc, m, pk, pv);
      pk = kc;
      pv = vc;
    }
    switch (nvec - j) {
      case 3:
        ChunkVectors<DC, 3>(sh, st, vec0 + j, kc, vc, m, pk, pv);
        break;
      case 2:
        ChunkVectors<DC, 2>(sh, st, vec0 + j, kc, vc, m, pk, pv);
        break;
      case 1:
        ChunkVectors<DC, 1>(sh, st, vec0 + j, kc, vc, m, pk, pv);
        break;
      default:
        break;
    }
  }
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
  const int32_t per_head = tile.rows * sh.group;
  const int32_t vectors = tile.kv_heads * per_head;
  // Vector (hl·rows + r)·group + g is query row r, head (kv_head + hl)·group + g.
  const auto for_each_vector = [&](auto fn) {
    for (int32_t hl = 0; hl < tile.kv_heads; ++hl) {
      for (int32_t r = 0; r < tile.rows; ++r) {
        for (int32_t g = 0; g < sh.group; ++g) {
          const int64_t vec = static_cast<int64_t>(hl) * per_head + r * sh.group + g;
          fn(vec, r * row_stride + ((tile.kv_head + hl) * sh.group + g) * d);
        }
      }
    }
  };
  for_each_vector(
      [&](int64_t vec, int64_t at) { ScaleInto(tile.q + at, scale, st.q.data() + vec * d, d); });
  std::fill_n(st.acc.begin(), static_cast<int64_t>(vectors) * d, 0.0f);
  std::fill_n(st.max.begin(), vectors, -std::numeric_limits<float>::infinity());
  std::fill_n(st.sum.begin(), vectors, 0.0f);

  const int64_t num_keys = tile.first_pos + tile.rows;  // the last row sees [0, last_pos]
  // With a window, the first row sees nothing before first_pos - window + 1: blocks wholly
  // before that are never read (the KV manager may have freed them).
  const int64_t first_key =
      sh.sliding_window > 0 ? std::max<int64_t>(0, tile.first_pos - sh.sliding_window + 1) : 0;
  for (int64_t b = first_key / sh.block_size, key_begin = b * sh.block_size; key_begin < num_keys;
       key_begin += sh.block_size, ++b) {
    const int64_t block_offset = tile.blocks[b] * sh.kv_block_stride;
    // The next block (this one if none): the AVX-512 path prefetches it while it works on
    // this one, since nothing in the address stream predicts it.
    const int64_t next_offset = key_begin + sh.block_size < num_keys
                                    ? tile.blocks[b + 1] * sh.kv_block_stride
                                    : block_offset;
    for (int32_t hl = 0; hl < tile.kv_heads; ++hl) {
      const int64_t head_offset = (tile.kv_head + hl) * sh.kv_head_stride;
      const float* k = k_cache + block_offset + head_offset;
      const float* v = v_cache + block_offset + head_offset;
      const int64_t next = next_offset + head_offset;
      for (int32_t r = 0; r < tile.rows; ++r) {
        // Causal: row r (position first_pos + r) sees keys up to its own position, and with
        // a window only the last sliding_window of them.
        const int64_t pos = tile.first_pos + r;
        const int64_t visible = pos + 1 - key_begin;
        if (visible <= 0) continue;
        const int64_t lo = sh.sliding_window > 0 ? pos - sh.sliding_window + 1 - key_begin : 0;
        if (lo >= sh.block_size) continue;
        const auto start = static_cast<int32_t>(std::max<int64_t>(lo, 0));
        const auto n = static_cast<int32_t>(std::min<int64_t>(visible, sh.block_size)) - start;
        const int64_t v_skip = static_cast<int64_t>(start) * d;
        block(sh, st, hl * per_head + r * sh.group, sh.group, k + start, v + v_skip, n,
              k_cache + next + start, v_cache + next + v_skip);
      }
    }
  }

  for_each_vector([&](int64_t vec, int64_t at) {
    ScaleInto(st.acc.data() + vec * d, 1.0f / st.sum[vec], tile.out + at, d);
  });
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
  sh.kv_head_stride = static_cast<int64_t>(head_dim) * meta.block_size;
  sh.kv_block_stride = sh.kv_head_stride * num_kv_heads;
  sh.sliding_window = sliding_window;
  sh.soft_cap = logits_soft_cap;

  const BlockFn block = PickBlockFn(head_dim);
  // A decode row (a sequence with one query row) takes one tile for all its KV heads, which
  // then reads each block's K and V as one contiguous span (all heads) instead of
  // num_kv_heads scattered pieces, unless its keys are more than 1 / (4 · threads) of all
  // decode rows' keys: then a tile per KV head, so threads share it (batch 1, or one long
  // context among short ones).
  int64_t decode_keys = 0;
  for (int32_t s = 0; s < meta.num_seqs; ++s) {
    if (meta.query_start_loc[s + 1] - meta.query_start_loc[s] == 1) decode_keys += meta.seq_lens[s];
  }
  const int64_t whole_heads_max_keys = decode_keys / (4 * KernelThreadPool().num_threads());
  const int64_t max_vectors = static_cast<int64_t>(std::max(kRowsPerTile, num_kv_heads)) * sh.group;
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
    const int32_t heads_per_tile = q_len == 1 && seq_len <= whole_heads_max_keys ? num_kv_heads : 1;
    for (int32_t row = 0; row < q_len; row += kRowsPerTile) {
      for (int32_t h = 0; h < num_kv_heads; h += heads_per_tile) {
        Tile tile;
        tile.q = q + (q_begin + row) * row_stride;
        tile.out = out + (q_begin + row) * row_stride;
        tile.blocks = blocks;
        tile.kv_head = h;
        tile.kv_heads = heads_per_tile;
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
