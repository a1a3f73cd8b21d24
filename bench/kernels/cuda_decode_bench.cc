// cuda_decode_bench: the decode / prefill roofline of the CUDA backend on the visible GPU
// (device 0), all in one run so every ratio compares figures from the same device and moment:
//   (a) HBM bandwidth: our 16-byte copy kernel over buffers far larger than L2, bytes read +
//       written / time, best of N (CUDA events);
//   (b) the cuBLASLt bf16 GEMM peak (CublasLtGemm): 8192³ and Llama-3-8B's prefill shapes;
//   (c) the decode step time of a dummy Llama-3-8B-shaped model (bf16) at batch 1, 8, 64, 256
//       with ~512 tokens of context each, against the HBM roofline = weight bytes read per
//       step / (a), eager and with CUDA graphs;
//   (d) prefill throughput (tokens/s, TFLOP/s) for 1×2048 and 4×512 tokens against (b).
// Without a visible GPU it says so and exits 0 (CI builds it on machines without one).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/kernels/cuda_decode_bench_model.h"
#include "bench/kernels/cuda_decode_kernels.h"
#include "kernels/cuda/cuda_probe.h"
#include "kernels/cuda/gemm.h"

namespace vllm::bench {
namespace {

namespace kc = kernels::cuda;

// Exits with a message on a CUDA error: a benchmark has nothing sensible to do after one.
void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cuda_decode_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

void* Alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  Check(cudaMalloc(&p, bytes), what);
  return p;
}

// Event-timed milliseconds of `enqueue` (which enqueues work on `stream`), `reps` times after
// `warmup` untimed runs; sorted ascending.
std::vector<double> TimeMs(const std::function<void()>& enqueue, cudaStream_t stream, int reps,
                           int warmup = 3) {
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "cudaEventCreate");
  Check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < warmup; ++i) enqueue();
  Check(cudaStreamSynchronize(stream), "warm-up");
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    Check(cudaEventRecord(start, stream), "cudaEventRecord");
    enqueue();
    Check(cudaEventRecord(stop, stream), "cudaEventRecord");
    Check(cudaEventSynchronize(stop), "timed run");
    float t = 0;
    Check(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms;
}

// (a) Bytes read + written per second by the copy kernel, best of 30, in GB/s.
double MeasureBandwidth(const cudaDeviceProp& prop, cudaStream_t stream) {
  size_t free_bytes = 0, total_bytes = 0;
  Check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  size_t bytes = std::min<size_t>(size_t{1} << 30, free_bytes / 8);
  bytes -= bytes % (size_t{1} << 20);
  void* in = Alloc(bytes, "copy source");
  void* out = Alloc(bytes, "copy destination");
  Check(cudaMemsetAsync(in, 1, bytes, stream), "cudaMemset");
  const std::vector<double> ms = TimeMs(
      [&] { Check(LaunchCopy16(in, out, bytes, prop.multiProcessorCount * 8, stream), "copy"); },
      stream, 30);
  cudaFree(in);
  cudaFree(out);
  const double gbs = 2.0 * static_cast<double>(bytes) / ms.front() / 1e6;
  int clock_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
  const double nominal = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;  // DDR
  std::printf("(a) HBM bandwidth: copy kernel, 2 x %zu MiB, best of %zu: %.3f ms -> %.0f GB/s",
              bytes >> 20, ms.size(), ms.front(), gbs);
  if (nominal > 0)
    std::printf(" (%.0f%% of the nominal %.0f GB/s)", 100.0 * gbs / nominal, nominal);
  std::printf("\n\n");
  return gbs;
}

