// config/vllm_envs.h: the table of vLLM 0.33.0's VLLM_* variables (complete, no duplicates,
// the honoured set), Python's int() parsing, ReadVllmEnv's defaults and errors, the refusals
// and the one warning line.
#include "config/vllm_envs.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vllm::config {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

EnvLookup MapEnv(const std::map<std::string, std::string>& m) {
  return [&m](const char* name) -> const char* {
    auto it = m.find(name);
    return it == m.end() ? nullptr : it->second.c_str();
  };
}

TEST(VllmEnvTable, EveryVariableOnceWithAReason) {
  std::set<std::string_view> names;
  for (const VllmEnvVar& v : VllmEnvTable()) {
    EXPECT_TRUE(names.insert(v.name).second) << v.name;
    EXPECT_EQ(v.name.substr(0, 5), "VLLM_") << v.name;
    EXPECT_FALSE(IsOwnEnvVariable(v.name)) << v.name;
    if (v.status == EnvStatus::kNotHonoured) {
      EXPECT_FALSE(v.note.empty() && v.why == EnvWhy::kNone) << v.name << " has no reason";
    }
    if (v.status == EnvStatus::kHonoured) {
      EXPECT_EQ(v.why, EnvWhy::kNone) << v.name;
    }
  }
  EXPECT_EQ(names.size(), 303u);
}

TEST(VllmEnvTable, HonouredAndRefusedSets) {
  std::set<std::string_view> honoured, refused;
  for (const VllmEnvVar& v : VllmEnvTable()) {
    if (v.status == EnvStatus::kHonoured) honoured.insert(v.name);
    if (v.status == EnvStatus::kRefused) refused.insert(v.name);
  }
  const std::set<std::string_view> want = {
      "VLLM_HOST_IP",
      "VLLM_ENGINE_READY_TIMEOUT_S",
      "VLLM_API_KEY",
      "VLLM_NO_USAGE_STATS",
      "VLLM_DO_NOT_TRACK",
      "VLLM_CONFIGURE_LOGGING",
      "VLLM_LOGGING_LEVEL",
      "VLLM_PP_LAYER_PARTITION",
      "VLLM_CPU_KVCACHE_SPACE",
      "VLLM_HTTP_TIMEOUT_KEEP_ALIVE",
      "VLLM_HTTP_MAX_REQUEST_BODY_SIZE",
      "VLLM_DP_RANK",
      "VLLM_DP_RANK_LOCAL",
      "VLLM_DP_SIZE",
      "VLLM_DP_MASTER_IP",
      "VLLM_DP_MASTER_PORT",
      "VLLM_NIXL_SIDE_CHANNEL_HOST",
      "VLLM_NIXL_SIDE_CHANNEL_PORT",
      "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
      "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS",
      "VLLM_SERVER_DEV_MODE",
      "VLLM_PORT",
      "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH",
      "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
      "VLLM_MAX_N_SEQUENCES",
      "VLLM_MAX_COMPLETION_PROMPTS",
      "VLLM_MAX_STOP_STRINGS",
      "VLLM_MQ_MAX_CHUNK_BYTES_MB",
      "VLLM_LOG_STATS_INTERVAL",  // serve_flags_test: a stats line every 0.5 s
  };
  EXPECT_EQ(honoured, want);
  EXPECT_EQ(refused, (std::set<std::string_view>{"VLLM_LOGGING_CONFIG_PATH",
                                                 "VLLM_ALLOW_RUNTIME_LORA_UPDATING"}));
  // A few rows checked against envs.py by hand.
  const VllmEnvVar* keep_alive = FindVllmEnv("VLLM_HTTP_TIMEOUT_KEEP_ALIVE");
  ASSERT_NE(keep_alive, nullptr);
  EXPECT_EQ(keep_alive->parse, EnvParse::kInt);
  EXPECT_EQ(keep_alive->vllm_default, "5");
  EXPECT_EQ(FindVllmEnv("VLLM_HTTP_MAX_REQUEST_BODY_SIZE")->vllm_default, "33554432");
  EXPECT_EQ(FindVllmEnv("VLLM_ALLOW_RUNTIME_LORA_UPDATING")->parse, EnvParse::kBool1True);
  EXPECT_EQ(FindVllmEnv("VLLM_ROCM_USE_AITER")->why, EnvWhy::kRocm);
  EXPECT_EQ(FindVllmEnv("VLLM_NOT_A_VARIABLE"), nullptr);
}

