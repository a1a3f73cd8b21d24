// EngineCoreClient against a scripted engine speaking the protocol of core/engine_core_proc.h
// over real ZMQ sockets. Regression (hardening issue, defect 3): an outputs frame the client
// cannot decode used to be dropped silently, so its requests waited forever; now it comes
// back from GetOutputs with the error and the request ids that could still be read. Also
// AsyncLLM over such an engine: what it sends and what it hands back (kv_transfer_params).
#include "frontend/engine/engine_core_client.h"

#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/codec.h"
#include "core/engine_core_proc.h"
#include "core/engine_handshake.h"
#include "frontend/engine/async_llm.h"
#include "frontend/tokenizer/tokenizer.h"
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
  explicit ScriptedEngine(const std::string& handshake_address, int32_t index = 0,
                          int32_t num_engines = 1)
      : index_(index),
        num_engines_(num_engines),
        handshake_(ipc::ZmqContext(), zmq::socket_type::dealer),
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
    parts.push_back(Msg(core::EncodeHello({index_, num_engines_, "test-host"})));
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
    absl::StatusOr<core::EngineAddresses> addresses =
        core::DecodeAddresses(parts[1].to_string_view());
    if (!addresses.ok()) return false;
    input_.set(zmq::sockopt::routing_id, "engine-" + std::to_string(index_));
    input_.connect(addresses->input);
    output_.connect(addresses->output);
    parts.clear();
    parts.push_back(Msg("REGISTER"));
    if (!ipc::SendMultipart(input_, parts, deadline, absl::Milliseconds(10), nullptr, "REGISTER")
             .ok()) {
      return false;
    }
    parts.clear();
    parts.push_back(Msg("READY"));
    parts.push_back(Msg(Pack(std::vector<int32_t>{index_, 100, 64})));
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

  // The next message from the client: [request type, payload].
  void Receive(char* type, std::string* payload) {
    std::vector<zmq::message_t> parts;
    ASSERT_TRUE(ipc::RecvMultipart(input_, parts, 2, ipc::MonoNowNs() + 5'000'000'000,
                                   absl::Milliseconds(10), nullptr, "request")
                    .ok());
    ASSERT_EQ(parts.size(), 2u);
    ASSERT_EQ(parts[0].size(), 1u);
    *type = *static_cast<const char*>(parts[0].data());
    *payload = parts[1].to_string();
  }

 private:
  const int32_t index_;
  const int32_t num_engines_;
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
    pk.pack_array(10);
    pk.pack(std::string(id));
    pk.pack(std::vector<int32_t>{5});
    if (std::string(id) == "b") {
      pk.pack(99);  // no such FinishReason
    } else {
      pk.pack_nil();
    }
    pk.pack_nil();
    pk.pack(0);        // num_cached_tokens
    pk.pack(0);        // num_cache_creation_tokens
    pk.pack_array(0);  // logprobs
    pk.pack_array(0);  // prompt_logprobs
    pk.pack_nil();     // kv_transfer_params
    pk.pack_array(0);  // events
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

