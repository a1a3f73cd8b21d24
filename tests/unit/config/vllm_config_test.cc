#include "config/vllm_config.h"

#include <string>
#include <vector>

#include "config/engine_args.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vllm::config {
namespace {

using ::testing::HasSubstr;

VllmConfig Valid() {
  VllmConfig c;
  c.model.model = "/models/m";
  return c;
}

TEST(VllmConfigTest, DefaultsWithAModelAreValid) {
  EXPECT_TRUE(Valid().Validate().ok()) << Valid().Validate();
  EXPECT_EQ(Valid().parallel.world_size(), 1);
  EXPECT_EQ(Valid().parallel.executor_backend(), ExecutorBackend::kUni);
}

TEST(VllmConfigTest, EnumsParseTheirFlagSpellingsAndPrintTheCanonicalOne) {
  EXPECT_EQ(*ParseModelDType("half"), ModelDType::kFloat16);
  EXPECT_EQ(*ParseModelDType("float"), ModelDType::kFloat32);
  EXPECT_EQ(ModelDTypeName(ModelDType::kFloat16), "float16");
  EXPECT_EQ(*ParseSchedulingPolicy("priority"), SchedulingPolicy::kPriority);
  EXPECT_EQ(*ParseExecutorBackend("mp"), ExecutorBackend::kMp);
  EXPECT_EQ(*ParseCommBackend("gloo"), CommBackend::kGloo);
  EXPECT_EQ(*ParseDevice("cuda"), Device::kCuda);
  EXPECT_EQ(*ParseLoadFormat("dummy"), LoadFormat::kDummy);
  for (ModelDType d :
       {ModelDType::kAuto, ModelDType::kFloat32, ModelDType::kBFloat16, ModelDType::kFloat16}) {
    EXPECT_EQ(*ParseModelDType(ModelDTypeName(d)), d);
  }
  const absl::StatusOr<Device> bad = ParseDevice("tpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("--device"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("auto, cpu, cuda"));
  EXPECT_FALSE(ParseSchedulingPolicy("lifo").ok());
  EXPECT_FALSE(ParseModelDType("").ok());
}

TEST(VllmConfigTest, EachBadValueNamesItsFlag) {
  struct Case {
    void (*mutate)(VllmConfig&);
    std::string flag;
  };
  const std::vector<Case> cases = {
      {[](VllmConfig& c) { c.model.model.clear(); }, "--model"},
      {[](VllmConfig& c) { c.model.model = std::string(5000, 'm'); }, "--model"},
      {[](VllmConfig& c) { c.model.model = std::string("a\0b", 3); }, "--model"},
      {[](VllmConfig& c) { c.model.max_model_len = -1; }, "--max-model-len"},
      {[](VllmConfig& c) { c.model.max_logprobs = -1; }, "--max-logprobs"},
      {[](VllmConfig& c) { c.model.max_logprobs = kMaxLogprobsLimit + 1; }, "--max-logprobs"},
      {[](VllmConfig& c) { c.kv_events.publisher = "kafka"; }, "--kv-events-config publisher"},
      {[](VllmConfig& c) { c.kv_events.max_queue_size = 0; }, "--kv-events-config max_queue_size"},
      {[](VllmConfig& c) { c.cache.block_size = 24; }, "--block-size"},
      {[](VllmConfig& c) { c.cache.kv_cache_memory_bytes = 0; }, "--kv-cache-memory"},
      {[](VllmConfig& c) { c.cache.gpu_memory_utilization = 0; }, "--gpu-memory-utilization"},
      {[](VllmConfig& c) { c.cache.gpu_memory_utilization = 1.5; }, "--gpu-memory-utilization"},
      {[](VllmConfig& c) { c.cache.num_gpu_blocks_override = 0; }, "--num-gpu-blocks-override"},
      {[](VllmConfig& c) { c.parallel.tensor_parallel_size = 0; }, "--tensor-parallel-size"},
      {[](VllmConfig& c) { c.parallel.tensor_parallel_size = 65; }, "--tensor-parallel-size"},
      {[](VllmConfig& c) { c.parallel.pipeline_parallel_size = 0; }, "--pipeline-parallel-size"},
      {[](VllmConfig& c) {
         c.parallel.pipeline_parallel_size = 2;
         c.device.device = Device::kCuda;
       },
       "--pipeline-parallel-size"},
      {[](VllmConfig& c) {
         c.parallel.pipeline_parallel_size = 2;
         c.speculative.method = "eagle";
         c.speculative.model = "head";
         c.speculative.num_speculative_tokens = 3;
       },
       "--speculative-config method 'eagle' does not run with --pipeline-parallel-size 2"},
      {[](VllmConfig& c) {
         c.parallel.pipeline_parallel_size = 2;
         c.parallel.distributed_executor_backend = ExecutorBackend::kUni;
       },
       "--distributed-executor-backend"},
      {[](VllmConfig& c) { c.parallel.data_parallel_size = 0; }, "--data-parallel-size"},
      {[](VllmConfig& c) { c.parallel.data_parallel_rank = 1; }, "--data-parallel-rank"},
      {[](VllmConfig& c) { c.parallel.data_parallel_size_local = 2; },
       "--data-parallel-size-local"},
      {[](VllmConfig& c) { c.parallel.data_parallel_address.clear(); }, "--data-parallel-address"},
      {[](VllmConfig& c) { c.parallel.data_parallel_rpc_port = 0; }, "--data-parallel-rpc-port"},
      {[](VllmConfig& c) {
         c.parallel.tensor_parallel_size = 2;
         c.parallel.distributed_executor_backend = ExecutorBackend::kUni;
       },
       "--distributed-executor-backend"},
      {[](VllmConfig& c) { c.scheduler.max_num_seqs = 0; }, "--max-num-seqs"},
      {[](VllmConfig& c) { c.scheduler.max_num_batched_tokens = -5; }, "--max-num-batched-tokens"},
      {[](VllmConfig& c) { c.scheduler.long_prefill_token_threshold = -1; },
       "--long-prefill-token-threshold"},
      {[](VllmConfig& c) {
         c.scheduler.enable_chunked_prefill = false;
         c.model.max_model_len = 4096;
         c.scheduler.max_num_batched_tokens = 2048;
       },
       "--max-num-batched-tokens"},
  };
  for (const Case& k : cases) {
    VllmConfig c = Valid();
    k.mutate(c);
    const absl::Status s = c.Validate();
    ASSERT_FALSE(s.ok()) << k.flag;
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(k.flag)) << s;
  }
}

// A field's bounds are its line in its part's Fields list: the message gives the range.
TEST(VllmConfigTest, BoundsComeFromTheFieldLists) {
  VllmConfig c = Valid();
  c.scheduler.max_num_seqs = 0;
  EXPECT_EQ(c.Validate().message(), "--max-num-seqs: 0 is outside [1, 1048576]");
  c = Valid();
  c.model.max_logprobs = 2000;
  EXPECT_EQ(c.Validate().message(), "--max-logprobs: 2000 is outside [0, 1024]");
  c = Valid();
  c.model.seed = ~uint64_t{0};  // unbounded unsigned: any value
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
}

TEST(VllmConfigTest, DataParallelRanksAreChecked) {
  VllmConfig c = Valid();
  c.parallel.data_parallel_size = 4;
  c.parallel.data_parallel_size_local = 2;
  c.parallel.data_parallel_start_rank = 2;
  c.parallel.data_parallel_rank = 3;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  c.parallel.data_parallel_start_rank = 3;  // ranks 3 and 4 of 4
  EXPECT_THAT(std::string(c.Validate().message()), HasSubstr("--data-parallel-start-rank"));
}

// One engine's workers across nodes: vLLM 0.33's launch checks and messages.
TEST(VllmConfigTest, NodesAreChecked) {
  VllmConfig c = Valid();
  c.parallel.pipeline_parallel_size = 2;
  c.parallel.nnodes = 2;
  c.parallel.node_rank = 1;
  c.parallel.master_addr = "10.0.0.1";
  c.parallel.master_port = 29600;
  ASSERT_TRUE(c.Validate().ok()) << c.Validate();
  EXPECT_EQ(c.parallel.nnodes_within_dp(), 2);
  EXPECT_EQ(c.parallel.node_rank_within_dp(), 1);
  EXPECT_EQ(c.parallel.local_world_size(), 1);
  EXPECT_EQ(c.parallel.node_of_rank(1), 1);
  c.parallel.distributed_executor_backend = ExecutorBackend::kMp;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();

  struct Case {
    void (*mutate)(ParallelConfig&);
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](ParallelConfig& p) { p.nnodes = 3; },
       "Invalid data-parallel launch options: `--nnodes 3` must evenly divide the total world "
       "size (2). Adjust `--nnodes`, `--data-parallel-size`, `--pipeline-parallel-size` or "
       "`--tensor-parallel-size`."},
      {[](ParallelConfig& p) { p.node_rank = 2; },
       "Invalid data-parallel launch options: `--node-rank` must be between 0 and 1; got "
       "`--node-rank 2`. Set it to this node's zero-based index."},
      {[](ParallelConfig& p) {
         p.nnodes = 1;
         p.node_rank = 1;
       },
       "`--node-rank` must be between 0 and 0; got `--node-rank 1`"},
      {[](ParallelConfig& p) {
         p.pipeline_parallel_size = 1;
         p.tensor_parallel_size = 2;
         p.distributed_executor_backend = ExecutorBackend::kUni;
       },
       "`--nnodes 2` needs `--distributed-executor-backend mp`; got "
       "`--distributed-executor-backend uni`"},
      {[](ParallelConfig& p) {
         p.nnodes = 4;
         p.data_parallel_size = 2;
         p.data_parallel_size_local = 1;
       },
       "`--nnodes 4` with `--data-parallel-size 2`: a replica of 2 ranks (-tp × -pp) would span "
       "nodes of 1 ranks; not built yet"},
      {[](ParallelConfig& p) { p.master_addr.clear(); }, "--master-addr: expected a host name"},
      {[](ParallelConfig& p) { p.master_addr = "10.0.0.1 "; }, "--master-addr"},
      {[](ParallelConfig& p) { p.master_addr = "head\n"; }, "--master-addr"},
      {[](ParallelConfig& p) { p.master_addr = std::string(256, 'h'); }, "--master-addr"},
      {[](ParallelConfig& p) { p.master_port = 0; }, "--master-port: 0 is outside [1, 65535]"},
      {[](ParallelConfig& p) { p.master_port = 65536; }, "--master-port"},
      {[](ParallelConfig& p) { p.nnodes = 0; }, "--nnodes"},
  };
  for (const Case& k : cases) {
    VllmConfig bad = c;
    k.mutate(bad.parallel);
    const absl::Status s = bad.Validate();
    ASSERT_FALSE(s.ok()) << k.message;
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(k.message)) << s;
  }
  // The part alone refuses the same (a decoded config is validated in each process).
  ParallelConfig p = c.parallel;
  p.nnodes = 4;
  EXPECT_THAT(std::string(p.Validate().message()), HasSubstr("`--nnodes 4` must evenly divide"));
}

