// Paged attention, prefill path: a flash-attention-2 style kernel on the tensor cores
// (mma.sync m16n8k16, f16/bf16 inputs, f32 accumulators) for half and bfloat16 with head_dim
// 16, 32, 64 or 128; other cases (float32, other head_dims, more than 65535 sequences, a tile
// count past the grid's x limit) run the decode kernel unsplit, one block per (row, head
// group) walking the row's whole context.
//
// Grouped-query packing: the query vectors of one sequence and one KV head are numbered
// v = row · group + g (g = the query head within the group), so a tile of 64 vectors holds
// 64 / group rows × every head of the group and each K/V tile it loads serves all of them.
// Block = 4 warps = 64 vectors; grid = (vector tiles of the longest query, sequences, KV
// heads), heaviest tiles (latest rows) first; tiles past a sequence's rows exit at once.
// A K/V tile of 64 keys is staged in shared memory (K row-major, V transposed, both padded
// so the fragment loads are bank-conflict free); each warp computes S = Q·Kᵀ for its 16
// vectors, masks causally, updates its running max / sum, and adds P·V into its output
// fragments. Keys past the tile's last position are never read (zero-filled).
// Sliding window: the key loop starts at the K/V tile holding the first row's first visible
// key (tiles wholly before every row's window are skipped), keys before it are zero-filled,
// not loaded (their blocks may be freed: NaN · 0 would poison P·V), and each score is masked
// to its row's [first, last] range. The soft cap, when on (kSoftCap, a template flag so the
// plain kernel keeps its instruction mix), maps each scaled score before the mask.
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_internal.cuh"
#include "kernels/cuda/common.cuh"

