// The typed specs of launcher/spec/: the API server's (whole serve configuration and its
// control messages) and the DP coordinator's (its spec and the addresses it reports), each
// round-tripped field by field, every truncation an InvalidArgument (never a crash), fields
// out of range named; and the frames they travel in over a real socketpair.
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/spec/api_server_spec.h"
#include "launcher/spec/coordinator_spec.h"
#include "launcher/spec/frames.h"

namespace vllm::launcher {
namespace {

using ::testing::HasSubstr;

ApiServerSpec Everything() {
  ApiServerSpec s;
  s.index = 2;
  s.count = 3;
  s.config.model.model = "/models/llama";
  s.config.parallel.data_parallel_size = 4;
  s.config.parallel.data_parallel_size_local = 4;
  FrontendSettings& f = s.frontend;
  f.host = "::1";
  f.port = 8123;
  f.http.api_keys = {"secret", "other"};
  f.http.root_path = "/api";
  f.http.allowed_origins = {"https://a.example"};
  f.http.allowed_methods = {"GET"};
  f.http.allowed_headers = {"X-Custom"};
  f.http.allow_credentials = true;
  f.http.log_level = frontend::HttpLogLevel::kTrace;
  f.http.access_log = false;
  f.http.log_requests = true;
  f.http.max_log_len = 40;
  f.http.request_id_headers = true;
  f.http.disable_fastapi_docs = true;
  f.http.access_log_skip_paths = {"/health", "/metrics"};
  f.http.h11_max_incomplete_event_size = 8192;
  f.http.h11_max_header_count = 12;
  f.http.server_load_tracking = true;
  f.http.sse_keep_alive_interval_s = 3;
  f.http.log_stats = false;
  f.max_connections = 4096;
  f.shutdown_timeout_s = 2.5;
  f.served_model_names = {"a", "b"};
  f.chat_template = "{{ messages }}";
  f.multi_node = true;
  f.dp_load_balancing = DpLoadBalancing::kHybrid;
  f.cluster_key_file = "/etc/key";
  s.coordinator.stats = "udp://10.0.0.1:5000";
  s.coordinator.publish = "tcp://10.0.0.1:5001";
  s.coordinator.waves = "tcp://10.0.0.1:5002";
  s.coordinator.report_key = std::string(32, '\x7f');
  s.serving.generation_config = "/etc/gen";
  s.serving.override_generation_config = R"({"temperature": 0.5})";
  s.serving.chat_template_content_format = "openai";
  s.serving.default_chat_template_kwargs = R"({"enable_thinking": false})";
  s.serving.return_tokens_as_token_ids = true;
  s.serving.enable_force_include_usage = true;
  s.serving.response_role = "narrator";
  s.serving.enable_prompt_tokens_details = true;
  s.serving.enable_per_request_metrics = true;
  s.serving.enable_log_outputs = true;
  s.serving.enable_log_deltas = false;
  return s;
}

TEST(ApiServerSpecTest, RoundTripKeepsEveryField) {
  const ApiServerSpec s = Everything();
  absl::StatusOr<std::string> bytes = EncodeApiServerSpec(s);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<ApiServerSpec> back = DecodeApiServerSpec(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, s);
  ApiServerSpec plain;
  plain.config.model.model = "m";
  plain.frontend.served_model_names = {"m"};
  back = DecodeApiServerSpec(*EncodeApiServerSpec(plain));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, plain);
  EXPECT_TRUE(back->frontend.http.api_keys.empty());
}

TEST(ApiServerSpecTest, EveryTruncationIsAnErrorNotACrash) {
  const std::string bytes = *EncodeApiServerSpec(Everything());
  for (size_t n = 0; n < bytes.size(); ++n) {
    absl::StatusOr<ApiServerSpec> s = DecodeApiServerSpec(bytes.substr(0, n));
    ASSERT_FALSE(s.ok()) << n;
    EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << n << ": " << s.status();
  }
}

TEST(ApiServerSpecTest, OutOfRangeFieldsAreNamed) {
  ApiServerSpec s = Everything();
  s.index = 3;  // not below count
  EXPECT_THAT(std::string(DecodeApiServerSpec(*EncodeApiServerSpec(s)).status().message()),
              HasSubstr("index"));
  s = Everything();
  s.frontend.served_model_names.clear();
  EXPECT_THAT(std::string(DecodeApiServerSpec(*EncodeApiServerSpec(s)).status().message()),
              HasSubstr("served_model_names"));
  s = Everything();
  s.coordinator.report_key.clear();  // udp:// reports need their key
  EXPECT_THAT(std::string(DecodeApiServerSpec(*EncodeApiServerSpec(s)).status().message()),
              HasSubstr("report_key"));
  s = Everything();
  s.config.parallel.tensor_parallel_size = 0;  // does not validate
  EXPECT_THAT(std::string(DecodeApiServerSpec(*EncodeApiServerSpec(s)).status().message()),
              HasSubstr("vllm_config"));
  s = Everything();
  s.frontend.chat_template = std::string(kMaxChatTemplateBytes + 1, 'x');  // never cut
  EXPECT_THAT(std::string(EncodeApiServerSpec(s).status().message()), HasSubstr("chat_template"));
  EXPECT_FALSE(DecodeApiServerSpec(EncodeDpCoordinatorSpec({})).ok());  // another tag
}

TEST(ApiServerSpecTest, ControlMessagesRoundTrip) {
  const ApiServerMessage messages[] = {
      {ApiServerMessage::Kind::kHandshake, "ipc:///tmp/x", 0},
      {ApiServerMessage::Kind::kReady, "", 8000},
      {ApiServerMessage::Kind::kEngineDead, "the engine core of rank 1 was killed", 1},
  };
  for (const ApiServerMessage& m : messages) {
    const std::string bytes = EncodeApiServerMessage(m);
    absl::StatusOr<ApiServerMessage> back = DecodeApiServerMessage(bytes);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, m);
    for (size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_TRUE(absl::IsInvalidArgument(DecodeApiServerMessage(bytes.substr(0, n)).status()));
    }
  }
  EXPECT_FALSE(
      DecodeApiServerMessage(EncodeApiServerMessage({ApiServerMessage::Kind::kReady, "", 0}))
          .ok());  // no port 0
}

