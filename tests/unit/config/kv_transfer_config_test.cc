// --kv-transfer-config's parser (vLLM's KVTransferConfig keys, strictly), its part of the
// VllmConfig (codec round trip, the log line, Validate naming the flag), and
// --kv-offloading-size's mapping onto OffloadingConnector (vLLM's
// _post_init_kv_transfer_config).
#include "config/kv_transfer_config.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/config_codec.h"
#include "config/engine_args.h"
#include "config/vllm_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace vllm::config {
namespace {

using ::testing::HasSubstr;

// The message of a parse that must fail.
std::string Refusal(const std::string& json) {
  absl::StatusOr<KvTransferConfig> c = ParseKvTransferConfig(json);
  EXPECT_FALSE(c.ok()) << json;
  if (c.ok()) return "";
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("--kv-transfer-config")) << json;
  return std::string(c.status().message());
}

VllmConfig Valid() {
  VllmConfig c;
  c.model.model = "/models/m";
  return c;
}

TEST(KvTransferConfigTest, DefaultsAreVllmsWithNoConnector) {
  const KvTransferConfig d;
  EXPECT_EQ(d.kv_connector, "");
  EXPECT_EQ(d.engine_id, "");
  EXPECT_EQ(d.kv_buffer_device, "cpu");
  EXPECT_EQ(d.kv_role, "");
  EXPECT_EQ(d.kv_port, 14579);
  EXPECT_EQ(d.kv_connector_extra_config, "{}");
  EXPECT_EQ(d.kv_load_failure_policy, "fail");
  EXPECT_FALSE(d.has_connector());
  EXPECT_FALSE(d.is_kv_producer());
  EXPECT_TRUE(d.Validate().ok());
  absl::StatusOr<KvTransferConfig> empty = ParseKvTransferConfig("{}");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(*empty, d);
  // Null is the default for vLLM's `| None` keys.
  absl::StatusOr<KvTransferConfig> nulls = ParseKvTransferConfig(
      R"({"kv_connector": null, "engine_id": null, "kv_role": null,
          "kv_connector_module_path": null, "kv_connector_extra_config": null})");
  ASSERT_TRUE(nulls.ok()) << nulls.status();
  EXPECT_EQ(*nulls, d);
}

TEST(KvTransferConfigTest, EveryKeyIsRead) {
  absl::StatusOr<KvTransferConfig> c = ParseKvTransferConfig(R"({
      "kv_connector": "NixlConnector", "engine_id": "prefill-0", "kv_buffer_device": "cuda",
      "kv_role": "kv_producer", "kv_port": 20001,
      "kv_connector_extra_config": {"b": [1, 2], "a": {"x": "y"}},
      "kv_connector_module_path": null, "enable_permute_local_kv": false,
      "kv_load_failure_policy": "recompute"})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kv_connector, "NixlConnector");
  EXPECT_EQ(c->engine_id, "prefill-0");
  EXPECT_EQ(c->kv_buffer_device, "cuda");
  EXPECT_EQ(c->kv_role, "kv_producer");
  EXPECT_EQ(c->kv_port, 20001);
  EXPECT_EQ(c->kv_connector_extra_config, R"({"a":{"x":"y"},"b":[1,2]})");  // compact
  EXPECT_EQ(c->kv_load_failure_policy, "recompute");
  EXPECT_TRUE(c->is_kv_producer());
  EXPECT_FALSE(c->is_kv_consumer());
  for (const char* role : {"kv_consumer", "kv_both"}) {
    absl::StatusOr<KvTransferConfig> r = ParseKvTransferConfig(
        absl::StrCat(R"({"kv_connector": "ExampleConnector", "kv_role": ")", role, R"("})"));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->is_kv_consumer());
  }
  // A role without a connector is allowed (vLLM's too).
  EXPECT_TRUE(ParseKvTransferConfig(R"({"kv_role": "kv_both"})").ok());
}