TEST(VllmConfigTest, DescriptionNamesEveryPart) {
  VllmConfig c = Valid();
  c.cache.num_gpu_blocks_override = 64;
  c.scheduler.policy = SchedulingPolicy::kPriority;
  c.scheduler.enable_chunked_prefill = false;
  const std::string d = DescribeVllmConfig(c);
  for (const char* part :
       {"model='/models/m'", "num_gpu_blocks_override=64", "scheduling_policy=priority",
        "enable_chunked_prefill=False", "enable_prefix_caching=True", "dtype=auto",
        "distributed_executor_backend=auto", "comm_backend=shm", "device_config=auto",
        "long_prefill_token_threshold=0", "load_format=auto"}) {
    EXPECT_THAT(d, HasSubstr(part));
  }
}

TEST(EngineArgsTest, CreateEngineConfigPlacesEveryArgument) {
  EngineArgs a;
  a.config.model.model = "/models/m";
  a.config.load.load_format = LoadFormat::kDummy;
  a.config.model.max_model_len = 512;
  a.config.scheduler.max_num_seqs = 8;
  a.config.scheduler.max_num_batched_tokens = 1024;
  a.config.cache.block_size = 32;
  a.config.cache.enable_prefix_caching = false;
  a.config.scheduler.enable_chunked_prefill = false;
  a.config.scheduler.long_prefill_token_threshold = 64;
  a.config.scheduler.policy = SchedulingPolicy::kPriority;
  a.config.cache.kv_cache_memory_bytes = 123456;
  a.config.cache.num_gpu_blocks_override = 77;
  a.config.model.seed = 9;
  a.config.parallel.tensor_parallel_size = 2;
  a.config.parallel.distributed_executor_backend = ExecutorBackend::kMp;
  a.config.parallel.comm_backend = CommBackend::kGloo;
  a.config.device.device = Device::kCuda;
  a.config.model.dtype = ModelDType::kBFloat16;
  a.config.cache.gpu_memory_utilization = 0.5;
  a.config.model.enforce_eager = true;
  absl::StatusOr<VllmConfig> c = a.CreateEngineConfig();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.model, "/models/m");
  EXPECT_EQ(c->load.load_format, LoadFormat::kDummy);
  EXPECT_EQ(c->model.max_model_len, 512);
  EXPECT_EQ(c->scheduler.max_num_seqs, 8);
  EXPECT_EQ(c->scheduler.max_num_batched_tokens, 1024);
  EXPECT_EQ(c->cache.block_size, 32);
  EXPECT_FALSE(c->cache.enable_prefix_caching);
  EXPECT_FALSE(c->scheduler.enable_chunked_prefill);
  EXPECT_EQ(c->scheduler.long_prefill_token_threshold, 64);
  EXPECT_EQ(c->scheduler.policy, SchedulingPolicy::kPriority);
  EXPECT_EQ(c->cache.kv_cache_memory_bytes, 123456);
  EXPECT_EQ(c->cache.num_gpu_blocks_override, 77);
  EXPECT_EQ(c->model.seed, 9u);
  EXPECT_EQ(c->parallel.tensor_parallel_size, 2);
  EXPECT_EQ(c->parallel.distributed_executor_backend, ExecutorBackend::kMp);
  EXPECT_EQ(c->parallel.comm_backend, CommBackend::kGloo);
  EXPECT_EQ(c->device.device, Device::kCuda);
  EXPECT_EQ(c->model.dtype, ModelDType::kBFloat16);
  EXPECT_DOUBLE_EQ(c->cache.gpu_memory_utilization, 0.5);
  EXPECT_TRUE(c->model.enforce_eager);

  a.config.cache.block_size = 3;
  EXPECT_THAT(std::string(a.CreateEngineConfig().status().message()), HasSubstr("--block-size"));
}

}  // namespace
}  // namespace vllm::config
