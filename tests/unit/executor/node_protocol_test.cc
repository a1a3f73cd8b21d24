// The head <-> worker node frames (executor/node_protocol.h): every kind round-trips, every
// bound the header states is enforced at its limit and one past it (InvalidArgument naming the
// message and field), another version is FailedPrecondition, and unknown kinds, truncated
// frames, non-arrays, trailing bytes and oversized frames are refused.
#include "executor/node_protocol.h"

#include <cstdint>
#include <msgpack.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "config/config_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vllm::executor {
namespace {

using ::testing::HasSubstr;

// A frame packed by hand: a msgpack array of `fields` (std::string packs as str,
// std::vector<char> as bin, std::vector<std::string> as an array of str).
template <typename... Fields>
std::string Pack(const Fields&... fields) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(sizeof...(fields));
  (pk.pack(fields), ...);
  return std::string(buffer.data(), buffer.size());
}

NodeHello Hello() {
  NodeHello m;
  m.node_rank = 1;
  m.nnodes = 2;
  m.tensor_parallel_size = 4;
  m.pipeline_parallel_size = 2;
  m.data_parallel_size = 1;
  m.model = "/models/kjv-llama-tiny";
  m.node_address = "10.0.0.2";
  m.pid = 4242;
  return m;
}

NodeConfig Config() {
  NodeConfig m;
  m.engine_config = std::string("\x93\x01\xc0\x00", 4);  // bytes, NUL included
  m.broadcast_handle = "mq:4:0,1:vllm-mq-1:10:1048576";
  m.ready_address = "tcp://10.0.0.1:41005";
  m.comm_specs = {"", "tp-group-1"};
  m.startup_timeout_ms = 600'000;
  m.heartbeat_interval_ms = 1'000;
  m.heartbeat_timeout_ms = 10'000;
  return m;
}

std::vector<NodeMessage> Samples() {
  return {Hello(),
          Config(),
          NodeReject{"--nnodes", "--nnodes 3 on node 1 but 2 on the head"},
          NodeHeartbeat{},
          NodeWorkerExited{5, "killed by signal 9"},
          NodeStop{"engine core failed"}};
}

absl::Status Decode(std::string_view bytes) { return DecodeNodeMessage(bytes).status(); }

void ExpectInvalid(std::string_view bytes, std::string_view needle) {
  const absl::Status s = Decode(bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr(needle)) << s;
}

TEST(NodeProtocolTest, KindNames) {
  const std::vector<NodeMessage> samples = Samples();
  const std::vector<std::string_view> kinds = {"hello",     "config",        "reject",
                                               "heartbeat", "worker_exited", "stop"};
  ASSERT_EQ(samples.size(), kinds.size());
  for (size_t i = 0; i < samples.size(); ++i) EXPECT_EQ(NodeMessageKind(samples[i]), kinds[i]);
}

TEST(NodeProtocolTest, EveryKindRoundTrips) {
  for (const NodeMessage& m : Samples()) {
    const std::string bytes = EncodeNodeMessage(m);
    absl::StatusOr<NodeMessage> decoded = DecodeNodeMessage(bytes);
    ASSERT_TRUE(decoded.ok()) << NodeMessageKind(m) << ": " << decoded.status();
    EXPECT_EQ(*decoded, m) << NodeMessageKind(m);
    EXPECT_EQ(EncodeNodeMessage(*decoded), bytes) << NodeMessageKind(m);
  }
}

TEST(NodeProtocolTest, WireFormIsKindVersionThenFieldsInStructOrder) {
  EXPECT_EQ(EncodeNodeMessage(NodeHeartbeat{}), Pack(std::string("heartbeat"), 1u));
  EXPECT_EQ(EncodeNodeMessage(NodeWorkerExited{3, "exited with status 1"}),
            Pack(std::string("worker_exited"), 1u, 3, std::string("exited with status 1")));
  // The engine config goes as bin.
  const NodeConfig c = Config();
  EXPECT_EQ(EncodeNodeMessage(c),
            Pack(std::string("config"), 1u,
                 std::vector<char>(c.engine_config.begin(), c.engine_config.end()),
                 c.broadcast_handle, c.ready_address, c.comm_specs, c.startup_timeout_ms,
                 c.heartbeat_interval_ms, c.heartbeat_timeout_ms));
}

