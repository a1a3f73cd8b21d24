// StructuredOutputManager: grammar compilation off the engine thread, the compile cache and
// the per-step token bitmask (vLLM's vllm/v1/structured_output/__init__.py).
//
// The scheduler (engine thread) submits a request's constraint when the request arrives and
// polls it while the request waits (vLLM's WAITING_FOR_FSM); compiles run on the manager's
// own threads, so a request whose grammar compiles never holds up a step. Compiled grammars
// are cached by spec (bounded by bytes, least recently used evicted); a request whose grammar
// takes longer than max_compile_seconds is failed (the compile finishes on its thread and is
// cached, but nobody waits for it). Each step the scheduler asks for the bitmask rows of the
// constrained requests that sample; with many of them the rows are filled in parallel.
//
// Thread-safety: every public method is called from the engine thread only.
#ifndef VLLM_STRUCTURED_OUTPUT_MANAGER_H_
#define VLLM_STRUCTURED_OUTPUT_MANAGER_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "structured_output/params.h"
#include "structured_output/xgrammar_backend.h"

namespace vllm::structured_output {

class TaskPool;
struct CompileJob;
struct CompileCache;

// Counters since the previous TakeStats() (for /metrics).
struct StructuredOutputStats {
  int64_t cache_hits = 0;
  int64_t cache_misses = 0;
  int64_t compile_failures = 0;
  int64_t compile_timeouts = 0;
  // Wall seconds of each compile that finished.
  std::vector<double> compile_seconds;
};

// One request's structured-output state (vLLM's StructuredOutputRequest).
class RequestState {
 public:
  ~RequestState();
  // The matcher, once compiled (Poll returned kReady).
  Grammar* grammar() const { return grammar_.get(); }

 private:
  friend class StructuredOutputManager;
  RequestState();
  std::shared_ptr<CompileJob> job_;
  std::optional<int32_t> eos_token_id_;
  absl::Time submitted_;
  std::unique_ptr<Grammar> grammar_;
};

class StructuredOutputManager {
 public:
  struct Options {
    std::filesystem::path model_dir;  // tokenizer.json is read from here
    int32_t vocab_size = 0;           // the model's (the logits' width)
    std::vector<int32_t> stop_token_ids;
    bool disable_any_whitespace = false;
    double max_compile_seconds = 30.0;
    int32_t num_compile_threads = 2;
    int32_t num_fill_threads = 2;
    int64_t cache_bytes = int64_t{512} << 20;
  };
  explicit StructuredOutputManager(Options options);
  ~StructuredOutputManager();
  StructuredOutputManager(const StructuredOutputManager&) = delete;
  StructuredOutputManager& operator=(const StructuredOutputManager&) = delete;

  // Starts compiling (or finds in the cache) the request's grammar.
  std::unique_ptr<RequestState> Submit(const StructuredOutputsParams& params,
                                       std::optional<int32_t> eos_token_id);

  enum class PollResult : uint8_t { kCompiling, kReady, kFailed };
  // kReady once the grammar compiled (the state's grammar() is then set); kFailed with the
  // reason in `error` when it did not compile or took longer than max_compile_seconds.
  PollResult Poll(RequestState& state, std::string* error);

  // Returns when a compile finishes or after `timeout` (the engine's idle wait while only
  // compiling requests are left).
  void WaitForCompiles(absl::Duration timeout);

  int32_t vocab_size() const { return options_.vocab_size; }
  int32_t bitmask_words() const { return BitmaskWords(options_.vocab_size); }
  // Fills row i of `out` (bitmask_words() words each) for grammars[i].
  void FillBitmasks(std::span<Grammar* const> grammars, std::span<int32_t> out);

  StructuredOutputStats TakeStats();

 private:
  Options options_;
  std::shared_ptr<CompileCache> cache_;
  std::unique_ptr<TaskPool> compile_pool_;
  std::unique_ptr<TaskPool> fill_pool_;
  StructuredOutputStats stats_;
};

}  // namespace vllm::structured_output

#endif  // VLLM_STRUCTURED_OUTPUT_MANAGER_H_