TEST(KvTransferConfigTest, UnknownKeysAndWrongTypesAreRefusedByName) {
  EXPECT_THAT(Refusal(R"({"kv_rank": 0})"), HasSubstr("unknown key 'kv_rank'"));
  EXPECT_THAT(Refusal(R"({"kv_parallel_size": 2})"), HasSubstr("kv_parallel_size"));
  EXPECT_THAT(Refusal(R"({"kv_ip": "1.2.3.4"})"), HasSubstr("kv_ip"));
  EXPECT_THAT(Refusal("[]"), HasSubstr("expected a JSON object"));
  EXPECT_THAT(Refusal("{"), HasSubstr("--kv-transfer-config"));
  EXPECT_THAT(Refusal(R"({"kv_port": "14579"})"), HasSubstr("kv_port: expected an integer"));
  EXPECT_THAT(Refusal(R"({"kv_port": 1.5})"), HasSubstr("kv_port"));
  EXPECT_THAT(Refusal(R"({"kv_port": 0})"), HasSubstr("kv_port: expected an integer in [1"));
  EXPECT_THAT(Refusal(R"({"kv_port": 65536})"), HasSubstr("kv_port"));
  EXPECT_THAT(Refusal(R"({"kv_port": 18446744073709551615})"), HasSubstr("kv_port"));
  EXPECT_THAT(Refusal(R"({"kv_connector": 3})"), HasSubstr("kv_connector: expected a string"));
  EXPECT_THAT(Refusal(R"({"kv_buffer_device": null})"), HasSubstr("kv_buffer_device"));
  EXPECT_THAT(Refusal(R"({"kv_buffer_device": "xpu"})"),
              HasSubstr("kv_buffer_device: 'xpu' is not one of cpu, cuda"));
  EXPECT_THAT(Refusal(R"({"kv_connector_extra_config": "{}"})"),
              HasSubstr("kv_connector_extra_config: expected a JSON object"));
  EXPECT_THAT(Refusal(R"({"enable_permute_local_kv": 1})"),
              HasSubstr("enable_permute_local_kv: expected true or false"));
  EXPECT_THAT(Refusal(R"({"kv_role": "producer"})"),
              HasSubstr("Unsupported kv_role: 'producer'. Supported roles are ('kv_producer', "
                        "'kv_both', 'kv_consumer')"));
}

TEST(KvTransferConfigTest, ConnectorsNotBuiltAreRefusedByName) {
  for (const char* name :
       {"LMCacheConnectorV1", "LMCacheMPConnector", "P2pNcclConnector", "MooncakeConnector",
        "MooncakeStoreConnector", "MultiConnector", "NixlPullConnector",
        "SimpleCPUOffloadConnector", "DecodeBenchConnector", "exampleconnector"}) {
    const std::string m =
        Refusal(absl::StrCat(R"({"kv_connector": ")", name, R"(", "kv_role": "kv_both"})"));
    EXPECT_THAT(m, HasSubstr(absl::StrCat("kv_connector: connector '", name, "'"))) << m;
    EXPECT_THAT(m, HasSubstr("ExampleConnector, NixlConnector, OffloadingConnector")) << m;
  }
  EXPECT_THAT(Refusal(R"({"kv_connector": "", "kv_role": "kv_both"})"), HasSubstr("empty"));
}

TEST(KvTransferConfigTest, SharedStorageConnectorIsExampleConnector) {
  absl::StatusOr<KvTransferConfig> c =
      ParseKvTransferConfig(R"({"kv_connector": "SharedStorageConnector", "kv_role": "kv_both",
                                "kv_connector_extra_config": {"shared_storage_path": "/tmp/kv"}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kv_connector, "ExampleConnector");
  EXPECT_EQ(c->kv_connector_extra_config, R"({"shared_storage_path":"/tmp/kv"})");
}

TEST(KvTransferConfigTest, VllmsPostInitRules) {
  // vLLM's message, word for word.
  EXPECT_THAT(Refusal(R"({"kv_connector": "NixlConnector"})"),
              HasSubstr("kv_role: Please specify kv_role when kv_connector is set, supported "
                        "roles are ('kv_producer', 'kv_both', 'kv_consumer')"));
  EXPECT_THAT(Refusal(R"({"kv_connector": "NixlConnector", "kv_role": null})"),
              HasSubstr("Please specify kv_role"));
}

TEST(KvTransferConfigTest, ModuleAndPermuteAreRefused) {
  EXPECT_THAT(Refusal(R"({"kv_connector_module_path": "my.connectors"})"),
              HasSubstr("kv_connector_module_path: Python connector modules cannot be loaded by "
                        "this runtime"));
  EXPECT_THAT(Refusal(R"({"enable_permute_local_kv": true})"),
              HasSubstr("enable_permute_local_kv: true is not supported"));
  EXPECT_TRUE(ParseKvTransferConfig(R"({"enable_permute_local_kv": false})").ok());
}

TEST(KvTransferConfigTest, LoadFailurePolicies) {
  for (const char* policy : {"fail", "recompute"}) {
    absl::StatusOr<KvTransferConfig> c =
        ParseKvTransferConfig(absl::StrCat(R"({"kv_load_failure_policy": ")", policy, R"("})"));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->kv_load_failure_policy, policy);
  }
  EXPECT_THAT(Refusal(R"({"kv_load_failure_policy": "retry"})"),
              HasSubstr("kv_load_failure_policy: 'retry' is not one of fail, recompute"));
  EXPECT_THAT(Refusal(R"({"kv_load_failure_policy": null})"), HasSubstr("kv_load_failure_policy"));
}