// The GEMM runner the worker uses (a benchmark has nothing sensible to do without one).
std::unique_ptr<kc::CublasLtGemm> MakeGemm() {
  auto gemm = kc::CublasLtGemm::Create();
  if (!gemm.ok()) {
    std::fprintf(stderr, "cuda_decode_bench: %s\n", gemm.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*gemm);
}

// (b) cuBLASLt bf16 GEMM TFLOP/s over the 8B model's prefill shapes and 8192³; returns the
// best.
double MeasureGemmPeak(cudaStream_t stream) {
  const std::unique_ptr<kc::CublasLtGemm> gemm = MakeGemm();
  struct Shape {
    const char* name;
    int64_t m, n, k;
  };
  const Shape shapes[] = {{"8192^3", 8192, 8192, 8192},
                          {"qkv    2048x6144x4096", 2048, 6144, 4096},
                          {"o      2048x4096x4096", 2048, 4096, 4096},
                          {"gate_up 2048x28672x4096", 2048, 28672, 4096},
                          {"down   2048x4096x14336", 2048, 4096, 14336},
                          {"lm_head 2048x128256x4096", 2048, 128256, 4096}};
  int64_t max_x = 0, max_w = 0, max_y = 0;
  for (const Shape& s : shapes) {
    max_x = std::max(max_x, s.m * s.k);
    max_w = std::max(max_w, s.n * s.k);
    max_y = std::max(max_y, s.m * s.n);
  }
  void* x = Alloc(max_x * 2, "GEMM x");
  void* w = Alloc(max_w * 2, "GEMM w");
  void* y = Alloc(max_y * 2, "GEMM y");
  Check(LaunchFillBf16(x, max_x, 1, 1.0f, stream), "fill x");
  Check(LaunchFillBf16(w, max_w, 2, 0.02f, stream), "fill w");
  std::printf("(b) cuBLASLt GEMM, bf16 in/out, fp32 accumulate (y[m,n] = x[m,k] w[n,k]^T)\n");
  std::printf("    %-26s %10s %10s\n", "m x n x k", "best us", "TFLOP/s");
  double peak = 0;
  for (const Shape& s : shapes) {
    const std::vector<double> ms = TimeMs(
        [&] {
          absl::Status st =
              gemm->Linear(kc::GemmDType::kBFloat16, x, w, nullptr, y, s.m, s.n, s.k, stream);
          if (!st.ok()) {
            std::fprintf(stderr, "cuda_decode_bench: %s\n", st.ToString().c_str());
            std::exit(1);
          }
        },
        stream, 20);
    const double tflops = 2.0 * s.m * s.n * s.k / ms.front() / 1e9;
    peak = std::max(peak, tflops);
    std::printf("    %-26s %10.1f %10.1f\n", s.name, ms.front() * 1e3, tflops);
  }
  Check(cudaStreamSynchronize(stream), "GEMM");
  cudaFree(x);
  cudaFree(w);
  cudaFree(y);
  std::printf("    GEMM peak (best above): %.1f TFLOP/s\n\n", peak);
  return peak;
}

// (b') The decode step's GEMMs alone (m = 1 and 8, bf16) as the worker runs them (same
// CublasLtGemm, tuned as the worker tunes), weights rotated over a pool far larger than L2 so
// every run reads its weights from HBM: GB/s of weight read against (a), and the sum over one
// 8B decode step (32 layers + lm_head), which says how much of the step's time is outside the
// linear layers.
void MeasureDecodeGemms(double bandwidth_gbs, int l2_bytes, cudaStream_t stream) {
  const std::unique_ptr<kc::CublasLtGemm> gemm = MakeGemm();
  struct Shape {
    const char* name;
    int64_t n, k, per_step;  // per_step: how many times one decode step runs it
  };
  const Shape shapes[] = {{"qkv     6144x4096", 6144, 4096, 32},
                          {"o       4096x4096", 4096, 4096, 32},
                          {"gate_up 28672x4096", 28672, 4096, 32},
                          {"down    4096x14336", 4096, 14336, 32},
                          {"lm_head 128256x4096", 128256, 4096, 1}};
  const int64_t max_w = int64_t{128256} * 4096;
  // At least 4 x L2 of copies of the largest weight, rounded to whole copies.
  const int64_t copies = std::max<int64_t>(2, (int64_t{4} * l2_bytes) / (max_w * 2) + 1);
  void* pool = Alloc(copies * max_w * 2, "weight pool");
  void* x = Alloc(8 * 14336 * 2, "x");
  void* y = Alloc(8 * max_w / 4096 * 2, "y");
  Check(LaunchFillBf16(pool, copies * max_w, 3, 0.02f, stream), "fill pool");
  Check(LaunchFillBf16(x, 8 * 14336, 4, 1.0f, stream), "fill x");
  std::printf("(b') decode GEMMs alone, bf16, weights from HBM (rotated over %lld copies)\n",
              static_cast<long long>(copies));
  std::printf("    %-22s %4s %10s %8s %8s\n", "n x k", "m", "median us", "GB/s", "of (a)");
  for (int64_t m : {1, 8}) {
    double step_ms = 0, step_bytes = 0;
    for (const Shape& s : shapes) {
      // Offsets a whole number of this shape's weights apart, cycling over the pool.
      const int64_t slots = copies * max_w / (s.n * s.k);
      int64_t i = 0;
      const std::vector<double> ms = TimeMs(
          [&] {
            const char* w = static_cast<const char*>(pool) + (i++ % slots) * s.n * s.k * 2;
            absl::Status st =
                gemm->Linear(kc::GemmDType::kBFloat16, x, w, nullptr, y, m, s.n, s.k, stream);
            if (!st.ok()) {
              std::fprintf(stderr, "cuda_decode_bench: %s\n", st.ToString().c_str());
              std::exit(1);
            }
          },
          stream, 41);
      const double med = ms[ms.size() / 2];
      const double bytes = 2.0 * s.n * s.k;
      const double gbs = bytes / med / 1e6;
      step_ms += med * s.per_step;
      step_bytes += bytes * s.per_step;
      std::printf("    %-22s %4lld %10.1f %8.0f %7.0f%%\n", s.name, static_cast<long long>(m),
                  med * 1e3, gbs, 100.0 * gbs / bandwidth_gbs);
    }
    std::printf(
        "    one decode step's linear layers at m=%lld: %.3f ms (%.0f GB/s, %.0f%% of (a))\n",
        static_cast<long long>(m), step_ms, step_bytes / step_ms / 1e6,
        100.0 * step_bytes / step_ms / 1e6 / bandwidth_gbs);
  }
  Check(cudaStreamSynchronize(stream), "decode GEMMs");
  cudaFree(pool);
  cudaFree(x);
  cudaFree(y);
  std::printf("\n");
}

}  // namespace
}  // namespace vllm::bench

int main() {
  using namespace vllm::bench;
  if (vllm::kernels::CudaDeviceCount() == 0) {
    std::printf("cuda_decode_bench: no CUDA device visible; nothing measured\n");
    return 0;
  }
  Check(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  size_t free_bytes = 0, total_bytes = 0;
  Check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  std::printf("device: %s (sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB)\n\n", prop.name, prop.major,
              prop.minor, prop.multiProcessorCount, total_bytes / 1073741824.0,
              prop.l2CacheSize >> 20);
  cudaStream_t stream = nullptr;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const double bandwidth_gbs = MeasureBandwidth(prop, stream);
  const double gemm_peak_tflops = MeasureGemmPeak(stream);
  MeasureDecodeGemms(bandwidth_gbs, prop.l2CacheSize, stream);
  const int rc = RunModelBench(bandwidth_gbs, gemm_peak_tflops, stream);
  cudaStreamDestroy(stream);
  return rc;
}
