// Drafter: speculative decoding's draft when it runs in the worker (vLLM's EagleProposer,
// DraftModelProposer and the Medusa proposer; vllm/v1/spec_decode/). After a step is sampled
// (and its drafts verified), the ModelRunner hands the drafter every scheduled request's rows
// whose tokens stand and the target's hidden states of the step's rows; the drafter feeds its
// own model (an EAGLE head's or a draft model's KV cache follows the target's positions, in
// the same blocks) and drafts up to k greedy tokens after each request's last sampled token.
// The drafts go back with the step's output (ModelRunnerOutput::draft_token_ids), and the
// scheduler schedules them with the request's next step.
//
//   eagle        the EAGLE-1 head (LlamaModel::LoadEagleHead): position p reads (token p + 1,
//                the target's hidden state at p); each further draft reads the head's own
//                output. Its KV cache has the head's layers.
//   eagle3       the EAGLE-3 head (LlamaModel::LoadEagle3Head): as eagle, but the target's
//                hidden state is three (configurable) of its layers' streams fused by the
//                head's fc before the first pass; the head drafts over its own vocabulary,
//                mapped to the target's by d2t.
//   draft_model  a smaller model of the same vocabulary, fed the same tokens as the target
//                plus the token just sampled, then its own drafts. Its KV cache has its
//                layers. Sharded as the target or whole on every rank
//                (draft_tensor_parallel_size 1).
//   medusa       MedusaHead on the target's hidden state of the row that sampled; no KV.
//
// A draft position needs a KV slot: the scheduler allocates k lookahead slots (vLLM's
// num_lookahead_tokens); a request whose block table ends sooner drafts fewer tokens.
//
// Thread-safety: none; the worker's thread owns a drafter (every rank runs the same passes, so
// a sharded draft's collectives line up).
#ifndef VLLM_WORKER_DRAFTER_H_
#define VLLM_WORKER_DRAFTER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/speculative_config.h"
#include "kernels/communicator.h"
#include "worker/llama_model.h"

namespace vllm::worker {

// One scheduled request of the step just run.
struct DraftRequest {
  int32_t first_row = 0;       // its first row in the step's batch
  int32_t num_rows = 0;        // its leading rows whose tokens stand (rejected drafts' do not)
  int32_t first_position = 0;  // the position of first_row
  // Every token known after the step: the prompt, the tokens sampled so far (this step's
  // included, rejected drafts not), or a prompt still being prefilled.
  std::span<const int32_t> token_ids;
  std::span<const int32_t> block_ids;  // its block table (lookahead blocks included)
  // Tokens to draft after token_ids (it sampled this step); 0: only feed the draft.
  int32_t num_drafts = 0;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Whether Propose reads the target's hidden states (eagle, eagle3, medusa).
  virtual bool needs_hidden_states() const = 0;
  // Bytes of the draft's KV cache per token on this rank (0: none).
  virtual int64_t kv_bytes_per_token() const = 0;
  // Allocates the draft's KV cache with the target's geometry (its block table is the
  // target's).
  [[nodiscard]] virtual absl::Status InitializeKVCache(int32_t num_blocks, int32_t block_size) = 0;
  // Feeds the step's standing rows and fills drafts->at(i) with up to requests[i].num_drafts
  // tokens. `hidden`: the target's hidden states of the step's rows, [rows,
  // LlamaModel::hidden_out_width()] (EAGLE-3: its aux states; empty when
  // !needs_hidden_states()). Fails only if a collective fails or the inputs are
  // inconsistent (InvalidArgument).
  [[nodiscard]] virtual absl::Status Propose(std::span<const DraftRequest> requests,
                                             std::span<const float> hidden,
                                             std::vector<std::vector<int32_t>>* drafts) = 0;
};

// The drafter of `config` (method eagle, eagle3, medusa or draft_model; its model directory)
// for `target`, which must outlive it; `comm` is the target's tensor-parallel group. An
// EAGLE-3 head sets the target's aux hidden layers (LlamaModel::SetAuxHiddenLayers), so the
// hidden states Propose reads are those. A dummy
// `target` load format gives the draft dummy weights too (`dummy_seed`). Start-up errors name
// the file and key: a missing directory, a head whose shapes or vocabulary differ from the
// target's, a tensor of the wrong shape.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Drafter>> MakeDrafter(
    const config::SpeculativeConfig& config, LlamaModel& target, kernels::Communicator* comm,
    bool dummy_weights, uint64_t dummy_seed);

}  // namespace vllm::worker

#endif  // VLLM_WORKER_DRAFTER_H_
