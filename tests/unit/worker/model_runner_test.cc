// ModelRunner on a small dummy-weight Llama: persistent request state from deltas, chunked
// prefill sampling only at the end, seeded sampling independent of the batch, logprobs,
// grammar bitmasks (on the host, and passed to a device-sampling backend), and malformed
// SchedulerOutputs rejected with an error instead of a crash.
#include "worker/model_runner.h"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/sampling.h"
#include "worker/weights.h"
#include "worker/worker.h"

namespace vllm::worker {
namespace {

constexpr int32_t kVocab = 96;
constexpr int32_t kBlockSize = 4;

// A resolved engine config for a CPU worker on the model in `dir` with dummy weights.
config::VllmConfig CpuConfig(const std::filesystem::path& dir, uint64_t seed = 0) {
  config::VllmConfig config;
  config.model.model = dir;
  config.model.max_model_len = 128;
  config.model.seed = seed;
  config.scheduler.max_num_batched_tokens = 128;
  config.load.load_format = LoadFormat::kDummy;
  config.device.device = Device::kCpu;
  return config;
}

class ModelRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/vllm-runner-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ / "config.json")
        << R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 96, "hidden_size": 32,
"intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
"num_key_value_heads": 2, "max_position_embeddings": 128, "rms_norm_eps": 1e-5,
"eos_token_id": 95})";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Worker> MakeWorker(uint64_t seed = 1) {
    const config::VllmConfig config = CpuConfig(dir_, seed);
    // Large random weights so that sampled distributions are not flat.
    auto worker = Worker::Create(config, &comm_);
    EXPECT_TRUE(worker.ok()) << worker.status();
    EXPECT_TRUE((*worker)->InitializeKVCache(32, kBlockSize).ok());
    return std::move(*worker);
  }

  static core::NewRequestData NewRequest(const std::string& id, int32_t prompt_len,
                                         int32_t first_block) {
    core::NewRequestData d;
    d.req_id = id;
    for (int32_t i = 0; i < prompt_len; ++i) d.prompt_token_ids.push_back((i * 7 + 3) % kVocab);
    for (int32_t b = 0; b < (prompt_len + 8) / kBlockSize + 1; ++b) {
      d.block_ids.push_back(first_block + b);
    }
    d.sampling_params.temperature = 0.0;
    return d;
  }

  // A decode step for `id` feeding `token` at position `pos`.
  static void AddDecode(core::SchedulerOutput& so, const std::string& id, int32_t token,
                        int32_t pos) {
    core::CachedRequestData& c = so.scheduled_cached_reqs;
    c.req_ids.push_back(id);
    c.resumed_from_preemption.push_back(0);
    c.new_token_ids.push_back(token);
    c.new_token_ids_offsets.push_back(static_cast<uint32_t>(c.new_token_ids.size()));
    c.new_block_ids_offsets.push_back(static_cast<uint32_t>(c.new_block_ids.size()));
    c.num_computed_tokens.push_back(pos);
    so.num_scheduled_tokens.push_back(1);
    so.total_num_scheduled_tokens += 1;
  }

  std::filesystem::path dir_;
  kernels::SingleRankCommunicator comm_;
};

TEST_F(ModelRunnerTest, ChunkedPrefillSamplesOnlyAfterTheLastChunk) {
  auto worker = MakeWorker();
  core::SchedulerOutput first;
  first.scheduled_new_reqs.push_back(NewRequest("a", 10, 0));
  first.num_scheduled_tokens = {6};
  auto out = worker->ExecuteModel(first);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->req_ids, std::vector<std::string>{"a"});
  EXPECT_TRUE(out->sampled_token_ids[0].empty()) << "sampled mid-prefill";

  core::SchedulerOutput second;
  core::CachedRequestData& c = second.scheduled_cached_reqs;
  c.req_ids = {"a"};
  c.resumed_from_preemption = {0};
  c.new_token_ids = {first.scheduled_new_reqs[0].prompt_token_ids.begin() + 6,
                     first.scheduled_new_reqs[0].prompt_token_ids.end()};
  c.new_token_ids_offsets = {0, 4};
  c.new_block_ids_offsets = {0, 0};
  c.num_computed_tokens = {6};
  second.num_scheduled_tokens = {4};
  out = worker->ExecuteModel(second);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->sampled_token_ids[0].size(), 1u);

  // The same prompt in one go samples the same token.
  auto fresh = MakeWorker();
  core::SchedulerOutput whole;
  whole.scheduled_new_reqs.push_back(NewRequest("a", 10, 0));
  whole.num_scheduled_tokens = {10};
  auto once = fresh->ExecuteModel(whole);
  ASSERT_TRUE(once.ok()) << once.status();
  EXPECT_EQ(once->sampled_token_ids[0], out->sampled_token_ids[0]);
}

