// The CUDA backend end to end (worker/cuda/): the reference fixtures (tests/fixtures/models)
// through CudaLlamaModel and through LLMEngine with --device cuda, against transformers'
// greedy tokens and logits — float32 (tokens exact, logits tight), eager and with CUDA graphs
// — and in the checkpoints' own dtypes (bf16 / f16: logits looser, first tokens equal where
// the reference's top two logits are apart); the bundled bf16 model on CUDA vs the CPU; a
// TP = 1 engine through MultiprocExecutor (a worker process) with --device cuda; prompt
// logprobs against the CPU backend's.
// Every test skips itself when no CUDA device is visible.
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "frontend/engine/llm_engine.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_probe.h"
#include "kernels/cuda/device_communicator.h"
#include "nlohmann/json.hpp"
#include "tests/support/engine_greedy.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "worker/cuda/cuda_llama_model.h"
#include "worker/cuda/cuda_model_backend.h"
#include "worker/cuda/dtype_dispatch.h"
#include "worker/weights.h"
#include "worker/worker.h"

namespace vllm::worker {
namespace {

namespace kc = ::vllm::kernels::cuda;
using config::EngineArgs;
using frontend::LLMEngine;
using testing::GreedyRequest;
using testing::LoadReference;
using testing::Reference;

#define SKIP_WITHOUT_GPU()                      \
  do {                                          \
    if (kernels::CudaDeviceCount() == 0) {      \
      GTEST_SKIP() << "no CUDA device visible"; \
    }                                           \
  } while (0)

std::filesystem::path Fixture(const std::string& name) { return testing::FixtureModels() / name; }

// The first logits row of the last Forward, as floats.
std::vector<float> DownloadLogits(const CudaLlamaModel& model) {
  const int64_t vocab = model.vocab_size();
  return WithDType(model.dtype(), [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> raw(vocab);
    std::vector<float> out(vocab);
    if (cudaMemcpy(raw.data(), model.logits(), vocab * sizeof(T), cudaMemcpyDeviceToHost) !=
        cudaSuccess) {
      return std::vector<float>{};
    }
    for (int64_t i = 0; i < vocab; ++i) out[i] = HostToFloat(raw[i]);
    return out;
  });
}

// Runs `tokens` as one prefill in a fresh cache and returns the last position's logits
// (empty on failure).
std::vector<float> CudaLastLogits(CudaLlamaModel& model, const std::vector<int32_t>& tokens) {
  constexpr int32_t kBlockSize = 16;
  const int32_t n = static_cast<int32_t>(tokens.size());
  const int32_t num_blocks = (n + kBlockSize - 1) / kBlockSize;
  auto cache = model.AllocateKVCache(num_blocks, kBlockSize);
  if (!cache.ok()) return {};
  std::vector<int32_t> positions(n), table(num_blocks), qsl = {0, n}, seq_lens = {n},
                                                        logits_index = {n - 1};
  std::vector<int64_t> slots(n);
  for (int32_t i = 0; i < n; ++i) positions[i] = i, slots[i] = i;
  for (int32_t b = 0; b < num_blocks; ++b) table[b] = b;
  auto up = [](const auto& host) {
    auto buf = DeviceBuffer::Allocate(host.size() * sizeof(host[0]), "test input");
    if (buf.ok()) {
      cudaMemcpy(buf->get(), host.data(), host.size() * sizeof(host[0]), cudaMemcpyHostToDevice);
    }
    return buf;
  };
  auto d_ids = up(tokens), d_pos = up(positions), d_table = up(table), d_qsl = up(qsl),
       d_lens = up(seq_lens), d_logits = up(logits_index);
  auto d_slots = up(slots);
  if (!d_ids.ok() || !d_pos.ok() || !d_table.ok() || !d_qsl.ok() || !d_lens.ok() ||
      !d_logits.ok() || !d_slots.ok()) {
    return {};
  }
  CudaForwardInputs in;
  in.num_tokens = n;
  in.token_ids = d_ids->as<int32_t>();
  in.positions = d_pos->as<int32_t>();
  in.slot_mapping = d_slots->as<int64_t>();
  in.attention.num_seqs = 1;
  in.attention.num_tokens = n;
  in.attention.query_start_loc = d_qsl->as<int32_t>();
  in.attention.seq_lens = d_lens->as<int32_t>();
  in.attention.block_tables = d_table->as<int32_t>();
  in.attention.max_blocks_per_seq = num_blocks;
  in.attention.block_size = kBlockSize;
  in.attention.max_query_len = n;
  in.attention.max_seq_len = n;
  in.num_logits = 1;
  in.logits_indices = d_logits->as<int32_t>();
  if (!model.Forward(in, &*cache, nullptr).ok()) return {};
  if (cudaDeviceSynchronize() != cudaSuccess) return {};
  return DownloadLogits(model);
}

// max |got - want| / max(1, max |want|).
double RelativeMaxDiff(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return 1e30;
  double scale = 1.0, diff = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::abs(want[i])));
    diff = std::max(diff, static_cast<double>(std::abs(got[i] - want[i])));
  }
  return diff / scale;
}

