// Pipeline parallelism: which layers each stage runs (vLLM's get_pp_indices,
// vllm/distributed/utils.py).
//
// Without VLLM_PP_LAYER_PARTITION the layers are split evenly; the remainder goes one layer
// each to the stages before the last, from the second-to-last backwards (the last stage also
// runs the final norm and the LM head, the first the embedding). With it, a comma-separated
// list of layer counts, one per stage, adding up to the model's layers. A stage may hold no
// layer (it passes the stream on).
//
// Worker ranks: rank = pp_rank × tensor_parallel_size + tp_rank (vLLM's order), so the ranks of
// the last stage's first TP rank, world_size − tp, answers the executor.
#ifndef VLLM_WORKER_PP_LAYOUT_H_
#define VLLM_WORKER_PP_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace vllm::worker {

struct PpStage {
  int32_t rank = 0;
  int32_t size = 1;
  int32_t first_layer = 0;  // [first_layer, end_layer)
  int32_t end_layer = 0;
  bool is_first() const { return rank == 0; }
  bool is_last() const { return rank == size - 1; }
  bool owns(int32_t layer) const { return layer >= first_layer && layer < end_layer; }
};

// The layer counts of the `pp_size` stages. `partition` is VLLM_PP_LAYER_PARTITION's value
// (nullopt: unset). InvalidArgument naming the variable when it does not parse, has a
// negative count, does not have pp_size entries or does not add up to num_layers.
[[nodiscard]] absl::StatusOr<std::vector<int32_t>> PpPartition(
    int32_t num_layers, int32_t pp_size, const std::optional<std::string>& partition);

// Stage `pp_rank` of `pp_size` over `num_layers` layers, reading VLLM_PP_LAYER_PARTITION
// from the environment.
[[nodiscard]] absl::StatusOr<PpStage> MakePpStage(int32_t num_layers, int32_t pp_rank,
                                                  int32_t pp_size);

}  // namespace vllm::worker

#endif  // VLLM_WORKER_PP_LAYOUT_H_
