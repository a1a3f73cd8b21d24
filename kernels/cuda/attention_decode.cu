// Paged attention, decode path: one block per (query row, group of query heads sharing a KV
// head, split-K partition of the row's keys), then a reduction kernel that merges the
// partitions' (max, sum, output) triples when there is more than one.
//
// Inside a block each warp walks its share of the partition's keys with an online softmax.
// A key's row (head_dim elements of one KV head) is read by a "thread group" of kTG lanes,
// 16 bytes per lane, so a warp reads 32 / kTG keys at a time, kU of them per lane in
// flight (K and V loads issued together before any use). The group's lanes reduce their
// partial dot products with xor shuffles, so every lane of a group holds the key's scores
// for all kGc query heads and keeps an identical running (max, sum); each lane accumulates
// the output dims of its own 16-byte slice. At the end the groups of a warp, then the warps
// of the block (through shared memory), are merged.
#include "kernels/cuda/attention_internal.cuh"
#include "kernels/cuda/common.cuh"

namespace vllm::kernels::cuda::detail {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr float kNegInf = -__builtin_huge_valf();

__host__ __device__ constexpr int NextPow2(int x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

// Compile-time shape of the decode kernel for element T and head_dim kD (0: any multiple
// of 8 up to kMaxHeadDim, read at run time).
template <typename T, int kD>
struct DecodeShape {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // elements per 16 bytes
  static constexpr int kMaxD = kD > 0 ? kD : kMaxHeadDim;
  static constexpr int kRowVecs = kMaxD / kVec;  // 16-byte vectors in a key row (at most)
  static constexpr int kTG = NextPow2(kRowVecs) < 32 ? NextPow2(kRowVecs) : 32;  // lanes/key
  static constexpr int kNV = (kRowVecs + kTG - 1) / kTG;  // vectors per lane per key
  static constexpr int kGroups = 32 / kTG;                // keys a warp reads at once
  static constexpr int kU = 4;                            // keys per group per step
  static constexpr int kWarpStep = kGroups * kU;          // keys a warp handles per step
};

template <typename T>
__device__ __forceinline__ void AddScaled(float (&acc)[16 / sizeof(T)], float p,
                                          const Vec<T, 16 / sizeof(T)>& v) {
#pragma unroll
  for (int e = 0; e < static_cast<int>(16 / sizeof(T)); ++e) acc[e] += p * ToFloat(v.v[e]);
}

// Grid: x = query row (token), y = head block (kGc query heads of one KV head), z =
// partition of the row's visible keys (its last opts.sliding_window when windowed). Writes
// `out` directly when num_partitions == 1, else the workspace. The soft cap is a template flag
// (kSoftCap): as a run-time branch in the score loop it cost the plain kernel spills; the
// window only moves the partition bounds, so it stays a run-time value.
template <typename T, int kD, int kGc, bool kSoftCap>
__global__ void __launch_bounds__(kThreads)
    DecodeKernel(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ k_cache,
                 const T* __restrict__ v_cache, T* __restrict__ out, float2* __restrict__ ws_ml,
                 float* __restrict__ ws_out, DeviceAttentionMetadata meta, int32_t num_q_heads,
                 int32_t num_kv_heads, int32_t head_dim, float scale, ScoreOptions opts,
                 int32_t num_partitions) {
  using S = DecodeShape<T, kD>;
  using V = Vec<T, S::kVec>;
  constexpr int kVec = S::kVec;
  const int d = kD > 0 ? kD : head_dim;
  const int row_vecs = d / kVec;

  const int64_t token = blockIdx.x;
  const int h0 = blockIdx.y * kGc;  // first query head of this block
  const int part = blockIdx.z;
  const int group = num_q_heads / num_kv_heads;
  const int kv_head = h0 / group;

  const RowPlace place = LocateRow(meta, token, opts.sliding_window);
  // Only the window's keys are split, so a window much shorter than the context still
  // spreads over every partition; blocks before first_key are never touched.
  const int partition_size = PartitionKeys(place.num_keys - place.first_key, num_partitions);
  // <= num_keys + num_partitions · 64: no overflow.
  const int begin = place.first_key + part * partition_size;
  if (begin >= place.num_keys) {
    // Nothing to see: a zero row when this block owns the output, else the reduction skips
    // this partition (it recomputes num_keys).
    if (num_partitions == 1) {
      T* dst = out + (token * num_q_heads + h0) * d;
      for (int i = threadIdx.x; i < kGc * d; i += kThreads) dst[i] = FromFloat<T>(0.0f);
    }
    return;
  }
  const int end = min(begin + partition_size, place.num_keys);

  __shared__ float s_q[kGc * S::kMaxD];
  __shared__ float s_acc[kWarps][kGc][S::kMaxD];
  __shared__ float s_m[kWarps][kGc];
  __shared__ float s_l[kWarps][kGc];

  // q rows of the block's heads, scaled, through shared memory (any q_stride, any alignment).
  const T* q_row = q + token * q_stride + static_cast<int64_t>(h0) * d;
  for (int i = threadIdx.x; i < kGc * d; i += kThreads) s_q[i] = ToFloat(q_row[i]) * scale;
  __syncthreads();

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int gi = lane / S::kTG;  // key group within the warp
  const int gl = lane % S::kTG;  // lane within the group

  float qr[kGc][S::kNV][kVec];
  float acc[kGc][S::kNV][kVec];
  float m[kGc], l[kGc];
#pragma unroll
  for (int g = 0; g < kGc; ++g) {
    m[g] = kNegInf;
    l[g] = 0.0f;
#pragma unroll
    for (int j = 0; j < S::kNV; ++j) {
      const int vi = gl + j * S::kTG;
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        qr[g][j][e] = vi < row_vecs ? s_q[g * d + vi * kVec + e] : 0.0f;
        acc[g][j][e] = 0.0f;
      }
    }
  }

  const int32_t* table =
      meta.block_tables + static_cast<int64_t>(place.seq) * meta.max_blocks_per_seq;
  const int32_t bs = meta.block_size;
  const int64_t slot_stride = static_cast<int64_t>(num_kv_heads) * d;
  const T* k_head = k_cache + static_cast<int64_t>(kv_head) * d;
  const T* v_head = v_cache + static_cast<int64_t>(kv_head) * d;
  const float inv_cap = kSoftCap ? 1.0f / opts.soft_cap : 0.0f;

  // Every lane of a warp runs the same iterations (the bounds depend on the warp only), so
  // the shuffles below always see the full warp.
  for (int base = begin + warp * S::kWarpStep; base < end; base += kWarps * S::kWarpStep) {
    V kv[S::kU][S::kNV];
    V vv[S::kU][S::kNV];
    bool valid[S::kU];
#pragma unroll
    for (int u = 0; u < S::kU; ++u) {
      const int key = base + u * S::kGroups + gi;
      valid[u] = key < end;
      int64_t offset = 0;
      if (valid[u]) {
        const int64_t block = table[key / bs];
        offset = (block * bs + (key % bs)) * slot_stride;
      }
#pragma unroll
      for (int j = 0; j < S::kNV; ++j) {
        const int vi = gl + j * S::kTG;
        if (valid[u] && vi < row_vecs) {
          kv[u][j] = *reinterpret_cast<const V*>(k_head + offset + vi * kVec);
          vv[u][j] = *reinterpret_cast<const V*>(v_head + offset + vi * kVec);
        } else {
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            kv[u][j].v[e] = FromFloat<T>(0.0f);
            vv[u][j].v[e] = FromFloat<T>(0.0f);
          }
        }
      }
    }
    float s[S::kU][kGc];
#pragma unroll
    for (int u = 0; u < S::kU; ++u) {
#pragma unroll
      for (int g = 0; g < kGc; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int j = 0; j < S::kNV; ++j) {
#pragma unroll
          for (int e = 0; e < kVec; ++e) dot += qr[g][j][e] * ToFloat(kv[u][j].v[e]);
        }
#pragma unroll
        for (int off = S::kTG / 2; off > 0; off >>= 1)
          dot += __shfl_xor_sync(0xffffffffu, dot, off);
        // The cap before the mask: a masked key must stay -inf, not become -cap.
        if constexpr (kSoftCap) dot = SoftCap(dot, opts.soft_cap, inv_cap);
        s[u][g] = valid[u] ? dot : kNegInf;
      }
    }
#pragma unroll
    for (int g = 0; g < kGc; ++g) {
      float mx = s[0][g];
#pragma unroll
      for (int u = 1; u < S::kU; ++u) mx = fmaxf(mx, s[u][g]);
      const float m_new = fmaxf(m[g], mx);
      const float m_use = m_new == kNegInf ? 0.0f : m_new;  // no key yet: keep everything 0
      const float corr = __expf(m[g] - m_use);
      m[g] = m_new;
      l[g] *= corr;
#pragma unroll
      for (int j = 0; j < S::kNV; ++j) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[g][j][e] *= corr;
      }
#pragma unroll
      for (int u = 0; u < S::kU; ++u) {
        const float p = __expf(s[u][g] - m_use);
        l[g] += p;
#pragma unroll
        for (int j = 0; j < S::kNV; ++j) AddScaled<T>(acc[g][j], p, vv[u][j]);
      }
    }
  }

  // Merge the key groups of the warp: lanes with the same slice (same gl) across groups.
