// EngineCoreClient against a scripted engine speaking the protocol of core/engine_core_proc.h
// over real ZMQ sockets. Regression (hardening issue, defect 3): an outputs frame the client
// cannot decode used to be dropped silently, so its requests waited forever; now it comes
// back from GetOutputs with the error and the request ids that could still be read.
#include "frontend/engine_core_client.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "core/codec.h"
#include "core/engine_core_proc.h"
#include "gtest/gtest.h"
#include "ipc/wait_strategy.h"
#include "ipc/zmq_util.h"
#include "msgpack.hpp"

namespace vllm::frontend {
namespace {

zmq::message_t Msg(std::string_view s) { return zmq::message_t(s.data(), s.size()); }

std::string Pack(const auto& value) {
  msgpack::sbuffer b;
  msgpack::pack(b, value);
  return std::string(b.data(), b.size());
}

// The engine side of the handshake, then a PUSH socket to the client's output address.
class ScriptedEngine {
 public:
  explicit ScriptedEngine(const std::string& handshake_address)
      : handshake_(ipc::ZmqContext(), zmq::socket_type::dealer),
        input_(ipc::ZmqContext(), zmq::socket_type::dealer),
        output_(ipc::ZmqContext(), zmq::socket_type::push) {
    for (zmq::socket_t* s : {&handshake_, &input_, &output_}) s->set(zmq::sockopt::linger, 0);
    handshake_.connect(handshake_address);
  }

  // HELLO → CONFIG → REGISTER on the input socket → READY. Returns false on any problem.
  bool Handshake() {
    const int64_t deadline = ipc::MonoNowNs() + 10'000'000'000;
    std::vector<zmq::message_t> parts;
    parts.push_back(Msg("HELLO"));
    parts.push_back(Msg(Pack(std::vector<int32_t>{0})));
    if (!ipc::SendMultipart(handshake_, parts, deadline, absl::Milliseconds(10), nullptr, "HELLO")
             .ok()) {
      return false;
    }
    if (!ipc::RecvMultipart(handshake_, parts, 2, deadline, absl::Milliseconds(10), nullptr,
                            "CONFIG")
             .ok() ||
        parts.size() != 2) {
      return false;
    }
    msgpack::object_handle oh = msgpack::unpack(parts[1].data<char>(), parts[1].size());
    const auto addresses = oh.get().as<std::vector<std::string>>();
    input_.set(zmq::sockopt::routing_id, "engine-0");
    input_.connect(addresses.at(0));
    output_.connect(addresses.at(1));
    parts.clear();
    parts.push_back(Msg("REGISTER"));
    if (!ipc::SendMultipart(input_, parts, deadline, absl::Milliseconds(10), nullptr, "REGISTER")
             .ok()) {
      return false;
    }
    parts.clear();
    parts.push_back(Msg("READY"));
    parts.push_back(Msg(Pack(std::vector<int32_t>{0, 100, 64})));
    return ipc::SendMultipart(handshake_, parts, deadline, absl::Milliseconds(10), nullptr, "READY")
        .ok();
  }

  void SendOutput(char kind, const std::string& payload) {
    std::vector<zmq::message_t> parts;
    parts.push_back(Msg(std::string_view(&kind, 1)));
    parts.push_back(Msg(payload));
    ASSERT_TRUE(ipc::SendMultipart(output_, parts, ipc::MonoNowNs() + 5'000'000'000,
                                   absl::Milliseconds(10), nullptr, "output")
                    .ok());
  }

