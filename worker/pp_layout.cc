#include "worker/pp_layout.h"

#include <cstdlib>
#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"

namespace vllm::worker {

absl::StatusOr<std::vector<int32_t>> PpPartition(int32_t num_layers, int32_t pp_size,
                                                 const std::optional<std::string>& partition) {
  if (pp_size < 1) return absl::InvalidArgumentError("pipeline parallel size must be positive");
  std::vector<int32_t> parts;
  if (partition.has_value()) {
    for (absl::string_view piece : absl::StrSplit(*partition, ',')) {
      int32_t n = 0;
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(piece), &n) || n < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "VLLM_PP_LAYER_PARTITION: invalid partition string '", *partition,
            "' (expected one non-negative layer count per pipeline stage, e.g. '14,18')"));
      }
      parts.push_back(n);
    }
    if (static_cast<int32_t>(parts.size()) != pp_size) {
      return absl::InvalidArgumentError(
          absl::StrFormat("VLLM_PP_LAYER_PARTITION: len(partitions)=%d does not match pp_size=%d",
                          parts.size(), pp_size));
    }
    const int64_t sum = std::accumulate(parts.begin(), parts.end(), int64_t{0});
    if (sum != num_layers) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "VLLM_PP_LAYER_PARTITION: sum(partitions)=%d does not match num_hidden_layers=%d", sum,
          num_layers));
    }
    return parts;
  }
  parts.assign(pp_size, num_layers / pp_size);
  const int32_t remaining = num_layers % pp_size;
  for (int32_t i = 2; i < remaining + 2; ++i) ++parts[pp_size - i];
  return parts;
}

absl::StatusOr<PpStage> MakePpStage(int32_t num_layers, int32_t pp_rank, int32_t pp_size) {
  std::optional<std::string> env;
  if (const char* v = std::getenv("VLLM_PP_LAYER_PARTITION"); v != nullptr) env = v;
  VLLM_ASSIGN_OR_RETURN(const std::vector<int32_t> parts, PpPartition(num_layers, pp_size, env));
  if (pp_rank < 0 || pp_rank >= pp_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pipeline stage %d outside [0, %d)", pp_rank, pp_size));
  }
  PpStage stage;
  stage.rank = pp_rank;
  stage.size = pp_size;
  stage.first_layer = std::accumulate(parts.begin(), parts.begin() + pp_rank, 0);
  stage.end_layer = stage.first_layer + parts[pp_rank];
  return stage;
}

}  // namespace vllm::worker
