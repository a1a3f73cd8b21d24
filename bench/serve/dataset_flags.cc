#include "bench/serve/dataset_flags.h"

#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "bench/serve/dataset_files.h"
#include "frontend/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace vllm::bench_serve {
namespace {

// vLLM's _parse_range_ratio and _resolve_range_ratios: a float for both lengths, or a JSON
// object with "input" and "output".
absl::Status ParseRangeRatio(const std::string& text, RandomDatasetOptions& random) {
  double ratio = 0;
  if (absl::SimpleAtod(absl::StripAsciiWhitespace(text), &ratio)) {
    random.range_ratio = ratio;
    random.output_range_ratio.reset();
    return absl::OkStatus();
  }
  const nlohmann::json object = nlohmann::json::parse(text, nullptr, false);
  if (object.is_discarded() || !object.is_object() || !object.contains("input") ||
      !object.contains("output") || !object["input"].is_number() || !object["output"].is_number()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--random-range-ratio: expected a number or a JSON object with numbers \"input\" and "
        "\"output\", got ",
        text));
  }
  random.range_ratio = object["input"].get<double>();
  random.output_range_ratio = object["output"].get<double>();
  return absl::OkStatus();
}

FileDatasetOptions FileOptions(const BenchServeFlags& flags) {
  return FileDatasetOptions{.path = flags.dataset_path,
                            .num_prompts = flags.random.num_prompts,
                            .seed = flags.random.seed,
                            .disable_shuffle = flags.disable_shuffle,
                            .no_oversample = flags.no_oversample};
}

absl::StatusOr<std::vector<SampleRequest>> BuildRandomDataset(
    BenchServeFlags& flags, const frontend::Tokenizer* tokenizer) {
  if (tokenizer == nullptr && flags.load.backend == BenchBackend::kOpenAIChat) {
    return absl::InvalidArgumentError(
        "the random dataset with --backend openai-chat sends text, which needs --tokenizer DIR "
        "(a directory with tokenizer.json)");
  }
  if (tokenizer == nullptr) {
    std::fprintf(stderr,
                 "vllm-launch bench serve: no tokenizer (give --tokenizer DIR); random prompts "
                 "are token ids in [%d, %d)\n",
                 flags.random.vocab_min, flags.random.vocab_max);
  }
  if (tokenizer != nullptr && flags.vocab_range_given) {
    return absl::InvalidArgumentError(
        "--random-vocab-min/--random-vocab-max apply only without --tokenizer; with one, ids "
        "come from its vocabulary");
  }
  flags.random.tokenizer = tokenizer;
  return SampleRandomRequests(flags.random);
}

}  // namespace

void AddDatasetOptions(CLI::App& app, BenchServeFlags& flags, DatasetRawFlags& raw) {
  app.add_option("--dataset-name", flags.dataset_name,
                 "random, sharegpt, custom, prefix_repetition, or prompts (ours)")
      ->check(CLI::IsMember({"random", "sharegpt", "custom", "prefix_repetition", "prompts"}))
      ->capture_default_str();
  app.add_option("--dataset-path", flags.dataset_path,
                 "sharegpt: JSON file; custom: .jsonl of {\"prompt\", \"output_tokens\"}; "
                 "prompts: JSON lines {\"prompt\", \"output_len\"} or text lines");
  app.add_option("--custom-output-len", flags.custom_output_len,
                 "max_tokens of every custom request (-1: each line's output_tokens)")
      ->capture_default_str();
  app.add_flag("--skip-chat-template", flags.skip_chat_template,
               "custom: send prompts without the chat template");
  app.add_option("--chat-template-kwargs", raw.chat_template_kwargs,
                 "custom: JSON object of variables for the chat template");
  app.add_option("--sharegpt-output-len", flags.sharegpt_output_len,
                 "Replaces the ShareGPT completions' lengths");
  app.add_flag("--no-oversample", flags.no_oversample,
               "Do not repeat samples to reach --num-prompts");
  app.add_flag("--disable-shuffle", flags.disable_shuffle, "Keep the dataset's order");
  app.add_option("--num-prompts", flags.random.num_prompts, "Number of requests")
      ->capture_default_str();
  app.add_option("--input-len", raw.input_len, "Overrides --random-input-len");
  app.add_option("--output-len", raw.output_len,
                 "Overrides every dataset's output length (--random-output-len, ...)");
  app.add_option("--random-input-len", flags.random.input_len)->capture_default_str();
  app.add_option("--random-output-len", flags.random.output_len)->capture_default_str();
  app.add_option("--random-prefix-len", flags.random.prefix_len,
                 "Tokens of a random prefix shared by every prompt")
      ->capture_default_str();
  app.add_option("--random-range-ratio", raw.range_ratio,
                 "Lengths uniform in [len*(1-r), len*(1+r)]; or {\"input\": r, \"output\": r}")
      ->capture_default_str();
  app.add_option("--random-batch-size", raw.random_batch_size,
                 "1 only (larger batches are vLLM's embeddings benchmark)")
      ->capture_default_str();
  app.add_option("--random-vocab-min", flags.random.vocab_min,
                 "Without a tokenizer: smallest random token id (not a vLLM flag)")
      ->capture_default_str();
  app.add_option("--random-vocab-max", flags.random.vocab_max,
                 "Without a tokenizer: random ids are below this (not a vLLM flag)")
      ->capture_default_str();
  PrefixRepetitionOptions& repetition = flags.prefix_repetition;
  app.add_option("--prefix-repetition-prefix-len", repetition.prefix_len)->capture_default_str();
  app.add_option("--prefix-repetition-suffix-len", repetition.suffix_len)->capture_default_str();
  app.add_option("--prefix-repetition-num-prefixes", repetition.num_prefixes)
      ->capture_default_str();
  app.add_option("--prefix-repetition-output-len", repetition.output_len)->capture_default_str();
  CLI::Option* schema_path =
      app.add_option("--json-schema-path", flags.json_schema_path,
                     "Constrain requests by JSON schema (structured_outputs.json): one schema "
                     "file, a .jsonl of schemas or a directory of *.json, cycled over requests");
  app.add_option("--structured-output-ratio", flags.structured_output_ratio,
                 "Share of requests sent with a schema (which ones: --seed)")
      ->needs(schema_path)
      ->capture_default_str();
  app.add_option("--seed", flags.random.seed)->capture_default_str();
}

