// vllm-launch's serve flags: vLLM's names and aliases, defaults that serve the bundled model
// on the CPU, --help text, and bad flags named in the error with the allowed values.
#include "launcher/serve_args.h"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ipc/curve.h"

namespace vllm::launcher {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<ParsedServeArgs> Parse(std::vector<std::string> argv) {
  return ParseServeArgs(argv, "models/kjv-llama-tiny");
}

TEST(ServeArgsTest, NoFlagsServeTheBundledModelLocally) {
  auto p = Parse({});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->args.has_value());
  const ServeArgs& a = *p->args;
  EXPECT_EQ(a.config.model.model, "models/kjv-llama-tiny");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 8000);
  EXPECT_EQ(a.config.parallel.tensor_parallel_size, 1);
  EXPECT_TRUE(a.config.cache.enable_prefix_caching);
  EXPECT_EQ(a.config.cache.kv_cache_memory_bytes, int64_t{4} << 30);
  EXPECT_EQ(a.served_model_names, std::vector<std::string>{"kjv-llama-tiny"});
  EXPECT_TRUE(a.http.api_keys.empty());
}

TEST(ServeArgsTest, VllmNamesAndAliases) {
  auto p = Parse({"my/model",
                  "-tp",
                  "2",
                  "--max-model-len",
                  "512",
                  "--max-num-seqs=8",
                  "--max-num-batched-tokens",
                  "1024",
                  "--block-size",
                  "32",
                  "--no-enable-prefix-caching",
                  "--load-format",
                  "dummy",
                  "--kv-cache-memory",
                  "512MiB",
                  "--seed",
                  "7",
                  "--api-key",
                  "secret",
                  "--served-model-name",
                  "tiny",
                  "--host",
                  "0.0.0.0",
                  "--port",
                  "9000",
                  "--scheduling-policy",
                  "priority",
                  "--max-logprobs",
                  "30"});
  ASSERT_TRUE(p.ok()) << p.status();
  const ServeArgs& a = *p->args;
  EXPECT_EQ(a.config.model.model, "my/model");
  EXPECT_EQ(a.config.parallel.tensor_parallel_size, 2);
  EXPECT_EQ(a.config.model.max_model_len, 512);
  EXPECT_EQ(a.config.scheduler.max_num_seqs, 8);
  EXPECT_EQ(a.config.scheduler.max_num_batched_tokens, 1024);
  EXPECT_EQ(a.config.cache.block_size, 32);
  EXPECT_FALSE(a.config.cache.enable_prefix_caching);
  EXPECT_EQ(a.config.load.load_format, config::LoadFormat::kDummy);
  EXPECT_EQ(a.config.cache.kv_cache_memory_bytes, int64_t{512} << 20);
  EXPECT_EQ(a.config.model.seed, 7u);
  EXPECT_EQ(a.http.api_keys, std::vector<std::string>{"secret"});
  EXPECT_EQ(a.served_model_names, std::vector<std::string>{"tiny"});
  EXPECT_EQ(a.host, "0.0.0.0");
  EXPECT_EQ(a.port, 9000);
  EXPECT_EQ(a.config.scheduler.policy, config::SchedulingPolicy::kPriority);
  EXPECT_EQ(a.config.model.max_logprobs, 30);
  auto with_model = Parse({"--model", "other", "--tensor-parallel-size", "4"});
  ASSERT_TRUE(with_model.ok()) << with_model.status();
  EXPECT_EQ(with_model->args->config.model.model, "other");
  EXPECT_EQ(with_model->args->config.parallel.tensor_parallel_size, 4);
}

TEST(ServeArgsTest, DataParallelOnOneNode) {
  // Without -dpl every replica is local (vLLM's default for the head node).
  for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
           {"-dp", "4", "-tp", "2"}, {"-dp", "4", "-dpl", "4", "-tp", "2"}}) {
    auto p = Parse(argv);
    ASSERT_TRUE(p.ok()) << p.status();
    const config::ParallelConfig& c = p->args->config.parallel;
    EXPECT_EQ(c.data_parallel_size, 4);
    EXPECT_EQ(c.data_parallel_size_local, 4);
    EXPECT_EQ(c.data_parallel_start_rank, 0);
    // Engine 3's workers take GPUs 6 and 7.
    config::ParallelConfig rank3 = c;
    rank3.data_parallel_rank = 3;
    EXPECT_TRUE(rank3.Validate().ok());
    EXPECT_EQ(rank3.local_device_index(0), 6);
    EXPECT_EQ(rank3.local_device_index(1), 7);
  }
}