// Gap between the reference's largest and second-largest logit, relative like above.
double TopTwoGap(const std::vector<float>& want) {
  std::vector<float> v = want;
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  double scale = 1.0;
  for (float x : want) scale = std::max(scale, static_cast<double>(std::abs(x)));
  return (v[0] - v[1]) / scale;
}

std::unique_ptr<CudaLlamaModel> LoadCuda(const std::string& name, kc::GemmDType dtype) {
  auto config = LoadHfConfig(Fixture(name));
  if (!config.ok()) return nullptr;
  auto weights = OpenSafetensors(Fixture(name));
  if (!weights.ok()) return nullptr;
  static kc::SingleRankDeviceCommunicator comm;
  CudaModelOptions o;
  o.dtype = dtype;
  o.max_num_tokens = 256;
  o.max_num_logits = 8;
  o.max_model_len = 256;
  auto model = CudaLlamaModel::Load(*config, weights->get(), &comm, o, nullptr);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

kc::GemmDType CheckpointDType(const std::string& name) {
  auto config = LoadHfConfig(Fixture(name));
  return ResolveCudaDType(ModelDType::kAuto, *config);  // fixtures are float32 / bf16 / f16
}

class CudaFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaFixtureTest, Float32LogitsMatchTransformers) {
  SKIP_WITHOUT_GPU();
  const Reference ref = LoadReference(Fixture(GetParam()));
  auto model = LoadCuda(GetParam(), kc::GemmDType::kFloat32);
  ASSERT_NE(model, nullptr);
  for (size_t i = 0; i < ref.prompts.size(); ++i) {
    EXPECT_LE(RelativeMaxDiff(CudaLastLogits(*model, ref.prompts[i]), ref.prompt_logits[i]), 5e-4)
        << "prompt " << i;
    std::vector<int32_t> tokens = ref.prompts[i];
    tokens.insert(tokens.end(), ref.greedy[i].begin(), ref.greedy[i].end() - 1);
    EXPECT_LE(RelativeMaxDiff(CudaLastLogits(*model, tokens), ref.final_logits[i]), 5e-4)
        << "prompt " << i << " (final step)";
  }
}

TEST_P(CudaFixtureTest, CheckpointDTypeLogitsAndFirstTokens) {
  SKIP_WITHOUT_GPU();
  const Reference ref = LoadReference(Fixture(GetParam()));
  const kc::GemmDType dtype = CheckpointDType(GetParam());
  const double tolerance = dtype == kc::GemmDType::kBFloat16 ? 6e-2 : 1.5e-2;
  auto model = LoadCuda(GetParam(), dtype);
  ASSERT_NE(model, nullptr);
  for (size_t i = 0; i < ref.prompts.size(); ++i) {
    const std::vector<float> got = CudaLastLogits(*model, ref.prompts[i]);
    EXPECT_LE(RelativeMaxDiff(got, ref.prompt_logits[i]), tolerance) << "prompt " << i;
    // The first greedy token, unless the reference's top two are within the tolerance.
    if (got.empty() || TopTwoGap(ref.prompt_logits[i]) <= 2 * tolerance) continue;
    const int32_t token =
        static_cast<int32_t>(std::max_element(got.begin(), got.end()) - got.begin());
    EXPECT_EQ(token, ref.greedy[i][0]) << "prompt " << i;
  }
}

