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
#include "structured_output/reasoning.h"
#include "structured_output/stats.h"
#include "structured_output/xgrammar_backend.h"

namespace vllm::structured_output {

class TaskPool;
struct CompileJob;
struct CompileCache;

// One request's structured-output state (vLLM's StructuredOutputRequest).
class RequestState {
 public:
  ~RequestState();
  // The matcher, once compiled (Poll returned kReady).
  Grammar* grammar() const { return grammar_.get(); }
  // False while the request reasons (a reasoning parser is configured, enable_in_reasoning is
  // off, and neither the prompt nor a sampled token has ended the reasoning yet): the grammar
  // then neither constrains nor advances (vLLM's StructuredOutputRequest.reasoning_ended).
  // Never goes back to false, so it survives a preemption: recomputed tokens are not sampled
  // again.
  bool reasoning_ended() const { return reasoning_ended_; }
  // While the request reasons: the implicit reasoning ends (ReasoningTokens::implicit_end_ids)
  // its grammar refuses as its first token, ascending; set when the grammar compiled (Poll),
  // fixed from then on since the grammar does not advance before the reasoning ends (vLLM's
  // _masked_reasoning_ends).
  const std::vector<int32_t>& masked_reasoning_ends() const { return masked_reasoning_ends_; }

 private:
  friend class StructuredOutputManager;
  RequestState();
  std::shared_ptr<CompileJob> job_;
  std::optional<int32_t> eos_token_id_;
  bool reasoning_ended_ = true;
  std::vector<int32_t> masked_reasoning_ends_;
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
    // Set with a reasoning parser (--reasoning-parser; LoadReasoningTokens): constrained
    // requests are free until their reasoning ends.
    std::optional<ReasoningTokens> reasoning;
    // --structured-outputs-config enable_in_reasoning: the grammar constrains from the first
    // token, reasoning or not (vLLM's _get_constraint_bounds with enable_in_reasoning).
    bool enable_in_reasoning = false;
  };
  explicit StructuredOutputManager(Options options);
  ~StructuredOutputManager();
  StructuredOutputManager(const StructuredOutputManager&) = delete;
  StructuredOutputManager& operator=(const StructuredOutputManager&) = delete;

  // Starts compiling (or finds in the cache) the request's grammar. With a reasoning parser
  // (and enable_in_reasoning off), the request reasons first unless `prompt_token_ids` already
  // ended the reasoning (PromptEndsReasoning).
  std::unique_ptr<RequestState> Submit(const StructuredOutputsParams& params,
                                       std::optional<int32_t> eos_token_id,
                                       std::span<const int32_t> prompt_token_ids = {});

  enum class PollResult : uint8_t { kCompiling, kReady, kFailed };
  // kReady once the grammar compiled (the state's grammar() is then set, and for a request
  // that reasons its masked_reasoning_ends(): each implicit end tried on the grammar and
  // rolled back); kFailed with the reason in `error` when it did not compile or took longer
  // than max_compile_seconds.
  PollResult Poll(RequestState& state, std::string* error);

  // Returns when a compile finishes or after `timeout` (the engine's idle wait while only
  // compiling requests are left).
  void WaitForCompiles(absl::Duration timeout);

  int32_t vocab_size() const { return options_.vocab_size; }
  int32_t bitmask_words() const { return BitmaskWords(options_.vocab_size); }
  // vLLM's should_fill_bitmask: whether the request's next token is constrained by its
  // grammar (its reasoning, if any, has ended).
  bool ShouldFillBitmask(const RequestState& state) const { return state.reasoning_ended_; }
  // Whether a request that reasons needs a reasoning row (FillReasoningRow): some implicit
  // end is masked. Without one, every token is allowed and the request needs no row at all.
  bool NeedsReasoningRow(const RequestState& state) const {
    return !state.reasoning_ended_ && !state.masked_reasoning_ends_.empty();
  }
  // vLLM's should_advance, for `token` just sampled by the request: whether the grammar takes
  // it. False while the request reasons and for the think-end token that ends the reasoning
  // (the grammar takes the tokens after it); true for an implicit end (qwen3's <tool_call>),
  // which ends the reasoning and is the grammar's first token. Either end marks the reasoning
  // ended.
  bool ShouldAdvance(RequestState& state, int32_t token);

  // Fills row i of `out` (bitmask_words() words each) for grammars[i]; a null grammars[i]
  // leaves its row as it is (a reasoning row: FillReasoningRow).
  void FillBitmasks(std::span<Grammar* const> grammars, std::span<int32_t> out);
  // The row of a request that reasons: every token allowed but its masked_reasoning_ends()
  // (`row`: bitmask_words() words).
  void FillReasoningRow(const RequestState& state, std::span<int32_t> row) const;

  // The counters since the previous call (which it resets).
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