TEST(ServeArgsTest, DataParallelAcrossNodes) {
  // The head: ranks 0-1 here, 2-3 elsewhere.
  auto head = Parse({"-dp", "4", "-dpl", "2", "-dpa", "10.0.0.1", "-dpp", "13400"});
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_TRUE(head->args->multi_node);
  EXPECT_FALSE(head->args->headless);
  EXPECT_EQ(head->args->config.parallel.data_parallel_address, "10.0.0.1");
  EXPECT_EQ(head->args->config.parallel.data_parallel_rpc_port, 13400);
  // A headless node: ranks 2-3.
  auto node = Parse({"-dp", "4", "-dpl", "2", "-dpr", "2", "-dpa", "10.0.0.1", "--headless"});
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_TRUE(node->args->multi_node);
  EXPECT_TRUE(node->args->headless);
  EXPECT_EQ(node->args->config.parallel.data_parallel_start_rank, 2);
  EXPECT_EQ(node->args->config.parallel.data_parallel_size_local, 2);
  EXPECT_TRUE(node->args->rejoin_head);  // by default a headless node re-joins a silent head
  auto no_rejoin = Parse(
      {"-dp", "4", "-dpl", "2", "-dpr", "2", "-dpa", "10.0.0.1", "--headless", "--no-rejoin-head"});
  ASSERT_TRUE(no_rejoin.ok()) << no_rejoin.status();
  EXPECT_FALSE(no_rejoin->args->rejoin_head);
  // One node: no TCP, unless an address is given (engines may then join again).
  auto local = Parse({"-dp", "2"});
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_FALSE(local->args->multi_node);
  auto restartable = Parse({"-dp", "2", "-dpa", "127.0.0.1", "--restart-dead-engines"});
  ASSERT_TRUE(restartable.ok()) << restartable.status();
  EXPECT_TRUE(restartable->args->multi_node);
  EXPECT_TRUE(restartable->args->restart_dead_engines);
  EXPECT_FALSE(local->args->data_parallel_lockstep);  // off by default
  auto lockstep = Parse({"-dp", "2", "--data-parallel-lockstep"});
  ASSERT_TRUE(lockstep.ok()) << lockstep.status();
  EXPECT_TRUE(lockstep->args->data_parallel_lockstep);
}

// One engine's workers across nodes, as vLLM 0.33 without Ray: node rank 0 runs the API
// server and the engine core, the others (--headless) their workers only.
// vLLM: -dp with --nnodes shares the replicas over the nodes (each within one node here): -dpl,
// -dpr and -dpa follow from the node flags unless given.
TEST(ServeArgsTest, DataParallelWithNodesTakesTheReplicasFromTheNodeFlags) {
  auto head = Parse({"-dp", "2", "-pp", "2", "-n", "2", "--master-addr", "10.0.0.1"});
  ASSERT_TRUE(head.ok()) << head.status();
  const config::ParallelConfig& h = head->args->config.parallel;
  EXPECT_EQ(h.data_parallel_size_local, 1);
  EXPECT_EQ(h.data_parallel_start_rank, 0);
  EXPECT_EQ(h.data_parallel_address, "10.0.0.1");
  EXPECT_EQ(h.nnodes_within_dp(), 1);  // each replica's two stages on one node
  EXPECT_TRUE(head->args->multi_node);
  EXPECT_FALSE(head->args->worker_node);
  auto node = Parse({"-dp", "4", "-n", "2", "-r", "1", "--master-addr", "10.0.0.1", "--headless"});
  ASSERT_TRUE(node.ok()) << node.status();
  const config::ParallelConfig& w = node->args->config.parallel;
  EXPECT_EQ(w.data_parallel_size_local, 2);
  EXPECT_EQ(w.data_parallel_start_rank, 2);
  EXPECT_EQ(w.data_parallel_address, "10.0.0.1");
  EXPECT_TRUE(node->args->headless);
  EXPECT_FALSE(node->args->worker_node);  // a data-parallel headless node: engine cores
  // Given flags win.
  auto given = Parse({"-dp", "4", "-n", "2", "-r", "1", "-dpl", "2", "-dpr", "2", "-dpa",
                      "10.0.0.9", "--master-addr", "10.0.0.1", "--headless"});
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->args->config.parallel.data_parallel_address, "10.0.0.9");
}

