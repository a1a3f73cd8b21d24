// Fuzzes a POST body alone (no HTTP framing, so mutations stay inside the JSON): the body
// path of openai_request.h — ParseJsonObject, ParseCompletionRequest and
// ParseChatCompletionRequest, FanOut, the bundled model's chat template and tokenizer on
// accepted requests, the error body on rejected ones. Invariants: no crash, throw, leak or
// timeout (e.g. 1e309, 100000 nested brackets, invalid UTF-8 in strings); an accepted request
// satisfies the documented limits and valid sampling params; a rejected one gives a 4xx error
// body that is valid JSON.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/openai_request.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  vllm::fuzz::Served();  // load the tokenizer and chat template once
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vllm::fuzz::CheckGenerationBody(vllm::fuzz::AsText(data, size));
  return 0;
}
