// Executor round trip: what it costs the engine to hand a step to its workers and
// get the answer back, printed as a Markdown table.
//
//   empty step      MultiprocExecutor::ExecuteModel(SchedulerOutput{}) with TP = 1, 2, 4:
//                   encode, broadcast through the shm ring, worker decode + (empty) run,
//                   reply through the worker's ring, decode. The pure overhead.
//   decode step     256 running decode requests on the llama_mha fixture model through
//                   LLMEngine::Step(), "uni" (in-process worker) vs "mp" (worker processes):
//                   the difference is the executor's share of a real step.
//
//   build/release/bin/executor_bench [--iterations N] [--empty-only]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "executor/multiproc_executor.h"
#include "frontend/engine/llm_engine.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace vllm::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Stats {
  double p50 = 0, p99 = 0;
  // Context switches per timed step: the whole machine's (/proc/stat "ctxt": every process,
  // so other work counts too) and the engine process's own (getrusage).
  double machine_switches = 0, engine_switches = 0;
};

// The machine's context switches since boot (/proc/stat "ctxt"); 0 if unreadable.
int64_t MachineContextSwitches() {
  std::ifstream in("/proc/stat");
  std::string key;
  int64_t value = 0;
  while (in >> key) {
    if (key == "ctxt" && (in >> value)) return value;
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

int64_t OwnContextSwitches() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_nvcsw + u.ru_nivcsw;
}

Stats Summarise(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  Stats s;
  s.p50 = us[us.size() / 2];
  s.p99 = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  return s;
}

const std::string kModel = std::string(VLLM_SOURCE_DIR) + "/tests/fixtures/models/llama_mha";

std::string WorkerBinary(const char* argv0) {
  std::string self = argv0;
  return self.substr(0, self.rfind('/') + 1) + "vllm-launch";
}

absl::StatusOr<Stats> EmptyStep(int32_t tp, int iterations, const std::string& binary) {
  executor::MultiprocExecutorOptions o;
  o.config.device.device = config::Device::kCpu;  // what the engine factory would resolve
  o.config.model.model = kModel;
  o.config.cache.kv_cache_memory_bytes = 8 << 20;
  o.config.parallel.tensor_parallel_size = tp;
  o.worker_binary = binary;
  auto executor = executor::MultiprocExecutor::Create(o);
  if (!executor.ok()) return executor.status();
  if (absl::Status s = (*executor)->InitializeKVCache(64, 16); !s.ok()) return s;
  std::vector<double> us;
  us.reserve(iterations);
  core::SchedulerOutput empty;
  int64_t machine0 = 0, own0 = 0;
  for (int i = 0; i < iterations + 1000; ++i) {
    if (i == 1000) {
      machine0 = MachineContextSwitches();
      own0 = OwnContextSwitches();
    }
    auto t0 = Clock::now();
    auto out = (*executor)->ExecuteModel(empty);
    auto t1 = Clock::now();
    if (!out.ok()) return out.status();
    if (i >= 1000) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  Stats stats = Summarise(std::move(us));
  stats.machine_switches =
      static_cast<double>(MachineContextSwitches() - machine0) / static_cast<double>(iterations);
  stats.engine_switches =
      static_cast<double>(OwnContextSwitches() - own0) / static_cast<double>(iterations);
  return stats;
}

absl::StatusOr<Stats> DecodeStep(const std::string& backend, int32_t tp, int steps,
                                 const std::string& binary) {
  config::EngineArgs args;
  args.config.model.model = kModel;
  absl::StatusOr<config::ExecutorBackend> parsed = config::ParseExecutorBackend(backend);
  if (!parsed.ok()) return parsed.status();
  args.config.parallel.distributed_executor_backend = *parsed;
  args.config.parallel.tensor_parallel_size = tp;
  args.worker_binary = binary;
  args.config.scheduler.max_num_seqs = 256;
  args.config.cache.kv_cache_memory_bytes = 256 << 20;
  auto engine = frontend::LLMEngine::Create(args);
  if (!engine.ok()) return engine.status();
  for (int i = 0; i < 256; ++i) {
    core::EngineCoreRequest r;
    r.request_id = absl::StrCat("r", i);
    for (int t = 0; t < 16; ++t) r.prompt_token_ids.push_back((i * 31 + t * 7) % 500);
    r.sampling_params.temperature = 0.0;
    r.sampling_params.max_tokens = 200;
    r.sampling_params.ignore_eos = true;
    if (absl::Status s = (*engine)->AddRequest(r); !s.ok()) return s;
  }
  // Prefill everything first, then time decode steps.
  for (int i = 0; i < 4; ++i) {
    if (auto s = (*engine)->Step(); !s.ok()) return s.status();
  }
  std::vector<double> us;
  for (int i = 0; i < steps; ++i) {
    auto t0 = Clock::now();
    auto s = (*engine)->Step();
    auto t1 = Clock::now();
    if (!s.ok()) return s.status();
    if (s->size() != 256) return absl::InternalError("not every request decoded in the step");
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  return Summarise(std::move(us));
}

int Main(int argc, char** argv) {
  int iterations = 20000;
  bool empty_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--empty-only") == 0) {
      empty_only = true;
    } else if (std::strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) {
      iterations = std::max(100, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--iterations N] [--empty-only]\n", argv[0]);
      return 2;
    }
  }
  const std::string binary = WorkerBinary(argv[0]);
  std::printf(
      "| measurement | TP | p50 µs | p99 µs | context switches per step: machine / engine |\n"
      "|---|---:|---:|---:|---:|\n");
  for (int32_t tp : {1, 2, 4}) {
    auto s = EmptyStep(tp, iterations, binary);
    if (!s.ok()) {
      std::fprintf(stderr, "empty step TP=%d: %s\n", tp, s.status().ToString().c_str());
      return 1;
    }
    std::printf("| empty step, MultiprocExecutor | %d | %.2f | %.2f | %.2f / %.2f |\n", tp, s->p50,
                s->p99, s->machine_switches, s->engine_switches);
  }
  if (empty_only) return 0;
  const int steps = std::max(20, iterations / 200);
  for (const auto& [backend, tp] :
       {std::pair{"uni", 1}, std::pair{"mp", 1}, std::pair{"mp", 2}, std::pair{"mp", 4}}) {
    auto s = DecodeStep(backend, tp, steps, binary);
    if (!s.ok()) {
      std::fprintf(stderr, "decode step %s TP=%d: %s\n", backend, tp,
                   s.status().ToString().c_str());
      return 1;
    }
    std::printf("| 256-request decode step, llama_mha, %s | %d | %.1f | %.1f | |\n", backend, tp,
                s->p50, s->p99);
  }
  return 0;
}

}  // namespace
}  // namespace vllm::bench

int main(int argc, char** argv) {
  // stdout carries the results; the engine's log goes to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("engine"));
  return vllm::bench::Main(argc, argv);
}