TEST(ParsePythonInt, AsPythonsInt) {
  EXPECT_EQ(*ParsePythonInt("X", "42"), 42);
  EXPECT_EQ(*ParsePythonInt("X", " -7\n"), -7);
  EXPECT_EQ(*ParsePythonInt("X", "+007"), 7);
  EXPECT_EQ(*ParsePythonInt("X", "1_000"), 1000);
  for (const char* bad :
       {"", " ", "1.5", "0x10", "1__0", "_1", "1_", "5s", "--1", "9e3", "99999999999999999999"}) {
    auto r = ParsePythonInt("VLLM_X", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("VLLM_X"));
  }
}

TEST(ReadVllmEnv, DefaultsAreVllms) {
  const std::map<std::string, std::string> none;
  auto e = ReadVllmEnv(MapEnv(none));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->http_timeout_keep_alive_s, 5);
  EXPECT_EQ(e->http_max_request_body_size, 32 << 20);
  EXPECT_EQ(e->engine_ready_timeout_s, 600);
  EXPECT_EQ(e->execute_model_timeout_s, 300);
  EXPECT_EQ(e->worker_shutdown_timeout_s, 5);
  EXPECT_EQ(e->logging_level, "INFO");
  EXPECT_TRUE(e->configure_logging);
  EXPECT_FALSE(e->api_key.has_value());
  EXPECT_FALSE(e->cpu_kvcache_space_gib.has_value());
  EXPECT_EQ(e->dp_size, 1);
  EXPECT_EQ(e->dp_master_ip, "127.0.0.1");
  EXPECT_EQ(e->nixl_side_channel_port, 5600);
  EXPECT_EQ(e->max_n_sequences, 16384);
  EXPECT_EQ(e->max_completion_prompts, 1024);
  EXPECT_EQ(e->max_stop_strings, 4);
  EXPECT_FALSE(e->port.has_value());
  EXPECT_FALSE(e->keep_alive_on_engine_death);
  EXPECT_EQ(e->mq_max_chunk_bytes_mb, 16);
  EXPECT_FALSE(e->allow_long_max_model_len);
  EXPECT_TRUE(CheckVllmEnvRefusals(*e).ok());
}

TEST(ReadVllmEnv, ParsesAsVllm) {
  const std::map<std::string, std::string> env = {
      {"VLLM_LOGGING_LEVEL", "debug"},
      {"VLLM_CONFIGURE_LOGGING", "0"},
      {"VLLM_API_KEY", "k"},
      {"VLLM_CPU_KVCACHE_SPACE", " 2 "},
      {"VLLM_DP_RANK", "3"},
      {"VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "1"},
      {"VLLM_HTTP_MAX_REQUEST_BODY_SIZE", "0"},
      {"VLLM_ALLOW_RUNTIME_LORA_UPDATING", " TRUE "},
      {"VLLM_MAX_N_SEQUENCES", "2_000"},
      {"VLLM_MAX_COMPLETION_PROMPTS", " 7"},
      {"VLLM_MAX_STOP_STRINGS", "0"},
      {"VLLM_PORT", "40000"},
      {"VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "1"},
      {"VLLM_MQ_MAX_CHUNK_BYTES_MB", "1"},
      {"VLLM_ALLOW_LONG_MAX_MODEL_LEN", "True"},
  };
  auto e = ReadVllmEnv(MapEnv(env));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->logging_level, "DEBUG");
  EXPECT_FALSE(e->configure_logging);
  EXPECT_EQ(e->api_key, "k");
  EXPECT_EQ(e->cpu_kvcache_space_gib, 2);
  EXPECT_EQ(e->dp_rank_local, 3);  // VLLM_DP_RANK_LOCAL defaults to VLLM_DP_RANK
  EXPECT_EQ(e->http_timeout_keep_alive_s, 1);
  EXPECT_EQ(e->http_max_request_body_size, 0);
  EXPECT_TRUE(e->allow_runtime_lora_updating);
  EXPECT_EQ(e->max_n_sequences, 2000);
  EXPECT_EQ(e->max_completion_prompts, 7);
  EXPECT_EQ(e->max_stop_strings, 0);
  EXPECT_EQ(e->port, 40000);
  EXPECT_TRUE(e->keep_alive_on_engine_death);
  EXPECT_EQ(e->mq_max_chunk_bytes_mb, 1);
  EXPECT_TRUE(e->allow_long_max_model_len);
  const absl::Status refused = CheckVllmEnvRefusals(*e);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("VLLM_ALLOW_RUNTIME_LORA_UPDATING"));
  // An empty VLLM_CPU_KVCACHE_SPACE is unset (vLLM's CPU platform checks for "").
  const std::map<std::string, std::string> empty = {{"VLLM_CPU_KVCACHE_SPACE", ""}};
  EXPECT_FALSE(ReadVllmEnv(MapEnv(empty))->cpu_kvcache_space_gib.has_value());
}