// Data parallelism: requests spread over the engines by their load, and one engine's death
// fails only that engine (an event for its requests) while the other keeps serving.
TEST(EngineCoreClientTest, DataParallelEnginesFailAlone) {
  auto client = EngineCoreClient::Create(2);
  ASSERT_TRUE(client.ok()) << client.status();
  EngineCoreClient& c = **client;
  ScriptedEngine e0(c.handshake_address(), 0, 2), e1(c.handshake_address(), 1, 2);
  bool ok0 = false, ok1 = false;
  std::thread side0([&] { ok0 = e0.Handshake(); });
  std::thread side1([&] { ok1 = e1.Handshake(); });
  absl::Status ready =
      c.WaitForEngines(absl::Now() + absl::Seconds(10), [] { return absl::OkStatus(); });
  side0.join();
  side1.join();
  ASSERT_TRUE(ok0 && ok1);
  ASSERT_TRUE(ready.ok()) << ready;

  // Idle engines: picks alternate (each pick counts until the engine reports figures).
  std::vector<int32_t> picks;
  for (int i = 0; i < 4; ++i) picks.push_back(*c.PickEngine());
  EXPECT_EQ(picks, (std::vector<int32_t>{0, 1, 0, 1}));

  // Engine 0 reports a long queue: the next picks go to engine 1.
  core::EngineCoreOutputs busy;
  busy.engine_index = 0;
  busy.scheduler_stats.emplace();
  busy.scheduler_stats->num_waiting_reqs = 10;
  busy.scheduler_stats->num_running_reqs = 4;
  ASSERT_NO_FATAL_FAILURE(e0.SendOutput(core::kOutputKindOutputs, core::Encode(busy)));
  auto stats = c.GetOutputs(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(*c.PickEngine(), 1);

  // Engine 1 fails: one event names it; engine 0 still takes requests.
  ASSERT_NO_FATAL_FAILURE(
      e1.SendOutput(core::kOutputKindFailed, Pack(std::make_tuple(1, 13, std::string("boom")))));
  auto event = c.GetOutputs(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(event.ok()) << event.status();
  ASSERT_TRUE(event->dead_engine.has_value());
  EXPECT_EQ(*event->dead_engine, 1);
  EXPECT_NE(event->engine_failure.message().find("engine 1 failed: boom"), std::string::npos)
      << event->engine_failure;
  EXPECT_TRUE(c.failure().ok());
  EXPECT_FALSE(c.EngineFailure(1).ok());
  EXPECT_TRUE(c.EngineFailure(0).ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(*c.PickEngine(), 0);
  core::EngineCoreRequest to_dead;
  to_dead.request_id = "x";
  to_dead.prompt_token_ids = {1};
  to_dead.data_parallel_rank = 1;
  EXPECT_TRUE(absl::IsUnavailable(c.AddRequest(to_dead)));
  // A second report of the same death adds nothing.
  c.MarkEngineDead(1, absl::InternalError("exited"));

  // The last engine dies: the client as a whole fails.
  c.MarkEngineDead(0, absl::InternalError("killed by signal 9"));
  auto last = c.GetOutputs(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_TRUE(last->dead_engine.has_value());
  EXPECT_EQ(*last->dead_engine, 0);
  EXPECT_FALSE(c.failure().ok());
  EXPECT_FALSE(c.PickEngine().ok());
  auto after = c.GetOutputs(absl::Now() + absl::Seconds(10));
  EXPECT_TRUE(absl::IsUnavailable(after.status())) << after.status();
}

// Disaggregated prefill/decode through AsyncLLM: a request's kv_transfer_params reach the
// engine in its EngineCoreRequest, the finishing output's come back on the final delta, and
// the connector's prefix-cache counters add up in Stats().
TEST(EngineCoreClientTest, AsyncLlmCarriesKvTransferParams) {
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
  auto tokenizer =
      Tokenizer::Load(std::filesystem::path(VLLM_SOURCE_DIR) / "models" / "kjv-llama-tiny");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  AsyncLLMConfig config;
  config.model_name = "kjv-llama-tiny";
  config.max_model_len = 64;
  config.vocab_size = 4096;
  config.vllm.kv_transfer.kv_connector = "NixlConnector";
  config.vllm.kv_transfer.kv_role = "kv_producer";
  auto llm = AsyncLLM::Create(std::move(*client), std::move(*tokenizer), std::nullopt, config);
  ASSERT_TRUE(llm.ok()) << llm.status();

  GenerateRequest request;
  request.request_id = "cmpl-kv-0";
  request.prompt_token_ids = {5, 6, 7};
  request.params.max_tokens = 1;
  request.kv_transfer_params.emplace().do_remote_decode = true;
  absl::Notification done;
  std::optional<GenerateOutput> last;
  ASSERT_TRUE((*llm)
                  ->Generate(request,
                             [&](absl::StatusOr<GenerateOutput> out) {
                               ASSERT_TRUE(out.ok()) << out.status();
                               if (!out->finished()) return;
                               last = std::move(*out);
                               done.Notify();
                             })
                  .ok());
  char type = 0;
  std::string payload;
  ASSERT_NO_FATAL_FAILURE(engine.Receive(&type, &payload));
  ASSERT_EQ(type, static_cast<char>(core::EngineCoreRequestType::kAdd));
  auto sent = core::DecodeEngineCoreRequest(payload);
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_EQ(sent->kv_transfer_params, request.kv_transfer_params);

  kv_transfer::KVTransferParams answer;
  answer.do_remote_prefill = true;
  answer.remote_engine_id = "prefill-0";
  answer.remote_request_id = "cmpl-kv-0";
  answer.remote_host = "127.0.0.1";
  answer.remote_port = 14579;
  answer.remote_block_ids = {0};
  answer.tp_size = 1;
  core::EngineCoreOutputs outs;
  core::EngineCoreOutput& o = outs.outputs.emplace_back();
  o.request_id = "cmpl-kv-0";
  o.new_token_ids = {9};
  o.finish_reason = core::FinishReason::kLength;
  o.kv_transfer_params = answer;
  core::SchedulerStats& stats = outs.scheduler_stats.emplace();
  stats.connector_prefix_cache_stats.queries = 32;
  stats.connector_prefix_cache_stats.hits = 16;
  ASSERT_NO_FATAL_FAILURE(engine.SendOutput(core::kOutputKindOutputs, core::Encode(outs)));
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->kv_transfer_params, answer);
  const EngineStats totals = (*llm)->Stats();
  EXPECT_EQ(totals.connector_prefix_cache_queries, 32);
  EXPECT_EQ(totals.connector_prefix_cache_hits, 16);
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