struct Mode {
  const char* name;
  int32_t batch;
  bool prefix_caching;
  int32_t max_num_batched_tokens;
  int32_t long_prefill_token_threshold;
  int32_t num_blocks;  // 0: profiled
  int32_t repeats;
};

const Mode kModes[] = {
    {"batch1", 1, false, 0, 0, 0, 1},
    {"batch8", 8, false, 0, 0, 0, 1},
    {"batch8_prefix_caching", 8, true, 0, 0, 0, 2},
    {"chunked_prefill", 8, true, 16, 5, 0, 1},
    {"preemption", 8, true, 0, 0, 14, 1},
};

EngineArgs CudaArgs(const std::filesystem::path& model, bool eager) {
  EngineArgs args;
  args.config.model.model = model;
  args.config.device.device = Device::kCuda;
  args.config.model.dtype = ModelDType::kFloat32;
  args.config.model.enforce_eager = eager;
  args.config.cache.gpu_memory_utilization = 0.3;
  args.config.model.max_model_len = 128;
  args.config.scheduler.max_num_seqs = 16;
  return args;
}

void RunGreedyModes(const std::string& name, bool eager) {
  const Reference ref = LoadReference(Fixture(name));
  for (const Mode& mode : kModes) {
    SCOPED_TRACE(mode.name);
    EngineArgs args = CudaArgs(Fixture(name), eager);
    args.config.cache.enable_prefix_caching = mode.prefix_caching;
    args.config.scheduler.max_num_batched_tokens = mode.max_num_batched_tokens;
    args.config.scheduler.long_prefill_token_threshold = mode.long_prefill_token_threshold;
    if (mode.num_blocks > 0) args.config.cache.num_gpu_blocks_override = mode.num_blocks;
    auto engine = LLMEngine::Create(args);
    ASSERT_TRUE(engine.ok()) << engine.status();
    testing::ExpectGreedyMatchesReference(**engine, ref, mode.name, mode.repeats, mode.batch);
    if (mode.num_blocks > 0) {
      EXPECT_GT((*engine)->totals().num_preemptions, 0);
    }
    if (mode.repeats > 1) {
      EXPECT_GT((*engine)->totals().prefix_cache_hits, 0);
    }
  }
}

TEST_P(CudaFixtureTest, Float32GreedyTokensEager) {
  SKIP_WITHOUT_GPU();
  RunGreedyModes(GetParam(), /*eager=*/true);
}

TEST_P(CudaFixtureTest, Float32GreedyTokensWithCudaGraphs) {
  SKIP_WITHOUT_GPU();
  RunGreedyModes(GetParam(), /*eager=*/false);
}

// TP = 2 through worker processes and NCCL (each rank holds half the heads and half the MLP;
// o_proj / down_proj partial sums all-reduced), with CUDA graphs: transformers' greedy tokens.
// Needs two GPUs.
TEST_P(CudaFixtureTest, TensorParallelTwoGreedyTokens) {
  if (kernels::CudaDeviceCount() < 2) {
    GTEST_SKIP() << "needs 2 GPUs, " << kernels::CudaDeviceCount() << " visible";
  }
  const Reference ref = LoadReference(Fixture(GetParam()));
  {
    EngineArgs args = CudaArgs(Fixture(GetParam()), /*eager=*/false);
    args.config.parallel.tensor_parallel_size = 2;
    args.config.parallel.distributed_executor_backend = config::ExecutorBackend::kMp;
    args.worker_binary = testing::BinDir() + "/vllm-launch";
    auto engine = LLMEngine::Create(args);
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::vector<core::EngineCoreRequest> requests;
    for (size_t i = 0; i < ref.prompts.size(); ++i) {
      requests.push_back(GreedyRequest(absl::StrCat("tp", i), ref.prompts[i], ref.max_new_tokens));
    }
    auto outputs = (*engine)->Generate(std::move(requests));
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    ASSERT_EQ(outputs->size(), ref.prompts.size());
    for (size_t i = 0; i < outputs->size(); ++i) {
      EXPECT_EQ((*outputs)[i].output_token_ids, ref.greedy[i]) << "prompt " << i;
    }
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!testing::ChildrenOf(getpid()).empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));  // polling a condition with a deadline
  }
  EXPECT_TRUE(testing::ChildrenOf(getpid()).empty());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaFixtureTest,
                         ::testing::Values("llama_mha", "llama_gqa", "qwen2", "qwen3", "phi3",
                                           "llama_mqa", "mistral_swa", "qwen2_swa", "qwen3_moe",
                                           "mixtral", "qwen2_moe", "gemma2", "gemma3"));