TEST(KvTransferConfigTest, EngineIdAndExtraConfigAreBounded) {
  const std::string longest(kMaxKvEngineIdBytes, 'e');
  absl::StatusOr<KvTransferConfig> c =
      ParseKvTransferConfig(absl::StrCat(R"({"engine_id": ")", longest, R"("})"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->engine_id, longest);
  EXPECT_THAT(Refusal(absl::StrCat(R"({"engine_id": ")", longest, R"(e"})")),
              HasSubstr("engine_id: 257 bytes; at most 256"));
  EXPECT_THAT(Refusal(R"({"engine_id": "a b"})"), HasSubstr("engine_id: expected at most 256"));
  EXPECT_THAT(Refusal(R"({"engine_id": "a\u0001"})"), HasSubstr("engine_id"));
  EXPECT_THAT(Refusal(R"({"engine_id": "\u00e9"})"), HasSubstr("engine_id"));
  const std::string big = absl::StrCat(R"({"kv_connector_extra_config": {"k": ")",
                                       std::string(kMaxKvConnectorExtraConfigBytes, 'x'), R"("}})");
  EXPECT_THAT(Refusal(big), HasSubstr("kv_connector_extra_config"));
  EXPECT_THAT(Refusal(R"({"kv_connector_extra_config": {"a": [[[[[[[[[1]]]]]]]]]}})"),
              HasSubstr("nest deeper"));
}

TEST(KvTransferConfigTest, ValidateNamesTheFlagAndTheKey) {
  struct Case {
    void (*mutate)(VllmConfig&);
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](VllmConfig& c) { c.kv_transfer.kv_connector = "P2pNcclConnector"; },
       "--kv-transfer-config kv_connector"},
      {[](VllmConfig& c) { c.kv_transfer.kv_role = "both"; }, "--kv-transfer-config kv_role"},
      {[](VllmConfig& c) { c.kv_transfer.kv_connector = "NixlConnector"; },
       "Please specify kv_role"},
      {[](VllmConfig& c) { c.kv_transfer.kv_port = 0; }, "--kv-transfer-config kv_port"},
      {[](VllmConfig& c) { c.kv_transfer.kv_buffer_device = "xpu"; },
       "--kv-transfer-config kv_buffer_device"},
      {[](VllmConfig& c) { c.kv_transfer.engine_id = "a\nb"; }, "--kv-transfer-config engine_id"},
      {[](VllmConfig& c) { c.kv_transfer.kv_connector_extra_config = "[1]"; },
       "--kv-transfer-config kv_connector_extra_config"},
      {[](VllmConfig& c) { c.kv_transfer.kv_connector_extra_config = "{"; },
       "--kv-transfer-config kv_connector_extra_config"},
      {[](VllmConfig& c) { c.kv_transfer.kv_load_failure_policy = "ignore"; },
       "--kv-transfer-config kv_load_failure_policy"},
      {[](VllmConfig& c) { c.cache.kv_offloading_size = -1; }, "--kv-offloading-size"},
      {[](VllmConfig& c) { c.cache.kv_offloading_size = std::nan(""); }, "--kv-offloading-size"},
      {[](VllmConfig& c) { c.cache.kv_offloading_size = 2 * kMaxKvOffloadingGiB; },
       "--kv-offloading-size"},
      {[](VllmConfig& c) { c.cache.kv_offloading_backend = "lmcache"; },
       "--kv-offloading-backend lmcache: LMCache is a Python package"},
      {[](VllmConfig& c) { c.cache.kv_offloading_backend = "disk"; },
       "--kv-offloading-backend: unknown value 'disk'"},
      // An offloading size the config was not resolved for.
      {[](VllmConfig& c) { c.cache.kv_offloading_size = 1; }, "ResolveKvOffloading"},
  };
  for (const Case& k : cases) {
    VllmConfig c = Valid();
    k.mutate(c);
    const absl::Status s = c.Validate();
    ASSERT_FALSE(s.ok()) << k.message;
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(k.message));
  }
}

TEST(KvTransferConfigTest, TheCodecCarriesItAndTheLogLineShowsIt) {
  VllmConfig c = Valid();
  c.kv_transfer.kv_connector = "NixlConnector";
  c.kv_transfer.engine_id = "decode-7";
  c.kv_transfer.kv_buffer_device = "cuda";
  c.kv_transfer.kv_role = "kv_consumer";
  c.kv_transfer.kv_port = 30000;
  c.kv_transfer.kv_connector_extra_config = R"({"backends":["UCX"]})";
  c.kv_transfer.kv_load_failure_policy = "recompute";
  ASSERT_TRUE(c.Validate().ok()) << c.Validate();
  absl::StatusOr<VllmConfig> back = DecodeVllmConfig(EncodeVllmConfig(c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, c);
  const std::string d = DescribeVllmConfig(c);
  for (const char* field :
       {"kv_transfer_config.kv_connector='NixlConnector'",
        "kv_transfer_config.engine_id='decode-7'", "kv_transfer_config.kv_role='kv_consumer'",
        "kv_transfer_config.kv_port=30000", "kv_transfer_config.kv_load_failure_policy='recompute'",
        "kv_offloading_size=0", "kv_offloading_backend='native'"}) {
    EXPECT_THAT(d, HasSubstr(field));
  }

  // Offloading too, resolved on one side and carried whole.
  VllmConfig off = Valid();
  off.cache.kv_offloading_size = 1.5;
  ASSERT_TRUE(off.ResolveKvOffloading().ok());
  back = DecodeVllmConfig(EncodeVllmConfig(off));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, off);
  EXPECT_DOUBLE_EQ(back->cache.kv_offloading_size, 1.5);
}

