// Fuzzes the request fields -> grammar spec path of structured outputs: the input is a JSON
// request body, read by ParseStructuredOutputs (structured_outputs, response_format, guided_*:
// frontend/openai/structured_output_request.h), which checks the spec with XGrammar; and the
// same bytes as the text of each constraint kind straight to ValidateGrammarSpec (a schema,
// regex, EBNF grammar, structural tag). Invariants: no crash, throw, leak or timeout; a refused
// body is InvalidArgument naming a field; an accepted one has structured_outputs that pass
// ValidateStructuredOutputsParams and whose spec ValidateGrammarSpec accepts again.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/sampling_params.h"
#include "frontend/engine/engine_client.h"
#include "frontend/openai/structured_output_request.h"
#include "nlohmann/json.hpp"
#include "structured_output/params.h"
#include "tests/fuzz/fuzz_util.h"

namespace so = vllm::structured_output;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(vllm::fuzz::AsText(data, size));
  const nlohmann::ordered_json body =
      nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!body.is_discarded() && body.is_object()) {
    vllm::core::SamplingParams params;
    const absl::Status s = vllm::frontend::ParseStructuredOutputs(body, &params);
    if (s.ok()) {
      if (params.structured_outputs.has_value()) {
        FUZZ_CHECK(so::ValidateStructuredOutputsParams(*params.structured_outputs).ok(),
                   "accepted params fail their own check");
        FUZZ_CHECK(so::ValidateGrammarSpec(so::ToGrammarSpec(*params.structured_outputs)).ok(),
                   "accepted spec fails validation again");
      }
    } else {
      FUZZ_CHECK(absl::IsInvalidArgument(s), std::string(s.message()));
      FUZZ_CHECK(vllm::frontend::ErrorParam(s).has_value(), "a refusal names no field");
    }
  }
  for (so::ConstraintKind kind :
       {so::ConstraintKind::kJson, so::ConstraintKind::kRegex, so::ConstraintKind::kGrammar,
        so::ConstraintKind::kStructuralTag}) {
    const absl::Status s = so::ValidateGrammarSpec({kind, text, size % 2 == 0});
    FUZZ_CHECK(s.ok() || absl::IsInvalidArgument(s), std::string(s.message()));
  }
  return 0;
}