TEST_F(ModelRunnerTest, SeededSamplingDoesNotDependOnTheBatch) {
  auto sample_alone = [&](bool with_neighbour) {
    auto worker = MakeWorker(/*seed=*/7);
    core::SchedulerOutput so;
    core::NewRequestData d = NewRequest("seeded", 5, 0);
    d.sampling_params.temperature = 1.0;
    d.sampling_params.seed = 1234;
    so.scheduled_new_reqs.push_back(d);
    so.num_scheduled_tokens.push_back(5);
    if (with_neighbour) {
      core::NewRequestData n = NewRequest("other", 9, 10);
      n.sampling_params.temperature = 1.0;
      so.scheduled_new_reqs.insert(so.scheduled_new_reqs.begin(), n);
      so.num_scheduled_tokens.insert(so.num_scheduled_tokens.begin(), 9);
    }
    std::vector<int32_t> tokens;
    auto out = worker->ExecuteModel(so);
    EXPECT_TRUE(out.ok()) << out.status();
    tokens.push_back(out->sampled_token_ids.back()[0]);
    for (int32_t step = 0; step < 6; ++step) {
      core::SchedulerOutput next;
      AddDecode(next, "seeded", tokens.back(), 5 + step);
      auto o = worker->ExecuteModel(next);
      EXPECT_TRUE(o.ok()) << o.status();
      tokens.push_back(o->sampled_token_ids[0][0]);
    }
    return tokens;
  };
  EXPECT_EQ(sample_alone(false), sample_alone(true));
}

TEST_F(ModelRunnerTest, ReturnsLogprobsWhenAsked) {
  auto worker = MakeWorker();
  core::SchedulerOutput so;
  core::NewRequestData d = NewRequest("lp", 4, 0);
  d.sampling_params.logprobs = 3;
  so.scheduled_new_reqs.push_back(d);
  so.num_scheduled_tokens = {4};
  auto out = worker->ExecuteModel(so);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->logprobs.size(), 1u);
  ASSERT_EQ(out->logprobs[0].size(), 1u);
  const core::TokenLogprobs& lp = out->logprobs[0][0];
  ASSERT_EQ(lp.token_ids.size(), 4u);  // the sampled token, then the top 3
  EXPECT_EQ(lp.token_ids[0], out->sampled_token_ids[0][0]);
  EXPECT_EQ(lp.sampled_token_rank, 1);  // greedy picks the most likely token
  EXPECT_LE(lp.logprobs[0], 0.0f);
}

// A chunk of `id`'s prompt: tokens [nc, nc + n) of `prompt`.
void AddChunk(core::SchedulerOutput& so, const std::string& id, const std::vector<int32_t>& prompt,
              int32_t nc, int32_t n) {
  core::CachedRequestData& c = so.scheduled_cached_reqs;
  c.req_ids.push_back(id);
  c.resumed_from_preemption.push_back(0);
  c.new_token_ids.insert(c.new_token_ids.end(), prompt.begin() + nc, prompt.begin() + nc + n);
  c.new_token_ids_offsets.push_back(static_cast<uint32_t>(c.new_token_ids.size()));
  c.new_block_ids_offsets.push_back(static_cast<uint32_t>(c.new_block_ids.size()));
  c.num_computed_tokens.push_back(nc);
  so.num_scheduled_tokens.push_back(n);
  so.total_num_scheduled_tokens += n;
}

void ExpectSameLogprobs(const core::TokenLogprobs& got, const core::TokenLogprobs& want) {
  EXPECT_EQ(got.token_ids, want.token_ids);
  EXPECT_EQ(got.sampled_token_rank, want.sampled_token_rank);
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
  for (size_t i = 0; i < want.logprobs.size(); ++i) {
    EXPECT_NEAR(got.logprobs[i], want.logprobs[i], 1e-4f) << "entry " << i;
  }
}