TEST(ServeArgsTest, OneEngineAcrossNodes) {
  auto head = Parse({"M", "-tp", "1", "-pp", "2", "--nnodes", "2", "--node-rank", "0",
                     "--master-addr", "10.0.0.1", "--master-port", "29600", "--device", "cpu"});
  ASSERT_TRUE(head.ok()) << head.status();
  const config::ParallelConfig& h = head->args->config.parallel;
  EXPECT_EQ(h.nnodes, 2);
  EXPECT_EQ(h.node_rank, 0);
  EXPECT_EQ(h.master_addr, "10.0.0.1");
  EXPECT_EQ(h.master_port, 29600);
  EXPECT_EQ(h.local_world_size(), 1);
  EXPECT_FALSE(head->args->headless);
  EXPECT_FALSE(head->args->worker_node);
  EXPECT_FALSE(head->args->multi_node);
  // The worker node: vLLM's short aliases; no data-parallel flags needed.
  auto node = Parse({"M", "-pp", "2", "-n", "2", "-r", "1", "--master-addr", "10.0.0.1",
                     "--headless", "--distributed-executor-backend", "mp"});
  ASSERT_TRUE(node.ok()) << node.status();
  const config::ParallelConfig& w = node->args->config.parallel;
  EXPECT_EQ(w.nnodes, 2);
  EXPECT_EQ(w.node_rank, 1);
  EXPECT_EQ(w.node_rank_within_dp(), 1);
  EXPECT_EQ(w.master_port, 29501);  // vLLM's default
  EXPECT_EQ(w.data_parallel_size_local, 1);
  EXPECT_EQ(w.data_parallel_start_rank, 0);
  EXPECT_TRUE(node->args->headless);
  EXPECT_TRUE(node->args->worker_node);
  EXPECT_FALSE(node->args->multi_node);  // no engine core here
  // Four nodes of -tp 2 -pp 2: one rank each.
  auto four = Parse({"-tp", "2", "-pp", "2", "--nnodes=4", "--node-rank=3", "--headless"});
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_EQ(four->args->config.parallel.node_of_rank(3), 3);
  // Defaults: one node.
  const auto defaults = Parse({});
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  const config::ParallelConfig& d = defaults->args->config.parallel;
  EXPECT_EQ(d.nnodes, 1);
  EXPECT_EQ(d.node_rank, 0);
  EXPECT_EQ(d.master_addr, "127.0.0.1");
  EXPECT_EQ(d.master_port, 29501);
  EXPECT_FALSE(Parse({})->args->worker_node);
  // --device auto is resolved later, on the node: not refused here.
  EXPECT_TRUE(Parse({"-tp", "2", "-n", "2", "--device", "auto"}).ok());
}

// The workers of other nodes reach node rank 0 over TCP: --cluster-key-file applies (on one
// node without data-parallel TCP it is refused as before).
TEST(ServeArgsTest, ClusterKeyFileAcrossNodes) {
  const std::string key =
      absl::StrCat(::testing::TempDir(), "/serve_args_test_cluster_", getpid(), ".key");
  std::remove(key.c_str());
  ASSERT_TRUE(ipc::CreateCurveKeyFile(key).ok());
  for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
           {"-pp", "2", "-n", "2", "--cluster-key-file", key},
           {"-pp", "2", "-n", "2", "-r", "1", "--headless", "--cluster-key-file", key}}) {
    auto p = Parse(argv);
    ASSERT_TRUE(p.ok()) << absl::StrJoin(argv, " ") << ": " << p.status();
    EXPECT_EQ(p->args->cluster_key_file, key);
  }
  auto one = Parse({"--cluster-key-file", key});
  ASSERT_FALSE(one.ok());
  EXPECT_THAT(std::string(one.status().message()), HasSubstr("--cluster-key-file: only used when"));
  std::remove(key.c_str());
}

