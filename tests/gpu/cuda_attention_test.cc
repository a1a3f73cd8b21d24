// kernels::cuda::PagedAttention against kernels::cpu::PagedAttention on random inputs, in
// float32, float16 and bfloat16: head_dims 16/32/64/128 and odd multiples of 8, MHA and
// GQA, decode / prefill / chunked-prefill / speculative batches, block-boundary and long
// (split-K) contexts, padding sequences, q inside a wider row, block sizes 1/16/32 with
// shuffled block tables, sliding windows and logit soft caps, and CUDA-graph replays after
// the device metadata changed.
// Cache slots the kernel must not read (past seq_len, unused table entries, blocks wholly
// before a sequence's window, whose entries name the NaN block as after vLLM frees them) and
// the padding of q rows hold NaN, and the output starts as NaN, so an over-read or a missed
// write shows as a NaN. Inputs are rounded to the element type first and the CPU runs on those
// values. Every test skips itself when no CUDA device is visible.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_probe.h"
#include "tests/gpu/gpu_test_util.h"

namespace vllm::kernels::cuda {
namespace {

using gpu_test::CudaToCpuKvLayout;
using gpu_test::DeviceBuffer;
using gpu_test::FromF;
using gpu_test::ToF;
using gpu_test::ToFloats;

// Largest |out − ref| allowed, as a fraction of the largest |ref| of the case (the output
// rounding to T dominates for 16-bit types; float differs only in summation order and
// the device's exp).
template <typename T>
double Tolerance() {
  if constexpr (std::is_same_v<T, float>) return 5e-5;
  if constexpr (std::is_same_v<T, __half>) return 2e-3;
  return 1.6e-2;
}

struct SeqSpec {
  int32_t q_len;
  int32_t seq_len;  // 0: a padding sequence (its rows must come out as zeros)
};

struct AttnShape {
  int32_t q_heads, kv_heads, head_dim;
};

// One call: the batch, the shape, and the knobs that change the launch.
struct AttnCase {
  AttnShape shape;
  int32_t block_size = 16;
  std::vector<SeqSpec> seqs;
  int32_t q_pad = 0;                // q_stride = q_heads · head_dim + q_pad
  int32_t max_seq_len_bound = 0;    // host bound passed; 0: the batch's actual max
  int32_t max_query_len_bound = 0;  // host bound passed; 0: the batch's actual max
  float q_scale = 1.0f;             // larger: peakier softmax
  // Rows past query_start_loc[num_seqs] (num_tokens > the batch's rows), q NaN; they must come
  // out as zeros. Decode path only (the prefill path leaves them alone, see attention.h).
  int32_t pad_tokens = 0;
  // Device block ids = host ids + this, in a device cache that many blocks larger (NaN
  // below): > 2^31 elements / block reaches element offsets that overflow 32 bits. 0: off.
  int32_t block_offset = 0;
  int32_t sliding_window = 0;  // 0: none; else blocks before each window are freed (NaN)
  float soft_cap = 0.0f;       // 0: none
};

std::string Describe(const AttnCase& c) {
  std::string s = "heads " + std::to_string(c.shape.q_heads) + "/" +
                  std::to_string(c.shape.kv_heads) + " d " + std::to_string(c.shape.head_dim) +
                  " bs " + std::to_string(c.block_size) + " q_pad " + std::to_string(c.q_pad) +
                  " bound " + std::to_string(c.max_seq_len_bound) + " q bound " +
                  std::to_string(c.max_query_len_bound) + " pad " + std::to_string(c.pad_tokens) +
                  " block offset " + std::to_string(c.block_offset) + " window " +
                  std::to_string(c.sliding_window) + " cap " + std::to_string(c.soft_cap) + " seqs";
  for (const SeqSpec& q : c.seqs) {
    s += " (" + std::to_string(q.q_len) + "," + std::to_string(q.seq_len) + ")";
  }
  return s;
}

// The paged cache and block tables of a batch, host side: typed values for the device and
// the same values as floats for the CPU. Blocks are handed out in a shuffled order; table
// entries past a sequence's blocks point at a block full of NaN, and slots past seq_len in
// a sequence's last block are NaN too.
template <typename T>
struct PagedCache {
  int32_t num_blocks = 0;
  int32_t max_blocks_per_seq = 0;
  std::vector<int32_t> block_tables;
  std::vector<T> k, v;
  std::vector<float> kf, vf;
};

template <typename T>
PagedCache<T> BuildCache(const std::vector<int32_t>& seq_lens, const AttnShape& sh,
                         int32_t block_size, std::mt19937& rng) {
  PagedCache<T> c;
  int32_t used = 0;
  for (int32_t len : seq_lens) {
    const int32_t nb = (len + block_size - 1) / block_size;
    c.max_blocks_per_seq = std::max(c.max_blocks_per_seq, nb);
    used += nb;
  }
  c.max_blocks_per_seq += 1;  // at least one poisoned entry per row
  c.num_blocks = used + 1;    // block `used` is the NaN block
  std::vector<int32_t> ids(used);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  c.block_tables.assign(seq_lens.size() * c.max_blocks_per_seq, used);
  const int64_t slot = int64_t{sh.kv_heads} * sh.head_dim;
  const int64_t n = int64_t{c.num_blocks} * block_size * slot;
  c.k.resize(n);
  c.v.resize(n);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    c.k[i] = FromF<T>(dist(rng));
    c.v[i] = FromF<T>(dist(rng));
  }
  auto poison = [&](int64_t first_slot, int64_t num_slots) {
    for (int64_t i = first_slot * slot; i < (first_slot + num_slots) * slot; ++i) {
      c.k[i] = FromF<T>(NAN);
      c.v[i] = FromF<T>(NAN);
    }
  };
  poison(int64_t{used} * block_size, block_size);
  size_t next = 0;
  for (size_t s = 0; s < seq_lens.size(); ++s) {
    const int32_t nb = (seq_lens[s] + block_size - 1) / block_size;
    for (int32_t b = 0; b < nb; ++b) c.block_tables[s * c.max_blocks_per_seq + b] = ids[next++];
    if (nb > 0 && seq_lens[s] % block_size != 0) {
      const int32_t last = c.block_tables[s * c.max_blocks_per_seq + nb - 1];
      const int32_t filled = seq_lens[s] % block_size;
      poison(int64_t{last} * block_size + filled, block_size - filled);
    }
  }
  // The CPU reference reads its own layout (kernels/cpu/ops.h); c.k / c.v are the CUDA one.
  c.kf = CudaToCpuKvLayout(ToFloats(c.k), true, sh.kv_heads, sh.head_dim, block_size);
  c.vf = CudaToCpuKvLayout(ToFloats(c.v), false, sh.kv_heads, sh.head_dim, block_size);
  return c;
}

// What vLLM's sliding-window manager frees before a step: the table entries (rows of
// max_blocks_per_seq in `tables`) of blocks wholly before each sequence's first visible
// position, seq_len - q_len - window + 1, are pointed at `nan_block`. Returns how many.
int32_t FreeBlocksBeforeWindow(const std::vector<SeqSpec>& seqs, int32_t window, int32_t block_size,
                               int32_t max_blocks_per_seq, int32_t nan_block,
                               std::vector<int32_t>& tables) {
  if (window <= 0) return 0;
  int32_t freed = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int32_t first_visible = std::max(0, seqs[s].seq_len - seqs[s].q_len - window + 1);
    for (int32_t b = 0; b < first_visible / block_size; ++b, ++freed) {
      tables[s * max_blocks_per_seq + b] = nan_block;
    }
  }
  return freed;
}