namespace vllm::kernels::cuda::detail {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTileVectors = kWarps * 16;  // query vectors per block
constexpr int kTileKeys = 64;              // keys per shared-memory K/V tile
constexpr int kPad = 8;                    // elements of padding per shared row
constexpr float kNegInf = -__builtin_huge_valf();

__device__ __forceinline__ uint32_t Bits(__half x) { return __half_as_ushort(x); }
__device__ __forceinline__ uint32_t Bits(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }

// Two elements as one 32-bit fragment register, `lo` in the low half.
template <typename T>
__device__ __forceinline__ uint32_t Pack(T lo, T hi) {
  return Bits(lo) | (Bits(hi) << 16);
}
template <typename T>
__device__ __forceinline__ uint32_t PackFloats(float lo, float hi) {
  return Pack(FromFloat<T>(lo), FromFloat<T>(hi));
}

// d += a · b for one m16n8k16 tile (a row-major 16×16, b column-major 16×8).
template <typename T>
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1);
template <>
__device__ __forceinline__ void Mma<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                            uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void Mma<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                   uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Fragment layout (PTX ISA, mma.m16n8k16 with 16-bit inputs), lane = 4·gid + tig:
//   A regs 0..3: (row gid, cols 2tig..+1), (row gid+8, same), (row gid, cols 8+2tig..+1),
//                (row gid+8, same);
//   B regs 0..1: (k 2tig..+1, col gid), (k 8+2tig..+1, col gid);
//   C/D 0..3:    (row gid, cols 2tig, 2tig+1), (row gid+8, cols 2tig, 2tig+1).
template <typename T, int kD, bool kWindow, bool kSoftCap>
__global__ void __launch_bounds__(kThreads)
    PrefillKernel(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ k_cache,
                  const T* __restrict__ v_cache, T* __restrict__ out, DeviceAttentionMetadata meta,
                  int32_t num_q_heads, int32_t num_kv_heads, float scale, ScoreOptions opts) {
  constexpr int kKSteps = kD / 16;  // k-steps of Q·Kᵀ
  constexpr int kDTiles = kD / 8;   // n-tiles of P·V
  constexpr int kNTiles = kTileKeys / 8;
  constexpr int kChunks = kD / 8;  // 16-byte chunks per K/V row
  __shared__ alignas(16) T s_k[kTileKeys][kD + kPad];
  __shared__ alignas(16) T s_vt[kD][kTileKeys + kPad];

  const int tile = gridDim.x - 1 - blockIdx.x;  // latest rows (most keys) first
  const int seq = blockIdx.y;
  const int kv_head = blockIdx.z;
  const int group = num_q_heads / num_kv_heads;

  const int32_t q_begin = meta.query_start_loc[seq];
  const int32_t q_len = meta.query_start_loc[seq + 1] - q_begin;
  const int64_t num_vectors = static_cast<int64_t>(q_len) * group;
  const int64_t v_first = static_cast<int64_t>(tile) * kTileVectors;
  if (v_first >= num_vectors) return;
  const int32_t seq_len = meta.seq_lens[seq];
  const int32_t pos0 = seq_len - q_len;  // position of row 0
  const int32_t last_row =
      static_cast<int32_t>(min(num_vectors, v_first + kTileVectors) - 1) / group;
  const int32_t tile_keys = seq_len > 0 ? max(pos0 + last_row + 1, 0) : 0;
  // The first key any row of the tile sees: its first row's window start.
  const int32_t window = kWindow ? opts.sliding_window : 0;
  const int32_t first_row = static_cast<int32_t>(v_first / group);
  const int32_t tile_first_key = window > 0 ? max(pos0 + first_row + 1 - window, 0) : 0;

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int gid = lane >> 2;
  const int tig = lane & 3;

  // This lane's two vectors (fragment rows gid and gid + 8 of the warp's 16).
  // Row h sees key k iff last_key[h] - k lies in [0, span): span = the window, or 2^31 (every
  // key up to its own) without one; a dead row has last_key -1 and sees none. One unsigned
  // compare per score, as the causal mask alone cost.
  int32_t row[2], last_key[2];
  int64_t qh_offset[2];  // element offset of (token, query head) in a packed row space
  bool live[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t v = v_first + warp * 16 + gid + h * 8;
    live[h] = v < num_vectors;
    row[h] = live[h] ? static_cast<int32_t>(v / group) : 0;
    const int g = live[h] ? static_cast<int>(v % group) : 0;
    last_key[h] = (live[h] && seq_len > 0) ? pos0 + row[h] : -1;
    qh_offset[h] = static_cast<int64_t>(kv_head) * group + g;
  }

  // Q fragments, straight from global memory (once per block).
  uint32_t qa[kKSteps][4];
#pragma unroll
  for (int ks = 0; ks < kKSteps; ++ks) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int h = r & 1;  // regs 1 and 3 are row gid + 8
      const int col = ks * 16 + (r >> 1) * 8 + 2 * tig;
      if (live[h]) {
        const T* src = q + (q_begin + row[h]) * q_stride + qh_offset[h] * kD + col;
        qa[ks][r] = Pack(src[0], src[1]);
      } else {
        qa[ks][r] = 0;
      }
    }
  }

  float o[kDTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
    for (int c = 0; c < 4; ++c) o[dt][c] = 0.0f;
  }
  float m[2] = {kNegInf, kNegInf};
  float l[2] = {0.0f, 0.0f};

  const int32_t* table = meta.block_tables + static_cast<int64_t>(seq) * meta.max_blocks_per_seq;
  const int32_t bs = meta.block_size;
  const int64_t slot_stride = static_cast<int64_t>(num_kv_heads) * kD;
  const int64_t head_offset = static_cast<int64_t>(kv_head) * kD;
  using V8 = Vec<T, 8>;

  const uint32_t span = window > 0 ? static_cast<uint32_t>(window) : 0x80000000u;
  const float inv_cap = kSoftCap ? 1.0f / opts.soft_cap : 0.0f;
  for (int k0 = tile_first_key / kTileKeys * kTileKeys; k0 < tile_keys; k0 += kTileKeys) {
    __syncthreads();  // the previous tile's readers are done
    // Consecutive threads take consecutive keys: the transposed V stores then hit
    // consecutive 2-byte slots and the K stores distinct banks.
    for (int c = threadIdx.x; c < kTileKeys * kChunks; c += kThreads) {
      const int kk = c % kTileKeys;
      const int chunk = c / kTileKeys;
      const int key = k0 + kk;
      V8 kv, vv;
      if (key >= tile_first_key && key < tile_keys) {
        const int64_t offset =
            (static_cast<int64_t>(table[key / bs]) * bs + key % bs) * slot_stride + head_offset +
            chunk * 8;
        kv = *reinterpret_cast<const V8*>(k_cache + offset);
        vv = *reinterpret_cast<const V8*>(v_cache + offset);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          kv.v[e] = FromFloat<T>(0.0f);
          vv.v[e] = FromFloat<T>(0.0f);
        }
      }
      *reinterpret_cast<V8*>(&s_k[kk][chunk * 8]) = kv;
#pragma unroll
      for (int e = 0; e < 8; ++e) s_vt[chunk * 8 + e][kk] = vv.v[e];
    }
    __syncthreads();

    // S = Q · Kᵀ for the warp's 16 vectors and the tile's 64 keys.
    float s[kNTiles][4];
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) s[nt][c] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
        const T* krow = &s_k[nt * 8 + gid][ks * 16 + 2 * tig];
        Mma<T>(s[nt], qa[ks], *reinterpret_cast<const uint32_t*>(krow),
               *reinterpret_cast<const uint32_t*>(krow + 8));
      }
    }

    // Scale, soft cap, causal / window mask, online softmax (rows gid and gid + 8; a row's 64
    // scores are spread over the 4 lanes of its quad). The cap comes before the mask: a masked
    // key must stay -inf, not become -cap.
    float corr[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = kNegInf;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int key = k0 + nt * 8 + 2 * tig + c;
          float& x = s[nt][h * 2 + c];
          x *= scale;
          if constexpr (kSoftCap) x = SoftCap(x, opts.soft_cap, inv_cap);
          const bool seen =
              kWindow ? static_cast<uint32_t>(last_key[h] - key) < span : key <= last_key[h];
          x = seen ? x : kNegInf;
          mx = fmaxf(mx, x);
        }
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[h], mx);
      const float m_use = m_new == kNegInf ? 0.0f : m_new;
      corr[h] = __expf(m[h] - m_use);
      m[h] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float& x = s[nt][h * 2 + c];
          x = __expf(x - m_use);
          sum += x;
        }
      }
      l[h] = l[h] * corr[h] + sum;  // lane-partial; the quad's lanes are summed at the end
    }
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      o[dt][0] *= corr[0];
      o[dt][1] *= corr[0];
      o[dt][2] *= corr[1];
      o[dt][3] *= corr[1];
    }

    // O += P · V, P re-packed from the S accumulators as A fragments (16 keys per k-step).
