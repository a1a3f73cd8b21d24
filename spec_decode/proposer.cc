#include "spec_decode/proposer.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "spec_decode/ngram_proposer.h"
#include "spec_decode/suffix_proposer.h"

namespace vllm::spec_decode {

absl::StatusOr<std::unique_ptr<Proposer>> MakeProposer(const config::SpeculativeConfig& config) {
  if (config.method == "ngram") {
    if (config.prompt_lookup_min < 1 || config.prompt_lookup_min > config.prompt_lookup_max) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ngram proposer: prompt_lookup_min=", config.prompt_lookup_min,
          " and prompt_lookup_max=", config.prompt_lookup_max, " must satisfy 1 <= min <= max"));
    }
    return std::make_unique<NgramProposer>(config.prompt_lookup_min, config.prompt_lookup_max);
  }
  if (config.method == "suffix") {
    return std::make_unique<SuffixProposer>(config);
  }
  return absl::InvalidArgumentError(absl::StrCat("speculative method '", config.method,
                                                 "' has no engine-core proposer (ngram, suffix)"));
}

}  // namespace vllm::spec_decode
