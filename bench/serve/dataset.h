// Prompt sources for `vllm-launch bench serve`: vLLM's `random` dataset (prompts of random token
// ids, sent as the OpenAI `prompt` token array), a `prompts` file (JSON lines or plain text), and
// the JSON schemas that constrain requests (--json-schema-path). Pure functions of their inputs
// and a seed; thread-compatible.
#ifndef VLLM_BENCH_SERVE_DATASET_H_
#define VLLM_BENCH_SERVE_DATASET_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {
class Tokenizer;
}  // namespace vllm::frontend

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
  // The JSON schema the output must follow, sent as `structured_outputs: {"json": schema}`;
  // null for an unconstrained request. Shared by every request that uses the same schema.
  std::shared_ptr<const nlohmann::json> json_schema;
};

using JsonSchemaList = std::vector<std::shared_ptr<const nlohmann::json>>;

// Parameters of vLLM's random dataset (flags --random-*).
struct RandomDatasetOptions {
  int num_prompts = 1000;
  int input_len = 1024;
  int output_len = 128;
  // Lengths are drawn uniformly from [floor(len * (1 - ratio)), ceil(len * (1 + ratio))]; in
  // [0, 1). `output_range_ratio`, when set, applies to output lengths instead (vLLM's
  // --random-range-ratio '{"input": r1, "output": r2}').
  double range_ratio = 0.0;
  std::optional<double> output_range_ratio;
  // Tokens of a prefix shared by every prompt (vLLM's --random-prefix-len), drawn once.
  int prefix_len = 0;
  // Without a tokenizer: token ids are drawn uniformly from [vocab_min, vocab_max) and sent
  // as ids.
  int32_t vocab_min = 1000;
  int32_t vocab_max = 30000;
  // With one (as vLLM's RandomDataset): the input length is drawn around input_len less the
  // special tokens the tokenizer adds (BOS), the prompt is the random prefix followed by
  // consecutive ids of the vocabulary less its special tokens, starting at a random offset
  // (plus the request's index), decoded to text, and the text re-encoded and adjusted (cut, or
  // extended with random ids, up to 10 times) until it is `prompt_len` tokens long; the prompt
  // is sent as that text. Not owned.
  const frontend::Tokenizer* tokenizer = nullptr;
  uint64_t seed = 0;
};

// Draws `num_prompts` random prompts. Deterministic in `options` (same seed, same prompts).
// Input lengths (prefix included) are at least 1, output lengths at least 1. Fails with
// InvalidArgument on a ratio outside [0, 1), an empty vocabulary range, a negative prefix or
// non-positive lengths.
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

// Reads the schemas of --json-schema-path: a directory (every `*.json` file directly in it, one
// schema each, in file-name order), a JSON-lines file (name ending in `.jsonl`: one schema per
// non-empty line), or any other file holding one schema. A schema is a JSON object. Fails with
// NotFound when the path cannot be read, InvalidArgument when a file or line is not a JSON
// object or no schema is found.
[[nodiscard]] absl::StatusOr<JsonSchemaList> LoadJsonSchemas(const std::string& path);

// Constrains floor(size * ratio) of `requests` (vLLM's --structured-output-ratio; which ones is
// drawn from `seed`, all of them at ratio 1): request i gets schemas[i % schemas.size()], so the
// schemas cycle over the dataset in order. Fails with InvalidArgument on a ratio outside [0, 1]
// or an empty schema list.
[[nodiscard]] absl::Status AssignJsonSchemas(const JsonSchemaList& schemas, double ratio,
                                             uint64_t seed, std::vector<SampleRequest>& requests);

}  // namespace vllm::bench_serve

#endif  // VLLM_BENCH_SERVE_DATASET_H_