#pragma unroll
  for (int g = 0; g < kGc; ++g) {
    float mw = m[g];
#pragma unroll
    for (int off = S::kTG; off < 32; off <<= 1)
      mw = fmaxf(mw, __shfl_xor_sync(0xffffffffu, mw, off));
    const float mw_use = mw == kNegInf ? 0.0f : mw;
    const float sc = __expf(m[g] - mw_use);
    float lw = l[g] * sc;
#pragma unroll
    for (int off = S::kTG; off < 32; off <<= 1) lw += __shfl_xor_sync(0xffffffffu, lw, off);
#pragma unroll
    for (int j = 0; j < S::kNV; ++j) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        float a = acc[g][j][e] * sc;
#pragma unroll
        for (int off = S::kTG; off < 32; off <<= 1) a += __shfl_xor_sync(0xffffffffu, a, off);
        acc[g][j][e] = a;
      }
    }
    if (gi == 0) {
#pragma unroll
      for (int j = 0; j < S::kNV; ++j) {
        const int vi = gl + j * S::kTG;
        if (vi < row_vecs) {
#pragma unroll
          for (int e = 0; e < kVec; ++e) s_acc[warp][g][vi * kVec + e] = acc[g][j][e];
        }
      }
    }
    if (lane == 0) {
      s_m[warp][g] = mw;
      s_l[warp][g] = lw;
    }
  }
  __syncthreads();

  // Merge the warps; one thread per (head, dim). The partition has at least one key, so
  // the merged max is finite and the merged sum positive.
  const int64_t row0 = token * num_q_heads + h0;  // (token, head) row of head h0
  for (int i = threadIdx.x; i < kGc * d; i += kThreads) {
    const int g = i / d;
    const int dim = i - g * d;
    float mb = s_m[0][g];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) mb = fmaxf(mb, s_m[w][g]);
    float lb = 0.0f, ab = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float sc = __expf(s_m[w][g] - mb);  // an idle warp has max -inf: weight 0
      lb += s_l[w][g] * sc;
      ab += s_acc[w][g][dim] * sc;
    }
    if (num_partitions == 1) {
      out[(row0 + g) * d + dim] = FromFloat<T>(ab / lb);
    } else {
      const int64_t prow = (row0 + g) * num_partitions + part;
      ws_out[prow * d + dim] = ab / lb;
      if (dim == 0) ws_ml[prow] = make_float2(mb, lb);
    }
  }
}