 private:
  zmq::socket_t handshake_, input_, output_;
};

// An EngineCoreOutputs frame whose second output ("b") has an invalid finish reason, so the
// strict decoder refuses the whole frame while "a" and "b" can still be read.
std::string FrameWithOneBadOutput() {
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> pk(b);
  pk.pack_array(3);
  pk.pack(static_cast<uint32_t>(core::WireTag::kEngineCoreOutputs));
  pk.pack(core::kWireVersion);
  pk.pack_array(7);
  pk.pack(0);        // engine_index
  pk.pack_array(2);  // outputs
  for (const char* id : {"a", "b"}) {
    pk.pack_array(6);
    pk.pack(std::string(id));
    pk.pack(std::vector<int32_t>{5});
    if (std::string(id) == "b") {
      pk.pack(99);  // no such FinishReason
    } else {
      pk.pack_nil();
    }
    pk.pack_nil();
    pk.pack(0);
    pk.pack_array(0);
  }
  pk.pack_nil();     // scheduler_stats
  pk.pack(1.5);      // timestamp
  pk.pack_array(0);  // finished_requests
  pk.pack_nil();
  pk.pack_nil();
  return std::string(b.data(), b.size());
}

TEST(EngineCoreClientTest, UndecodableOutputsAreReportedNotDropped) {
  auto client = EngineCoreClient::Create(1);
  ASSERT_TRUE(client.ok()) << client.status();
  ScriptedEngine engine((*client)->handshake_address());
  bool handshake_ok = false;
  std::thread engine_side([&] { handshake_ok = engine.Handshake(); });
  absl::Status ready =
      (*client)->WaitForEngines(absl::Now() + absl::Seconds(10), [] { return absl::OkStatus(); });
  engine_side.join();
  ASSERT_TRUE(handshake_ok);
  ASSERT_TRUE(ready.ok()) << ready;

  core::EngineCoreOutputs good;
  good.outputs.emplace_back().request_id = "ok";
  good.outputs.back().new_token_ids = {7};
  ASSERT_NO_FATAL_FAILURE(engine.SendOutput(core::kOutputKindOutputs, core::Encode(good)));
  ASSERT_NO_FATAL_FAILURE(engine.SendOutput(core::kOutputKindOutputs, FrameWithOneBadOutput()));
  ASSERT_NO_FATAL_FAILURE(engine.SendOutput(core::kOutputKindOutputs, "\xc1 not msgpack"));
  ASSERT_NO_FATAL_FAILURE(engine.SendOutput(core::kOutputKindOutputs, core::Encode(good)));

  auto first = (*client)->GetOutputs(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->decode_error.ok());
  ASSERT_EQ(first->outputs.outputs.size(), 1u);
  EXPECT_EQ(first->outputs.outputs[0].request_id, "ok");

  auto damaged = (*client)->GetOutputs(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(damaged.ok()) << damaged.status();
  EXPECT_TRUE(absl::IsInternal(damaged->decode_error)) << damaged->decode_error;
  EXPECT_NE(damaged->decode_error.message().find("could not be decoded"), std::string::npos);
  EXPECT_EQ(damaged->failed_request_ids, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(damaged->outputs.outputs.empty());

  auto garbage = (*client)->GetOutputs(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(garbage.ok()) << garbage.status();
  EXPECT_FALSE(garbage->decode_error.ok());
  EXPECT_TRUE(garbage->failed_request_ids.empty());  // every request in flight is affected

  // The engine stays usable: later frames arrive, and the client has not failed.
  auto after = (*client)->GetOutputs(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(after->decode_error.ok());
  EXPECT_TRUE((*client)->failure().ok());
}

TEST(EngineCoreClientTest, RecoverOutputRequestIdsIsBounded) {
  EXPECT_TRUE(core::RecoverOutputRequestIds("").empty());
  EXPECT_TRUE(core::RecoverOutputRequestIds("\x93\x03\x01").empty());  // truncated
  EXPECT_EQ(core::RecoverOutputRequestIds(FrameWithOneBadOutput()),
            (std::vector<std::string>{"a", "b"}));
  core::DecodeLimits tiny;
  tiny.max_message_bytes = 4;
  EXPECT_TRUE(core::RecoverOutputRequestIds(FrameWithOneBadOutput(), tiny).empty());
}

}  // namespace
}  // namespace vllm::frontend