// prompt_logprobs on CUDA (logits_only rows run through ComputeLogits after the forward, in
// chunks of the max_num_seqs logits buffer) against the CPU backend on the same requests:
// every reference prompt (1 to 64 tokens; 173 prompt rows, so the one-step prefill takes 11
// chunks of 16) with prompt_logprobs = 5, plus a request without them whose sampled token
// has logprobs (an on_host sampled row among the prompt rows). Whole prefills and chunked ones
// (16 tokens a step, chunks of at most 5, max_num_seqs 4), eager and with graphs, float32:
// logprobs within 1e-3, ids and ranks equal where the CPU's values are further apart.
constexpr int32_t kPromptTopK = 5;
constexpr double kPromptLogprobTol = 1e-3;

std::vector<core::EngineCoreRequest> PromptLogprobsRequests(const Reference& ref) {
  std::vector<core::EngineCoreRequest> requests;
  for (size_t i = 0; i < ref.prompts.size(); ++i) {
    core::EngineCoreRequest r = GreedyRequest(absl::StrCat("p", i), ref.prompts[i], 2);
    r.sampling_params.prompt_logprobs = kPromptTopK;
    requests.push_back(std::move(r));
  }
  core::EngineCoreRequest plain = GreedyRequest("plain", ref.prompts.back(), 2);
  plain.sampling_params.logprobs = 3;
  requests.push_back(std::move(plain));
  return requests;
}

// Whether the CPU's top-k entry k (1-based in token_ids / logprobs) is apart from its
// neighbours by more than the tolerance (the last one's lower neighbour is unknown).
bool TopEntryIsClear(const core::TokenLogprobs& lp, size_t k) {
  const std::vector<float>& v = lp.logprobs;
  const double gap = 2 * kPromptLogprobTol;
  if (k > 1 && v[k - 1] - v[k] <= gap) return false;
  if (k + 1 >= v.size()) return false;
  return v[k] - v[k + 1] > gap;
}

