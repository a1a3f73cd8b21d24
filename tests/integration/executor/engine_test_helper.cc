// An engine process for executor tests: an LLMEngine over MultiprocExecutor (TP 2) on a
// fixture model that generates until SIGTERM or SIGINT, then shuts down in order.
//
//   engine_test_helper MODEL_DIR WORKER_BINARY
// Prints "ready <worker pid> <worker pid>" once the workers are up, "stopped" at the end.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "executor/multiproc_executor.h"
#include "frontend/engine/llm_engine.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace {
std::atomic<bool> stop{false};
void OnSignal(int) { stop.store(true); }
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL_DIR WORKER_BINARY\n", argv[0]);
    return 2;
  }
  // stdout carries the protocol lines above; the engine's log goes to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("engine"));
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  vllm::config::EngineArgs args;
  args.config.model.model = argv[1];
  args.worker_binary = argv[2];
  args.config.parallel.tensor_parallel_size = 2;
  args.config.cache.kv_cache_memory_bytes = 16 << 20;
  auto engine = vllm::frontend::LLMEngine::Create(args);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().ToString().c_str());
    return 1;
  }
  auto* mp = dynamic_cast<vllm::executor::MultiprocExecutor*>(&(*engine)->engine_core().executor());
  std::printf("ready %d %d\n", mp->worker_pids()[0], mp->worker_pids()[1]);
  std::fflush(stdout);
  int next = 0;
  while (!stop.load()) {
    if (!(*engine)->HasUnfinishedRequests()) {
      vllm::core::EngineCoreRequest r;
      r.request_id = absl::StrCat("r", next++);
      r.prompt_token_ids = {1, 2, 3, 4, 5};
      r.sampling_params.max_tokens = 100;
      r.sampling_params.ignore_eos = true;
      if (!(*engine)->AddRequest(r).ok()) return 1;
    }
    if (auto s = (*engine)->Step(); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
      return 1;
    }
  }
  engine->reset();  // orderly: the workers exit, then we do
  std::printf("stopped\n");
  return 0;
}
