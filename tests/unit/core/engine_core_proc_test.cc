// EngineCoreProc in this process (its input, main-loop and output threads over real ZMQ
// sockets) with a scripted executor, driven by the frontend's EngineCoreClient; and its
// DpEngineCoreProc against a stand-in DP coordinator (a PULL for the load reports, a PUB for
// the waves). Also run under TSan (label tsan-unit). The process-level tests (model, signals,
// executor failure) are tests/integration/engine/engine_core_proc_test.cc.
#include "core/engine_core_proc.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/time/clock.h"
#include "core/dp_coordinator.h"
#include "core/dp_engine_core_proc.h"
#include "core_test_util.h"
#include "frontend/engine/engine_core_client.h"
#include "gtest/gtest.h"
#include "ipc/ipc_address.h"
#include "ipc/zmq_util.h"
#include "msgpack.hpp"

namespace vllm::core {
namespace {

using testing::MakeRequest;
using testing::ScriptedExecutor;

// The scripted executor with vLLM's dummy batch, counted (read by the test thread).
class LockstepExecutor : public ScriptedExecutor {
 public:
  explicit LockstepExecutor(std::shared_ptr<std::atomic<int64_t>> dummy_steps)
      : ScriptedExecutor(Options{}), dummy_steps_(std::move(dummy_steps)) {}
  absl::Status ExecuteDummyBatch() override {
    dummy_steps_->fetch_add(1);
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<std::atomic<int64_t>> dummy_steps_;
};

class EngineCoreProcTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (proc_ != nullptr) proc_->Stop();
    if (engine_thread_.joinable()) engine_thread_.join();
    EXPECT_TRUE(run_status_.ok()) << run_status_;
  }

  // Starts the client (with `client_options`) and an engine that joins it; waits for READY.
  void Start(frontend::EngineCoreClientOptions client_options = {}) {
    auto client = frontend::EngineCoreClient::Create(client_options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    EngineCoreProcOptions options;
    options.handshake_address = client_->handshake_address();
    options.heartbeat_interval = absl::Milliseconds(100);
    options.make_engine = [dummy = dummy_steps_]() {
      config::VllmConfig config = testing::MakeTestConfig();
      config.scheduler.max_num_seqs = 8;
      config.scheduler.max_num_batched_tokens = 64;
      config.model.max_model_len = 128;
      config.cache.block_size = 4;
      return EngineCore::Create(config, EngineCoreOptions{},
                                std::make_unique<LockstepExecutor>(dummy));
    };
    proc_ = std::make_unique<EngineCoreProc>(std::move(options));
    engine_thread_ = std::thread([this] { run_status_ = proc_->Run(); });
    absl::Status ready =
        client_->WaitForEngines(absl::Now() + absl::Seconds(30), [] { return absl::OkStatus(); });
    ASSERT_TRUE(ready.ok()) << ready;
  }

  // Every output of `id` until it finished: its tokens.
  std::vector<int32_t> Collect(const std::string& id) {
    std::vector<int32_t> tokens;
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      auto got = client_->GetOutputs(deadline);
      if (!got.ok()) {
        ADD_FAILURE() << got.status();
        break;
      }
      for (const EngineCoreOutput& o : got->outputs.outputs) {
        if (o.request_id != id) continue;
        tokens.insert(tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        if (o.finished()) return tokens;
      }
    }
    ADD_FAILURE() << id << " did not finish";
    return tokens;
  }

  std::shared_ptr<std::atomic<int64_t>> dummy_steps_ = std::make_shared<std::atomic<int64_t>>(0);
  std::unique_ptr<frontend::EngineCoreClient> client_;
  std::unique_ptr<EngineCoreProc> proc_;
  std::thread engine_thread_;
  absl::Status run_status_;
};

TEST_F(EngineCoreProcTest, ServesRequestsAndUtilityCalls) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_TRUE(client_->AddRequest(MakeRequest("a", 9, 5)).ok());
  std::vector<int32_t> tokens = Collect("a");
  ASSERT_EQ(tokens.size(), 5u);
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(tokens[i], testing::ScriptedToken("a", 9 + static_cast<int32_t>(i)));
  }
  auto pong = client_->CallUtility("ping", absl::Seconds(10));
  ASSERT_TRUE(pong.ok()) << pong.status();
  auto reset = client_->CallUtility("reset_prefix_cache", absl::Seconds(10));
  ASSERT_TRUE(reset.ok()) << reset.status();
  // The result: msgpack [bool] (the cache was reset).
  EXPECT_EQ(msgpack::unpack(reset->data(), reset->size()).get().as<std::tuple<bool>>(),
            std::make_tuple(true));
  EXPECT_EQ(dummy_steps_->load(), 0);  // no coordinator: never a dummy step
}

// The stand-in coordinator: reports arrive on its PULL; waves go out on its PUB.
TEST_F(EngineCoreProcTest, DpEngineReportsLoadAndStepsThroughWaves) {
  auto stats_address = ipc::ScopedIpcAddress::Create("dp-stats");
  auto waves_address = ipc::ScopedIpcAddress::Create("dp-waves");
  ASSERT_TRUE(stats_address.ok() && waves_address.ok());
  const std::string stats = stats_address->address(), waves = waves_address->address();
  zmq::socket_t pull(ipc::ZmqContext(), zmq::socket_type::pull);
  zmq::socket_t pub(ipc::ZmqContext(), zmq::socket_type::pub);
  for (zmq::socket_t* s : {&pull, &pub}) s->set(zmq::sockopt::linger, 0);
  pull.set(zmq::sockopt::rcvtimeo, 10000);
  pull.bind(stats);
  pub.bind(waves);
  frontend::EngineCoreClientOptions options;
  options.coordinator_stats = stats;
  options.coordinator_waves = waves;
  ASSERT_NO_FATAL_FAILURE(Start(options));

  // The first report proves the connection: an idle engine.
  zmq::message_t msg;
  ASSERT_TRUE(pull.recv(msg));
  auto report = DecodeLoadReport(msg.to_string_view());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->engine_index, 0);
  EXPECT_EQ(report->waiting + report->running, 0);

  // A wave runs (another engine has work): this idle engine runs dummy steps. The SUB may
  // join late, so the wave is sent until they start.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (dummy_steps_->load() == 0 && absl::Now() < deadline) {
    pub.send(zmq::buffer(EncodeDpWave({0, true, 1})));
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_GT(dummy_steps_->load(), 0);

  // The wave completes: the dummy steps stop.
  pub.send(zmq::buffer(EncodeDpWave({0, false, -1})));
  int64_t settled = -1;
  for (int i = 0; i < 200 && settled != dummy_steps_->load(); ++i) {
    settled = dummy_steps_->load();
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(settled, dummy_steps_->load());

  // Work of its own: served, and reported busy at once.
  ASSERT_TRUE(client_->AddRequest(MakeRequest("b", 6, 3)).ok());
  bool busy = false;
  while (!busy && pull.recv(msg)) {
    auto r = DecodeLoadReport(msg.to_string_view());
    ASSERT_TRUE(r.ok()) << r.status();
    busy = r->waiting + r->running > 0;
  }
  EXPECT_TRUE(busy);
  EXPECT_EQ(Collect("b").size(), 3u);
}

}  // namespace
}  // namespace vllm::core