// The CPU's answer, one sequence at a time (the CPU rejects padding sequences, whose rows
// are zeros), reading the cache through `tables` (cache.block_tables' layout). q is packed
// [num_tokens, q_heads, head_dim] floats.
template <typename T>
std::vector<float> Reference(const std::vector<SeqSpec>& seqs, const std::vector<float>& q,
                             const PagedCache<T>& cache, const std::vector<int32_t>& tables,
                             const AttnShape& sh, int32_t block_size, float scale,
                             int32_t window = 0, float soft_cap = 0.0f) {
  const int64_t row = int64_t{sh.q_heads} * sh.head_dim;
  std::vector<float> ref(q.size(), 0.0f);
  int64_t q_begin = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    if (seqs[s].seq_len > 0 && seqs[s].q_len > 0) {
      const int32_t qsl[2] = {0, seqs[s].q_len};
      cpu::AttentionMetadata meta;
      meta.num_seqs = 1;
      meta.query_start_loc = qsl;
      meta.seq_lens = &seqs[s].seq_len;
      meta.block_tables = tables.data() + s * cache.max_blocks_per_seq;
      meta.max_blocks_per_seq = cache.max_blocks_per_seq;
      meta.block_size = block_size;
      cpu::PagedAttention(q.data() + q_begin * row, cache.kf.data(), cache.vf.data(),
                          ref.data() + q_begin * row, meta, sh.q_heads, sh.kv_heads, sh.head_dim,
                          scale, window, soft_cap);
    }
    q_begin += seqs[s].q_len;
  }
  return ref;
}