TEST(KvTransferConfigTest, OffloadingSizeMeansOffloadingConnector) {
  VllmConfig c = Valid();
  c.cache.kv_offloading_size = 4;
  ASSERT_TRUE(c.ResolveKvOffloading().ok());
  EXPECT_EQ(c.kv_transfer.kv_connector, "OffloadingConnector");
  EXPECT_EQ(c.kv_transfer.kv_role, "kv_both");
  // vLLM's kv_offloading_size * (1 << 30): a float.
  EXPECT_EQ(c.kv_transfer.kv_connector_extra_config, R"({"cpu_bytes_to_use":4294967296.0})");
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  const VllmConfig once = c;
  ASSERT_TRUE(c.ResolveKvOffloading().ok());
  EXPECT_EQ(c, once);  // idempotent

  // Without a size: nothing, whatever the backend says.
  VllmConfig none = Valid();
  ASSERT_TRUE(none.ResolveKvOffloading().ok());
  EXPECT_EQ(none, Valid());

  // The keys given are kept; a connector and role that agree are fine.
  VllmConfig given = Valid();
  given.cache.kv_offloading_size = 0.5;
  absl::StatusOr<KvTransferConfig> t = ParseKvTransferConfig(
      R"({"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
          "kv_connector_extra_config": {"block_size": 64, "cpu_bytes_to_use": 536870912}})");
  ASSERT_TRUE(t.ok()) << t.status();
  given.kv_transfer = *t;
  ASSERT_TRUE(given.ResolveKvOffloading().ok());
  const nlohmann::json extra = nlohmann::json::parse(given.kv_transfer.kv_connector_extra_config);
  EXPECT_EQ(extra.at("block_size"), 64);
  EXPECT_DOUBLE_EQ(extra.at("cpu_bytes_to_use").get<double>(), 536870912.0);

  // EngineArgs resolves it as the CLI does.
  EngineArgs a;
  a.config.model.model = "/models/m";
  a.config.cache.kv_offloading_size = 2;
  absl::StatusOr<VllmConfig> e = a.CreateEngineConfig();
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->kv_transfer.kv_connector, "OffloadingConnector");
}

TEST(KvTransferConfigTest, OffloadingSizeRefusesWhatVllmWouldOverwrite) {
  struct Case {
    const char* transfer;
    const char* message;
  };
  const Case cases[] = {
      {R"({"kv_connector": "NixlConnector", "kv_role": "kv_both"})",
       "--kv-offloading-size 4 runs OffloadingConnector, but --kv-transfer-config kv_connector is "
       "'NixlConnector'"},
      {R"({"kv_connector": "OffloadingConnector", "kv_role": "kv_producer"})",
       "--kv-transfer-config kv_role is 'kv_producer'"},
      {R"({"kv_role": "kv_consumer"})", "kv_role is 'kv_consumer'"},
      {R"({"kv_connector_extra_config": {"cpu_bytes_to_use": 1024}})",
       "--kv-offloading-size 4 offloads 4294967296 bytes, but --kv-transfer-config "
       "kv_connector_extra_config cpu_bytes_to_use is 1024"},
      {R"({"kv_connector_extra_config": {"cpu_bytes_to_use": "4GiB"}})", "cpu_bytes_to_use"},
  };
  for (const Case& k : cases) {
    VllmConfig c = Valid();
    c.cache.kv_offloading_size = 4;
    absl::StatusOr<KvTransferConfig> t = ParseKvTransferConfig(k.transfer);
    ASSERT_TRUE(t.ok()) << t.status();
    c.kv_transfer = *t;
    const absl::Status s = c.ResolveKvOffloading();
    ASSERT_FALSE(s.ok()) << k.transfer;
    EXPECT_TRUE(absl::IsInvalidArgument(s));
    EXPECT_THAT(std::string(s.message()), HasSubstr(k.message));
    EXPECT_FALSE(c.Validate().ok());
  }
}

}  // namespace
}  // namespace vllm::config
