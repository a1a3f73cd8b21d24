// comm_bench: all-reduce latency and bus bandwidth of our shared-memory communicator against
// gloo (TCP on 127.0.0.1), same run, same machine, ranks as forked processes.
//
//   comm_bench [--quick] [--worlds 2,4]
//
// For each world size and backend: the parent creates the group (CommGroup), forks one process
// per rank, each joins and all-reduces every size back to back (a few warm-up calls first)
// and times each call. A call's latency is the longest of the ranks' times for it: back to
// back, the rank that arrives last finds the others waiting and returns at once, so one rank's
// time alone would under-report. Prints a Markdown table: median and p99 latency in µs, bus
// bandwidth (NCCL's convention: size / median time * 2 (N - 1) / N), and gloo's median over
// ours.
// Single-thread memcpy bandwidth (64 MiB, out of cache) is printed as the limit: an
// all-reduce moves several times its size through memory on every rank.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/common/bench_util.h"
#include "kernels/comm/group_spec.h"

namespace vllm::bench {
namespace {

using kernels::comm::CommGroup;
using kernels::comm::CommGroupSpec;
using Backend = CommGroupSpec::Backend;

constexpr size_t kSizes[] = {4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
constexpr int kNumSizes = sizeof(kSizes) / sizeof(kSizes[0]);

constexpr int kMaxIters = 2000;

struct SizeResult {
  double p50_us = 0;
  double p99_us = 0;
};

int Iterations(size_t bytes, bool quick) {
  const int64_t n = (int64_t{1} << 30) / static_cast<int64_t>(bytes);
  return static_cast<int>(
      std::clamp<int64_t>(quick ? n / 8 : n, quick ? 5 : 20, quick ? 200 : kMaxIters));
}

// Per-call times of every rank, [size][rank][iteration] in ns, in a MAP_SHARED mapping made
// before the fork; the parent reads it after the ranks exited.
class SharedSamples {
 public:
  explicit SharedSamples(int32_t world) : world_(world) {
    bytes_ = sizeof(double) * kNumSizes * static_cast<size_t>(world) * kMaxIters;
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<double*>(p);
  }
  ~SharedSamples() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  bool ok() const { return data_ != nullptr; }
  double* at(int size, int32_t rank) const {
    return data_ +
           (static_cast<size_t>(size) * static_cast<size_t>(world_) + static_cast<size_t>(rank)) *
               kMaxIters;
  }
  // p50/p99 over calls of the slowest rank's time for each call.
  SizeResult Summary(int size, int iters) const {
    std::vector<double> worst(static_cast<size_t>(iters), 0.0);
    for (int32_t r = 0; r < world_; ++r) {
      for (int i = 0; i < iters; ++i) worst[i] = std::max(worst[i], at(size, r)[i]);
    }
    const LatencyStats stats = Summarize(std::move(worst));
    return SizeResult{stats.p50_us, stats.p99_us};
  }

 private:
  int32_t world_;
  size_t bytes_ = 0;
  double* data_ = nullptr;
};

// One rank: join, all-reduce each size, record each call's time.
int RunRank(const CommGroupSpec& spec, int32_t rank, bool quick, const SharedSamples* out) {
  auto comm = kernels::comm::JoinGroup(spec, rank, absl::Seconds(60));
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, comm.status().ToString().c_str());
    return 1;
  }
  std::vector<float> data(kSizes[kNumSizes - 1] / sizeof(float), 0.0f);  // zeros stay zeros
  for (int s = 0; s < kNumSizes; ++s) {
    const size_t count = kSizes[s] / sizeof(float);
    const int iters = Iterations(kSizes[s], quick);
    double* samples = out->at(s, rank);
    for (int i = -3; i < iters; ++i) {
      const int64_t t0 = NowNs();
      if (absl::Status st = (*comm)->AllReduceSum(data.data(), count); !st.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, st.ToString().c_str());
        return 1;
      }
      if (i >= 0) samples[i] = static_cast<double>(NowNs() - t0);
    }
  }
  return 0;
}

