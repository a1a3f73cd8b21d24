// Pipeline parallelism's worker side: vLLM's layer split (worker/pp_layout.h), the stage frame
// codec (worker/intermediate_tensors.h), and a model split into stages that hand each other the
// residual stream giving exactly the whole model's logits.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/communicator.h"
#include "tests/support/fixtures.h"
#include "worker/intermediate_tensors.h"
#include "worker/llama_model.h"
#include "worker/model_runner.h"
#include "worker/pp_layout.h"
#include "worker/weights.h"

namespace vllm::worker {
namespace {

using ::testing::HasSubstr;

std::vector<int32_t> Split(int32_t layers, int32_t pp, std::optional<std::string> env = {}) {
  absl::StatusOr<std::vector<int32_t>> parts = PpPartition(layers, pp, env);
  EXPECT_TRUE(parts.ok()) << parts.status();
  return parts.ok() ? *parts : std::vector<int32_t>{};
}

// vllm/distributed/utils.py get_pp_indices: the remainder goes to the stages before the last,
// from the second-to-last backwards.
TEST(PpPartitionTest, SplitsAsVllm) {
  EXPECT_EQ(Split(6, 2), (std::vector<int32_t>{3, 3}));
  EXPECT_EQ(Split(5, 2), (std::vector<int32_t>{3, 2}));
  EXPECT_EQ(Split(32, 3), (std::vector<int32_t>{11, 11, 10}));
  EXPECT_EQ(Split(10, 4), (std::vector<int32_t>{2, 3, 3, 2}));
  EXPECT_EQ(Split(3, 4), (std::vector<int32_t>{1, 1, 1, 0}));
  EXPECT_EQ(Split(2, 4), (std::vector<int32_t>{0, 1, 1, 0}));
  EXPECT_EQ(Split(7, 1), (std::vector<int32_t>{7}));
  EXPECT_EQ(Split(6, 2, "1, 5"), (std::vector<int32_t>{1, 5}));
  EXPECT_EQ(Split(6, 2, "0,6"), (std::vector<int32_t>{0, 6}));
}

TEST(PpPartitionTest, BadPartitionsNameTheVariable) {
  for (const auto& [env, pp, want] : std::vector<std::tuple<std::string, int32_t, std::string>>{
           {"3,x", 2, "invalid partition string"},
           {"3,-1,4", 3, "invalid partition string"},
           {"", 2, "invalid partition string"},
           {"2,2,2", 2, "len(partitions)=3 does not match pp_size=2"},
           {"2,3", 2, "sum(partitions)=5 does not match num_hidden_layers=6"}}) {
    absl::StatusOr<std::vector<int32_t>> parts = PpPartition(6, pp, env);
    ASSERT_FALSE(parts.ok()) << env;
    EXPECT_EQ(parts.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(parts.status().message()), HasSubstr("VLLM_PP_LAYER_PARTITION"));
    EXPECT_THAT(std::string(parts.status().message()), HasSubstr(want)) << env;
  }
}

TEST(PpPartitionTest, StagesCoverTheLayersInOrder) {
  int32_t next = 0;
  for (int32_t rank = 0; rank < 4; ++rank) {
    absl::StatusOr<PpStage> stage = MakePpStage(10, rank, 4);
    ASSERT_TRUE(stage.ok()) << stage.status();
    EXPECT_EQ(stage->first_layer, next);
    EXPECT_EQ(stage->is_first(), rank == 0);
    EXPECT_EQ(stage->is_last(), rank == 3);
    next = stage->end_layer;
  }
  EXPECT_EQ(next, 10);
  EXPECT_FALSE(MakePpStage(10, 4, 4).ok());
}

std::string Frame(uint64_t step, const IntermediateTensors& t) {
  std::string out = EncodeStageTensorsHeader(step, t);
  out.append(reinterpret_cast<const char*>(t.residual.data()), t.residual.size() * sizeof(float));
  out.append(reinterpret_cast<const char*>(t.hidden.data()), t.hidden.size() * sizeof(float));
  return out;
}

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

constexpr StageFrameLimits kLimits{/*hidden_size=*/4, /*max_num_tokens=*/8, /*num_layers=*/6};

IntermediateTensors TwoTokens(int32_t next_layer) {
  IntermediateTensors t;
  t.next_layer = next_layer;
  t.num_tokens = 2;
  t.hidden_size = 4;
  t.residual = {1, 2, 3, 4, 5, 6, 7, 8};
  if (next_layer > 0) t.hidden = {-1, -2, -3, -4, -5, -6, -7, -8};
  return t;
}

TEST(StageFrameTest, RoundTripsAndRefusesEveryPrefix) {
  for (int32_t next_layer : {0, 3, 6}) {
    const IntermediateTensors t = TwoTokens(next_layer);
    const std::string bytes = Frame(41, t);
    EXPECT_EQ(bytes.size(), StageFrameBytes(t));
    IntermediateTensors out;
    absl::Status error;
    absl::StatusOr<uint64_t> step = DecodeStageFrame(Bytes(bytes), kLimits, &out, &error);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(*step, 41u);
    EXPECT_TRUE(error.ok());
    EXPECT_EQ(out.next_layer, next_layer);
    EXPECT_EQ(out.num_tokens, 2);
    EXPECT_EQ(out.residual, t.residual);
    EXPECT_EQ(out.hidden, t.hidden);
    for (size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_FALSE(DecodeStageFrame(Bytes(bytes.substr(0, n)), kLimits, &out, &error).ok()) << n;
    }
    EXPECT_FALSE(DecodeStageFrame(Bytes(bytes + "x"), kLimits, &out, &error).ok());
  }
}

TEST(StageFrameTest, RefusesFramesOutsideTheLimits) {
  IntermediateTensors out;
  absl::Status error;
  auto refused = [&](const std::string& bytes, const std::string& want) {
    absl::StatusOr<uint64_t> step = DecodeStageFrame(Bytes(bytes), kLimits, &out, &error);
    ASSERT_FALSE(step.ok()) << want;
    EXPECT_EQ(step.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(step.status().message()), HasSubstr(want));
  };
  IntermediateTensors t = TwoTokens(3);
  t.hidden_size = 2;  // 2 tokens × 4 floats read as 4 tokens × 2: the wrong model
  t.num_tokens = 4;
  refused(Frame(1, t), "hidden size 2, this stage's is 4");
  t = TwoTokens(3);
  t.num_tokens = 9;
  refused(Frame(1, t), "9 tokens, outside [1, 8]");
  t.num_tokens = 0;
  refused(Frame(1, t), "0 tokens");
  t = TwoTokens(7);
  refused(Frame(1, t), "next layer 7 outside [0, 6]");
  t = TwoTokens(0);
  t.next_layer = 2;  // past layer 0 the last sub-layer's output must come with the stream
  refused(Frame(1, t), "hidden states absent at layer 2");
  t = TwoTokens(3);
  t.residual.pop_back();
  refused(Frame(1, t), "bytes,");
  std::string bad_magic = Frame(1, TwoTokens(3));
  bad_magic[0] = 'X';
  refused(bad_magic, "bad magic");
  std::string bad_kind = Frame(1, TwoTokens(3));
  bad_kind[4] = 'Q';
  refused(bad_kind, "unknown kind");
}

TEST(StageFrameTest, ErrorFramesCarryTheStatusBounded) {
  IntermediateTensors out;
  absl::Status error;
  const std::string bytes =
      EncodeStageError(9, absl::ResourceExhaustedError("pipeline stage 0: out of memory"));
  absl::StatusOr<uint64_t> step = DecodeStageFrame(Bytes(bytes), kLimits, &out, &error);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 9u);
  EXPECT_EQ(error, absl::ResourceExhaustedError("pipeline stage 0: out of memory"));
  // A long message is cut to the bound; a longer frame is refused.
  const std::string long_message(10000, 'm');
  const std::string cut = EncodeStageError(9, absl::InternalError(long_message));
  ASSERT_TRUE(DecodeStageFrame(Bytes(cut), kLimits, &out, &error).ok());
  EXPECT_EQ(error.message().size(), kMaxStageErrorBytes);
  EXPECT_FALSE(DecodeStageFrame(Bytes(cut + "m"), kLimits, &out, &error).ok());
  std::string bad_code = bytes;
  std::memset(bad_code.data() + 16, 0, 4);  // OK is not an error
  EXPECT_FALSE(DecodeStageFrame(Bytes(bad_code), kLimits, &out, &error).ok());
}

// One prompt through `stages` (each a stage of the same model), the stream handed on as the
// worker hands it; returns the last stage's logits of the last token.
std::vector<float> StagedLastLogits(const std::vector<std::unique_ptr<LlamaModel>>& stages,
                                    const std::vector<int32_t>& tokens) {
  constexpr int32_t kBlockSize = 16;
  const int32_t n = static_cast<int32_t>(tokens.size());
  const int32_t num_blocks = (n + kBlockSize - 1) / kBlockSize;
  std::vector<int32_t> positions(n), block_table(num_blocks);
  std::vector<int64_t> slots(n);
  for (int32_t i = 0; i < n; ++i) positions[i] = slots[i] = i;
  for (int32_t b = 0; b < num_blocks; ++b) block_table[b] = b;
  const int32_t query_start_loc[2] = {0, n};
  const int32_t seq_lens[1] = {n};
  const int32_t logits_index[1] = {n - 1};
  IntermediateTensors in, out;
  std::vector<float> logits;
  for (size_t s = 0; s < stages.size(); ++s) {
    absl::StatusOr<KVCache> cache = stages[s]->AllocateKVCache(num_blocks, kBlockSize);
    EXPECT_TRUE(cache.ok()) << cache.status();
    if (!cache.ok()) return {};
    ForwardBatch batch;
    batch.token_ids = tokens;
    batch.positions = positions;
    batch.slot_mapping = slots;
    batch.logits_indices = logits_index;
    batch.attention = {1, query_start_loc, seq_lens, block_table.data(), num_blocks, kBlockSize};
    if (s > 0) batch.intermediate_in = &in;
    if (s + 1 < stages.size()) batch.intermediate_out = &out;
    EXPECT_TRUE(stages[s]->Forward(batch, *cache, &logits).ok());
    // Through the wire format, as between processes.
    if (s + 1 < stages.size()) {
      const std::string frame = Frame(s, out);
      absl::Status error;
      const StageFrameLimits limits{stages[s]->config().hidden_size, n,
                                    stages[s]->config().num_hidden_layers};
      EXPECT_TRUE(DecodeStageFrame(Bytes(frame), limits, &in, &error).ok());
    }
  }
  return logits;
}

// A StageLink double that records what a runner takes and sends.
class RecordingLink final : public StageLink {
 public:
  absl::Status Send(uint64_t step_id, const IntermediateTensors& t) override {
    sent.push_back(step_id);
    last_sent = t;
    return absl::OkStatus();
  }
  absl::Status SendError(uint64_t step_id, const absl::Status& error) override {
    errors.emplace_back(step_id, error);
    return absl::OkStatus();
  }
  absl::Status Receive(uint64_t step_id, IntermediateTensors* out) override {
    received.push_back(step_id);
    *out = next_in;
    return absl::OkStatus();
  }
  std::vector<uint64_t> sent, received;
  std::vector<std::pair<uint64_t, absl::Status>> errors;
  IntermediateTensors last_sent, next_in;
};

// A middle stage keeps the frames in step whatever happens: a step it cannot run still takes
// the previous stage's frame and sends the next stage an error frame; a step with nothing
// scheduled exchanges nothing; a good step takes one frame and sends one.
TEST(StageRunnerTest, AFailedStepStillTakesAndSendsOneFrame) {
  const std::filesystem::path dir =
      std::filesystem::path(VLLM_SOURCE_DIR) / "tests" / "fixtures" / "models" / "llama_gqa";
  absl::StatusOr<HfConfig> config = LoadHfConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::unique_ptr<WeightSource>> weights = OpenSafetensors(dir);
  ASSERT_TRUE(weights.ok()) << weights.status();
  kernels::SingleRankCommunicator comm;
  const PpStage middle{1, 3, 1, 2};
  absl::StatusOr<std::unique_ptr<LlamaModel>> model =
      LlamaModel::Load(*config, **weights, &comm, &middle);
  ASSERT_TRUE(model.ok()) << model.status();
  ModelRunner runner(std::move(*model), /*seed=*/0);
  ASSERT_TRUE(runner.InitializeKVCache(8, 16).ok());
  RecordingLink previous, next;
  runner.SetStageLinks(&previous, &next);

  // A cached request this stage never saw: the step fails here.
  core::SchedulerOutput bad;
  bad.step_id = 7;
  bad.scheduled_cached_reqs.req_ids = {"ghost"};
  bad.scheduled_cached_reqs.resumed_from_preemption = {0};
  bad.scheduled_cached_reqs.new_token_ids = {5};
  bad.scheduled_cached_reqs.new_token_ids_offsets = {0, 1};
  bad.scheduled_cached_reqs.new_block_ids_offsets = {0, 0};
  bad.scheduled_cached_reqs.num_computed_tokens = {3};
  bad.num_scheduled_tokens = {1};
  bad.total_num_scheduled_tokens = 1;
  EXPECT_FALSE(runner.ExecuteModel(bad).ok());
  EXPECT_EQ(previous.received, (std::vector<uint64_t>{7}));
  ASSERT_EQ(next.errors.size(), 1u);
  EXPECT_EQ(next.errors[0].first, 7u);
  EXPECT_THAT(std::string(next.errors[0].second.message()), HasSubstr("pipeline stage 1:"));
  EXPECT_TRUE(next.sent.empty());

  // Nothing scheduled: no frame either way.
  core::SchedulerOutput empty;
  empty.step_id = 8;
  ASSERT_TRUE(runner.ExecuteModel(empty).ok());
  EXPECT_EQ(previous.received.size(), 1u);

  // A good step: one frame in (stage 0's stream after layer 0), one frame out (after layer 1).
  core::SchedulerOutput good;
  good.step_id = 9;
  core::NewRequestData r;
  r.req_id = "a";
  r.prompt_token_ids = {1, 2, 3};
  r.block_ids = {0};
  r.sampling_params.temperature = 0.0;
  good.scheduled_new_reqs.push_back(r);
  good.num_scheduled_tokens = {3};
  good.total_num_scheduled_tokens = 3;
  previous.next_in.next_layer = 1;
  previous.next_in.num_tokens = 3;
  previous.next_in.hidden_size = config->hidden_size;
  previous.next_in.residual.assign(3 * config->hidden_size, 0.5f);
  previous.next_in.hidden.assign(3 * config->hidden_size, 0.25f);
  absl::StatusOr<core::ModelRunnerOutput> out = runner.ExecuteModel(good);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->req_ids, std::vector<std::string>{"a"});
  EXPECT_TRUE(out->sampled_token_ids[0].empty()) << "a stage before the last samples nothing";
  EXPECT_EQ(previous.received, (std::vector<uint64_t>{7, 9}));
  EXPECT_EQ(next.sent, (std::vector<uint64_t>{9}));
  EXPECT_EQ(next.last_sent.next_layer, 2);
  EXPECT_EQ(next.last_sent.num_tokens, 3);
  EXPECT_EQ(runner.stage_stats().steps, 2);
}