// Checks out against ref element by element: |out − ref| <= tol · max|ref|, NaN never.
void ExpectClose(const std::vector<float>& out, const std::vector<float>& ref, double tol) {
  ASSERT_EQ(out.size(), ref.size());
  double ref_scale = 1e-3;
  for (float r : ref) ref_scale = std::max(ref_scale, static_cast<double>(std::fabs(r)));
  double worst = 0.0;
  size_t worst_at = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    // A NaN reference (the CPU read a poisoned slot) fails too.
    const double err =
        std::isnan(out[i]) || std::isnan(ref[i]) ? INFINITY : std::fabs(double{out[i]} - ref[i]);
    if (err > worst) {
      worst = err;
      worst_at = i;
    }
  }
  EXPECT_LE(worst, tol * ref_scale)
      << "worst at element " << worst_at << ": got " << out[worst_at] << ", want " << ref[worst_at]
      << " (output scale " << ref_scale << ")";
}

template <typename T>
class CudaAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
    ASSERT_CUDA_OK(cudaSetDevice(0));
  }

  // Runs one case on the device and compares with the CPU.
  void RunCase(const AttnCase& c) {
    SCOPED_TRACE(Describe(c));
    const AttnShape& sh = c.shape;
    const int64_t row = int64_t{sh.q_heads} * sh.head_dim;
    const int64_t q_stride = row + c.q_pad;
    std::vector<int32_t> qsl{0}, seq_lens;
    int32_t max_q = 0, max_seq = 0;
    for (const SeqSpec& s : c.seqs) {
      qsl.push_back(qsl.back() + s.q_len);
      seq_lens.push_back(s.seq_len);
      max_q = std::max(max_q, s.q_len);
      max_seq = std::max(max_seq, s.seq_len);
    }
    const int64_t batch_tokens = qsl.back();
    const int64_t num_tokens = batch_tokens + c.pad_tokens;
    PagedCache<T> cache = BuildCache<T>(seq_lens, sh, c.block_size, rng_);
    FreeBlocksBeforeWindow(c.seqs, c.sliding_window, c.block_size, cache.max_blocks_per_seq,
                           cache.num_blocks - 1, cache.block_tables);

    std::normal_distribution<float> dist(0.0f, c.q_scale);
    std::vector<T> q(num_tokens * q_stride, FromF<T>(NAN));  // padding rows stay NaN
    std::vector<float> qf(batch_tokens * row);
    for (int64_t t = 0; t < batch_tokens; ++t) {
      for (int64_t i = 0; i < row; ++i) {
        q[t * q_stride + i] = FromF<T>(dist(rng_));
        qf[t * row + i] = ToF(q[t * q_stride + i]);
      }
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(sh.head_dim));
    std::vector<float> ref = Reference(c.seqs, qf, cache, cache.block_tables, sh, c.block_size,
                                       scale, c.sliding_window, c.soft_cap);
    ref.resize(num_tokens * row, 0.0f);  // padding rows: zeros

    // The device cache: block_offset NaN blocks, then the host cache; tables shifted to match.
    const size_t block_elems =
        size_t{static_cast<uint32_t>(c.block_size)} * sh.kv_heads * sh.head_dim;
    const size_t cache_offset = size_t{static_cast<uint32_t>(c.block_offset)} * block_elems;
    DeviceBuffer<T> dk(cache_offset + cache.k.size()), dv(cache_offset + cache.v.size());
    if (c.block_offset > 0 && (dk.get() == nullptr || dv.get() == nullptr)) {
      GTEST_SKIP() << "no room for a " << 2 * (cache_offset + cache.k.size()) * sizeof(T)
                   << "-byte cache";
    }
    ASSERT_CUDA_OK(dk.Poison());
    ASSERT_CUDA_OK(dv.Poison());
    ASSERT_CUDA_OK(dk.Upload(cache.k, cache_offset));
    ASSERT_CUDA_OK(dv.Upload(cache.v, cache_offset));
    for (int32_t& id : cache.block_tables) id += c.block_offset;

    DeviceBuffer<T> dq(q), dout(num_tokens * row);
    DeviceBuffer<int32_t> dqsl(qsl), dseq(seq_lens), dtables(cache.block_tables);
    ASSERT_NE(dq.get(), nullptr);
    ASSERT_NE(dout.get(), nullptr);
    DeviceAttentionMetadata meta;
    meta.num_seqs = static_cast<int32_t>(c.seqs.size());
    meta.num_tokens = num_tokens;
    meta.query_start_loc = dqsl.get();
    meta.seq_lens = dseq.get();
    meta.block_tables = dtables.get();
    meta.max_blocks_per_seq = cache.max_blocks_per_seq;
    meta.block_size = c.block_size;
    meta.max_query_len = c.max_query_len_bound > 0 ? c.max_query_len_bound : max_q;
    meta.max_seq_len = c.max_seq_len_bound > 0 ? c.max_seq_len_bound : max_seq;
    // The windowed size exactly (a call checks it has at least what its plan needs).
    const size_t ws_bytes =
        PagedAttentionWorkspaceBytes(meta, sh.q_heads, sh.head_dim, c.sliding_window);
    DeviceBuffer<char> ws(ws_bytes);
    ASSERT_CUDA_OK(dout.Poison());
    ASSERT_CUDA_OK(PagedAttention<T>(dq.get(), q_stride, dk.get(), dv.get(), dout.get(), meta,
                                     sh.q_heads, sh.kv_heads, sh.head_dim, scale,
                                     ws_bytes > 0 ? ws.get() : nullptr, ws_bytes, nullptr,
                                     c.sliding_window, c.soft_cap));
    ASSERT_CUDA_OK(cudaDeviceSynchronize());
    ExpectClose(ToFloats(dout.Download()), ref, Tolerance<T>());
  }

  // A decode call captured once with host bounds (max_seq_len = max_model_len) and replayed
  // after the device's seq_lens and block tables changed: the grid must not depend on them.
  void RunGraphReplay(int32_t sliding_window, float soft_cap) {
    SCOPED_TRACE(testing::Message() << "window " << sliding_window << " cap " << soft_cap);
    const AttnShape sh{8, 2, 128};
    constexpr int32_t kBlockSize = 16;
    constexpr int32_t kMaxModelLen = 4096;
    constexpr int32_t kNumSeqs = 4;
    const int64_t row = int64_t{sh.q_heads} * sh.head_dim;
    const float scale = 1.0f / std::sqrt(static_cast<float>(sh.head_dim));

    // One cache big enough for both rounds: every sequence may hold kMaxModelLen tokens.
    const std::vector<int32_t> full(kNumSeqs, kMaxModelLen);
    PagedCache<T> cache = BuildCache<T>(full, sh, kBlockSize, rng_);
    std::vector<int32_t> qsl(kNumSeqs + 1);
    std::iota(qsl.begin(), qsl.end(), 0);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<T> q(kNumSeqs * row);
    std::vector<float> qf(q.size());
    for (size_t i = 0; i < q.size(); ++i) {
      q[i] = FromF<T>(dist(rng_));
      qf[i] = ToF(q[i]);
    }

    DeviceBuffer<T> dq(q), dk(cache.k), dv(cache.v), dout(q.size());
    DeviceBuffer<int32_t> dqsl(qsl), dseq(kNumSeqs), dtables(cache.block_tables);
    DeviceAttentionMetadata meta;
    meta.num_seqs = kNumSeqs;
    meta.num_tokens = kNumSeqs;
    meta.query_start_loc = dqsl.get();
    meta.seq_lens = dseq.get();
    meta.block_tables = dtables.get();
    meta.max_blocks_per_seq = cache.max_blocks_per_seq;
    meta.block_size = kBlockSize;
    meta.max_query_len = 1;
    meta.max_seq_len = kMaxModelLen;
    const size_t ws_bytes =
        PagedAttentionWorkspaceBytes(meta, sh.q_heads, sh.head_dim, sliding_window);
    DeviceBuffer<char> ws(ws_bytes);

    cudaStream_t stream;
    ASSERT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const cudaError_t launch = PagedAttention<T>(
        dq.get(), row, dk.get(), dv.get(), dout.get(), meta, sh.q_heads, sh.kv_heads, sh.head_dim,
        scale, ws_bytes > 0 ? ws.get() : nullptr, ws_bytes, stream, sliding_window, soft_cap);
    ASSERT_CUDA_OK(cudaStreamEndCapture(stream, &graph));
    ASSERT_CUDA_OK(launch);
    ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

    // Two rounds of (seq_lens, a reshuffled table); the table's first rows are reused.
    const std::vector<std::vector<int32_t>> rounds = {{1, 700, 2500, 4096}, {3000, 0, 17, 1}};
    for (const std::vector<int32_t>& lens : rounds) {
      SCOPED_TRACE(testing::Message()
                   << "seq_lens " << lens[0] << "," << lens[1] << "," << lens[2] << "," << lens[3]);
      // Reassign each row's blocks in a new order (a permutation of all cache rows).
      std::vector<int32_t> used;
      for (int32_t i = 0; i < kNumSeqs * cache.max_blocks_per_seq; ++i) {
        if (cache.block_tables[i] != cache.num_blocks - 1) used.push_back(cache.block_tables[i]);
      }
      std::shuffle(used.begin(), used.end(), rng_);
      size_t next = 0;
      for (int32_t s = 0; s < kNumSeqs; ++s) {
        for (int32_t b = 0; b < cache.max_blocks_per_seq; ++b) {
          int32_t& e = cache.block_tables[s * cache.max_blocks_per_seq + b];
          if (e != cache.num_blocks - 1) e = used[next++];
        }
      }
      std::vector<SeqSpec> seqs;
      for (int32_t len : lens) seqs.push_back({1, len});
      // With a window, this step's freed blocks name the NaN block (the permuted table above
      // keeps every block, so the next round can use them again).
      std::vector<int32_t> tables = cache.block_tables;
      const int32_t freed = FreeBlocksBeforeWindow(
          seqs, sliding_window, kBlockSize, cache.max_blocks_per_seq, cache.num_blocks - 1, tables);
      if (sliding_window > 0) {
        EXPECT_GT(freed, 0);  // the rounds' long rows free blocks
      }
      ASSERT_CUDA_OK(dtables.Upload(tables));
      ASSERT_CUDA_OK(dseq.Upload(lens));
      const std::vector<float> ref =
          Reference(seqs, qf, cache, tables, sh, kBlockSize, scale, sliding_window, soft_cap);
      ASSERT_CUDA_OK(dout.Poison());
      ASSERT_CUDA_OK(cudaDeviceSynchronize());
      ASSERT_CUDA_OK(cudaGraphLaunch(exec, stream));
      ASSERT_CUDA_OK(cudaStreamSynchronize(stream));
      ExpectClose(ToFloats(dout.Download()), ref, Tolerance<T>());
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }

  std::mt19937 rng_{20240611};
};

