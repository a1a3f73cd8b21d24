// Prompt sources for `vllm-launch bench serve`: vLLM's `random` dataset (prompts of random token
// ids, sent as the OpenAI `prompt` token array) and a `prompts` file (JSON lines or plain text).
// Pure functions of their inputs and a seed; thread-compatible.
#ifndef VLLM_BENCH_SERVE_DATASET_H_
#define VLLM_BENCH_SERVE_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace vllm::bench_serve {

// One request of the benchmark, as vLLM's SampleRequest.
struct SampleRequest {
  // Text prompt; empty when the prompt is given as token ids.
  std::string prompt;
  // Token-id prompt (random dataset); empty for text prompts.
  std::vector<int32_t> prompt_token_ids;
  // Prompt length in tokens: the number of ids for token prompts, 0 (unknown; the server's
  // usage.prompt_tokens is used instead) for text prompts.
  int prompt_len = 0;
  // max_tokens sent with the request.
  int expected_output_len = 0;
};

// Parameters of vLLM's random dataset (flags --random-*).
struct RandomDatasetOptions {
  int num_prompts = 1000;
  int input_len = 1024;
  int output_len = 128;
  // Lengths are drawn uniformly from [len * (1 - ratio), len * (1 + ratio)]; in [0, 1).
  double range_ratio = 0.0;
  // Token ids are drawn uniformly from [vocab_min, vocab_max).
  int32_t vocab_min = 1000;
  int32_t vocab_max = 30000;
  uint64_t seed = 0;
};

// Draws `num_prompts` random prompts. Deterministic in `options` (same seed, same prompts).
// Input lengths are at least 1, output lengths at least 1. Fails with InvalidArgument on a
// ratio outside [0, 1), an empty vocabulary range or non-positive lengths.
[[nodiscard]] absl::StatusOr<std::vector<SampleRequest>> SampleRandomRequests(
    const RandomDatasetOptions& options);

// Reads a prompts file: one request per non-empty line, either a JSON object
// {"prompt": "...", "output_len": N} (output_len optional) or plain text (the whole line is the
// prompt). Lines without output_len get `default_output_len`. Returns `num_prompts` requests,
// cycling through the file when it has fewer lines (vLLM oversamples the same way). Fails with
// NotFound when the file cannot be read, InvalidArgument when it has no prompts or a JSON line
// has no string "prompt".
[[nodiscard]] absl::StatusOr<std::vector<SampleRequest>> LoadPromptsFile(const std::string& path,
                                                                         int num_prompts,
                                                                         int default_output_len);

}  // namespace vllm::bench_serve

#endif  // VLLM_BENCH_SERVE_DATASET_H_