TEST(NodeProtocolTest, CarriesARealEngineConfig) {
  config::VllmConfig vc;
  vc.model.model = "/models/kjv-llama-tiny";
  vc.parallel.tensor_parallel_size = 2;
  NodeConfig m = Config();
  m.engine_config = config::EncodeVllmConfig(vc);
  absl::StatusOr<NodeMessage> decoded = DecodeNodeMessage(EncodeNodeMessage(m));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  absl::StatusOr<config::VllmConfig> again =
      config::DecodeVllmConfig(std::get<NodeConfig>(*decoded).engine_config);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->model.model, vc.model.model);
  EXPECT_EQ(again->parallel.tensor_parallel_size, 2);
}

TEST(NodeProtocolTest, ValuesAtTheirLimitsRoundTrip) {
  NodeHello hello = Hello();
  hello.node_rank = 1023;
  hello.nnodes = 1024;
  hello.model = std::string(kMaxNodeTextBytes, 'm');
  hello.node_address = std::string(kMaxNodeAddressBytes, 'a');
  hello.pid = INT64_MAX;
  NodeConfig config = Config();
  config.engine_config = std::string(config::kMaxEncodedConfigBytes, '\xff');
  config.broadcast_handle = std::string(kMaxNodeTextBytes, 'h');
  config.ready_address = std::string(kMaxNodeTextBytes, 'r');
  config.comm_specs.assign(kMaxNodeCommSpecs, "spec");
  config.comm_specs[0] = std::string(kMaxNodeTextBytes, 's');
  config.startup_timeout_ms = 86'400'000;
  config.heartbeat_interval_ms = 1;
  config.heartbeat_timeout_ms = 86'400'000;
  const std::vector<NodeMessage> messages = {
      hello,
      config,
      NodeReject{std::string(kMaxNodeAddressBytes, 'f'), std::string(kMaxNodeTextBytes, 'x')},
      NodeReject{"", ""},
      NodeWorkerExited{65535, std::string(kMaxNodeTextBytes, 'w')},
      NodeWorkerExited{0, ""},
      NodeStop{std::string(kMaxNodeTextBytes, 's')}};
  for (const NodeMessage& m : messages) {
    absl::StatusOr<NodeMessage> decoded = DecodeNodeMessage(EncodeNodeMessage(m));
    ASSERT_TRUE(decoded.ok()) << NodeMessageKind(m) << ": " << decoded.status();
    EXPECT_EQ(*decoded, m) << NodeMessageKind(m);
  }
}

struct BadCase {
  NodeMessage message;
  std::string_view field;  // what the error must name
};

TEST(NodeProtocolTest, EachBoundIsRefusedOnePastIt) {
  std::vector<BadCase> cases;
  auto hello = [&](auto mutate, std::string_view field) {
    NodeHello m = Hello();
    mutate(m);
    cases.push_back({m, field});
  };
  hello([](NodeHello& m) { m.node_rank = 0; }, "NodeHello.node_rank");
  hello([](NodeHello& m) { m.node_rank = 1024; }, "NodeHello.node_rank");
  hello([](NodeHello& m) { m.nnodes = 0; }, "NodeHello.nnodes");
  hello([](NodeHello& m) { m.nnodes = 1025; }, "NodeHello.nnodes");
  hello([](NodeHello& m) { m.model.assign(kMaxNodeTextBytes + 1, 'm'); }, "NodeHello.model");
  hello([](NodeHello& m) { m.node_address.clear(); }, "NodeHello.node_address");
  hello([](NodeHello& m) { m.node_address.assign(kMaxNodeAddressBytes + 1, 'a'); },
        "NodeHello.node_address");
  hello([](NodeHello& m) { m.pid = 0; }, "NodeHello.pid");
  auto config = [&](auto mutate, std::string_view field) {
    NodeConfig m = Config();
    mutate(m);
    cases.push_back({m, field});
  };
  config([](NodeConfig& m) { m.engine_config.assign(config::kMaxEncodedConfigBytes + 1, 'c'); },
         "NodeConfig.engine_config");
  config([](NodeConfig& m) { m.broadcast_handle.clear(); }, "NodeConfig.broadcast_handle");
  config([](NodeConfig& m) { m.broadcast_handle.assign(kMaxNodeTextBytes + 1, 'h'); },
         "NodeConfig.broadcast_handle");
  config([](NodeConfig& m) { m.ready_address.clear(); }, "NodeConfig.ready_address");
  config([](NodeConfig& m) { m.ready_address.assign(kMaxNodeTextBytes + 1, 'r'); },
         "NodeConfig.ready_address");
  config([](NodeConfig& m) { m.comm_specs.clear(); }, "NodeConfig.comm_specs");
  config([](NodeConfig& m) { m.comm_specs.assign(kMaxNodeCommSpecs + 1, ""); },
         "NodeConfig.comm_specs");
  config([](NodeConfig& m) { m.comm_specs[1].assign(kMaxNodeTextBytes + 1, 's'); },
         "NodeConfig.comm_specs");
  config([](NodeConfig& m) { m.startup_timeout_ms = 0; }, "NodeConfig.startup_timeout_ms");
  config([](NodeConfig& m) { m.startup_timeout_ms = 86'400'001; }, "NodeConfig.startup_timeout_ms");
  config([](NodeConfig& m) { m.heartbeat_interval_ms = 0; }, "NodeConfig.heartbeat_interval_ms");
  config([](NodeConfig& m) { m.heartbeat_interval_ms = 86'400'001; },
         "NodeConfig.heartbeat_interval_ms");
  config([](NodeConfig& m) { m.heartbeat_timeout_ms = -1; }, "NodeConfig.heartbeat_timeout_ms");
  config([](NodeConfig& m) { m.heartbeat_timeout_ms = 86'400'001; },
         "NodeConfig.heartbeat_timeout_ms");
  cases.push_back({NodeReject{std::string(kMaxNodeAddressBytes + 1, 'f'), ""}, "NodeReject.flag"});
  cases.push_back({NodeWorkerExited{-1, ""}, "NodeWorkerExited.rank"});
  cases.push_back({NodeWorkerExited{65536, ""}, "NodeWorkerExited.rank"});
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.field);
    ExpectInvalid(EncodeNodeMessage(c.message), c.field);
  }
}

