// The API server's spec made from parsed serve flags (EncodeSpecFor) and the serve arguments
// an API server process rebuilds from it (ServeArgsFromSpec): every setting Serve reads comes
// through, so the API server parses no flags.
#include "launcher/api_server_control.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "launcher/serve_args.h"
#include "launcher/spec/api_server_spec.h"

namespace vllm::launcher {
namespace {

TEST(ApiServerControlTest, TheSpecCarriesWhatServeReads) {
  auto parsed = ParseServeArgs({"--api-server-count",
                                "3",
                                "-dp",
                                "2",
                                "--host",
                                "127.0.0.2",
                                "--port",
                                "0",
                                "--api-key",
                                "k",
                                "--max-connections",
                                "77",
                                "--shutdown-timeout",
                                "3",
                                "--served-model-name",
                                "a",
                                "b",
                                "--chat-template",
                                "{{ x }}",
                                "--max-num-seqs",
                                "9",
                                "--data-parallel-address",
                                "127.0.0.1",
                                "--data-parallel-lockstep"},
                               "models/kjv-llama-tiny");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const ServeArgs& args = *parsed->args;
  DpCoordinatorAddresses coordinator{"ipc:///tmp/s", "ipc:///tmp/p", "ipc:///tmp/w", ""};
  absl::StatusOr<std::string> bytes = EncodeSpecFor(args, 2, 4321, coordinator);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<ApiServerSpec> spec = DecodeApiServerSpec(*bytes);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->index, 2);
  EXPECT_EQ(spec->count, 3);
  EXPECT_EQ(spec->coordinator, coordinator);
  const ServeArgs back = ServeArgsFromSpec(*spec);
  EXPECT_EQ(back.config, args.config);
  EXPECT_EQ(back.config.scheduler.max_num_seqs, 9);
  EXPECT_EQ(back.host, "127.0.0.2");
  EXPECT_EQ(back.port, 4321);
  EXPECT_EQ(back.http, args.http);
  EXPECT_EQ(back.max_connections, 77);
  EXPECT_EQ(back.shutdown_timeout_s, 3.0);
  EXPECT_EQ(back.served_model_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(back.chat_template, args.chat_template);
  EXPECT_EQ(back.multi_node, args.multi_node);
  EXPECT_TRUE(back.multi_node);
  EXPECT_EQ(back.dp_load_balancing, args.dp_load_balancing);
  EXPECT_EQ(back.cluster_key_file, args.cluster_key_file);
  EXPECT_EQ(back.api_server_count, 3);
  EXPECT_FALSE(back.headless);
}

}  // namespace
}  // namespace vllm::launcher
