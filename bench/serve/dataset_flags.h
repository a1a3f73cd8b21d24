// The dataset flags of `vllm-launch bench serve` (vLLM's add_dataset_parser names and
// defaults) and the dataset they select: parsing, the checks vLLM's main() makes on them, and
// building the requests (vLLM's get_samples). Used by bench_serve.cc only.
#ifndef VLLM_BENCH_SERVE_DATASET_FLAGS_H_
#define VLLM_BENCH_SERVE_DATASET_FLAGS_H_

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/serve/bench_serve.h"
#include "bench/serve/dataset.h"

namespace vllm::frontend {
class Tokenizer;
}  // namespace vllm::frontend

namespace vllm::bench_serve {

// Dataset flag values checked together after parsing.
struct DatasetRawFlags {
  std::optional<int> input_len, output_len;
  // vLLM's --random-range-ratio: a number, or a JSON object {"input": r1, "output": r2}.
  std::string range_ratio = "0.0";
  int random_batch_size = 1;
  std::string chat_template_kwargs;
};

// Adds --dataset-name, --dataset-path, the --random-*, --custom-*, --sharegpt-*,
// --prefix-repetition-* flags, --num-prompts, --input-len/--output-len, --seed,
// --no-oversample, --disable-shuffle, --skip-chat-template, --json-schema-path and
// --structured-output-ratio.
void AddDatasetOptions(CLI::App& app, BenchServeFlags& flags, DatasetRawFlags& raw);

// vLLM's checks and mappings: --input-len/--output-len override the datasets' lengths, the
// random datasets refuse --dataset-path, the file datasets need it, the random dataset sets
// ignore_eos. InvalidArgument with a message for the user.
[[nodiscard]] absl::Status FinalizeDatasetFlags(BenchServeFlags& flags, const DatasetRawFlags& raw);

// Builds the requests of every dataset but `prompts` (read before the server is asked):
// random, sharegpt, custom, prefix_repetition. `tokenizer` may be null (then only the random
// dataset's id prompts and the custom dataset with --skip-chat-template work). InvalidArgument
// or NotFound with a message for the user.
[[nodiscard]] absl::StatusOr<std::vector<SampleRequest>> BuildDataset(
    BenchServeFlags& flags, const frontend::Tokenizer* tokenizer);

}  // namespace vllm::bench_serve

#endif  // VLLM_BENCH_SERVE_DATASET_FLAGS_H_