// Merges the partitions of one (token, head) row: grid.x = num_tokens · num_q_heads.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ReduceKernel(const float2* __restrict__ ws_ml, const float* __restrict__ ws_out,
                 T* __restrict__ out, DeviceAttentionMetadata meta, int32_t num_q_heads,
                 int32_t head_dim, int32_t sliding_window, int32_t num_partitions) {
  const int64_t row = blockIdx.x;
  const int64_t token = row / num_q_heads;
  const RowPlace place = LocateRow(meta, token, sliding_window);
  T* dst = out + row * head_dim;
  if (place.num_keys <= 0) {
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) dst[i] = FromFloat<T>(0.0f);
    return;
  }
  // As DecodeKernel: the partitions that hold keys, counted over the row's visible keys.
  const int32_t visible = place.num_keys - place.first_key;
  const int32_t partition_size = PartitionKeys(visible, num_partitions);
  const int n = min((visible + partition_size - 1) / partition_size, num_partitions);
  const float2* ml = ws_ml + row * num_partitions;
  const float* po = ws_out + row * num_partitions * head_dim;
  float mx = kNegInf;
  for (int p = 0; p < n; ++p) mx = fmaxf(mx, ml[p].x);
  float total = 0.0f;
  for (int p = 0; p < n; ++p) total += ml[p].y * __expf(ml[p].x - mx);
  const float inv_total = 1.0f / total;
  for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
    float a = 0.0f;
    for (int p = 0; p < n; ++p) a += ml[p].y * __expf(ml[p].x - mx) * po[p * head_dim + i];
    dst[i] = FromFloat<T>(a * inv_total);
  }
}

template <typename T, int kD, int kGc>
cudaError_t LaunchDecodeKernel(const T* q, int64_t q_stride, const T* k_cache, const T* v_cache,
                               T* out, float2* ws_ml, float* ws_out,
                               const DeviceAttentionMetadata& meta, int32_t num_q_heads,
                               int32_t num_kv_heads, int32_t head_dim, float scale,
                               ScoreOptions opts, const AttentionPlan& plan, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(meta.num_tokens), static_cast<unsigned>(num_q_heads / kGc),
                  static_cast<unsigned>(plan.num_partitions));
  auto* kernel =
      opts.soft_cap > 0.0f ? DecodeKernel<T, kD, kGc, true> : DecodeKernel<T, kD, kGc, false>;
  kernel<<<grid, kThreads, 0, stream>>>(q, q_stride, k_cache, v_cache, out, ws_ml, ws_out, meta,
                                        num_q_heads, num_kv_heads, head_dim, scale, opts,
                                        plan.num_partitions);
  return cudaGetLastError();
}