TEST(CoordinatorSpecTest, RoundTripsAndTruncations) {
  DpCoordinatorSpec spec{.num_engines = 8,
                         .api_servers = 3,
                         .tcp_host = "10.0.0.1",
                         .waves = true,
                         .cluster_key_file = "/etc/key"};
  std::string bytes = EncodeDpCoordinatorSpec(spec);
  absl::StatusOr<DpCoordinatorSpec> back = DecodeDpCoordinatorSpec(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, spec);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_TRUE(absl::IsInvalidArgument(DecodeDpCoordinatorSpec(bytes.substr(0, n)).status()));
  }
  spec.num_engines = 0;
  EXPECT_THAT(
      std::string(DecodeDpCoordinatorSpec(EncodeDpCoordinatorSpec(spec)).status().message()),
      HasSubstr("num_engines"));

  DpCoordinatorAddresses a{"ipc:///tmp/s", "ipc:///tmp/p", "", ""};
  bytes = EncodeDpCoordinatorAddresses(a);
  absl::StatusOr<DpCoordinatorAddresses> a_back = DecodeDpCoordinatorAddresses(bytes);
  ASSERT_TRUE(a_back.ok()) << a_back.status();
  EXPECT_EQ(*a_back, a);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_TRUE(absl::IsInvalidArgument(DecodeDpCoordinatorAddresses(bytes.substr(0, n)).status()));
  }
  a = {"udp://10.0.0.1:9", "tcp://10.0.0.1:8", "tcp://10.0.0.1:7", std::string(32, 'k')};
  a_back = DecodeDpCoordinatorAddresses(EncodeDpCoordinatorAddresses(a));
  ASSERT_TRUE(a_back.ok()) << a_back.status();
  EXPECT_EQ(*a_back, a);
  a.report_key.clear();
  EXPECT_FALSE(DecodeDpCoordinatorAddresses(EncodeDpCoordinatorAddresses(a)).ok());
}

TEST(FramesTest, FramesCrossASocketWhole) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  const std::string big(kMaxFrameBytes, 'b');
  ASSERT_TRUE(WriteFrame(pair[0], "one"));
  ASSERT_TRUE(WriteFrame(pair[0], ""));
  EXPECT_FALSE(WriteFrame(pair[0], big + "!"));  // over the limit: nothing written
  // Exactly one frame, not a byte more: the next reader sees the rest.
  absl::StatusOr<std::string> first = ReadOneFrame(pair[1], absl::Seconds(30));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, "one");
  FrameReader reader(pair[1]);
  std::vector<std::string> got;
  std::thread writer([&] { ASSERT_TRUE(WriteFrame(pair[0], big)); });
  while (got.size() < 2) {
    std::optional<std::vector<std::string>> frames = reader.Read();
    ASSERT_TRUE(frames.has_value());
    got.insert(got.end(), frames->begin(), frames->end());
  }
  writer.join();
  EXPECT_EQ(got[0], "");
  EXPECT_EQ(got[1], big);
  close(pair[0]);
  EXPECT_FALSE(reader.Read().has_value());  // EOF
  EXPECT_TRUE(absl::IsUnavailable(ReadOneFrame(pair[1], absl::Seconds(30)).status()));
  close(pair[1]);
}

TEST(FramesTest, AnOversizedLengthIsRefused) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  const char header[4] = {'\x7f', '\x7f', '\x7f', '\x7f'};
  ASSERT_EQ(write(pair[0], header, 4), 4);
  EXPECT_TRUE(absl::IsInvalidArgument(ReadOneFrame(pair[1], absl::Seconds(30)).status()));
  ASSERT_EQ(write(pair[0], header, 4), 4);
  FrameReader reader(pair[1]);
  EXPECT_FALSE(reader.Read().has_value());
  close(pair[0]);
  close(pair[1]);
}

}  // namespace
}  // namespace vllm::launcher