// vLLM's prompt logprobs: position p's raw logits give the logprob and rank of prompt token
// p + 1 and the top-k; a chunked prefill assembles them in order and sends them all with the
// first sampled token; they agree with the sampled-token logprobs of the prefix alone.
TEST_F(ModelRunnerTest, PromptLogprobsAssembleAcrossChunks) {
  core::NewRequestData d = NewRequest("p", 10, 0);
  d.sampling_params.prompt_logprobs = 3;
  const std::vector<int32_t> prompt = d.prompt_token_ids;

  auto worker = MakeWorker();
  core::SchedulerOutput whole;
  whole.scheduled_new_reqs.push_back(d);
  whole.num_scheduled_tokens = {10};
  whole.total_num_scheduled_tokens = 10;
  auto once = worker->ExecuteModel(whole);
  ASSERT_TRUE(once.ok()) << once.status();
  EXPECT_TRUE(once->logprobs.empty());  // sampled logprobs were not asked for
  ASSERT_EQ(once->prompt_logprobs.size(), 1u);
  const std::vector<core::TokenLogprobs> expected = once->prompt_logprobs[0];
  ASSERT_EQ(expected.size(), 9u);
  for (size_t p = 0; p < expected.size(); ++p) {
    SCOPED_TRACE(p);
    ASSERT_EQ(expected[p].token_ids.size(), 4u);  // the prompt token, then the top 3
    EXPECT_EQ(expected[p].token_ids[0], prompt[p + 1]);
    EXPECT_GE(expected[p].sampled_token_rank, 1);
    EXPECT_LE(expected[p].logprobs[0], expected[p].logprobs[1]);
    if (expected[p].sampled_token_rank == 1) {
      EXPECT_FLOAT_EQ(expected[p].logprobs[0], expected[p].logprobs[1]);
    }
  }

  // Chunks of 4, 5 and 1 tokens, the first beside another request that samples.
  auto chunked = MakeWorker();
  core::NewRequestData first_chunk = d;
  core::SchedulerOutput s1;
  s1.scheduled_new_reqs = {first_chunk, NewRequest("other", 6, 10)};
  s1.num_scheduled_tokens = {4, 6};
  s1.total_num_scheduled_tokens = 10;
  auto out = chunked->ExecuteModel(s1);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->sampled_token_ids[0].empty());
  EXPECT_EQ(out->sampled_token_ids[1].size(), 1u);
  for (const auto& list : out->prompt_logprobs) EXPECT_TRUE(list.empty());
  core::SchedulerOutput s2;
  AddChunk(s2, "p", prompt, 4, 5);
  out = chunked->ExecuteModel(s2);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->prompt_logprobs.empty());  // not sampled yet: nothing sent
  core::SchedulerOutput s3;
  AddChunk(s3, "p", prompt, 9, 1);
  out = chunked->ExecuteModel(s3);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->prompt_logprobs.size(), 1u);
  ASSERT_EQ(out->prompt_logprobs[0].size(), expected.size());
  for (size_t p = 0; p < expected.size(); ++p) {
    SCOPED_TRACE(p);
    ExpectSameLogprobs(out->prompt_logprobs[0][p], expected[p]);
  }
  EXPECT_EQ(out->sampled_token_ids[0], once->sampled_token_ids[0]);
  // Sent once: the decode step after carries none.
  core::SchedulerOutput s4;
  AddDecode(s4, "p", out->sampled_token_ids[0][0], 10);
  out = chunked->ExecuteModel(s4);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->prompt_logprobs.empty());

  // The prefix alone: its sampled row's top 3 are position p's alternatives.
  for (int32_t p : {0, 4, 8}) {
    SCOPED_TRACE(p);
    auto fresh = MakeWorker();
    core::NewRequestData prefix = NewRequest("prefix", p + 1, 0);
    prefix.prompt_token_ids.assign(prompt.begin(), prompt.begin() + p + 1);
    prefix.sampling_params.logprobs = 3;
    core::SchedulerOutput so;
    so.scheduled_new_reqs.push_back(prefix);
    so.num_scheduled_tokens = {p + 1};
    so.total_num_scheduled_tokens = p + 1;
    auto alone = fresh->ExecuteModel(so);
    ASSERT_TRUE(alone.ok()) << alone.status();
    const core::TokenLogprobs& lp = alone->logprobs[0][0];
    for (size_t i = 1; i < lp.token_ids.size(); ++i) {
      EXPECT_EQ(lp.token_ids[i], expected[p].token_ids[i]);
      EXPECT_NEAR(lp.logprobs[i], expected[p].logprobs[i], 1e-4f);
    }
  }
}

// A one-token prompt has no prompt logprobs to send (its only position is the first).
TEST_F(ModelRunnerTest, PromptLogprobsOfAOneTokenPromptAreEmpty) {
  auto worker = MakeWorker();
  core::NewRequestData d = NewRequest("one", 1, 0);
  d.sampling_params.prompt_logprobs = 0;
  core::SchedulerOutput so;
  so.scheduled_new_reqs.push_back(d);
  so.num_scheduled_tokens = {1};
  so.total_num_scheduled_tokens = 1;
  auto out = worker->ExecuteModel(so);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->sampled_token_ids[0].size(), 1u);
  for (const auto& list : out->prompt_logprobs) EXPECT_TRUE(list.empty());
}