TEST(ServeArgsTest, NodeFlagsAreChecked) {
  struct Case {
    std::vector<std::string> argv;
    const char* expect;
  };
  const Case cases[] = {
      {{"-pp", "2", "--nnodes", "3"},
       "Invalid data-parallel launch options: `--nnodes 3` must evenly divide the total world "
       "size (2). Adjust `--nnodes`, `--data-parallel-size`, `--pipeline-parallel-size` or "
       "`--tensor-parallel-size`."},
      {{"-pp", "2", "--nnodes", "2", "--node-rank", "2", "--headless"},
       "Invalid data-parallel launch options: `--node-rank` must be between 0 and 1; got "
       "`--node-rank 2`. Set it to this node's zero-based index."},
      {{"--node-rank", "1"}, "`--node-rank` must be between 0 and 0"},
      {{"-tp", "2", "-n", "2", "--distributed-executor-backend", "uni"},
       "`--nnodes 2` needs `--distributed-executor-backend mp`; got "
       "`--distributed-executor-backend uni`"},
      {{"-dp", "2", "-pp", "2", "-n", "4"},
       "`--nnodes 4` with `--data-parallel-size 2`: a replica of 2 ranks (-tp × -pp) would span "
       "nodes of 1 ranks; not built yet"},
      {{"-pp", "2", "-n", "2", "-r", "1"},
       "`--node-rank 1` runs this node's workers only: add --headless (node rank 0 runs the API "
       "server and the engine core)"},
      {{"-pp", "2", "-n", "2", "--headless"},
       "node rank 0 is the head: it runs the API server; give --headless on node ranks 1 .. 1"},
      {{"-pp", "2", "-n", "2", "-r", "1", "--headless", "-asc", "2"}, "--api-server-count"},
      {{"-tp", "2", "-n", "2", "--device", "cuda"},
       "--nnodes above 1 runs on the CPU backend so far (--device cpu); CUDA across nodes is not "
       "verified yet"},
      {{"-pp", "2", "-n", "2", "--restart-dead-engines"}, "--restart-dead-engines"},
      {{"-pp", "2", "-n", "2", "-dpa", "127.0.0.1", "--restart-dead-engines"},
       "--restart-dead-engines: not with --nnodes above 1"},
      {{"-pp", "2", "-n", "2", "--master-addr", ""}, "--master-addr: expected a host name"},
      {{"-pp", "2", "-n", "2", "--master-addr", "head node"}, "--master-addr"},
      {{"-pp", "2", "-n", "2", "--master-addr", std::string(256, 'h')}, "--master-addr"},
      {{"-pp", "2", "-n", "2", "--master-port", "0"}, "--master-port: 0 is outside [1, 65535]"},
      {{"-pp", "2", "-n", "2", "--master-port", "65536"}, "--master-port"},
      {{"-pp", "2", "-n", "2", "--master-port", "port"}, "--master-port"},
      {{"-n", "0"}, "--nnodes: 0 is outside [1, 1024]"},
      {{"-n", "two"}, "--nnodes"},
      {{"-r", "-1"}, "--node-rank"},
  };
  for (const Case& c : cases) {
    auto p = Parse(c.argv);
    ASSERT_FALSE(p.ok()) << absl::StrJoin(c.argv, " ");
    EXPECT_TRUE(absl::IsInvalidArgument(p.status()));
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(c.expect))
        << absl::StrJoin(c.argv, " ");
  }
}

