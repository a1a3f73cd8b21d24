// DpCoordinator over real ZMQ sockets (ipc://): engines' reports reach every subscriber in a
// publication, a new subscriber gets the figures at once, publications are rate-limited to
// the interval, bad reports are dropped without harm; and the codec's bounds.
#include "core/dp_coordinator.h"

#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ipc/ipc_address.h"
#include "ipc/zmq_util.h"
#include "msgpack.hpp"

namespace vllm::core {
namespace {

TEST(DpCoordinatorCodecTest, RoundTripsAndBounds) {
  const EngineLoadReport report{3, 7, 12, 0.625};
  EXPECT_EQ(*DecodeLoadReport(EncodeLoadReport(report)), report);
  LoadPublication p;
  p.sequence = 9;
  p.publish_time_ns = 123456789;
  p.engines = {{1, 2, 0.5, true}, {0, 0, 0.0, false}};
  EXPECT_EQ(*DecodeLoadPublication(EncodeLoadPublication(p)), p);

  EXPECT_FALSE(DecodeLoadReport(EncodeLoadReport({-1, 0, 0, 0})).ok());
  EXPECT_FALSE(DecodeLoadReport(EncodeLoadReport({kMaxDpEngines, 0, 0, 0})).ok());
  EXPECT_FALSE(DecodeLoadReport(EncodeLoadReport({0, -2, 0, 0})).ok());
  EXPECT_FALSE(DecodeLoadReport(EncodeLoadReport({0, 0, 0, 1.5})).ok());
  EXPECT_FALSE(DecodeLoadReport(EncodeLoadReport({0, 0, 0, std::nan("")})).ok());
  EXPECT_FALSE(DecodeLoadReport("").ok());
  EXPECT_FALSE(DecodeLoadReport("\x94\x01\x02").ok());  // truncated
  // More engines than a coordinator takes: refused before anything is built.
  LoadPublication big;
  big.engines.resize(kMaxDpEngines + 1);
  absl::StatusOr<LoadPublication> refused = DecodeLoadPublication(EncodeLoadPublication(big));
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
}

class DpCoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DpCoordinatorOptions o;
    o.num_engines = 4;
    o.stats_address = *ipc::UniqueIpcAddress("dpc-stats");
    o.publish_address = *ipc::UniqueIpcAddress("dpc-publish");
    o.publish_interval = absl::Milliseconds(50);
    auto c = DpCoordinator::Create(o);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    addresses_ = {o.stats_address, o.publish_address};
    runner_ = std::thread([this] { run_status_ = coordinator_->Run(); });
  }
  void TearDown() override {
    coordinator_->Stop();
    runner_.join();
    EXPECT_TRUE(run_status_.ok()) << run_status_;
    for (const std::string& a : addresses_) ipc::ReleaseIpcAddress(a);
  }

  zmq::socket_t Subscriber() {
    zmq::socket_t s(ipc::ZmqContext(), zmq::socket_type::sub);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::subscribe, "");
    s.connect(coordinator_->publish_endpoint());
    return s;
  }
  zmq::socket_t Engine() {
    zmq::socket_t s(ipc::ZmqContext(), zmq::socket_type::push);
    s.set(zmq::sockopt::linger, 0);
    s.connect(coordinator_->stats_endpoint());
    return s;
  }
  // The next publication on `s` that satisfies `want`, or nullopt after 5 s.
  template <typename Want>
  std::optional<LoadPublication> Await(zmq::socket_t& s, Want want) {
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (absl::Now() < deadline) {
      zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      zmq::message_t msg;
      if (!s.recv(msg)) continue;
      absl::StatusOr<LoadPublication> p = DecodeLoadPublication(msg.to_string_view());
      if (p.ok() && want(*p)) return *p;
    }
    return std::nullopt;
  }

  std::unique_ptr<DpCoordinator> coordinator_;
  std::vector<std::string> addresses_;
  std::thread runner_;
  absl::Status run_status_;
};

TEST_F(DpCoordinatorTest, ReportsReachEverySubscriber) {
  zmq::socket_t a = Subscriber(), b = Subscriber();
  // Each new subscriber gets the (empty) figures without waiting for a change.
  auto all = [](const LoadPublication& p) { return p.engines.size() == 4; };
  ASSERT_TRUE(Await(a, all).has_value());
  ASSERT_TRUE(Await(b, all).has_value());

  zmq::socket_t e2 = Engine();
  ASSERT_TRUE(e2.send(zmq::buffer(EncodeLoadReport({2, 5, 3, 0.25})), zmq::send_flags::none));
  auto has_engine2 = [](const LoadPublication& p) {
    return p.engines.size() == 4 && p.engines[2].reported;
  };
  for (zmq::socket_t* s : {&a, &b}) {
    std::optional<LoadPublication> p = Await(*s, has_engine2);
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->engines[2], (PublishedEngineLoad{5, 3, 0.25, true}));
    EXPECT_FALSE(p->engines[0].reported);
    EXPECT_GT(p->publish_time_ns, 0);
  }
}

TEST_F(DpCoordinatorTest, PublicationsAreRateLimitedAndBadReportsDropped) {
  zmq::socket_t sub = Subscriber();
  ASSERT_TRUE(Await(sub, [](const LoadPublication&) { return true; }).has_value());
  zmq::socket_t engine = Engine();
  // Garbage and an engine out of range: dropped, the coordinator goes on.
  ASSERT_TRUE(engine.send(zmq::buffer(std::string("\xc1 not msgpack")), zmq::send_flags::none));
  ASSERT_TRUE(engine.send(zmq::buffer(EncodeLoadReport({9, 1, 1, 0.1})), zmq::send_flags::none));
  const uint64_t before = coordinator_->publications_sent();
  const absl::Time start = absl::Now();
  for (int i = 1; i <= 200; ++i) {
    ASSERT_TRUE(engine.send(zmq::buffer(EncodeLoadReport({1, i, 0, 0.0})), zmq::send_flags::none));
  }
  std::optional<LoadPublication> last =
      Await(sub, [](const LoadPublication& p) { return p.engines[1].waiting == 200; });
  ASSERT_TRUE(last.has_value()) << "the last figure was never published";
  const absl::Duration took = absl::Now() - start;
  const uint64_t sent = coordinator_->publications_sent() - before;
  // At most one per 50 ms interval (+1 for the first, +1 for rounding at the edges).
  EXPECT_LE(sent, static_cast<uint64_t>(took / absl::Milliseconds(50)) + 2)
      << sent << " publications in " << took;
  EXPECT_GE(coordinator_->reports_dropped(), 2u);
}

TEST(DpCoordinatorCreateTest, RefusesWhatItCannotServe) {
  DpCoordinatorOptions o;
  o.num_engines = 0;
  o.stats_address = "ipc:///nonexistent-dir/x";
  o.publish_address = "ipc:///nonexistent-dir/y";
  EXPECT_TRUE(absl::IsInvalidArgument(DpCoordinator::Create(o).status()));
  o.num_engines = 2;
  EXPECT_FALSE(DpCoordinator::Create(o).ok());  // cannot bind there
}

}  // namespace
}  // namespace vllm::core