struct SplitCase {
  const char* model;
  std::vector<int32_t> partition;
};

class StagedModelTest : public ::testing::TestWithParam<SplitCase> {};

// Stages chained by their frames give the whole model's logits bit for bit, whatever the split:
// even, uneven, stages without layers at either end (the stream is then the embedding alone).
TEST_P(StagedModelTest, StagesGiveTheWholeModelsLogitsExactly) {
  const std::filesystem::path dir =
      std::filesystem::path(VLLM_SOURCE_DIR) / "tests" / "fixtures" / "models" / GetParam().model;
  absl::StatusOr<HfConfig> config = LoadHfConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::unique_ptr<WeightSource>> weights = OpenSafetensors(dir);
  ASSERT_TRUE(weights.ok()) << weights.status();
  kernels::SingleRankCommunicator comm;
  absl::StatusOr<std::unique_ptr<LlamaModel>> whole = LlamaModel::Load(*config, **weights, &comm);
  ASSERT_TRUE(whole.ok()) << whole.status();
  const std::vector<int32_t>& partition = GetParam().partition;
  std::vector<std::unique_ptr<LlamaModel>> stages;
  int32_t first = 0;
  int64_t stage_bytes = 0;
  for (size_t s = 0; s < partition.size(); ++s) {
    const PpStage stage{static_cast<int32_t>(s), static_cast<int32_t>(partition.size()), first,
                        first + partition[s]};
    first = stage.end_layer;
    absl::StatusOr<std::unique_ptr<LlamaModel>> m =
        LlamaModel::Load(*config, **weights, &comm, &stage);
    ASSERT_TRUE(m.ok()) << m.status();
    stage_bytes += (*m)->weight_bytes();
    stages.push_back(std::move(*m));
  }
  ASSERT_EQ(first, config->num_hidden_layers);
  // Every stage holds only its share: together about the whole (the embedding once more when
  // the last stage needs it for a tied lm_head).
  const int64_t embedding = int64_t{config->vocab_size} * config->hidden_size * 4;
  EXPECT_LE(stage_bytes, (*whole)->weight_bytes() + embedding);
  const testing::Reference ref = testing::LoadReference(dir);
  for (size_t i = 0; i < ref.prompts.size(); ++i) {
    const std::vector<float> want = testing::LastLogits(**whole, ref.prompts[i]);
    const std::vector<float> got = StagedLastLogits(stages, ref.prompts[i]);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
        << "prompt " << i << ": the staged logits differ from the whole model's";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Splits, StagedModelTest,
    ::testing::Values(SplitCase{"llama_gqa", {2, 1}}, SplitCase{"llama_gqa", {0, 1, 1, 1}},
                      SplitCase{"llama_gqa", {3, 0}}, SplitCase{"gemma2", {1, 2, 1}},
                      SplitCase{"qwen2_moe", {0, 4}}, SplitCase{"phi3", {1, 1}}),
    [](const ::testing::TestParamInfo<SplitCase>& info) {
      std::string name = info.param.model;
      for (int32_t p : info.param.partition) absl::StrAppend(&name, "_", p);
      return name;
    });

}  // namespace
}  // namespace vllm::worker
