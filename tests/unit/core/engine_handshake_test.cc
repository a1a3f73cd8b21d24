// The handshake frames (core/engine_handshake.h): round trips, and every off-schema frame is
// an InvalidArgument naming the frame — never a crash or a silently wrong value.
#include "core/engine_handshake.h"

#include <string>

#include "core/dp_coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "msgpack.hpp"

namespace vllm::core {
namespace {

using ::testing::HasSubstr;

template <typename T>
std::string Pack(const T& value) {
  msgpack::sbuffer b;
  msgpack::pack(b, value);
  return std::string(b.data(), b.size());
}

TEST(EngineHandshakeTest, RoundTrips) {
  const HelloMessage hello{3, 4, "node-b"};
  EXPECT_EQ(*DecodeHello(EncodeHello(hello)), hello);
  const ReadyMessage ready{3, 682, 1024};
  EXPECT_EQ(*DecodeReady(EncodeReady(ready)), ready);
  const EngineAddresses addresses{"tcp://10.0.0.1:41000", "tcp://10.0.0.1:41001", {}, "", "", ""};
  EXPECT_EQ(*DecodeAddresses(EncodeAddresses(addresses)), addresses);
  // --api-server-count 3: API server 0 names the other two handshake sockets.
  const EngineAddresses with_peers{"ipc:///tmp/a/in",
                                   "ipc:///tmp/a/out",
                                   {"tcp://10.0.0.1:13346", "tcp://10.0.0.1:13347"},
                                   "",
                                   "",
                                   ""};
  EXPECT_EQ(*DecodeAddresses(EncodeAddresses(with_peers)), with_peers);
  // A DP coordinator: its report address and, in lockstep mode, its wave address.
  const EngineAddresses with_coordinator{"tcp://10.0.0.1:41000", "tcp://10.0.0.1:41001", {},
                                         "ipc:///tmp/a/stats",   "tcp://10.0.0.1:41003", ""};
  EXPECT_EQ(*DecodeAddresses(EncodeAddresses(with_coordinator)), with_coordinator);
  // Several nodes: reports as sealed datagrams, with the key that seals them.
  std::string key(kReportKeyBytes, '\0');
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<char>(i * 37 + 200);
  const EngineAddresses with_datagrams{
      "tcp://10.0.0.1:41000", "tcp://10.0.0.1:41001", {}, "udp://10.0.0.1:41002", "", key};
  EXPECT_EQ(*DecodeAddresses(EncodeAddresses(with_datagrams)), with_datagrams);
  // A wave address without a coordinator is off-schema; so is a udp:// report address without
  // a key, or a key with a ZMQ one.
  EXPECT_FALSE(DecodeAddresses(EncodeAddresses({"a", "b", {}, "", "tcp://h:1", ""})).ok());
  EXPECT_FALSE(DecodeAddresses(EncodeAddresses({"a", "b", {}, "udp://h:1", "", ""})).ok());
  EXPECT_FALSE(DecodeAddresses(EncodeAddresses({"a", "b", {}, "ipc:///x", "", key})).ok());
  // A key that is not 64 hex digits.
  EXPECT_FALSE(
      DecodeAddresses(
          Pack(std::make_tuple(std::string("a"), std::string("b"), std::vector<std::string>{},
                               std::string("udp://h:1"), std::string(""), std::string(64, 'g'))))
          .ok());
  EXPECT_FALSE(
      DecodeAddresses(
          Pack(std::make_tuple(std::string("a"), std::string("b"), std::vector<std::string>{},
                               std::string("udp://h:1"), std::string(""), std::string(62, 'a'))))
          .ok());
  EXPECT_EQ(*DecodeHandshakeMessage(EncodeHandshakeMessage("--data-parallel-size 2")),
            "--data-parallel-size 2");
  EXPECT_EQ(*DecodeHeartbeat(EncodeHeartbeat(7)), 7);
}

TEST(EngineHandshakeTest, EncodersBoundWhatTheySend) {
  // A long host name or message is cut, so the peer's bounded decoder still takes it.
  EXPECT_EQ(DecodeHello(EncodeHello({0, 1, std::string(1000, 'h')}))->host.size(), 255u);
  EXPECT_EQ(DecodeHandshakeMessage(EncodeHandshakeMessage(std::string(5000, 'm')))->size(),
            kMaxHandshakeString);
  // More peers than the decoder takes are cut to its limit.
  EngineAddresses many{"a", "b", std::vector<std::string>(200, "tcp://h:1"), "", "", ""};
  EXPECT_EQ(DecodeAddresses(EncodeAddresses(many))->peers.size(), kMaxFrontends - 1);
}

TEST(EngineHandshakeTest, OffSchemaFramesAreRefused) {
  struct Case {
    std::string bytes;
    absl::StatusOr<HelloMessage> (*decode)(std::string_view);
    std::string expect;
  };
  const Case hello_cases[] = {
      {"", DecodeHello, "HELLO"},
      {"\xc1", DecodeHello, "HELLO"},
      {Pack(std::vector<int>{1}), DecodeHello, "array of 3"},  // vLLM-style [index] only
      {Pack(std::make_tuple(-1, 2, std::string("h"))), DecodeHello, "engine_index"},
      {Pack(std::make_tuple(0, 0, std::string("h"))), DecodeHello, "data_parallel_size"},
      {Pack(std::make_tuple(0, 2, 5)), DecodeHello, "host"},
      {Pack(std::make_tuple(0, 2, std::string(256, 'h'))), DecodeHello, "host"},
      {Pack(std::make_tuple(int64_t{1} << 40, 2, std::string("h"))), DecodeHello, "engine_index"},
      {Pack(std::make_tuple(0.5, 2, std::string("h"))), DecodeHello, "engine_index"},
      {Pack(std::make_tuple(0, 2, std::string("h"), 1)), DecodeHello, "array of 3"},
      {Pack(std::map<int, int>{{1, 2}}), DecodeHello, "HELLO"},
  };
  for (const Case& c : hello_cases) {
    absl::StatusOr<HelloMessage> r = c.decode(c.bytes);
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.expect));
  }
  EXPECT_FALSE(DecodeReady(Pack(std::make_tuple(0, 10, 1))).ok());  // max_model_len < 2
  EXPECT_FALSE(DecodeReady(Pack(std::make_tuple(0, -1, 64))).ok());
  EXPECT_FALSE(DecodeAddresses(Pack(std::make_tuple(std::string("a"), std::string("")))).ok());
  EXPECT_FALSE(DecodeAddresses(Pack(std::make_tuple(std::string("a")))).ok());
  EXPECT_FALSE(DecodeAddresses(Pack(std::make_tuple(std::string("a"), std::string("b")))).ok());
  EXPECT_FALSE(DecodeAddresses(
                   Pack(std::make_tuple(std::string("a"), std::string("b"), std::vector<int>{1})))
                   .ok());
  EXPECT_FALSE(DecodeAddresses(Pack(std::make_tuple(std::string("a"), std::string("b"),
                                                    std::vector<std::string>{""})))
                   .ok());
  EXPECT_FALSE(DecodeAddresses(Pack(std::make_tuple(std::string("a"), std::string("b"),
                                                    std::vector<std::string>(64, "p"))))
                   .ok());
  EXPECT_FALSE(
      DecodeAddresses(Pack(std::make_tuple(std::string(2000, 'a'), std::string("b")))).ok());
  EXPECT_FALSE(DecodeHandshakeMessage(Pack(std::vector<std::vector<int>>{{1}})).ok());
  EXPECT_FALSE(DecodeHeartbeat(Pack(-3)).ok());
  EXPECT_FALSE(DecodeHeartbeat(Pack(std::string("7"))).ok());
  // Nesting beyond the frame's depth is refused before any conversion.
  EXPECT_FALSE(
      DecodeHello(Pack(std::vector<std::vector<std::vector<std::vector<int>>>>{{{{1}}}})).ok());
}

}  // namespace
}  // namespace vllm::core