TEST(ReadVllmEnv, BadValuesNameTheVariable) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"VLLM_LOGGING_LEVEL", "LOUD"},
      {"VLLM_CONFIGURE_LOGGING", "yes"},
      {"VLLM_CPU_KVCACHE_SPACE", "0"},
      {"VLLM_CPU_KVCACHE_SPACE", "4GiB"},
      {"VLLM_ENGINE_READY_TIMEOUT_S", "1.5"},
      {"VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "-1"},
      {"VLLM_DP_SIZE", "0"},
      {"VLLM_NIXL_SIDE_CHANNEL_PORT", "70000"},
      {"VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS", "x"},
      {"VLLM_MAX_N_SEQUENCES", "0"},
      {"VLLM_MAX_N_SEQUENCES", "2000000"},
      {"VLLM_MAX_COMPLETION_PROMPTS", "many"},
      {"VLLM_MAX_STOP_STRINGS", "-1"},
      {"VLLM_PORT", "tcp://10.0.0.3:8000"},  // Kubernetes' service variable
      {"VLLM_PORT", "0"},
      {"VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "true"},  // bool(int(v)), as vLLM
      {"VLLM_MQ_MAX_CHUNK_BYTES_MB", "0"},
      {"VLLM_MQ_MAX_CHUNK_BYTES_MB", "4096"},
  };
  for (const auto& [name, value] : bad) {
    const std::map<std::string, std::string> env = {{name, value}};
    auto e = ReadVllmEnv(MapEnv(env));
    ASSERT_FALSE(e.ok()) << name << "=" << value;
    EXPECT_THAT(std::string(e.status().message()), HasSubstr(name));
  }
  const std::map<std::string, std::string> path = {{"VLLM_LOGGING_CONFIG_PATH", "/etc/l.json"}};
  auto e = ReadVllmEnv(MapEnv(path));
  ASSERT_TRUE(e.ok());
  EXPECT_THAT(std::string(CheckVllmEnvRefusals(*e).message()),
              HasSubstr("VLLM_LOGGING_CONFIG_PATH"));
}

TEST(UnhonouredEnvWarning, NamesIgnoredAndUnknownOnly) {
  const char* environ[] = {"PATH=/bin",
                           "VLLM_NOT_A_VARIABLE=1",
                           "VLLM_USE_DEEP_GEMM=0",
                           "VLLM_API_KEY=secret",
                           "VLLM_ENGINE_HEARTBEAT_TIMEOUT_S=5",
                           "VLLM_CPU_OMP_THREADS_BIND=0-3",
                           "VLLM_LOGGING_CONFIG_PATH=x",
                           nullptr};
  const std::optional<std::string> line = UnhonouredEnvWarning(environ);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->find('\n'), std::string::npos);
  EXPECT_THAT(*line, HasSubstr("VLLM_NOT_A_VARIABLE"));
  EXPECT_THAT(*line, HasSubstr("VLLM_USE_DEEP_GEMM (a PyTorch"));
  EXPECT_THAT(*line, HasSubstr("VLLM_CPU_OMP_THREADS_BIND (the CPU backend pins no threads"));
  EXPECT_THAT(*line, Not(HasSubstr("VLLM_API_KEY")));
  EXPECT_THAT(*line, Not(HasSubstr("secret")));
  EXPECT_THAT(*line, Not(HasSubstr("HEARTBEAT")));
  EXPECT_THAT(*line, Not(HasSubstr("LOGGING_CONFIG_PATH")));  // refused, not warned
  const char* clean[] = {"VLLM_API_KEY=k", "HOME=/root", nullptr};
  EXPECT_FALSE(UnhonouredEnvWarning(clean).has_value());
}

}  // namespace
}  // namespace vllm::config
