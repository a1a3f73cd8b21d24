// `bench serve` against vLLM 0.33's own names
// (tests/unit/bench/testdata/vllm_0_33_bench_serve.json, taken from vllm/benchmarks/serve.py and
// datasets.py): every vLLM flag is parsed or refused by name, the result JSON has exactly vLLM's
// keys, the table prints vLLM's labels; plus the tokenizer-backed random dataset, goodput, peak
// metrics and ramp-up arrivals.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/serve/bench_serve.h"
#include "bench/serve/client.h"
#include "bench/serve/dataset.h"
#include "bench/serve/dataset_files.h"
#include "bench/serve/metrics.h"
#include "bench/serve/protocol.h"
#include "frontend/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace vllm::bench_serve {
namespace {

using ::testing::HasSubstr;

const nlohmann::json& VllmNames() {
  static const nlohmann::json names = [] {
    std::ifstream in(std::filesystem::path(VLLM_SOURCE_DIR) /
                     "tests/unit/bench/testdata/vllm_0_33_bench_serve.json");
    return nlohmann::json::parse(in, nullptr, false);
  }();
  return names;
}

std::set<std::string> Keys(const nlohmann::json& object) {
  std::set<std::string> keys;
  for (const auto& [key, value] : object.items()) keys.insert(key);
  return keys;
}

std::set<std::string> Strings(const nlohmann::json& list) {
  return list.get<std::set<std::string>>();
}

// Two requests and a failure, sent 0.5 s apart.
std::vector<RequestOutput> SampleOutputs() {
  RequestOutput a;
  a.success = true;
  a.start_time = 0.0;
  a.ttft = 0.1;
  a.latency = 0.5;
  a.itl = {0.2, 0.2};
  a.output_tokens = 3;
  a.prompt_len = 10;
  RequestOutput b = a;
  b.start_time = 0.5;
  b.ttft = 0.3;
  b.latency = 1.7;  // ends at 2.2 s
  b.itl = {0.1, 1.3};
  RequestOutput failed;
  failed.error = "HTTP 500";
  return {a, b, failed};
}

TEST(BenchServeVllmTest, ResultJsonHasVllmsKeys) {
  const nlohmann::json& vllm = VllmNames();
  ASSERT_FALSE(vllm.is_discarded());
  BenchmarkRunInfo info;
  info.date = "20261203-120000";
  info.backend = "openai";
  info.model_id = "m";
  info.request_rate = std::numeric_limits<double>::infinity();
  info.duration_s = 3.0;
  info.percentile_metrics = {"ttft", "tpot", "itl"};
  const std::vector<RequestOutput> outputs = SampleOutputs();
  const BenchmarkMetrics metrics = CalculateMetrics(outputs, 3.0, {99});
  const nlohmann::json plain = BuildResultJson(info, metrics, outputs, /*save_detailed=*/false);
  EXPECT_EQ(Keys(plain), Strings(vllm["result_keys"]));
  EXPECT_TRUE(plain["label"].is_null());
  EXPECT_EQ(plain["endpoint_type"], "openai");
  EXPECT_EQ(plain["latencies"].size(), 3u);

  std::set<std::string> detailed = Strings(vllm["result_keys"]);
  for (const std::string& key : Strings(vllm["detailed_keys"])) detailed.insert(key);
  for (const std::string& key : Strings(vllm["ramp_up_keys"])) detailed.insert(key);
  info.ramp_up_strategy = "linear";
  info.ramp_up_start_rps = 1;
  info.ramp_up_end_rps = 4;
  info.label = "mine";
  const nlohmann::json full = BuildResultJson(info, metrics, outputs, /*save_detailed=*/true);
  EXPECT_EQ(Keys(full), detailed);
  EXPECT_EQ(full["label"], "mine");
  EXPECT_EQ(DefaultResultFilename(info), "mine-ramp-up-linear-1qps-4qps-m-20261203-120000.json");
}

TEST(BenchServeVllmTest, TablePrintsVllmsLabels) {
  BenchmarkRunInfo info;
  info.backend = "openai";
  info.request_rate = 5.0;
  info.max_concurrency = 2;
  info.duration_s = 3.0;
  info.percentile_metrics = {"ttft", "tpot", "itl"};
  const BenchmarkMetrics metrics = CalculateMetrics(SampleOutputs(), 3.0, {99}, {{"ttft", 200.0}});
  const std::string table = FormatResultTable(info, metrics);
  size_t last = 0;
  for (const std::string& label : VllmNames()["table_labels"].get<std::vector<std::string>>()) {
    // vLLM's "{:<40} ": the label padded to 40 columns, in vLLM's order.
    const size_t at = table.find(absl::StrCat(label, std::string(40 - label.size(), ' '), " "));
    EXPECT_NE(at, std::string::npos) << label;
    if (at == std::string::npos) continue;
    EXPECT_GE(at, last) << label << " out of order";
    last = at;
  }
  EXPECT_THAT(table, HasSubstr("Peak concurrent requests:                2.00      \n"));
  EXPECT_THAT(table, HasSubstr("Request goodput (req/s):                 0.33      \n"));
}

TEST(BenchServeVllmTest, EveryVllmFlagIsParsedOrRefusedByName) {
  // Values for the flags we take (the rest must be refused by name).
  const std::map<std::string, std::vector<std::string>> supported = {
      {"--backend", {"openai-chat"}},
      {"--base-url", {"http://h:1"}},
      {"--host", {"h"}},
      {"--port", {"1"}},
      {"--endpoint", {"/v1/x"}},
      {"--model", {"m"}},
      {"--served-model-name", {"s"}},
      {"--tokenizer", {"t"}},
      {"--tokenizer-mode", {"auto"}},
      {"--trust-remote-code", {}},
      {"--request-rate", {"4"}},
      {"--burstiness", {"0.5"}},
      {"--max-concurrency", {"2"}},
      {"--ramp-up-strategy", {"linear"}},
      {"--ramp-up-start-rps", {"1"}},
      {"--ramp-up-end-rps", {"2"}},
      {"--ignore-eos", {}},
      {"--temperature", {"0"}},
      {"--top-p", {"0.9"}},
      {"--top-k", {"5"}},
      {"--min-p", {"0.1"}},
      {"--frequency-penalty", {"0.1"}},
      {"--presence-penalty", {"0.1"}},
      {"--repetition-penalty", {"1.1"}},
      {"--extra-body", {"{\"a\":1}"}},
      {"--dataset-name", {"custom"}},
      {"--dataset-path", {"p"}},
      {"--custom-output-len", {"3"}},
      {"--num-prompts", {"3"}},
      {"--input-len", {"3"}},
      {"--output-len", {"3"}},
      {"--random-input-len", {"3"}},
      {"--random-output-len", {"3"}},
      {"--random-prefix-len", {"3"}},
      {"--random-range-ratio", {"0.5"}},
      {"--seed", {"3"}},
      {"--save-result", {}},
      {"--save-detailed", {}},
      {"--append-result", {}},
      {"--result-dir", {"d"}},
      {"--result-filename", {"f"}},
      {"--label", {"l"}},
      {"--metadata", {"k=v"}},
      {"--goodput", {"ttft:5", "e2el:9"}},
      {"--disable-tqdm", {}},
      {"--percentile-metrics", {"e2el"}},
      {"--metric-percentiles", {"50"}},
      {"--header", {"x-a=1"}},
      {"--logprobs", {"2"}},
      {"--chat-template-kwargs", {"{\"enable_thinking\": false}"}},
      {"--request-id-prefix", {"r-"}},
      {"--num-warmups", {"2"}},
      {"--ready-check-timeout-sec", {"5"}},
      {"--no-oversample", {}},
      {"--disable-shuffle", {}},
      {"--skip-chat-template", {}},
      {"--random-batch-size", {"1"}},
      {"--sharegpt-output-len", {"9"}},
      {"--prefix-repetition-prefix-len", {"3"}},
      {"--prefix-repetition-suffix-len", {"3"}},
      {"--prefix-repetition-num-prefixes", {"3"}},
      {"--prefix-repetition-output-len", {"3"}},
  };
  for (const std::string& flag : VllmNames()["flags"].get<std::vector<std::string>>()) {
    const auto it = supported.find(flag);
    if (it == supported.end()) {
      const auto parsed = ParseBenchServeFlags({flag, "1"});
      ASSERT_FALSE(parsed.ok()) << flag;
      EXPECT_THAT(parsed.status().message(), HasSubstr(absl::StrCat(flag, " (a vLLM bench flag)")));
      continue;
    }
    std::vector<std::string> args = {flag};
    args.insert(args.end(), it->second.begin(), it->second.end());
    // Flags that need a companion.
    if (flag == "--ramp-up-strategy")
      args.insert(args.end(), {"--ramp-up-start-rps", "1", "--ramp-up-end-rps", "2"});
    if (flag == "--ramp-up-start-rps" || flag == "--ramp-up-end-rps") {
      args.insert(
          args.end(),
          {"--ramp-up-strategy", "linear",
           flag == "--ramp-up-start-rps" ? "--ramp-up-end-rps" : "--ramp-up-start-rps", "2"});
    }
    if (flag == "--dataset-name") args.insert(args.end(), {"--dataset-path", "p"});
    if (flag == "--dataset-path") args.insert(args.end(), {"--dataset-name", "custom"});
    EXPECT_TRUE(ParseBenchServeFlags(args).ok())
        << absl::StrCat(flag, ": ", ParseBenchServeFlags(args).status().message());
  }
}

TEST(BenchServeVllmTest, FlagsTakeVllmsMeaning) {
  const auto flags = ParseBenchServeFlags({"--goodput", "ttft:500", "tpot:50", "--top-k", "5",
                                           "--extra-body", "{\"top_k\": 7}", "--output-len", "9",
                                           "--label", "x", "--save-detailed"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->goodput, (GoodputSlos{{"ttft", 500.0}, {"tpot", 50.0}}));
  EXPECT_EQ(flags->load.settings.extra_body["top_k"], 7);  // --extra-body wins, as vLLM
  EXPECT_EQ(flags->random.output_len, 9);
  EXPECT_TRUE(flags->load.settings.ignore_eos);  // the random dataset ignores EOS in vLLM
  EXPECT_FALSE(flags->load.settings.temperature.has_value());
  EXPECT_TRUE(flags->save_detailed);
  EXPECT_FALSE(ParseBenchServeFlags({"--goodput", "itl:5"}).ok());
  EXPECT_FALSE(ParseBenchServeFlags({"--goodput", "ttft"}).ok());
  EXPECT_FALSE(ParseBenchServeFlags({"--ramp-up-strategy", "linear"}).ok());
  EXPECT_FALSE(ParseBenchServeFlags({"--ramp-up-start-rps", "1"}).ok());
  EXPECT_FALSE(ParseBenchServeFlags({"--extra-body", "[1]"}).ok());
  EXPECT_FALSE(ParseBenchServeFlags({"--metadata", "novalue"}).ok());
  // Refused before anything is sent (exit 2): a tokenizer that cannot load, our own id-range
  // flags beside a tokenizer, the chat backend's random text without a tokenizer.
  const std::string model = std::filesystem::path(VLLM_SOURCE_DIR) / "models/kjv-llama-tiny";
  EXPECT_EQ(RunBenchServe({"--model", "m", "--tokenizer", "/nonexistent"}), 2);
  EXPECT_EQ(RunBenchServe({"--model", "m", "--tokenizer", model, "--random-vocab-max", "100"}), 2);
  EXPECT_EQ(RunBenchServe({"--model", "m", "--backend", "openai-chat"}), 2);
}

TEST(BenchServeVllmTest, ExtraBodyOverridesTheRequestAsVllms) {
  RequestSettings settings;
  settings.model = "m";
  settings.ignore_eos = true;
  SampleRequest request;
  request.prompt = "hi";
  request.expected_output_len = 3;
  nlohmann::json body =
      nlohmann::json::parse(BuildRequestBody(BenchBackend::kOpenAICompletions, settings, request));
  EXPECT_FALSE(body.contains("temperature"));
  EXPECT_EQ(body["ignore_eos"], true);
  settings.temperature = 0.0;
  settings.extra_body = {{"ignore_eos", false}, {"top_k", 4}};
  body =
      nlohmann::json::parse(BuildRequestBody(BenchBackend::kOpenAICompletions, settings, request));
  EXPECT_EQ(body["ignore_eos"], false);
  EXPECT_EQ(body["top_k"], 4);
  EXPECT_EQ(body["temperature"], 0.0);
}

TEST(BenchServeVllmTest, GoodputAndPeaks) {
  // a: ttft 0.1, tpot 0.2, e2el 0.5; b: ttft 0.3, tpot 0.7, e2el 1.7.
  const std::vector<RequestOutput> outputs = SampleOutputs();
  EXPECT_FALSE(CalculateMetrics(outputs, 2.0, {99}).request_goodput.has_value());
  EXPECT_DOUBLE_EQ(*CalculateMetrics(outputs, 2.0, {99}, {{"ttft", 200}}).request_goodput, 0.5);
  EXPECT_DOUBLE_EQ(*CalculateMetrics(outputs, 2.0, {99}, {{"e2el", 2000}}).request_goodput, 1.0);
  EXPECT_DOUBLE_EQ(*CalculateMetrics(outputs, 2.0, {99}, {{"tpot", 100}}).request_goodput, 0.0);
  const BenchmarkMetrics metrics = CalculateMetrics(outputs, 2.0, {99});
  // Tokens at 0.1, 0.3, 0.5 (a) and 0.8, 0.9, 2.2 (b): five in second 0.
  EXPECT_DOUBLE_EQ(metrics.max_output_tokens_per_s, 5.0);
  EXPECT_EQ(metrics.max_concurrent_requests, 2);
}

TEST(BenchServeVllmTest, RampUpArrivals) {
  const double inf = std::numeric_limits<double>::infinity();
  // Infinite burstiness: constant intervals 1/rate_i, rates 1, 2, 3 (linear from 1 to 3).
  EXPECT_THAT(ArrivalOffsets(3, inf, inf, 0, RampUp{"linear", 1, 3}),
              ::testing::ElementsAre(1.0, 1.5, ::testing::DoubleNear(1.5 + 1.0 / 3, 1e-12)));
  // Exponential from 1 to 4: rates 1, 2, 4.
  EXPECT_THAT(ArrivalOffsets(3, inf, inf, 0, RampUp{"exponential", 1, 4}),
              ::testing::ElementsAre(1.0, 1.5, 1.75));
}

TEST(BenchServeVllmTest, RandomDatasetDrawsFromTheTokenizerAndTheSeed) {
  const auto tokenizer =
      frontend::Tokenizer::Load(std::filesystem::path(VLLM_SOURCE_DIR) / "models/kjv-llama-tiny");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  RandomDatasetOptions options;
  options.num_prompts = 4;
  options.input_len = 24;
  options.output_len = 4;
  options.prefix_len = 8;
  options.tokenizer = tokenizer->get();
  const auto first = SampleRandomRequests(options);
  ASSERT_TRUE(first.ok()) << first.status();
  for (const SampleRequest& request : *first) {
    EXPECT_TRUE(request.prompt_token_ids.empty());  // sent as text, as vLLM
    EXPECT_FALSE(request.prompt.empty());
    const auto ids = (*tokenizer)->Encode(request.prompt, false);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(static_cast<int>(ids->size()), request.prompt_len);
    EXPECT_NEAR(request.prompt_len, 32, 2);
    for (int32_t id : *ids) EXPECT_LT(id, (*tokenizer)->vocab_size());
  }
  // The shared prefix: every prompt starts with the same text.
  const std::string& a = (*first)[0].prompt;
  const std::string& b = (*first)[1].prompt;
  const size_t common = std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin();
  EXPECT_GE(common, 8u);
  // Same seed, same prompts; another seed, other prompts.
  const auto again = SampleRandomRequests(options);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[3].prompt, (*first)[3].prompt);
  options.seed = 1;
  const auto other = SampleRandomRequests(options);
  ASSERT_TRUE(other.ok());
  EXPECT_NE((*other)[3].prompt, (*first)[3].prompt);
}

std::filesystem::path Fixture(const std::string& name) {
  return std::filesystem::path(VLLM_SOURCE_DIR) / "tests/fixtures/bench" / name;
}

const frontend::Tokenizer& TinyTokenizer() {
  static const std::unique_ptr<frontend::Tokenizer> tokenizer = [] {
    auto loaded =
        frontend::Tokenizer::Load(std::filesystem::path(VLLM_SOURCE_DIR) / "models/kjv-llama-tiny");
    return loaded.ok() ? *std::move(loaded) : nullptr;
  }();
  return *tokenizer;
}

std::vector<std::string> Prompts(const std::vector<SampleRequest>& requests) {
  std::vector<std::string> prompts;
  for (const SampleRequest& request : requests) prompts.push_back(request.prompt);
  return prompts;
}

TEST(BenchServeVllmTest, PyRandomIsCPythonsRandom) {
  // python3: random.seed(0); [random.getrandbits(32) for _ in range(3)]
  PyRandom zero(0);
  EXPECT_EQ(zero.NextU32(), 3626764237u);
  EXPECT_EQ(zero.NextU32(), 1654615998u);
  EXPECT_EQ(zero.NextU32(), 3255389356u);
  // random.seed(7); random.shuffle(list(range(10)))
  std::vector<int> items = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  PyRandom(7).Shuffle(items);
  EXPECT_EQ(items, (std::vector<int>{8, 3, 1, 4, 7, 0, 9, 6, 2, 5}));
  // A seed of more than 32 bits: random.seed(2**40 + 5); random.shuffle(list(range(6)))
  items = {0, 1, 2, 3, 4, 5};
  PyRandom((uint64_t{1} << 40) + 5).Shuffle(items);
  EXPECT_EQ(items, (std::vector<int>{1, 0, 3, 2, 5, 4}));
  // random.seed(0); [random.choice(range(5)) for _ in range(6)]
  PyRandom choice(0);
  std::vector<uint32_t> picks;
  for (int i = 0; i < 6; ++i) picks.push_back(choice.Below(5));
  EXPECT_EQ(picks, (std::vector<uint32_t>{3, 3, 0, 2, 4, 3}));
}

TEST(BenchServeVllmTest, ShareGptFiltersShufflesAndOversamplesAsVllm) {
  const frontend::Tokenizer& tokenizer = TinyTokenizer();
  FileDatasetOptions options{.path = Fixture("sharegpt_tiny.json"), .num_prompts = 5};
  // Kept entries a, c, d, e, f; Python's shuffle at seed 0 walks d, c, a, f, e; d's completion
  // ("Ok") and c's prompt ("Hi") are under 4 tokens; random.choice at seed 0 then picks 1, 1.
  auto requests = LoadShareGptDataset(options, tokenizer, std::nullopt);
  ASSERT_TRUE(requests.ok()) << requests.status();
  const std::string a = "Tell me about the river that runs by the old mill.";
  const std::string e = "Which birds sing before the sun comes up in May?";
  const std::string f = "Write one line about a lantern left burning on the hill.";
  EXPECT_EQ(Prompts(*requests), (std::vector<std::string>{a, f, e, f, f}));
  const auto tokens = [&](const std::string& text) {
    return static_cast<int>(tokenizer.Encode(text, true)->size());
  };
  EXPECT_EQ((*requests)[0].prompt_len, tokens(a));  // special tokens counted, as HF's tokenizer()
  EXPECT_EQ((*requests)[0].expected_output_len,
            tokens("The river runs past the mill and on down to the sea in the spring."));
  // --sharegpt-output-len: the output check is skipped (d passes), lengths replaced.
  options.num_prompts = 4;
  requests = LoadShareGptDataset(options, tokenizer, 10);
  ASSERT_TRUE(requests.ok()) << requests.status();
  EXPECT_EQ((*requests)[0].prompt, "Count the stones along the garden wall for me.");
  EXPECT_EQ((*requests)[3].prompt, e);
  EXPECT_EQ((*requests)[3].expected_output_len, 10);
  // --no-oversample: only what passes; --disable-shuffle: file order.
  options.num_prompts = 10;
  options.no_oversample = true;
  options.disable_shuffle = true;
  requests = LoadShareGptDataset(options, tokenizer, std::nullopt);
  ASSERT_TRUE(requests.ok());
  EXPECT_EQ(Prompts(*requests), (std::vector<std::string>{a, e, f}));
  // Prompt + output over 2048 tokens: nothing passes.
  EXPECT_FALSE(LoadShareGptDataset(options, tokenizer, 2100).ok());
  options.path = Fixture("custom_tiny.jsonl");  // not a JSON array
  EXPECT_FALSE(LoadShareGptDataset(options, tokenizer, std::nullopt).ok());
}

TEST(BenchServeVllmTest, CustomDatasetAppliesTheChatTemplateAsVllm) {
  const frontend::Tokenizer& tokenizer = TinyTokenizer();
  FileDatasetOptions options{.path = Fixture("custom_tiny.jsonl"), .num_prompts = 5};
  // Python's shuffle at seed 0: rows 0, 2, 1; random.choice then picks 1, 1.
  auto requests = LoadCustomDataset(options, &tokenizer, -1, /*apply_chat_template=*/false);
  ASSERT_TRUE(requests.ok()) << requests.status();
  const std::string harbour = "Describe a quiet harbour at dawn.";
  EXPECT_EQ(Prompts(*requests),
            (std::vector<std::string>{"Name three colours of the evening sky.", harbour,
                                      "What does a miller grind?", harbour, harbour}));
  std::vector<int> outputs;
  for (const SampleRequest& request : *requests) outputs.push_back(request.expected_output_len);
  EXPECT_EQ(outputs, (std::vector<int>{12, 9, 5, 9, 9}));  // "output_tokens" ("9" too)
  // --custom-output-len (default 256) replaces output_tokens; the chat template is applied.
  options.num_prompts = 1;
  requests = LoadCustomDataset(options, &tokenizer, 256, /*apply_chat_template=*/true);
  ASSERT_TRUE(requests.ok()) << requests.status();
  ASSERT_EQ(requests->size(), 1u);
  const SampleRequest& templated = requests->front();
  EXPECT_EQ(templated.expected_output_len, 256);
  EXPECT_THAT(templated.prompt, HasSubstr("<|start_header_id|>user<|end_header_id|>\n\nName"));
  EXPECT_THAT(templated.prompt,
              ::testing::EndsWith("<|start_header_id|>assistant<|end_header_id|>\n\n"));
  EXPECT_EQ(templated.prompt_len,
            static_cast<int>(tokenizer.Encode(templated.prompt, true)->size()));
  // Refused as vLLM: a file not named .jsonl; -1 with a line lacking output_tokens. Without a
  // tokenizer the template cannot be applied.
  options.path = Fixture("sharegpt_tiny.json");
  EXPECT_FALSE(LoadCustomDataset(options, &tokenizer, 256, false).ok());
  const std::string missing = ::testing::TempDir() + "/bench_custom_missing.jsonl";
  std::ofstream(missing) << R"({"prompt": "no length"})"
                         << "\n";
  options.path = missing;
  EXPECT_FALSE(LoadCustomDataset(options, &tokenizer, -1, false).ok());
  EXPECT_TRUE(LoadCustomDataset(options, &tokenizer, 3, false).ok());
  EXPECT_FALSE(LoadCustomDataset(options, nullptr, 3, true).ok());
  auto raw = LoadCustomDataset(options, nullptr, 3, false);
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(raw->front().prompt_len, 0);  // the server's usage counts it
}

TEST(BenchServeVllmTest, PrefixRepetitionSharesEachPrefixAsVllm) {
  const frontend::Tokenizer& tokenizer = TinyTokenizer();
  PrefixRepetitionOptions options{.num_prompts = 7,
                                  .prefix_len = 12,
                                  .suffix_len = 5,
                                  .num_prefixes = 2,
                                  .output_len = 6,
                                  .disable_shuffle = true};
  auto requests = SamplePrefixRepetitionRequests(options, tokenizer);
  ASSERT_TRUE(requests.ok()) << requests.status();
  ASSERT_EQ(requests->size(), 6u);  // 2 prefixes x (7 / 2) prompts
  std::set<std::string> heads;
  for (const SampleRequest& request : *requests) {
    EXPECT_NEAR(request.prompt_len, 17, 2);
    EXPECT_EQ(request.expected_output_len, 6);
    heads.insert(request.prompt.substr(0, 12));
  }
  EXPECT_EQ(heads.size(), 2u);  // unshuffled: prompts 0-2 share one prefix, 3-5 the other
  EXPECT_EQ((*requests)[0].prompt.substr(0, 12), (*requests)[2].prompt.substr(0, 12));
  options.disable_shuffle = false;
  auto shuffled = SamplePrefixRepetitionRequests(options, tokenizer);
  ASSERT_TRUE(shuffled.ok());
  // Same seed, same prompts, in Python's shuffled order.
  std::vector<std::string> ordered = Prompts(*requests);
  std::vector<std::string> mixed = Prompts(*shuffled);
  EXPECT_NE(mixed, ordered);
  std::sort(ordered.begin(), ordered.end());
  std::sort(mixed.begin(), mixed.end());
  EXPECT_EQ(mixed, ordered);
  options.num_prefixes = 8;  // more prefixes than prompts
  EXPECT_FALSE(SamplePrefixRepetitionRequests(options, tokenizer).ok());
}

TEST(BenchServeVllmTest, DatasetFlagsTakeVllmsMeaning) {
  auto flags = ParseBenchServeFlags(
      {"--random-range-ratio", R"({"input": 0.5, "output": 0.25})", "--output-len", "9"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_DOUBLE_EQ(flags->random.range_ratio, 0.5);
  EXPECT_DOUBLE_EQ(*flags->random.output_range_ratio, 0.25);
  EXPECT_EQ(flags->sharegpt_output_len, 9);  // --output-len maps to every dataset
  EXPECT_EQ(flags->prefix_repetition.output_len, 9);
  EXPECT_FALSE(flags->load.request_id_prefix->empty());  // vLLM's bench-<hex>- default
  flags = ParseBenchServeFlags({"--header", "x-a = 1", "--request-id-prefix", "", "--dataset-name",
                                "sharegpt", "--dataset-path", "p"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->load.headers, (std::vector<std::pair<std::string, std::string>>{{"x-a", "1"}}));
  EXPECT_EQ(*flags->load.request_id_prefix, "");
  EXPECT_FALSE(flags->load.settings.ignore_eos);  // only the random dataset sets it
  flags =
      ParseBenchServeFlags({"--logprobs", "3", "--chat-template-kwargs", R"({"b": 1, "a": 2})"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->load.settings.extra_body["logprobs"], 3);  // vLLM's completions field
  EXPECT_EQ(flags->chat_template_kwargs.dump(), R"({"b":1,"a":2})");
  EXPECT_FALSE(ParseBenchServeFlags({"--logprobs", "3", "--backend", "openai-chat"}).ok());
  EXPECT_FALSE(ParseBenchServeFlags({"--chat-template-kwargs", "[1]"}).ok());
  EXPECT_FALSE(ParseBenchServeFlags({"--random-batch-size", "2"}).ok());
  EXPECT_FALSE(ParseBenchServeFlags({"--random-range-ratio", R"({"input": 0.5})"}).ok());
  EXPECT_FALSE(ParseBenchServeFlags({"--dataset-path", "p"}).ok());  // random takes no file
  EXPECT_FALSE(ParseBenchServeFlags({"--dataset-name", "sharegpt"}).ok());
  EXPECT_FALSE(ParseBenchServeFlags({"--header", "novalue"}).ok());
  EXPECT_FALSE(ParseBenchServeFlags({"--header", "bad name=1"}).ok());
  // Vocabulary sampling as vLLM: [floor(n (1 - r)), ceil(n (1 + r))] on the input length less
  // the BOS the tokenizer adds, the output ratio apart.
  RandomDatasetOptions options;
  options.num_prompts = 40;
  options.input_len = 11;
  options.output_len = 3;
  options.range_ratio = 0.5;
  options.output_range_ratio = 0.0;
  options.tokenizer = &TinyTokenizer();
  auto requests = SampleRandomRequests(options);
  ASSERT_TRUE(requests.ok()) << requests.status();
  for (const SampleRequest& request : *requests) {
    EXPECT_GE(request.prompt_len, 5 - 1);  // floor(10 * 0.5), a re-encoding may merge one
    EXPECT_LE(request.prompt_len, 15 + 1);
    EXPECT_EQ(request.expected_output_len, 3);
  }
}

}  // namespace
}  // namespace vllm::bench_serve