void ExpectPromptLogprobsMatch(const std::vector<frontend::RequestOutput>& got,
                               const std::vector<frontend::RequestOutput>& want,
                               const Reference& ref) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t r = 0; r < got.size(); ++r) {
    SCOPED_TRACE(absl::StrCat("request ", r));
    ASSERT_FALSE(got[r].output_token_ids.empty());
    EXPECT_EQ(got[r].output_token_ids.front(), want[r].output_token_ids.front());
    if (r == ref.prompts.size()) {  // "plain": no prompt logprobs, sampled logprobs
      EXPECT_TRUE(got[r].prompt_logprobs.empty());
      ASSERT_FALSE(got[r].logprobs.empty());
      ASSERT_FALSE(want[r].logprobs.empty());
      EXPECT_NEAR(got[r].logprobs[0].logprobs[0], want[r].logprobs[0].logprobs[0],
                  kPromptLogprobTol);
      continue;
    }
    const std::vector<int32_t>& prompt = ref.prompts[r];
    ASSERT_EQ(want[r].prompt_logprobs.size(), prompt.size() - 1);  // the CPU's, as a check
    ASSERT_EQ(got[r].prompt_logprobs.size(), prompt.size() - 1);
    for (size_t p = 0; p + 1 < prompt.size(); ++p) {
      SCOPED_TRACE(absl::StrCat("position ", p + 1));
      const core::TokenLogprobs& a = got[r].prompt_logprobs[p];
      const core::TokenLogprobs& b = want[r].prompt_logprobs[p];
      ASSERT_EQ(a.token_ids.size(), static_cast<size_t>(kPromptTopK + 1));
      ASSERT_EQ(a.logprobs.size(), a.token_ids.size());
      ASSERT_EQ(b.token_ids.size(), a.token_ids.size());
      EXPECT_EQ(a.token_ids[0], prompt[p + 1]);
      EXPECT_EQ(b.token_ids[0], prompt[p + 1]);
      for (size_t k = 0; k < a.logprobs.size(); ++k) {
        EXPECT_TRUE(std::isfinite(a.logprobs[k])) << "entry " << k;
        EXPECT_NEAR(a.logprobs[k], b.logprobs[k], kPromptLogprobTol) << "entry " << k;
        if (k > 0 && TopEntryIsClear(b, k)) {
          EXPECT_EQ(a.token_ids[k], b.token_ids[k]) << "top " << k;
        }
      }
      // The rank is exact when no top-k value is near the token's own; otherwise near.
      bool clear = true;
      for (size_t k = 1; k < b.logprobs.size(); ++k) {
        clear &= std::abs(b.logprobs[k] - b.logprobs[0]) > 2 * kPromptLogprobTol ||
                 b.token_ids[k] == b.token_ids[0];
      }
      if (clear && b.sampled_token_rank < kPromptTopK) {
        EXPECT_EQ(a.sampled_token_rank, b.sampled_token_rank);
      } else {
        EXPECT_NEAR(a.sampled_token_rank, b.sampled_token_rank,
                    std::max<int64_t>(2, b.sampled_token_rank / 20));
      }
    }
  }
}

class CudaPromptLogprobsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaPromptLogprobsTest, MatchTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  const Reference ref = LoadReference(Fixture(GetParam()));
  ASSERT_EQ(ref.prompts.size(), 8u);
  std::vector<frontend::RequestOutput> want;
  {
    EngineArgs args;
    args.config.model.model = Fixture(GetParam());
    args.config.model.max_model_len = 128;
    args.config.cache.kv_cache_memory_bytes = 64 << 20;
    auto cpu = LLMEngine::Create(args);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto outputs = (*cpu)->Generate(PromptLogprobsRequests(ref));
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    want = std::move(*outputs);
  }
  for (int eager = 0; eager < 2; ++eager) {
    for (int chunked = 0; chunked < 2; ++chunked) {
      SCOPED_TRACE(absl::StrCat(eager ? "eager" : "graphs", chunked ? ", chunked" : ""));
      EngineArgs args = CudaArgs(Fixture(GetParam()), eager == 1);
      if (chunked == 1) {
        args.config.scheduler.max_num_batched_tokens = 16;
        args.config.scheduler.long_prefill_token_threshold = 5;
        args.config.scheduler.max_num_seqs = 4;
      }
      auto engine = LLMEngine::Create(args);
      ASSERT_TRUE(engine.ok()) << engine.status();
      auto got = (*engine)->Generate(PromptLogprobsRequests(ref));
      ASSERT_TRUE(got.ok()) << got.status();
      ExpectPromptLogprobsMatch(*got, want, ref);
      // The same engine keeps serving requests without prompt logprobs (decode graphs).
      auto plain =
          (*engine)->Generate({GreedyRequest("after", ref.prompts[5], ref.max_new_tokens)});
      ASSERT_TRUE(plain.ok()) << plain.status();
      EXPECT_EQ((*plain)[0].output_token_ids, ref.greedy[5]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaPromptLogprobsTest,
                         ::testing::Values("llama_gqa", "qwen3", "gemma2"));

// The graph path is taken for decode steps, and sampling with penalties / logprobs (host
// rows) and seeded random sampling (device rows) give the same tokens eager and in graphs.
TEST(CudaBackendTest, GraphsReplayDecodeAndMatchEager) {
  SKIP_WITHOUT_GPU();
  const std::filesystem::path dir = Fixture("llama_gqa");
  std::vector<std::vector<int32_t>> results[2];
  for (int eager = 0; eager < 2; ++eager) {
    auto engine = LLMEngine::Create(CudaArgs(dir, eager == 1));
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::vector<core::EngineCoreRequest> requests;
    for (int i = 0; i < 6; ++i) {
      core::EngineCoreRequest r = GreedyRequest(absl::StrCat("r", i), {1, 5 + i, 9, 13 + i, 2}, 12);
      if (i % 3 == 1) {
        r.sampling_params.temperature = 0.8;
        r.sampling_params.top_p = 0.9;
        r.sampling_params.top_k = 20;
        r.sampling_params.seed = 1234 + i;
      } else if (i % 3 == 2) {
        r.sampling_params.repetition_penalty = 1.3;
        r.sampling_params.logprobs = 2;
      }
      requests.push_back(std::move(r));
    }
    auto outputs = (*engine)->Generate(std::move(requests));
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    for (const auto& o : *outputs) {
      EXPECT_EQ(o.output_token_ids.size(), 12u);
      results[eager].push_back(o.output_token_ids);
    }
  }
  EXPECT_EQ(results[0], results[1]);
}

// CudaModelBackend driven step by step, without the scheduler: three fixture prompts (7, 17
// and 40 tokens) prefilled in one step, then decoded together with the reference's tokens fed
// back. Every step's tokens are transformers' greedy tokens, eagerly and with graphs; with
// graphs every decode step (3 rows) replays the graph of size 4 (one padding row: slot -1,
// seq_len 0). The middle row is on_host: it comes back as its logits (token -1), one row of
// vocab_size floats whose argmax is the reference token.
TEST(CudaBackendTest, DecodeGraphsReplayPaddedBatchesAndMatchTransformers) {
  SKIP_WITHOUT_GPU();
  const std::filesystem::path dir = Fixture("llama_gqa");
  const Reference ref = LoadReference(dir);
  auto config = LoadHfConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  const int64_t vocab = config->vocab_size;
  constexpr int32_t kBlockSize = 16;
  constexpr int32_t kBlocksPerSeq = 8;  // max_model_len 128
  const size_t picks[3] = {2, 4, 6};
  for (bool eager : {true, false}) {
    SCOPED_TRACE(eager ? "eager" : "graphs");
    auto weights = OpenSafetensors(dir);
    ASSERT_TRUE(weights.ok()) << weights.status();
    CudaBackendOptions o;
    o.dtype = ModelDType::kFloat32;
    o.enforce_eager = eager;
    o.max_model_len = kBlockSize * kBlocksPerSeq;
    o.max_num_batched_tokens = 128;
    o.max_num_seqs = 8;
    auto backend = CudaModelBackend::Create(*config, weights->get(), nullptr, o);
    ASSERT_TRUE(backend.ok()) << backend.status();
    CudaModelBackend& b = **backend;
    ASSERT_TRUE(b.InitializeKVCache(3 * kBlocksPerSeq, kBlockSize).ok());
    EXPECT_EQ(b.captured_sizes().empty(), eager);
    std::vector<int32_t> seqs[3];
    int32_t computed[3] = {0, 0, 0};
    for (int r = 0; r < 3; ++r) seqs[r] = ref.prompts[picks[r]];
    for (int32_t step = 0; step < ref.max_new_tokens; ++step) {
      SCOPED_TRACE(absl::StrCat("step ", step));
      std::vector<int32_t> ids, positions, qsl = {0}, seq_lens, tables, logits_indices;
      std::vector<int64_t> slots;
      int32_t width = 0, max_q = 0, max_len = 0;
      for (int r = 0; r < 3; ++r) {
        width =
            std::max(width, (static_cast<int32_t>(seqs[r].size()) + kBlockSize - 1) / kBlockSize);
      }
      for (int r = 0; r < 3; ++r) {
        const int32_t len = static_cast<int32_t>(seqs[r].size());
        for (int32_t p = computed[r]; p < len; ++p) {
          ids.push_back(seqs[r][p]);
          positions.push_back(p);
          slots.push_back(int64_t{r * kBlocksPerSeq + p / kBlockSize} * kBlockSize +
                          p % kBlockSize);
        }
        qsl.push_back(static_cast<int32_t>(ids.size()));
        seq_lens.push_back(len);
        logits_indices.push_back(static_cast<int32_t>(ids.size()) - 1);
        for (int32_t k = 0; k < width; ++k) tables.push_back(r * kBlocksPerSeq + k);
        max_q = std::max(max_q, len - computed[r]);
        max_len = std::max(max_len, len);
      }
      std::vector<RowSampling> sampling(3);
      for (RowSampling& row : sampling) row.temperature = 0.0f;
      sampling[1].on_host = true;
      StepInputs in;
      in.token_ids = ids;
      in.positions = positions;
      in.slot_mapping = slots;
      in.query_start_loc = qsl;
      in.seq_lens = seq_lens;
      in.block_tables = tables;
      in.max_blocks_per_seq = width;
      in.max_query_len = max_q;
      in.max_seq_len = max_len;
      in.logits_indices = logits_indices;
      in.sampling = sampling;
      StepResult result;
      const absl::Status status = b.Execute(in, &result);
      ASSERT_TRUE(status.ok()) << status;
      ASSERT_EQ(result.tokens.size(), 3u);
      ASSERT_EQ(result.host_logits.size(), static_cast<size_t>(vocab));
      EXPECT_EQ(result.tokens[1], -1);
      result.tokens[1] = static_cast<int32_t>(
          std::max_element(result.host_logits.begin(), result.host_logits.end()) -
          result.host_logits.begin());
      for (int r = 0; r < 3; ++r) {
        const int32_t want = ref.greedy[picks[r]][step];
        EXPECT_EQ(result.tokens[r], want) << "row " << r;
        computed[r] = static_cast<int32_t>(seqs[r].size());
        seqs[r].push_back(want);  // the reference's token, so one miss does not cascade
      }
    }
    // Every step after the prefill is a decode step of 3 rows, padded to the graph of 4.
    EXPECT_EQ(b.num_graph_steps(), eager ? 0 : ref.max_new_tokens - 1);
    if (!eager) {
      const std::vector<int32_t> sizes = b.captured_sizes();
      EXPECT_NE(std::find(sizes.begin(), sizes.end(), 4), sizes.end());
      EXPECT_EQ(std::find(sizes.begin(), sizes.end(), 3), sizes.end());
    }
  }
}

TEST(CudaBackendTest, ProfiledKVBudgetFollowsTheUtilization) {
  SKIP_WITHOUT_GPU();
  auto config = LoadHfConfig(Fixture("llama_gqa"));
  ASSERT_TRUE(config.ok());
  int64_t budget[2] = {0, 0};
  const double utils[2] = {0.2, 0.4};
  for (int i = 0; i < 2; ++i) {
    CudaBackendOptions o;
    o.dtype = ModelDType::kFloat32;
    o.dummy_weights = true;
    o.gpu_memory_utilization = utils[i];
    o.max_model_len = 128;
    o.max_num_batched_tokens = 256;
    o.max_num_seqs = 8;
    auto backend = CudaModelBackend::Create(*config, nullptr, nullptr, o);
    ASSERT_TRUE(backend.ok()) << backend.status();
    auto available = (*backend)->DetermineAvailableMemory();
    ASSERT_TRUE(available.ok()) << available.status();
    budget[i] = *available;
    EXPECT_GT((*backend)->weight_bytes(), 0);
  }
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  // Raising the fraction by 0.2 adds 0.2 × total (what else is in use is the same).
  const double delta = static_cast<double>(budget[1] - budget[0]);
  EXPECT_NEAR(delta, 0.2 * static_cast<double>(total), 0.01 * static_cast<double>(total));
}

// A dummy Llama-3-8B-shaped model (bf16) loads in seconds with weights filled on the device.
TEST(CudaBackendTest, DummyEightBillionLoadsFast) {
  SKIP_WITHOUT_GPU();
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  if (free_bytes < (size_t{24} << 30)) GTEST_SKIP() << "needs 24 GiB free";
  HfConfig c;
  c.architecture = "LlamaForCausalLM";
  c.vocab_size = 128256;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_hidden_layers = 32;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.max_position_embeddings = 8192;
  c.rope_theta = 500000.0;
  c.rms_norm_eps = 1e-5;
  c.torch_dtype = "bfloat16";
  kc::SingleRankDeviceCommunicator comm;
  CudaModelOptions o;
  o.dtype = kc::GemmDType::kBFloat16;
  o.dummy_weights = true;
  o.max_num_tokens = 512;
  o.max_num_logits = 8;
  o.max_model_len = 2048;
  const absl::Time start = absl::Now();
  auto model = CudaLlamaModel::Load(c, nullptr, &comm, o, nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_NEAR(static_cast<double>((*model)->weight_bytes()), 16.06e9, 0.2e9);
  const std::vector<float> logits = CudaLastLogits(**model, {128000, 791, 6864, 315});
  ASSERT_EQ(logits.size(), 128256u);
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
}

// The bundled model (bf16) on CUDA in its own dtype vs the CPU (float32): the first token of
// every training-log sample is the same.
TEST(CudaBackendTest, BundledModelFirstTokensMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  const std::filesystem::path dir =
      std::filesystem::path(VLLM_SOURCE_DIR) / "models" / "kjv-llama-tiny";
  std::ifstream in(dir / "training_log.json");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json log = nlohmann::json::parse(text.str());
  std::vector<std::vector<int32_t>> firsts[2];
  for (int cuda = 0; cuda < 2; ++cuda) {
    EngineArgs args;
    args.config.model.model = dir;
    args.config.cache.kv_cache_memory_bytes = 64 << 20;
    if (cuda == 1) {
      args.config.device.device = Device::kCuda;
      args.config.cache.gpu_memory_utilization = 0.3;
      args.config.scheduler.max_num_seqs = 16;
    }
    auto engine = LLMEngine::Create(args);
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::vector<core::EngineCoreRequest> requests;
    for (const nlohmann::json& sample : log.at("samples")) {
      requests.push_back(GreedyRequest(absl::StrCat("s", requests.size()),
                                       sample.at("prompt_ids").get<std::vector<int32_t>>(), 2));
    }
    ASSERT_FALSE(requests.empty());
    auto outputs = (*engine)->Generate(std::move(requests));
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    for (const auto& o : *outputs) {
      firsts[cuda].push_back({o.output_token_ids.begin(), o.output_token_ids.begin() + 1});
    }
  }
  EXPECT_EQ(firsts[0], firsts[1]);
}

// TP = 1 through MultiprocExecutor: the worker process runs the CUDA backend.
TEST(CudaBackendTest, WorkerProcessEngineMatchesTransformers) {
  SKIP_WITHOUT_GPU();
  const Reference ref = LoadReference(Fixture("llama_mha"));
  {
    EngineArgs args = CudaArgs(Fixture("llama_mha"), /*eager=*/false);
    args.config.parallel.distributed_executor_backend = config::ExecutorBackend::kMp;
    args.worker_binary = testing::BinDir() + "/vllm-launch";
    auto engine = LLMEngine::Create(args);
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::vector<core::EngineCoreRequest> requests;
    for (size_t i = 0; i < ref.prompts.size(); ++i) {
      requests.push_back(GreedyRequest(absl::StrCat("mp", i), ref.prompts[i], ref.max_new_tokens));
    }
    auto outputs = (*engine)->Generate(std::move(requests));
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    for (size_t i = 0; i < outputs->size(); ++i) {
      EXPECT_EQ((*outputs)[i].output_token_ids, ref.greedy[i]) << "prompt " << i;
    }
  }
  // The worker process is gone once the engine is.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!testing::ChildrenOf(getpid()).empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(testing::ChildrenOf(getpid()).empty());
}

}  // namespace
}  // namespace vllm::worker