absl::Status FinalizeDatasetFlags(BenchServeFlags& flags, const DatasetRawFlags& raw) {
  if (absl::Status status = ParseRangeRatio(raw.range_ratio, flags.random); !status.ok()) {
    return status;
  }
  if (!raw.chat_template_kwargs.empty()) {
    flags.chat_template_kwargs =
        nlohmann::ordered_json::parse(raw.chat_template_kwargs, nullptr, false);
    if (flags.chat_template_kwargs.is_discarded() || !flags.chat_template_kwargs.is_object()) {
      return absl::InvalidArgumentError("--chat-template-kwargs: expected a JSON object");
    }
  }
  if (raw.random_batch_size != 1) {
    return absl::InvalidArgumentError(
        "--random-batch-size (a vLLM bench flag) is supported only at 1: batched prompts are "
        "for vLLM's embeddings benchmark");
  }
  // vLLM: --input-len/--output-len override the dataset-specific lengths.
  if (raw.input_len) flags.random.input_len = *raw.input_len;
  if (raw.output_len) {
    flags.random.output_len = flags.custom_output_len = *raw.output_len;
    flags.sharegpt_output_len = flags.prefix_repetition.output_len = *raw.output_len;
  }
  if (flags.random.num_prompts < 1) return absl::InvalidArgumentError("--num-prompts must be >= 1");
  const std::string& name = flags.dataset_name;
  if ((name == "random" || name == "prefix_repetition") && !flags.dataset_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Cannot use '", name,
                     "' dataset with --dataset-path. Please specify the appropriate "
                     "--dataset-name (e.g., 'sharegpt', 'custom') for your dataset file: ",
                     flags.dataset_path));
  }
  if (name != "random" && name != "prefix_repetition" && flags.dataset_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dataset-name ", name, " needs --dataset-path"));
  }
  flags.load.seed = flags.random.seed;
  flags.prefix_repetition.num_prompts = flags.random.num_prompts;
  flags.prefix_repetition.seed = flags.random.seed;
  flags.prefix_repetition.disable_shuffle = flags.disable_shuffle;
  // vLLM: the random dataset runs every request to its length (ignore_eos on).
  if (name == "random") flags.load.settings.ignore_eos = true;
  if (!(flags.structured_output_ratio >= 0.0 && flags.structured_output_ratio <= 1.0)) {
    return absl::InvalidArgumentError("--structured-output-ratio must be in [0, 1]");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SampleRequest>> BuildDataset(BenchServeFlags& flags,
                                                        const frontend::Tokenizer* tokenizer) {
  const std::string& name = flags.dataset_name;
  if (name == "random") return BuildRandomDataset(flags, tokenizer);
  if (name == "custom") {
    return LoadCustomDataset(FileOptions(flags), tokenizer, flags.custom_output_len,
                             !flags.skip_chat_template, flags.chat_template_kwargs);
  }
  if (tokenizer == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", name,
                     " dataset needs a tokenizer: give --tokenizer DIR (a directory with "
                     "tokenizer.json), or --model naming one"));
  }
  if (name == "sharegpt") {
    return LoadShareGptDataset(FileOptions(flags), *tokenizer, flags.sharegpt_output_len);
  }
  if (name == "prefix_repetition") {
    return SamplePrefixRepetitionRequests(flags.prefix_repetition, *tokenizer);
  }
  return absl::InvalidArgumentError(absl::StrCat("no dataset ", name));
}

}  // namespace vllm::bench_serve
