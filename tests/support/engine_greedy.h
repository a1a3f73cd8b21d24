// The reference check shared by the CPU and CUDA engine tests: a fixture's prompts through an
// LLMEngine, `batch` requests in flight at a time, `repeats` times over, each greedy answer
// expected equal to transformers' (Reference::greedy). Header-only; needs gtest and frontend/.
#ifndef VLLM_TESTS_SUPPORT_ENGINE_GREEDY_H_
#define VLLM_TESTS_SUPPORT_ENGINE_GREEDY_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "frontend/engine/llm_engine.h"
#include "gtest/gtest.h"
#include "tests/support/fixtures.h"

namespace vllm::testing {

// Request ids are "<tag>-<repeat>-<prompt index>" (distinct across repeats, so a prefix
// cache sees the earlier rounds' blocks). Fails the test (ADD_FAILURE) when a Generate call
// fails, and stops there.
inline void ExpectGreedyMatchesReference(frontend::LLMEngine& engine, const Reference& ref,
                                         const std::string& tag, int32_t repeats, size_t batch) {
  for (int32_t rep = 0; rep < repeats; ++rep) {
    for (size_t first = 0; first < ref.prompts.size(); first += batch) {
      std::vector<core::EngineCoreRequest> requests;
      for (size_t i = first; i < std::min(ref.prompts.size(), first + batch); ++i) {
        requests.push_back(
            GreedyRequest(absl::StrCat(tag, "-", rep, "-", i), ref.prompts[i], ref.max_new_tokens));
      }
      auto outputs = engine.Generate(std::move(requests));
      if (!outputs.ok()) {
        ADD_FAILURE() << outputs.status();
        return;
      }
      for (size_t k = 0; k < outputs->size(); ++k) {
        EXPECT_EQ((*outputs)[k].output_token_ids, ref.greedy[first + k])
            << "prompt " << first + k << ", repeat " << rep;
      }
    }
  }
}

}  // namespace vllm::testing

#endif  // VLLM_TESTS_SUPPORT_ENGINE_GREEDY_H_