using gpu_test::ElementTypes;
using gpu_test::TypeNames;
TYPED_TEST_SUITE(CudaAttentionTest, ElementTypes, TypeNames);

// Fixture models (16, 32), Llama-3-8B (128), MHA and GQA ratios 1..16, head_dims without a
// specialised kernel (40, 96, 256), and on the tensor-core prefill path (f16/bf16, head_dim
// 16/32/64/128) a group of 3, whose rows straddle the 64-vector tiles, and one of 16 (two
// decode blocks per KV head, 4 rows per prefill tile).
const std::vector<AttnShape> kShapes = {
    {4, 2, 16}, {4, 4, 32},  {8, 1, 64}, {32, 8, 128}, {6, 2, 40},
    {8, 8, 96}, {8, 2, 256}, {6, 2, 64}, {16, 1, 32},
};

// Batches by kind; each is run over every shape.
const std::vector<std::vector<SeqSpec>> kBatches = {
    // Decode: one token, block boundaries, a few partitions.
    {{1, 1}},
    {{1, 15}, {1, 16}, {1, 17}, {1, 32}, {1, 33}, {1, 100}, {1, 1000}},
    // Prefill: whole prompts.
    {{77, 77}},
    {{1, 1}, {16, 16}, {33, 33}, {130, 130}},
    // Chunked prefill mixed with decode rows and a padding sequence.
    {{10, 50}, {1, 700}, {33, 33}, {1, 0}, {40, 1200}},
    // Speculative-style short queries (the decode path with several rows per sequence).
    {{4, 300}, {8, 8}, {1, 2000}, {3, 0}, {2, 17}},
};