// vLLM 0.33's inference of the load-balancing mode (EngineArgs.create_engine_config).
TEST(ServeArgsTest, DataParallelLoadBalancingModes) {
  struct Case {
    std::vector<std::string> argv;
    DpLoadBalancing mode;
    int32_t start, local;
  };
  const Case cases[] = {
      {{"-dp", "4"}, DpLoadBalancing::kInternal, 0, 4},
      {{"-dp", "4", "-dpl", "2"}, DpLoadBalancing::kInternal, 0, 2},  // the head of two nodes
      {{"-dp", "4", "-dpl", "2", "-dph"}, DpLoadBalancing::kHybrid, 0, 2},
      {{"-dp", "4", "-dpl", "2", "-dpr", "2"}, DpLoadBalancing::kHybrid, 2, 2},  // inferred
      {{"-dp", "4", "-dpl", "1", "-dpr", "3"}, DpLoadBalancing::kExternal, 3, 1},
      {{"-dp", "4", "-dpl", "4", "-dph"}, DpLoadBalancing::kInternal, 0, 4},  // one node
      {{"-dp", "4", "-dpn", "2"}, DpLoadBalancing::kExternal, 2, 1},
      {{"-dp", "4", "-dpn", "2", "-dpe", "-dpa", "10.0.0.1", "-dpp", "13400"},
       DpLoadBalancing::kExternal,
       2,
       1},
      {{"-dp", "4", "-dpl", "2", "-dpr", "2", "--headless"}, DpLoadBalancing::kInternal, 2, 2},
  };
  for (const Case& c : cases) {
    auto p = Parse(c.argv);
    ASSERT_TRUE(p.ok()) << absl::StrJoin(c.argv, " ") << ": " << p.status();
    EXPECT_EQ(p->args->dp_load_balancing, c.mode) << absl::StrJoin(c.argv, " ");
    EXPECT_EQ(p->args->config.parallel.data_parallel_start_rank, c.start);
    EXPECT_EQ(p->args->config.parallel.data_parallel_size_local, c.local);
    // Only internal balancing across nodes puts engines on TCP.
    if (c.mode != DpLoadBalancing::kInternal) {
      EXPECT_FALSE(p->args->multi_node);
    }
  }
}

TEST(ServeArgsTest, KvEventsConfigReachesTheEngineConfig) {
  auto p = Parse({"--kv-events-config",
                  R"({"enable_kv_cache_events": true, "endpoint": "tcp://*:6000", "topic": "kv"})",
                  "-dp", "2"});
  ASSERT_TRUE(p.ok()) << p.status();
  const config::KvEventsConfig& k = p->args->config.kv_events;
  EXPECT_TRUE(k.enable);
  EXPECT_EQ(k.publisher, "zmq");
  EXPECT_EQ(k.endpoint, "tcp://*:6000");
  EXPECT_EQ(k.topic, "kv");
  EXPECT_FALSE(Parse({})->args->config.kv_events.enable);
  // Refused before anything starts, naming the flag.
  for (std::vector<std::string> argv : {
           std::vector<std::string>{"--kv-events-config", R"({"enable": true})"},
           std::vector<std::string>{"--kv-events-config", "not json"},
           std::vector<std::string>{
               "--kv-events-config",
               R"({"enable_kv_cache_events": true, "endpoint": "ipc:///tmp/kv"})", "-dp", "2"},
       }) {
    auto bad = Parse(argv);
    ASSERT_FALSE(bad.ok()) << argv[1];
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr("--kv-events-config"));
  }
}

TEST(ServeArgsTest, KvTransferConfigReachesTheEngineConfig) {
  auto p = Parse({"--kv-transfer-config",
                  R"({"kv_connector": "NixlConnector", "kv_role": "kv_producer", "kv_port": 20001,
                      "kv_connector_extra_config": {"backends": ["UCX"]}})"});
  ASSERT_TRUE(p.ok()) << p.status();
  const config::KvTransferConfig& t = p->args->config.kv_transfer;
  EXPECT_EQ(t.kv_connector, "NixlConnector");
  EXPECT_EQ(t.kv_role, "kv_producer");
  EXPECT_EQ(t.kv_port, 20001);
  EXPECT_EQ(t.kv_connector_extra_config, R"({"backends":["UCX"]})");
  EXPECT_FALSE(Parse({})->args->config.kv_transfer.has_connector());
  for (std::vector<std::string> argv : {
           std::vector<std::string>{"--kv-transfer-config", R"({"kv_connector": "NixlConnector"})"},
           std::vector<std::string>{
               "--kv-transfer-config",
               R"({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})"},
           std::vector<std::string>{"--kv-transfer-config", R"({"kv_rank": 0})"},
           std::vector<std::string>{"--kv-transfer-config", "not json"},
       }) {
    auto bad = Parse(argv);
    ASSERT_FALSE(bad.ok()) << argv[1];
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr("--kv-transfer-config"));
  }
}