#pragma unroll
    for (int kk = 0; kk < kTileKeys / 16; ++kk) {
      uint32_t pa[4];
      pa[0] = PackFloats<T>(s[2 * kk][0], s[2 * kk][1]);
      pa[1] = PackFloats<T>(s[2 * kk][2], s[2 * kk][3]);
      pa[2] = PackFloats<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[3] = PackFloats<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        const T* vrow = &s_vt[dt * 8 + gid][kk * 16 + 2 * tig];
        Mma<T>(o[dt], pa, *reinterpret_cast<const uint32_t*>(vrow),
               *reinterpret_cast<const uint32_t*>(vrow + 8));
      }
    }
  }

  // Normalise and store; a row that saw no key (padding) is written as zeros.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float total = l[h];
    total += __shfl_xor_sync(0xffffffffu, total, 1);
    total += __shfl_xor_sync(0xffffffffu, total, 2);
    if (!live[h]) continue;
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    T* dst = out + ((static_cast<int64_t>(q_begin) + row[h]) * num_q_heads + qh_offset[h]) * kD;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      dst[dt * 8 + 2 * tig] = FromFloat<T>(o[dt][h * 2] * inv);
      dst[dt * 8 + 2 * tig + 1] = FromFloat<T>(o[dt][h * 2 + 1] * inv);
    }
  }
}

template <typename T, int kD>
cudaError_t LaunchPrefillKernel(const T* q, int64_t q_stride, const T* k_cache, const T* v_cache,
                                T* out, const DeviceAttentionMetadata& meta, int32_t num_q_heads,
                                int32_t num_kv_heads, float scale, ScoreOptions opts,
                                cudaStream_t stream) {
  const int64_t group = num_q_heads / num_kv_heads;
  const int64_t tiles = (int64_t{meta.max_query_len} * group + kTileVectors - 1) / kTileVectors;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(meta.num_seqs),
                  static_cast<unsigned>(num_kv_heads));
  // One instantiation per variant: the plain kernel carries no window or cap arithmetic.
  auto* kernel = PrefillKernel<T, kD, false, false>;
  if (opts.sliding_window > 0) {
    kernel =
        opts.soft_cap > 0.0f ? PrefillKernel<T, kD, true, true> : PrefillKernel<T, kD, true, false>;
  } else if (opts.soft_cap > 0.0f) {
    kernel = PrefillKernel<T, kD, false, true>;
  }
  kernel<<<grid, kThreads, 0, stream>>>(q, q_stride, k_cache, v_cache, out, meta, num_q_heads,
                                        num_kv_heads, scale, opts);
  return cudaGetLastError();
}

