// CUDA op microbenchmark: RMSNorm / fused-add RMSNorm / SiLU-and-mul bandwidth against a plain
// 16-byte copy kernel measured in the same run, and cuBLASLt GEMM TFLOP/s on Llama-3-8B
// shapes (bf16), and paged attention (decode: µs and GB/s of KV read; prefill: TFLOP/s) on the
// Llama-3-8B head shape. Times are medians of CUDA-event-timed repetitions after a warm-up; buffers
// are larger than L2 so bandwidth is device memory's. Prints one table.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_probe.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"

namespace {

using bf16 = __nv_bfloat16;
namespace kc = vllm::kernels::cuda;

__global__ void CopyKernel(const uint4* __restrict__ in, uint4* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = in[i];
  }
}

__global__ void FillKernel(bf16* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    p[i] = __float2bfloat16(static_cast<float>(h & 0xFFFF) / 65536.0f - 0.5f);
  }
}

bf16* Alloc(int64_t n) {
  void* p = nullptr;
  if (cudaMalloc(&p, n * sizeof(bf16)) != cudaSuccess) {
    std::fprintf(stderr, "cudaMalloc of %lld elements failed\n", static_cast<long long>(n));
    std::exit(1);
  }
  FillKernel<<<1024, 256>>>(static_cast<bf16*>(p), n, 12345u);
  return static_cast<bf16*>(p);
}

// Median milliseconds of `fn` over `reps` event-timed runs after 3 warm-ups.
double MedianMs(const std::function<void()>& fn, int reps = 20) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) fn();
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a);
    fn();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms[i], a, b);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(e));
    std::exit(1);
  }
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

void Row(const char* name, double ms, double bytes, double copy_gbs) {
  const double gbs = bytes / ms / 1e6;
  std::printf("%-44s %9.1f us %8.0f GB/s %6.0f%% of copy\n", name, ms * 1e3, gbs,
              100.0 * gbs / copy_gbs);
}

int32_t* UploadInts(const std::vector<int32_t>& host) {
  void* p = nullptr;
  if (cudaMalloc(&p, std::max<size_t>(host.size(), 1) * sizeof(int32_t)) != cudaSuccess) {
    std::fprintf(stderr, "cudaMalloc of %zu ints failed\n", host.size());
    std::exit(1);
  }
  cudaMemcpy(p, host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice);
  return static_cast<int32_t*>(p);
}

// One PagedAttention call on the Llama-3-8B head shape (32 query heads, 8 KV heads,
// head_dim 128, bf16, block size 16): `batch` sequences of `q_len` new rows over `ctx`
// cached tokens, blocks in a shuffled order. `bound` is the host max_seq_len (0: ctx).
// Returns the median milliseconds.
double AttentionMs(int32_t batch, int32_t q_len, int32_t ctx, int32_t bound) {
  constexpr int32_t kQHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlockSize = 16;
  const int32_t blocks_per_seq = (ctx + kBlockSize - 1) / kBlockSize;
  const int64_t num_blocks = int64_t{batch} * blocks_per_seq;
  const int64_t cache_elems = num_blocks * kBlockSize * kKvHeads * kHeadDim;
  bf16* k = Alloc(cache_elems);
  bf16* v = Alloc(cache_elems);
  const int64_t tokens = int64_t{batch} * q_len;
  bf16* q = Alloc(tokens * kQHeads * kHeadDim);
  bf16* out = Alloc(tokens * kQHeads * kHeadDim);
  std::vector<int32_t> table(num_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(7));
  std::vector<int32_t> qsl(batch + 1);
  for (int32_t s = 0; s <= batch; ++s) qsl[s] = s * q_len;
  int32_t* d_table = UploadInts(table);
  int32_t* d_qsl = UploadInts(qsl);
  int32_t* d_lens = UploadInts(std::vector<int32_t>(batch, ctx));
  kc::DeviceAttentionMetadata meta;
  meta.num_seqs = batch;
  meta.num_tokens = tokens;
  meta.query_start_loc = d_qsl;
  meta.seq_lens = d_lens;
  meta.block_tables = d_table;
  meta.max_blocks_per_seq = blocks_per_seq;
  meta.block_size = kBlockSize;
  meta.max_query_len = q_len;
  meta.max_seq_len = bound > 0 ? bound : ctx;
  const size_t ws_bytes = kc::PagedAttentionWorkspaceBytes(meta, kQHeads, kHeadDim);
  void* ws = nullptr;
  if (ws_bytes > 0 && cudaMalloc(&ws, ws_bytes) != cudaSuccess) {
    std::fprintf(stderr, "cudaMalloc of the %zu-byte workspace failed\n", ws_bytes);
    std::exit(1);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  const double ms = MedianMs([&] {
    const cudaError_t e =
        kc::PagedAttention(q, int64_t{kQHeads} * kHeadDim, k, v, out, meta, kQHeads, kKvHeads,
                           kHeadDim, scale, ws, ws_bytes, nullptr);
    if (e != cudaSuccess) std::fprintf(stderr, "PagedAttention: %s\n", cudaGetErrorString(e));
  });
  for (void* p : {static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(q),
                  static_cast<void*>(out), static_cast<void*>(d_table), static_cast<void*>(d_qsl),
                  static_cast<void*>(d_lens), ws}) {
    cudaFree(p);
  }
  return ms;
}

void AttentionTable(double copy_gbs) {
  constexpr double kKvBytesPerToken = 8 * 128 * 2 * 2.0;  // K and V, 8 KV heads, bf16
  std::printf("\n%-44s %9s    %8s\n", "paged attention decode (8B heads, bf16)", "median",
              "KV read");
  for (int32_t ctx : {512, 2048}) {
    for (int32_t batch : {1, 8, 64, 256}) {
      char name[64];
      std::snprintf(name, sizeof(name), "decode batch %d ctx %d", batch, ctx);
      Row(name, AttentionMs(batch, 1, ctx, 0), kKvBytesPerToken * batch * ctx, copy_gbs);
    }
  }
  // As a decode CUDA graph launches it: max_seq_len = max_model_len, most partitions idle.
  Row("decode batch 64 ctx 2048, bound 8192", AttentionMs(64, 1, 2048, 8192),
      kKvBytesPerToken * 64 * 2048, copy_gbs);
  std::printf("\n%-44s %9s %10s\n", "paged attention prefill (8B heads, bf16)", "median",
              "TFLOP/s");
  for (auto [batch, len] : {std::pair{1, 2048}, std::pair{4, 512}, std::pair{1, 8192}}) {
    const double ms = AttentionMs(batch, len, len, 0);
    // Causal: each row sees its position + 1 keys; 2 GEMMs of 2 FLOPs per multiply-add.
    const double flops = 4.0 * 32 * 128 * batch * (static_cast<double>(len) * (len + 1) / 2);
    char name[64];
    std::snprintf(name, sizeof(name), "prefill %d x %d", batch, len);
    std::printf("%-44s %9.1f us %10.1f\n", name, ms * 1e3, flops / ms / 1e9);
  }
}

}  // namespace