TEST(ServeArgsTest, KvOffloadingSizeRunsOffloadingConnector) {
  auto p = Parse({"--kv-offloading-size", "2", "--kv-offloading-backend", "native"});
  ASSERT_TRUE(p.ok()) << p.status();
  const config::VllmConfig& c = p->args->config;
  EXPECT_DOUBLE_EQ(c.cache.kv_offloading_size, 2.0);
  EXPECT_EQ(c.cache.kv_offloading_backend, "native");
  EXPECT_EQ(c.kv_transfer.kv_connector, "OffloadingConnector");
  EXPECT_EQ(c.kv_transfer.kv_role, "kv_both");
  EXPECT_EQ(c.kv_transfer.kv_connector_extra_config, R"({"cpu_bytes_to_use":2147483648.0})");
  // Unset: no connector, whatever the backend.
  auto none = Parse({"--kv-offloading-backend", "native"});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->args->config.kv_transfer.has_connector());
  // With --kv-transfer-config: its keys kept; a connector vLLM would replace is refused.
  auto both = Parse({"--kv-offloading-size", "1", "--kv-transfer-config",
                     R"({"kv_connector_extra_config": {"block_size": 64}})"});
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->args->config.kv_transfer.kv_connector_extra_config,
            R"({"block_size":64,"cpu_bytes_to_use":1073741824.0})");
  auto conflict = Parse({"--kv-offloading-size", "1", "--kv-transfer-config",
                         R"({"kv_connector": "NixlConnector", "kv_role": "kv_both"})"});
  ASSERT_FALSE(conflict.ok());
  EXPECT_THAT(std::string(conflict.status().message()),
              HasSubstr("--kv-offloading-size 1 runs OffloadingConnector, but "
                        "--kv-transfer-config kv_connector is 'NixlConnector'"));
}