// Runs one group; on success fills out[size].
absl::Status RunGroup(Backend backend, int32_t world, bool quick, SizeResult* out) {
  SharedSamples samples(world);
  if (!samples.ok()) return absl::ResourceExhaustedError("mmap failed");
  const SharedSamples* shared = &samples;
  auto group = CommGroup::Create(backend, world);
  if (!group.ok()) return group.status();
  const CommGroupSpec spec = (*group)->spec();
  std::vector<ChildProcess> ranks;
  for (int32_t r = 0; r < world; ++r) {
    auto child =
        ChildProcess::Fork([spec, r, quick, shared] { return RunRank(spec, r, quick, shared); });
    if (!child.ok()) return child.status();
    ranks.push_back(std::move(*child));
  }
  if (absl::Status st = WaitForChildren(ranks, absl::Minutes(5)); !st.ok()) return st;
  for (int s = 0; s < kNumSizes; ++s) out[s] = samples.Summary(s, Iterations(kSizes[s], quick));
  return absl::OkStatus();
}

// Single-thread memcpy of `bytes`, best of a few runs, in GB/s.
double MemcpyGBps(size_t bytes) {
  AlignedBuffer src(bytes), dst(bytes);
  std::memset(src.data(), 1, bytes);
  const int reps = static_cast<int>(std::max<size_t>(3, (size_t{1} << 30) / bytes));
  double best = 0;
  for (int i = 0; i < reps; ++i) {
    const int64_t t0 = NowNs();
    std::memcpy(dst.data(), src.data(), bytes);
    ClobberMemory();
    const double s = static_cast<double>(NowNs() - t0) * 1e-9;
    best = std::max(best, static_cast<double>(bytes) / s * 1e-9);
  }
  return best;
}

std::string SizeName(size_t bytes) {
  return bytes >= (1 << 20) ? absl::StrCat(bytes >> 20, " MiB") : absl::StrCat(bytes >> 10, " KiB");
}

double BusGBps(size_t bytes, int32_t world, double us) {
  if (us <= 0) return 0;
  return static_cast<double>(bytes) / (us * 1e-6) * 1e-9 * 2.0 * (world - 1) / world;
}

}  // namespace
}  // namespace vllm::bench

int main(int argc, char** argv) {
  using namespace vllm::bench;  // NOLINT
  bool quick = false;
  std::vector<int32_t> worlds = {2, 4};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--worlds" && i + 1 < argc) {
      worlds.clear();
      for (absl::string_view w : absl::StrSplit(argv[++i], ',')) {
        int32_t n = 0;
        if (!absl::SimpleAtoi(w, &n) || n < 2 || n > 32) {
          std::fprintf(stderr, "bad world size\n");
          return 2;
        }
        worlds.push_back(n);
      }
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--worlds 2,4]\n", argv[0]);
      return 2;
    }
  }
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  std::printf("## CPU all-reduce: shm (ours) vs gloo (TCP loopback)\n\n");
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  std::printf(
      "%ld cores (load average %.1f when started); ranks are forked processes; a call's "
      "latency is the slowest rank's.\n",
      cores, load[0]);
  std::printf("Limit: single-thread memcpy %.1f GB/s at 64 MiB, %.1f GB/s at 1 MiB.\n\n",
              MemcpyGBps(64 << 20), MemcpyGBps(1 << 20));
  std::printf(
      "| ranks | size | shm p50 µs | shm p99 µs | shm busbw GB/s | gloo p50 µs | gloo p99 µs | "
      "gloo busbw GB/s | gloo/shm p50 |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (int32_t world : worlds) {
    SizeResult results[2 * kNumSizes];  // [backend][size]
    const Backend backends[2] = {Backend::kShm, Backend::kGloo};
    for (int b = 0; b < 2; ++b) {
      if (absl::Status st = RunGroup(backends[b], world, quick, results + b * kNumSizes);
          !st.ok()) {
        std::fprintf(stderr, "%s world %d: %s\n",
                     std::string(vllm::kernels::comm::BackendName(backends[b])).c_str(), world,
                     st.ToString().c_str());
      }
    }
    for (int s = 0; s < kNumSizes; ++s) {
      const SizeResult& shm = results[s];
      const SizeResult& gloo = results[kNumSizes + s];
      const std::string ranks =
          world > cores ? absl::StrCat(world, " (", cores, " cores)") : absl::StrCat(world);
      std::printf("| %s | %s | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f | %.2f |\n", ranks.c_str(),
                  SizeName(kSizes[s]).c_str(), shm.p50_us, shm.p99_us,
                  BusGBps(kSizes[s], world, shm.p50_us), gloo.p50_us, gloo.p99_us,
                  BusGBps(kSizes[s], world, gloo.p50_us),
                  shm.p50_us > 0 ? gloo.p50_us / shm.p50_us : 0.0);
    }
  }
  return 0;
}