template <typename T, int kD>
cudaError_t DispatchGroup(const T* q, int64_t q_stride, const T* k_cache, const T* v_cache, T* out,
                          float2* ws_ml, float* ws_out, const DeviceAttentionMetadata& meta,
                          int32_t num_q_heads, int32_t num_kv_heads, int32_t head_dim, float scale,
                          ScoreOptions opts, const AttentionPlan& plan, cudaStream_t stream) {
  // Heads per block: the largest power of two up to 8 dividing the group, so a block's
  // heads share one KV head and each K/V row it reads serves all of them.
  const int group = num_q_heads / num_kv_heads;
  if (group % 8 == 0) {
    return LaunchDecodeKernel<T, kD, 8>(q, q_stride, k_cache, v_cache, out, ws_ml, ws_out, meta,
                                        num_q_heads, num_kv_heads, head_dim, scale, opts, plan,
                                        stream);
  }
  if (group % 4 == 0) {
    return LaunchDecodeKernel<T, kD, 4>(q, q_stride, k_cache, v_cache, out, ws_ml, ws_out, meta,
                                        num_q_heads, num_kv_heads, head_dim, scale, opts, plan,
                                        stream);
  }
  if (group % 2 == 0) {
    return LaunchDecodeKernel<T, kD, 2>(q, q_stride, k_cache, v_cache, out, ws_ml, ws_out, meta,
                                        num_q_heads, num_kv_heads, head_dim, scale, opts, plan,
                                        stream);
  }
  return LaunchDecodeKernel<T, kD, 1>(q, q_stride, k_cache, v_cache, out, ws_ml, ws_out, meta,
                                      num_q_heads, num_kv_heads, head_dim, scale, opts, plan,
                                      stream);
}

}  // namespace

template <typename T>
cudaError_t LaunchDecodeAttention(const T* q, int64_t q_stride, const T* k_cache, const T* v_cache,
                                  T* out, const DeviceAttentionMetadata& meta, int32_t num_q_heads,
                                  int32_t num_kv_heads, int32_t head_dim, float scale,
                                  ScoreOptions opts, const AttentionPlan& plan, void* workspace,
                                  cudaStream_t stream) {
  float2* ws_ml = nullptr;
  float* ws_out = nullptr;
  if (plan.num_partitions > 1) {
    ws_ml = static_cast<float2*>(workspace);
    ws_out = reinterpret_cast<float*>(static_cast<char*>(workspace) + plan.out_offset);
  }
  cudaError_t err;
  switch (head_dim) {
    case 16:
      err = DispatchGroup<T, 16>(q, q_stride, k_cache, v_cache, out, ws_ml, ws_out, meta,
                                 num_q_heads, num_kv_heads, head_dim, scale, opts, plan, stream);
      break;
    case 32:
      err = DispatchGroup<T, 32>(q, q_stride, k_cache, v_cache, out, ws_ml, ws_out, meta,
                                 num_q_heads, num_kv_heads, head_dim, scale, opts, plan, stream);
      break;
    case 64:
      err = DispatchGroup<T, 64>(q, q_stride, k_cache, v_cache, out, ws_ml, ws_out, meta,
                                 num_q_heads, num_kv_heads, head_dim, scale, opts, plan, stream);
      break;
    case 128:
      err = DispatchGroup<T, 128>(q, q_stride, k_cache, v_cache, out, ws_ml, ws_out, meta,
                                  num_q_heads, num_kv_heads, head_dim, scale, opts, plan, stream);
      break;
    default:
      err = DispatchGroup<T, 0>(q, q_stride, k_cache, v_cache, out, ws_ml, ws_out, meta,
                                num_q_heads, num_kv_heads, head_dim, scale, opts, plan, stream);
      break;
  }
  if (err != cudaSuccess || plan.num_partitions == 1) return err;
  const int64_t rows = meta.num_tokens * num_q_heads;
  ReduceKernel<T><<<static_cast<unsigned>(rows), ThreadsFor(head_dim, kThreads), 0, stream>>>(
      ws_ml, ws_out, out, meta, num_q_heads, head_dim, opts.sliding_window, plan.num_partitions);
  return cudaGetLastError();
}

#define VLLM_INSTANTIATE_DECODE(T)                                                                 \
  template cudaError_t LaunchDecodeAttention<T>(                                                   \
      const T*, int64_t, const T*, const T*, T*, const DeviceAttentionMetadata&, int32_t, int32_t, \
      int32_t, float, ScoreOptions, const AttentionPlan&, void*, cudaStream_t);
VLLM_CUDA_INSTANTIATE_FOR_TYPES(VLLM_INSTANTIATE_DECODE)

}  // namespace vllm::kernels::cuda::detail
