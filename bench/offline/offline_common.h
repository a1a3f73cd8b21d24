// What `vllm-launch bench latency` and `bench throughput` share: the engine flags (parsed by
// the code `vllm-launch serve` uses, server-only flags refused), one timed batch on the
// in-process engine (frontend::LLMEngine, as vLLM's `LLM.generate`), Python's float text and
// the --output-json file.
#ifndef VLLM_BENCH_OFFLINE_OFFLINE_COMMON_H_
#define VLLM_BENCH_OFFLINE_OFFLINE_COMMON_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/vllm_config.h"
#include "frontend/engine/llm_engine.h"
#include "frontend/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace vllm::bench_offline {

// A vLLM flag of the bench command that vllm-launch does not implement, and why.
struct RefusedFlag {
  std::string_view name;
  std::string_view reason;
};

// The engine's settings from the flags that are not the bench command's own.
struct EngineFlags {
  config::VllmConfig config;
  // --model as given (vLLM's `model_id` in --output-json); the bundled model's directory by
  // default.
  std::string model_id;
};

// Parses `args` (the flags left once the command's own are taken) with `vllm-launch serve`'s
// parser, after refusing the server's own flags (--host, --port, --api-key, --headless, ...:
// vLLM's bench commands have only the engine's) and a positional model, each by name.
// `command` ("bench latency") names the command in messages. Prefix caching is off unless
// --enable-prefix-caching is given when `prefix_caching_default` is false (vLLM's latency
// default). Data parallelism and several nodes are refused (vLLM's offline benchmarks refuse
// them too, but for torchrun launches).
[[nodiscard]] absl::StatusOr<EngineFlags> ParseEngineFlags(const std::vector<std::string>& args,
                                                           std::string_view command,
                                                           bool prefix_caching_default);

// InvalidArgument naming the first of `args` that is one of `refused` (as `--x` or `--x=v`),
// with its reason; OK when none is.
[[nodiscard]] absl::Status RefuseFlags(const std::vector<std::string>& args,
                                       const std::vector<RefusedFlag>& refused,
                                       std::string_view command);

// One prompt of a batch: token ids (the engine's input).
struct OfflinePrompt {
  std::vector<int32_t> token_ids;
  int32_t max_tokens = 1;
};

// How a batch samples, as vLLM's benchmarks: temperature 1, top_p 1, ignore_eos.
struct BatchOptions {
  // Sequences per prompt (vLLM's SamplingParams.n: n requests of the same prompt).
  int32_t n = 1;
  // Detokenize every output as it grows (vLLM's detokenize=True); needs `tokenizer`.
  bool detokenize = true;
  const frontend::Tokenizer* tokenizer = nullptr;
  // Prefix of the request ids ("warmup-", "bench-3-"): ids stay unique over the engine's life.
  std::string request_id_prefix;
};

struct BatchResult {
  double elapsed_s = 0;
  int64_t prompt_tokens = 0;  // per prompt, once (vLLM's RequestOutput.prompt_token_ids)
  int64_t output_tokens = 0;  // over all n sequences
};

// Adds every prompt (n requests each), steps the engine until all finish and returns the wall
// time from the first add to the last output (vLLM's time around `llm.generate`).
[[nodiscard]] absl::StatusOr<BatchResult> RunBatch(frontend::LLMEngine& engine,
                                                   const std::vector<OfflinePrompt>& prompts,
                                                   const BatchOptions& options);

// Python's repr of a float (the shortest text that reads back the same, "1.0", "1e-05"):
// how vLLM's f-strings print numpy floats.
[[nodiscard]] std::string PyFloat(double value);

// Writes `value` as Python's `json.dump(value, f, indent=4)` would (NaN, Infinity as Python).
// Internal on a file that cannot be written, naming it.
[[nodiscard]] absl::Status WriteJsonFile(const std::string& path,
                                         const nlohmann::ordered_json& value);

// A progress line on stderr (tqdm's "desc: i/n"), redrawn in place.
void PrintProgress(std::string_view desc, int64_t done, int64_t total);

}  // namespace vllm::bench_offline

#endif  // VLLM_BENCH_OFFLINE_OFFLINE_COMMON_H_