// The unsplit decode kernel: any T, any head_dim.
template <typename T>
cudaError_t LaunchRowwise(const T* q, int64_t q_stride, const T* k_cache, const T* v_cache, T* out,
                          const DeviceAttentionMetadata& meta, int32_t num_q_heads,
                          int32_t num_kv_heads, int32_t head_dim, float scale, ScoreOptions opts,
                          cudaStream_t stream) {
  AttentionPlan plan;
  plan.decode = true;
  plan.num_partitions = 1;
  return LaunchDecodeAttention(q, q_stride, k_cache, v_cache, out, meta, num_q_heads, num_kv_heads,
                               head_dim, scale, opts, plan, nullptr, stream);
}

template <typename T>
cudaError_t LaunchTensorCore(const T* q, int64_t q_stride, const T* k_cache, const T* v_cache,
                             T* out, const DeviceAttentionMetadata& meta, int32_t num_q_heads,
                             int32_t num_kv_heads, int32_t head_dim, float scale, ScoreOptions opts,
                             cudaStream_t stream) {
  switch (head_dim) {
    case 16:
      return LaunchPrefillKernel<T, 16>(q, q_stride, k_cache, v_cache, out, meta, num_q_heads,
                                        num_kv_heads, scale, opts, stream);
    case 32:
      return LaunchPrefillKernel<T, 32>(q, q_stride, k_cache, v_cache, out, meta, num_q_heads,
                                        num_kv_heads, scale, opts, stream);
    case 64:
      return LaunchPrefillKernel<T, 64>(q, q_stride, k_cache, v_cache, out, meta, num_q_heads,
                                        num_kv_heads, scale, opts, stream);
    default:
      return LaunchPrefillKernel<T, 128>(q, q_stride, k_cache, v_cache, out, meta, num_q_heads,
                                         num_kv_heads, scale, opts, stream);
  }
}

// The tensor-core kernel's grid: x = ceil(max_query_len · group / 64) tiles (at most
// 2^31 - 1), y = num_seqs and z = num_kv_heads (each at most 65535; the caller bounds the
// heads).
bool TensorCoreShape(int32_t head_dim, const DeviceAttentionMetadata& meta, int32_t num_q_heads,
                     int32_t num_kv_heads) {
  const int64_t group = num_q_heads / num_kv_heads;
  const int64_t tiles = (int64_t{meta.max_query_len} * group + kTileVectors - 1) / kTileVectors;
  return (head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128) &&
         meta.num_seqs <= 65535 && tiles <= int64_t{0x7fffffff};
}

}  // namespace

template <typename T>
cudaError_t LaunchPrefillAttention(const T* q, int64_t q_stride, const T* k_cache, const T* v_cache,
                                   T* out, const DeviceAttentionMetadata& meta, int32_t num_q_heads,
                                   int32_t num_kv_heads, int32_t head_dim, float scale,
                                   ScoreOptions opts, cudaStream_t stream) {
  if constexpr (!std::is_same_v<T, float>) {
    if (TensorCoreShape(head_dim, meta, num_q_heads, num_kv_heads)) {
      if (meta.num_seqs == 0 || meta.max_query_len <= 0) return cudaSuccess;
      return LaunchTensorCore(q, q_stride, k_cache, v_cache, out, meta, num_q_heads, num_kv_heads,
                              head_dim, scale, opts, stream);
    }
  }
  return LaunchRowwise(q, q_stride, k_cache, v_cache, out, meta, num_q_heads, num_kv_heads,
                       head_dim, scale, opts, stream);
}

#define VLLM_INSTANTIATE_PREFILL(T)                                                                \
  template cudaError_t LaunchPrefillAttention<T>(const T*, int64_t, const T*, const T*, T*,        \
                                                 const DeviceAttentionMetadata&, int32_t, int32_t, \
                                                 int32_t, float, ScoreOptions, cudaStream_t);
VLLM_CUDA_INSTANTIATE_FOR_TYPES(VLLM_INSTANTIATE_PREFILL)

}  // namespace vllm::kernels::cuda::detail