int main() {
  if (vllm::kernels::CudaDeviceCount() == 0) {
    std::printf("no CUDA device visible: nothing to measure\n");
    return 0;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s, %d SMs, L2 %d MiB\n\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20);

  // Memory-bound ops, bf16, Llama-3-8B widths, 256 MiB-class buffers (well over L2).
  const int64_t tokens = 16384, hidden = 4096, inter = 14336;
  bf16* x = Alloc(tokens * hidden);
  bf16* res = Alloc(tokens * hidden);
  bf16* out = Alloc(tokens * hidden);
  bf16* w = Alloc(hidden);
  const int64_t act_tokens = 4096;
  bf16* gate_up = Alloc(act_tokens * 2 * inter);
  bf16* act = Alloc(act_tokens * inter);

  const int64_t copy_bytes = tokens * hidden * 2;
  const double copy_ms = MedianMs([&] {
    CopyKernel<<<prop.multiProcessorCount * 8, 512>>>(
        reinterpret_cast<const uint4*>(x), reinterpret_cast<uint4*>(out), copy_bytes / 16);
  });
  const double copy_gbs = 2.0 * copy_bytes / copy_ms / 1e6;
  std::printf("%-44s %9s    %8s      %s\n", "op (bf16)", "median", "read+write", "");
  Row("copy kernel 128 MiB", copy_ms, 2.0 * copy_bytes, copy_gbs);
  Row("RmsNorm 16384x4096",
      MedianMs([&] { (void)kc::RmsNorm(x, w, out, tokens, hidden, 1e-5f, nullptr); }),
      2.0 * copy_bytes, copy_gbs);
  Row("FusedAddRmsNorm 16384x4096",
      MedianMs([&] { (void)kc::FusedAddRmsNorm(out, res, w, tokens, hidden, 1e-5f, nullptr); }),
      4.0 * copy_bytes, copy_gbs);
  Row("RmsNorm 1x4096 (decode, launch-bound)",
      MedianMs([&] { (void)kc::RmsNorm(x, w, out, 1, hidden, 1e-5f, nullptr); }), 2.0 * hidden * 2,
      copy_gbs);
  Row("SiluAndMul 4096x14336",
      MedianMs([&] { (void)kc::SiluAndMul(gate_up, act, act_tokens, inter, nullptr); }),
      3.0 * act_tokens * inter * 2, copy_gbs);

  AttentionTable(copy_gbs);

  // GEMM TFLOP/s, bf16, 8B projections.
  auto gemm = kc::CublasLtGemm::Create();
  if (!gemm.ok()) {
    std::printf("GEMM: %s\n", gemm.status().ToString().c_str());
    return 1;
  }
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape shapes[] = {{"qkv 6144x4096", 6144, 4096},
                          {"o 4096x4096", 4096, 4096},
                          {"gate_up 28672x4096", 28672, 4096},
                          {"down 4096x14336", 4096, 14336}};
  std::printf("\n%-22s %6s %10s %10s %9s\n", "GEMM (bf16)", "m", "median us", "TFLOP/s",
              "GB/s (w)");
  bf16* big_w = Alloc(28672LL * 4096);
  bf16* big_x = Alloc(8192LL * 14336);
  bf16* big_y = Alloc(8192LL * 28672);
  for (const Shape& s : shapes) {
    for (int64_t m : {1, 16, 128, 1024, 8192}) {
      const double ms = MedianMs([&] {
        absl::Status st = (*gemm)->Linear(kc::GemmDType::kBFloat16, big_x, big_w, nullptr, big_y, m,
                                          s.n, s.k, nullptr);
        if (!st.ok()) std::fprintf(stderr, "%s\n", st.ToString().c_str());
      });
      const double flops = 2.0 * m * s.n * s.k;
      std::printf("%-22s %6lld %10.1f %10.1f %9.0f\n", s.name, static_cast<long long>(m), ms * 1e3,
                  flops / ms / 1e9, 2.0 * s.n * s.k / ms / 1e6);
    }
  }
  return 0;
}