TEST_F(ModelRunnerTest, MalformedStepsAreRejected) {
  auto worker = MakeWorker();
  {
    core::SchedulerOutput so;
    AddDecode(so, "nobody", 1, 3);
    auto out = worker->ExecuteModel(so);
    EXPECT_TRUE(absl::IsInvalidArgument(out.status())) << out.status();
  }
  {
    core::SchedulerOutput so;
    core::NewRequestData d = NewRequest("far", 4, 0);
    d.block_ids = {999};
    so.scheduled_new_reqs.push_back(d);
    so.num_scheduled_tokens = {4};
    auto out = worker->ExecuteModel(so);
    EXPECT_TRUE(absl::IsInvalidArgument(out.status())) << out.status();
    EXPECT_NE(out.status().message().find("block"), std::string::npos) << out.status();
  }
  {
    core::SchedulerOutput so;
    core::NewRequestData d = NewRequest("vocab", 4, 0);
    d.prompt_token_ids[2] = kVocab + 5;
    so.scheduled_new_reqs.push_back(d);
    so.num_scheduled_tokens = {4};
    auto out = worker->ExecuteModel(so);
    EXPECT_TRUE(absl::IsInvalidArgument(out.status())) << out.status();
  }
  {
    core::SchedulerOutput so;
    so.scheduled_new_reqs.push_back(NewRequest("count", 4, 0));
    so.num_scheduled_tokens = {4, 1};
    EXPECT_TRUE(absl::IsInvalidArgument(worker->ExecuteModel(so).status()));
  }
  {
    core::SchedulerOutput so;
    so.scheduled_new_reqs.push_back(NewRequest("toomany", 4, 0));
    so.num_scheduled_tokens = {9};
    EXPECT_TRUE(absl::IsInvalidArgument(worker->ExecuteModel(so).status()));
  }
  // The worker still serves a good step afterwards.
  core::SchedulerOutput good;
  good.scheduled_new_reqs.push_back(NewRequest("good", 4, 0));
  good.num_scheduled_tokens = {4};
  auto out = worker->ExecuteModel(good);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->sampled_token_ids[0].size(), 1u);
}

// A backend that samples on the "device" (ModelBackend's contract as CudaModelBackend keeps
// it, without a GPU): every logits row scores token t as -|t - 50|, so greedy picks 50
// unmasked; a row it samples is masked with its bitmask first (kernels::cpu::
// ApplyTokenBitmask standing in for the CUDA kernel); an on_host row comes back unmasked.
// Records what the runner passed for each row.
class FakeDeviceBackend final : public ModelBackend {
 public:
  struct SeenRow {
    bool on_host = false;
    bool has_bitmask = false;
  };
  FakeDeviceBackend(const HfConfig& config, std::vector<SeenRow>* seen)
      : config_(config), seen_(seen) {}
  const HfConfig& config() const override { return config_; }
  int32_t num_kv_heads() const override { return 1; }
  int32_t kv_dtype_bytes() const override { return 4; }
  int64_t weight_bytes() const override { return 0; }
  bool samples_on_device() const override { return true; }
  absl::StatusOr<int64_t> DetermineAvailableMemory() override { return int64_t{1} << 20; }
  absl::Status InitializeKVCache(int32_t, int32_t) override { return absl::OkStatus(); }
  absl::Status Execute(const StepInputs& in, StepResult* result) override {
    const int64_t vocab = config_.vocab_size;
    result->tokens.assign(in.sampling.size(), -1);
    result->host_logits.clear();
    std::vector<float> row(vocab);
    for (size_t i = 0; i < in.sampling.size(); ++i) {
      const RowSampling& r = in.sampling[i];
      seen_->push_back({r.on_host, r.bitmask != nullptr});
      for (int64_t t = 0; t < vocab; ++t) row[t] = -std::abs(static_cast<float>(t) - 50.0f);
      if (r.on_host) {
        result->host_logits.insert(result->host_logits.end(), row.begin(), row.end());
        continue;
      }
      if (r.bitmask != nullptr) kernels::cpu::ApplyTokenBitmask(row.data(), vocab, r.bitmask);
      result->tokens[i] =
          static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    }
    return absl::OkStatus();
  }

 private:
  const HfConfig config_;
  std::vector<SeenRow>* seen_;
};