TYPED_TEST(CudaAttentionTest, MatchesCpuOverShapesAndBatches) {
  for (const AttnShape& sh : kShapes) {
    for (size_t b = 0; b < kBatches.size(); ++b) {
      AttnCase c;
      c.shape = sh;
      c.seqs = kBatches[b];
      c.block_size = (b % 3 == 0) ? 16 : (b % 3 == 1 ? 32 : 1);
      c.q_pad = (b % 2 == 0) ? 0 : 2 * sh.kv_heads * sh.head_dim;  // q inside a fused qkv row
      this->RunCase(c);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TYPED_TEST(CudaAttentionTest, BlockSizes) {
  for (int32_t bs : {1, 16, 32}) {
    AttnCase c;
    c.shape = {8, 2, 64};
    c.block_size = bs;
    c.seqs = {{1, 15}, {1, 16}, {1, 17}, {1, 32}, {1, 33}, {5, 33}};
    this->RunCase(c);
    c.seqs = {{15, 15}, {16, 16}, {17, 17}, {32, 32}, {33, 33}, {9, 40}};
    this->RunCase(c);
  }
}

TYPED_TEST(CudaAttentionTest, LongContexts) {
  // Several split-K partitions per row (decode) and long rows in a prefill chunk.
  AttnCase c;
  c.shape = {32, 8, 128};
  c.seqs = {{1, 5000}, {1, 4097}, {1, 513}, {1, 3}};
  this->RunCase(c);
  c.seqs = {{1, 5000}};  // batch 1: smaller partitions for more blocks
  this->RunCase(c);
  c.seqs = {{64, 3000}, {1, 5000}};
  this->RunCase(c);
  c.shape = {4, 2, 16};
  c.block_size = 32;
  c.seqs = {{1, 5000}, {2, 6000}};
  this->RunCase(c);
}

TYPED_TEST(CudaAttentionTest, HostBoundsAboveTheBatch) {
  // max_seq_len = max_model_len as a decode graph passes it: most partitions exit early.
  AttnCase c;
  c.shape = {32, 8, 128};
  c.seqs = {{1, 1}, {1, 100}, {1, 0}, {1, 700}};
  c.max_seq_len_bound = 8192;
  this->RunCase(c);
  c.shape = {4, 2, 32};
  c.seqs = {{1, 40}, {1, 0}};
  c.max_seq_len_bound = 32768;
  this->RunCase(c);
}

TYPED_TEST(CudaAttentionTest, LargeLogitsDoNotOverflow) {
  AttnCase c;
  c.shape = {4, 2, 32};
  c.q_scale = 30.0f;  // scores in the hundreds: exp overflows without a running max
  c.seqs = {{1, 900}, {20, 20}, {3, 600}};
  this->RunCase(c);
  c.seqs = {{1, 900}, {200, 600}};
  this->RunCase(c);
}

TYPED_TEST(CudaAttentionTest, RejectsBadArguments) {
  using T = TypeParam;
  DeviceBuffer<T> buf(4096);
  DeviceBuffer<int32_t> ints(16);
  DeviceAttentionMetadata meta;
  meta.num_seqs = 1;
  meta.num_tokens = 1;
  meta.query_start_loc = ints.get();
  meta.seq_lens = ints.get();
  meta.block_tables = ints.get();
  meta.max_blocks_per_seq = 1;
  meta.block_size = 16;
  meta.max_query_len = 1;
  meta.max_seq_len = 16;
  // head_dim not a multiple of 8, too large; heads not grouping.
  EXPECT_EQ(PagedAttention<T>(buf.get(), 12, buf.get(), buf.get(), buf.get(), meta, 1, 1, 12, 1.0f,
                              nullptr, 0, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(PagedAttention<T>(buf.get(), 264, buf.get(), buf.get(), buf.get(), meta, 1, 1, 264,
                              1.0f, nullptr, 0, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(PagedAttention<T>(buf.get(), 96, buf.get(), buf.get(), buf.get(), meta, 3, 2, 32, 1.0f,
                              nullptr, 0, nullptr),
            cudaErrorInvalidValue);
  // A split-K decode call without its workspace.
  meta.max_seq_len = 100000;
  ASSERT_GT(PagedAttentionWorkspaceBytes(meta, 4, 32), 0u);
  EXPECT_EQ(PagedAttention<T>(buf.get(), 128, buf.get(), buf.get(), buf.get(), meta, 4, 2, 32, 1.0f,
                              nullptr, 0, nullptr),
            cudaErrorInvalidValue);
  // Nothing to do is fine.
  meta.num_tokens = 0;
  EXPECT_EQ(PagedAttention<T>(buf.get(), 128, buf.get(), buf.get(), buf.get(), meta, 4, 2, 32, 1.0f,
                              nullptr, 0, nullptr),
            cudaSuccess);
  // A window and a cap are fine; negative (or NaN, or infinite) ones are not, even with
  // nothing to do.
  EXPECT_EQ(PagedAttention<T>(buf.get(), 128, buf.get(), buf.get(), buf.get(), meta, 4, 2, 32, 1.0f,
                              nullptr, 0, nullptr, 4096, 50.0f),
            cudaSuccess);
  for (const auto& [window, cap] :
       std::vector<std::pair<int32_t, float>>{{-1, 0.0f}, {0, -1.0f}, {16, NAN}, {16, INFINITY}}) {
    EXPECT_EQ(PagedAttention<T>(buf.get(), 128, buf.get(), buf.get(), buf.get(), meta, 4, 2, 32,
                                1.0f, nullptr, 0, nullptr, window, cap),
              cudaErrorInvalidValue)
        << "window " << window << " cap " << cap;
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// Windows of 1, under a block, one block (16), spanning blocks, and past every context.
const std::vector<int32_t> kWindows = {1, 5, 16, 37, 4096};

// The decode path with a window, over every shape: one row per sequence across block edges,
// and speculative-style short queries whose rows' windows start at different keys.
TYPED_TEST(CudaAttentionTest, SlidingWindowDecode) {
  const std::vector<std::vector<SeqSpec>> batches = {
      {{1, 1}, {1, 15}, {1, 16}, {1, 17}, {1, 33}, {1, 100}, {1, 1000}, {1, 0}},
      {{4, 300}, {8, 8}, {1, 2000}, {3, 0}, {2, 17}},
  };
  for (const AttnShape& sh : kShapes) {
    for (size_t w = 0; w < kWindows.size(); ++w) {
      for (size_t b = 0; b < batches.size(); ++b) {
        AttnCase c;
        c.shape = sh;
        c.seqs = batches[b];
        c.sliding_window = kWindows[w];
        c.block_size = (w + b) % 3 == 0 ? 16 : ((w + b) % 3 == 1 ? 32 : 1);
        c.q_pad = b == 1 ? 2 * sh.kv_heads * sh.head_dim : 0;
        this->RunCase(c);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// Split-K with a window much smaller than the context: the partitions cover the window only
// (many of 64 keys for a long window, few for a short one), with the host bound at the batch
// and at max_model_len as a decode graph passes it.
TYPED_TEST(CudaAttentionTest, SlidingWindowSplitK) {
  AttnCase c;
  c.shape = {32, 8, 128};
  for (int32_t window : {64, 65, 100, 1000, 4096}) {
    c.sliding_window = window;
    c.max_seq_len_bound = 0;
    c.seqs = {{1, 5000}, {1, 4097}, {1, 513}, {1, 3}};
    this->RunCase(c);
    c.seqs = {{1, 5000}};  // batch 1: the most partitions
    this->RunCase(c);
    c.max_seq_len_bound = 32768;
    c.seqs = {{1, 9000}, {1, 700}, {1, 0}, {2, 4500}};
    this->RunCase(c);
  }
  c.shape = {4, 2, 16};
  c.block_size = 32;
  c.max_seq_len_bound = 0;
  c.sliding_window = 300;
  c.seqs = {{1, 5000}, {2, 6000}};
  this->RunCase(c);
}

// The prefill path with a window: whole prompts and chunks whose rows' windows start in
// different 64-key tiles (and, with a window of 1, every row of a tile in its own), on the
// tensor-core shapes (group 1, 2, 3, 4, 8, 16) and two that run the row-wise kernel.
TYPED_TEST(CudaAttentionTest, SlidingWindowPrefill) {
  const std::vector<AttnShape> shapes = {{4, 2, 16}, {4, 4, 32},  {8, 1, 64}, {32, 8, 128},
                                         {6, 2, 64}, {16, 1, 32}, {6, 2, 40}, {8, 4, 256}};
  const std::vector<std::vector<SeqSpec>> batches = {
      {{77, 77}},
      {{1, 1}, {16, 16}, {33, 33}, {130, 130}},
      {{10, 50}, {1, 700}, {33, 33}, {1, 0}, {40, 1200}},  // chunked, with decode rows
      {{200, 600}, {64, 64}},
  };
  for (const AttnShape& sh : shapes) {
    for (int32_t window : {1, 5, 16, 37, 100, 4096}) {
      for (size_t b = 0; b < batches.size(); ++b) {
        AttnCase c;
        c.shape = sh;
        c.seqs = batches[b];
        c.sliding_window = window;
        c.block_size = (window + b) % 3 == 0 ? 16 : ((window + b) % 3 == 1 ? 32 : 1);
        c.q_pad = b == 2 ? 2 * sh.kv_heads * sh.head_dim : 0;
        this->RunCase(c);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// Gemma-2's soft cap, alone and with a window, on both paths: scores in the hundreds (q_scale
// 30) against a cap of 50 bend most of them; a cap of 1 flattens ordinary scores.
TYPED_TEST(CudaAttentionTest, SoftCap) {
  const std::vector<std::vector<SeqSpec>> batches = {
      {{1, 900}, {1, 33}, {4, 600}, {1, 0}},  // decode
      {{1, 5000}},                            // decode, split-K
      {{20, 20}, {200, 600}, {1, 0}},         // prefill
  };
  // Gemma-2 2B's attention shape (8/4 heads, head_dim 256) and tensor-core shapes.
  for (const AttnShape& sh :
       {AttnShape{8, 4, 256}, AttnShape{4, 2, 32}, AttnShape{16, 8, 128}, AttnShape{6, 2, 64}}) {
    for (int32_t window : {0, 100, 4096}) {
      for (const auto& [cap, q_scale] :
           std::vector<std::pair<float, float>>{{50.0f, 30.0f}, {1.0f, 1.0f}}) {
        for (const std::vector<SeqSpec>& seqs : batches) {
          AttnCase c;
          c.shape = sh;
          c.seqs = seqs;
          c.sliding_window = window;
          c.soft_cap = cap;
          c.q_scale = q_scale;
          this->RunCase(c);
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

TYPED_TEST(CudaAttentionTest, PaddedRowsAndLooseHostBounds) {
  AttnCase c;
  c.shape = {8, 2, 64};
  // A padded decode batch: rows past query_start_loc[num_seqs] come out as zeros, unsplit...
  c.seqs = {{1, 40}, {1, 0}, {2, 300}};
  c.pad_tokens = 5;
  this->RunCase(c);
  // ...and split-K (the reduction writes them).
  c.max_seq_len_bound = 4096;
  this->RunCase(c);
  // Prefill with max_query_len above the batch (tiles past every sequence's rows exit).
  c.pad_tokens = 0;
  c.max_seq_len_bound = 0;
  c.max_query_len_bound = 256;
  c.seqs = {{20, 20}, {70, 90}, {1, 5}};
  this->RunCase(c);
}

// Llama-3-8B's KV shape with every used block past 2^31 elements of cache (about 4 GiB per
// cache in 16-bit types, 8 GiB in float; skipped when the device lacks the room): an offset
// computed in 32 bits reads the NaN blocks below, or faults.
TYPED_TEST(CudaAttentionTest, CacheOffsetsPast2To31Elements) {
  AttnCase c;
  c.shape = {32, 8, 128};
  c.block_size = 16;
  c.block_offset = static_cast<int32_t>((int64_t{1} << 31) / (16 * 8 * 128) + 1);
  c.seqs = {{1, 100}, {1, 3000}};  // decode, split-K
  this->RunCase(c);
  c.seqs = {{100, 100}, {33, 700}};  // prefill
  this->RunCase(c);
}

// Host-only: the workspace size never exceeds the documented bound, is 0 for prefill calls
// and single-partition decodes, and grows with the context when it is split.
TEST(PagedAttentionWorkspace, IsBoundedAndZeroWhenUnsplit) {
  DeviceAttentionMetadata meta;
  meta.block_size = 16;
  for (int32_t head_dim : {16, 128, 256}) {
    const size_t bound = PagedAttentionMaxWorkspaceBytes(head_dim);
    EXPECT_EQ(bound, size_t{65536} * (head_dim + 2) * 4);
    for (int64_t tokens : {1, 7, 64, 256, 4096, 65536}) {
      for (int32_t max_seq : {0, 1, 64, 512, 2048, 8192, 131072, 1 << 20}) {
        for (int32_t max_q : {1, 8, 9, 2048}) {
          meta.num_seqs = static_cast<int32_t>(std::min<int64_t>(tokens, 1024));
          meta.num_tokens = tokens;
          meta.max_query_len = max_q;
          meta.max_seq_len = max_seq;
          const size_t bytes = PagedAttentionWorkspaceBytes(meta, 32, head_dim);
          EXPECT_LE(bytes, bound) << tokens << " tokens, max_seq " << max_seq;
          if (max_q > 8 || max_seq <= 64) {
            EXPECT_EQ(bytes, 0u) << tokens << " tokens, max_q " << max_q;
          }
        }
      }
    }
  }
  meta.num_tokens = 1;
  meta.max_query_len = 1;
  meta.max_seq_len = 4096;
  const size_t short_ctx = PagedAttentionWorkspaceBytes(meta, 32, 128);
  meta.max_seq_len = 65536;
  EXPECT_GT(short_ctx, 0u);
  EXPECT_GT(PagedAttentionWorkspaceBytes(meta, 32, 128), short_ctx);
}

// Host-only: with a window the split covers min(max_seq_len, window) keys, so the workspace
// never grows past the unwindowed size, and a window of at most 64 keys is never split.
TEST(PagedAttentionWorkspace, WindowSplitsOnlyTheWindow) {
  DeviceAttentionMetadata meta;
  meta.block_size = 16;
  meta.num_seqs = 1;
  meta.num_tokens = 1;
  meta.max_query_len = 1;
  meta.max_seq_len = 65536;
  const size_t full = PagedAttentionWorkspaceBytes(meta, 32, 128);
  ASSERT_GT(full, 0u);
  EXPECT_EQ(PagedAttentionWorkspaceBytes(meta, 32, 128, 0), full);
  EXPECT_EQ(PagedAttentionWorkspaceBytes(meta, 32, 128, 1), 0u);
  EXPECT_EQ(PagedAttentionWorkspaceBytes(meta, 32, 128, 64), 0u);
  EXPECT_GT(PagedAttentionWorkspaceBytes(meta, 32, 128, 65), 0u);
  EXPECT_LT(PagedAttentionWorkspaceBytes(meta, 32, 128, 4096), full);
  EXPECT_EQ(PagedAttentionWorkspaceBytes(meta, 32, 128, 1 << 20), full);
  for (int32_t window : {1, 100, 4096, 65536}) {
    for (int32_t max_seq : {0, 64, 4096, 131072}) {
      meta.max_seq_len = max_seq;
      EXPECT_LE(PagedAttentionWorkspaceBytes(meta, 32, 128, window),
                PagedAttentionWorkspaceBytes(meta, 32, 128))
          << "window " << window << " max_seq " << max_seq;
    }
  }
}

TYPED_TEST(CudaAttentionTest, GraphReplayFollowsDeviceMetadata) { this->RunGraphReplay(0, 0.0f); }

// The same graph with a window much shorter than max_model_len and a soft cap: the plan splits
// the window (a host value), the rows' windows move with the replayed seq_lens, and the
// blocks freed before them hold NaN.
TYPED_TEST(CudaAttentionTest, GraphReplayWithWindowAndSoftCap) {
  this->RunGraphReplay(/*sliding_window=*/500, /*soft_cap=*/50.0f);
}

}  // namespace
}  // namespace vllm::kernels::cuda