// The encoder cuts the free text fields, so frames over their limits are packed by hand.
TEST(NodeProtocolTest, OverlongFreeTextIsRefused) {
  const std::string text(kMaxNodeTextBytes + 1, 't');
  ExpectInvalid(Pack(std::string("reject"), 1u, std::string("--nnodes"), text),
                "NodeReject.message");
  ExpectInvalid(Pack(std::string("worker_exited"), 1u, 2, text), "NodeWorkerExited.how");
  ExpectInvalid(Pack(std::string("stop"), 1u, text), "NodeStop.reason");
}

TEST(NodeProtocolTest, EncoderCutsFreeTextAtACharacterBoundary) {
  // 4095 ASCII bytes then "é" (2 bytes): the cut at 4096 would split it, so it goes whole.
  const std::string reason = std::string(kMaxNodeTextBytes - 1, 'a') + "\xc3\xa9 and more";
  absl::StatusOr<NodeMessage> stop = DecodeNodeMessage(EncodeNodeMessage(NodeStop{reason}));
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_EQ(std::get<NodeStop>(*stop).reason, std::string(kMaxNodeTextBytes - 1, 'a'));
  const std::string how(kMaxNodeTextBytes + 100, 'h');
  absl::StatusOr<NodeMessage> exited =
      DecodeNodeMessage(EncodeNodeMessage(NodeWorkerExited{1, how}));
  ASSERT_TRUE(exited.ok()) << exited.status();
  EXPECT_EQ(std::get<NodeWorkerExited>(*exited).how, how.substr(0, kMaxNodeTextBytes));
  absl::StatusOr<NodeMessage> reject =
      DecodeNodeMessage(EncodeNodeMessage(NodeReject{"--model", how}));
  ASSERT_TRUE(reject.ok()) << reject.status();
  EXPECT_EQ(std::get<NodeReject>(*reject).message, how.substr(0, kMaxNodeTextBytes));
}