TEST(ServeArgsTest, StructuredOutputsConfigTakesEnableInReasoning) {
  auto p = Parse({"--structured-outputs-config",
                  R"({"enable_in_reasoning": true, "reasoning_parser": "qwen3"})"});
  ASSERT_TRUE(p.ok()) << p.status();
  const config::StructuredOutputsConfig& s = p->args->config.structured_outputs;
  EXPECT_TRUE(s.enable_in_reasoning);
  EXPECT_EQ(s.reasoning_parser, "qwen3");
  EXPECT_FALSE(Parse({})->args->config.structured_outputs.enable_in_reasoning);
  auto off = Parse({"--structured-outputs-config", R"({"enable_in_reasoning": false})"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->args->config.structured_outputs.enable_in_reasoning);
  auto bad = Parse({"--structured-outputs-config", R"({"enable_in_reasoning": "yes"})"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("--structured-outputs-config enable_in_reasoning"));
}

TEST(ServeArgsTest, HelpReadsLikeVllm) {
  auto p = Parse({"--help"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->args.has_value());
  EXPECT_THAT(p->text, HasSubstr("--tensor-parallel-size"));
  EXPECT_THAT(p->text, HasSubstr("--enable-prefix-caching"));
  EXPECT_THAT(p->text, HasSubstr("CacheConfig"));
  EXPECT_THAT(p->text, HasSubstr("SchedulerConfig"));
  for (const char* flag :
       {"--nnodes", "-n", "--node-rank", "-r", "--master-addr", "--master-port"}) {
    EXPECT_THAT(p->text, HasSubstr(flag));
  }
}

TEST(ServeArgsTest, BadFlagsNameTheFlagAndTheChoices) {
  struct Case {
    std::vector<std::string> argv;
    const char* expect;
  };
  const Case cases[] = {
      {{"--load-format", "pt"}, "--load-format"},
      {{"--load-format", "pt"}, "dummy"},
      {{"--port", "70000"}, "--port"},
      {{"--port", "eighty"}, "--port"},
      {{"-tp", "0"}, "--tensor-parallel-size"},
      {{"--block-size", "17"}, "--block-size"},
      {{"--kv-cache-memory", "lots"}, "--kv-cache-memory"},
      {{"--kv-cache-memory", "-4GiB"}, "--kv-cache-memory"},
      {{"--dtype", "int4"}, "--dtype"},
      {{"--device", "tpu"}, "--device"},
      {{"--no-such-flag"}, "--no-such-flag"},
      {{"--max-num-seqs"}, "--max-num-seqs"},
      {{"-pp", "0"}, "--pipeline-parallel-size"},
      // vLLM's aliases reach their flags.
      {{"-dpl", "2"}, "--data-parallel-size-local"},
      {{"-dp", "4", "-dpl", "2", "-dpr", "3"}, "--data-parallel-start-rank"},
      {{"-dp", "4", "-dpl", "2", "--headless"}, "--data-parallel-start-rank"},
      {{"-dp", "4", "-dpl", "0", "-dpr", "2", "--headless"}, "--data-parallel-size-local"},
      {{"-dpn", "1"}, "--data-parallel-rank"},  // not below -dp 1
      {{"-dp", "2", "-dpn", "1", "-dpl", "2"}, "--data-parallel-size-local"},
      {{"-dp", "2", "-dpn", "1", "--headless"}, "--data-parallel-rank"},
      {{"-dp", "4", "-dpl", "2", "-dpr", "2", "-dph", "--headless"}, "--data-parallel-hybrid-lb"},
      {{"--restart-dead-engines"}, "--restart-dead-engines"},
      {{"--no-rejoin-head"}, "--no-rejoin-head: only with --headless"},
      // Lockstep needs several replicas behind one head, and is given on the head.
      {{"--data-parallel-lockstep"}, "--data-parallel-lockstep"},
      {{"-dp", "4", "-dpl", "2", "-dpr", "2", "--data-parallel-lockstep"},
       "--data-parallel-lockstep"},
      {{"-dp", "4", "-dpl", "2", "-dpr", "2", "--headless", "--data-parallel-lockstep"},
       "--data-parallel-lockstep"},
      {{"-dpp", "13345"}, "--data-parallel-rpc-port"},
      {{"-dp", "2", "-dpl", "1", "--cluster-key-file", "/nonexistent/key"}, "--cluster-key-file"},
      {{"-dph"}, "--data-parallel-hybrid-lb"},
      {{"-dpe"}, "--data-parallel-external-lb"},
      {{"-asc", "0"}, "--api-server-count"},
      {{"-asc", "65"}, "--api-server-count"},
      {{"-asc", "2", "-dp", "2", "-dpl", "1", "-dpr", "1", "--headless"}, "--api-server-count"},
      {{"-asc", "3", "-dp", "2", "-dpl", "1", "-dpp", "65534"}, "--api-server-count"},
      {{"a", "--model", "b"}, "given twice"},
      {{"--gpu-memory-utilization", "1.5"}, "--gpu-memory-utilization"},
      {{"--max-logprobs", "-1"}, "--max-logprobs"},
      {{"--max-logprobs", "1025"}, "--max-logprobs: 1025 is outside [0, 1024]"},
      {{"--max-num-seqs", "0"}, "--max-num-seqs: 0 is outside [1, 1048576]"},
      {{"--scheduling-policy", "lifo"}, "--scheduling-policy: unknown value 'lifo'"},
      {{"--kv-offloading-size", "0"}, "--kv-offloading-size: expected GiB in (0, 1048576]"},
      {{"--kv-offloading-size", "-1"}, "--kv-offloading-size"},
      {{"--kv-offloading-size", "nan"}, "--kv-offloading-size"},
      {{"--kv-offloading-size", "lots"}, "--kv-offloading-size"},
      {{"--kv-offloading-size", "1", "--kv-offloading-backend", "lmcache"},
       "--kv-offloading-backend lmcache: LMCache is a Python package"},
      {{"--kv-offloading-backend", "disk"}, "--kv-offloading-backend: unknown value 'disk'"},
  };
  for (const Case& c : cases) {
    auto p = Parse(c.argv);
    ASSERT_FALSE(p.ok()) << c.argv[0];
    EXPECT_TRUE(absl::IsInvalidArgument(p.status()));
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(c.expect)) << c.argv[0];
  }
}

TEST(ServeArgsTest, ByteSizes) {
  EXPECT_EQ(*ParseByteSize("4GiB"), int64_t{4} << 30);
  EXPECT_EQ(*ParseByteSize("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("2GB"), 2'000'000'000);
  EXPECT_EQ(*ParseByteSize("1048576"), 1048576);
  EXPECT_FALSE(ParseByteSize("0").ok());
  EXPECT_FALSE(ParseByteSize("GiB").ok());
  EXPECT_FALSE(ParseByteSize("1e30GiB").ok());
}

}  // namespace
}  // namespace vllm::launcher