// One bitmask row for kVocab tokens allowing `tokens`.
std::vector<int32_t> MaskAllowing(std::initializer_list<int32_t> tokens) {
  std::vector<int32_t> m((kVocab + 31) / 32, 0);
  for (int32_t t : tokens) m[t / 32] |= static_cast<int32_t>(1u << (t % 32));
  return m;
}

// Structured outputs on a device-sampling backend: a constrained row without penalties or
// logprobs stays on the device with its bitmask (no longer forced to the host); one with a
// penalty goes to the host with its bitmask, and the runner masks its (unmasked) logits; an
// unconstrained row carries none. Only allowed tokens are sampled either way.
TEST_F(ModelRunnerTest, GrammarBitmaskTravelsWithTheRowItConstrains) {
  auto config = LoadHfConfig(dir_);
  ASSERT_TRUE(config.ok()) << config.status();
  std::vector<FakeDeviceBackend::SeenRow> seen;
  ModelRunner runner(std::make_unique<FakeDeviceBackend>(*config, &seen), 1);
  ASSERT_TRUE(runner.InitializeKVCache(32, kBlockSize).ok());
  core::SchedulerOutput so;
  for (const char* id : {"free", "device", "host"}) {
    core::NewRequestData d = NewRequest(id, 4, 10 * static_cast<int32_t>(so.num_scheduled_reqs()));
    if (std::string(id) == "host") d.sampling_params.repetition_penalty = 1.2;
    so.scheduled_new_reqs.push_back(d);
    so.num_scheduled_tokens.push_back(4);
    so.total_num_scheduled_tokens += 4;
  }
  // Prompt tokens are 3, 10, 17, 24: the allowed 7 and 20 are unpenalised, 20 the closest to 50.
  so.structured_output_indices = {1, 2};
  for (int k = 0; k < 2; ++k) {
    const std::vector<int32_t> m = MaskAllowing({7, 20});
    so.grammar_bitmask.insert(so.grammar_bitmask.end(), m.begin(), m.end());
  }
  auto out = runner.ExecuteModel(so);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_FALSE(seen[0].on_host);
  EXPECT_FALSE(seen[0].has_bitmask);
  EXPECT_FALSE(seen[1].on_host) << "a constrained row no longer needs the host";
  EXPECT_TRUE(seen[1].has_bitmask);
  EXPECT_TRUE(seen[2].on_host);
  EXPECT_TRUE(seen[2].has_bitmask);
  EXPECT_EQ(out->sampled_token_ids[0], std::vector<int32_t>{50});
  EXPECT_EQ(out->sampled_token_ids[1], std::vector<int32_t>{20});
  EXPECT_EQ(out->sampled_token_ids[2], std::vector<int32_t>{20}) << "the host row was not masked";
}

// The CPU backend samples every row on the host: the runner masks a constrained row there.
TEST_F(ModelRunnerTest, CpuBackendSamplesOnlyAllowedTokens) {
  auto worker = MakeWorker();
  for (int32_t allowed : {7, 61}) {
    core::SchedulerOutput so;
    so.scheduled_new_reqs.push_back(
        NewRequest(absl::StrCat("c", allowed), 5, allowed == 7 ? 0 : 8));
    so.num_scheduled_tokens = {5};
    so.total_num_scheduled_tokens = 5;
    so.structured_output_indices = {0};
    so.grammar_bitmask = MaskAllowing({allowed});
    auto out = worker->ExecuteModel(so);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->sampled_token_ids[0], std::vector<int32_t>{allowed});
  }
}

TEST_F(ModelRunnerTest, ExecuteBeforeKVCacheFails) {
  auto worker = Worker::Create(CpuConfig(dir_), &comm_);
  ASSERT_TRUE(worker.ok()) << worker.status();
  core::SchedulerOutput so;
  so.scheduled_new_reqs.push_back(NewRequest("x", 4, 0));
  so.num_scheduled_tokens = {4};
  EXPECT_TRUE(absl::IsFailedPrecondition((*worker)->ExecuteModel(so).status()));
  EXPECT_TRUE(absl::IsInvalidArgument((*worker)->InitializeKVCache(0, 16)));
}

TEST_F(ModelRunnerTest, BadLoadFormatAndMissingModelAreClearErrors) {
  EXPECT_TRUE(absl::IsInvalidArgument(ParseLoadFormat("pt").status()));
  auto worker = Worker::Create(CpuConfig(dir_ / "missing"), &comm_);
  EXPECT_FALSE(worker.ok());
}

}  // namespace
}  // namespace vllm::worker