TEST(NodeProtocolTest, AnotherVersionIsFailedPrecondition) {
  const absl::Status s = Decode(Pack(std::string("heartbeat"), 2u));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(s.message(),
            "node protocol version 2, this vllm-launch speaks 1: run the same build on every node");
  // Refused by version before its kind or fields are looked at.
  EXPECT_EQ(Decode(Pack(std::string("hello"), 0u)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Decode(Pack(std::string("join"), 7u, 1, 2, 3)).code(),
            absl::StatusCode::kFailedPrecondition);
  ExpectInvalid(Pack(std::string("heartbeat"), -1), "node frame.version");
  ExpectInvalid(Pack(std::string("heartbeat"), std::string("1")), "node frame.version");
}

TEST(NodeProtocolTest, UnknownOrMistypedKindIsRefused) {
  ExpectInvalid(Pack(std::string("join"), 1u), "unknown kind");
  ExpectInvalid(Pack(std::string("Hello"), 1u), "node frame.kind");
  ExpectInvalid(Pack(std::string(""), 1u), "node frame.kind");
  ExpectInvalid(Pack(std::string(100, 'k'), 1u), "node frame.kind");
  ExpectInvalid(Pack(0, 1u), "node frame.kind");
}

TEST(NodeProtocolTest, WrongNumberOrTypeOfFieldsIsRefused) {
  ExpectInvalid(Pack(std::string("heartbeat"), 1u, 0), "NodeHeartbeat");
  ExpectInvalid(Pack(std::string("stop"), 1u), "NodeStop");
  ExpectInvalid(Pack(std::string("worker_exited"), 1u, 1, std::string("x"), std::string("y")),
                "NodeWorkerExited");
  ExpectInvalid(Pack(std::string("worker_exited"), 1u, std::string("1"), std::string("x")),
                "NodeWorkerExited.rank");
  ExpectInvalid(Pack(std::string("stop"), 1u, std::vector<char>{'x'}), "NodeStop.reason");
  // The engine config is bin; a str is refused.
  const NodeConfig c = Config();
  ExpectInvalid(
      Pack(std::string("config"), 1u, c.engine_config, c.broadcast_handle, c.ready_address,
           c.comm_specs, c.startup_timeout_ms, c.heartbeat_interval_ms, c.heartbeat_timeout_ms),
      "NodeConfig.engine_config");
  ExpectInvalid(Pack(std::string("config"), 1u,
                     std::vector<char>(c.engine_config.begin(), c.engine_config.end()),
                     c.broadcast_handle, c.ready_address, std::vector<int>{1, 2},
                     c.startup_timeout_ms, c.heartbeat_interval_ms, c.heartbeat_timeout_ms),
                "NodeConfig.comm_specs");
  ExpectInvalid(Pack(std::string("config"), 1u,
                     std::vector<char>(c.engine_config.begin(), c.engine_config.end()),
                     c.broadcast_handle, c.ready_address, std::string("not a list"),
                     c.startup_timeout_ms, c.heartbeat_interval_ms, c.heartbeat_timeout_ms),
                "NodeConfig.comm_specs");
}

TEST(NodeProtocolTest, EveryTruncationIsRefused) {
  for (const NodeMessage& m : Samples()) {
    const std::string bytes = EncodeNodeMessage(m);
    for (size_t n = 0; n < bytes.size(); ++n) {
      const absl::Status s = Decode(std::string_view(bytes).substr(0, n));
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
          << NodeMessageKind(m) << " prefix " << n << ": " << s;
    }
  }
}

TEST(NodeProtocolTest, NonArraysAreRefused) {
  msgpack::sbuffer map;
  msgpack::packer<msgpack::sbuffer> pk(map);
  pk.pack_map(1);
  pk.pack(std::string("kind"));
  pk.pack(std::string("hello"));
  for (const std::string& bytes :
       {std::string(map.data(), map.size()), std::string("\xc0", 1) /* nil */,
        std::string("\x01", 1), std::string("\xa5hello", 6), Pack(std::string("stop")), Pack()}) {
    ExpectInvalid(bytes, "node frame");
  }
}

TEST(NodeProtocolTest, TrailingBytesAreRefused) {
  for (const NodeMessage& m : Samples()) {
    ExpectInvalid(EncodeNodeMessage(m) + std::string(1, '\0'), "trailing");
    ExpectInvalid(EncodeNodeMessage(m) + EncodeNodeMessage(NodeHeartbeat{}), "trailing");
  }
}

TEST(NodeProtocolTest, FrameOverTheLimitIsRefused) {
  // Every field within its own limit, the whole over kMaxNodeFrameBytes.
  NodeConfig m = Config();
  m.engine_config.assign(config::kMaxEncodedConfigBytes, 'c');
  m.comm_specs.assign(kMaxNodeCommSpecs, std::string(kMaxNodeTextBytes, 's'));
  const std::string bytes = EncodeNodeMessage(m);
  ASSERT_GT(bytes.size(), kMaxNodeFrameBytes);
  ExpectInvalid(bytes, "exceeds the limit");
  ExpectInvalid(std::string(kMaxNodeFrameBytes + 1, '\x90'), "exceeds the limit");
}

TEST(NodeProtocolTest, NestingIsBounded) {
  // An array inside comm_specs' array: three levels, past the decoder's depth limit.
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(9);
  pk.pack(std::string("config"));
  pk.pack(1u);
  pk.pack(std::vector<char>{'c'});
  pk.pack(std::string("handle"));
  pk.pack(std::string("tcp://10.0.0.1:1"));
  pk.pack_array(1);
  pk.pack(std::vector<std::string>{"x"});
  pk.pack(1);
  pk.pack(1);
  pk.pack(1);
  ExpectInvalid(std::string(buffer.data(), buffer.size()), "node frame");
}

}  // namespace
}  // namespace vllm::executor
