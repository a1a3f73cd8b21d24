// DpCoordinator over real ZMQ sockets (ipc://): engines' reports reach every subscriber in a
// publication, a new subscriber gets the figures at once, publications are rate-limited to
// the interval, bad reports are dropped without harm; and the codec's bounds.
#include "core/dp_coordinator.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
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

TEST(DpCoordinatorCodecTest, WavesAndTimesRoundTripAndAreBounded) {
  const DpWave start{3, true, 1};
  EXPECT_EQ(*DecodeDpWave(EncodeDpWave(start)), start);
  const DpWave complete{3, false, -1};
  EXPECT_EQ(*DecodeDpWave(EncodeDpWave(complete)), complete);
  EXPECT_FALSE(DecodeDpWave(EncodeDpWave({-1, true, -1})).ok());
  EXPECT_FALSE(DecodeDpWave(EncodeDpWave({0, true, -2})).ok());
  EXPECT_FALSE(DecodeDpWave(EncodeDpWave({0, true, kMaxDpEngines})).ok());
  EXPECT_FALSE(DecodeDpWave("\x93\x01").ok());  // truncated
  EngineLoadReport timed{1, 2, 3, 0.5, 1795712674.25};
  EXPECT_EQ(*DecodeLoadReport(EncodeLoadReport(timed)), timed);
  timed.timestamp = -1;
  EXPECT_FALSE(DecodeLoadReport(EncodeLoadReport(timed)).ok());
  timed.timestamp = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(DecodeLoadReport(EncodeLoadReport(timed)).ok());
  LoadPublication p;
  p.current_wave = 7;
  p.engines_running = true;
  p.engines = {{1, 2, 0.5, true, 12.5}};
  EXPECT_EQ(*DecodeLoadPublication(EncodeLoadPublication(p)), p);
  p.current_wave = -1;
  EXPECT_FALSE(DecodeLoadPublication(EncodeLoadPublication(p)).ok());
}

// Request waves (lockstep): the first report with work starts a wave (START_DP_WAVE naming
// that engine), the wave completes when every engine's latest report shows none, the next
// one has the next number, and an engine that subscribes late gets the state at once. Over
// ipc:// the socket files go once every engine reported and every subscriber subscribed.
class DpCoordinatorWaveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DpCoordinatorOptions o;
    o.num_engines = 2;
    o.stats_address = *ipc::UniqueIpcAddress("dpc-stats");
    o.publish_address = *ipc::UniqueIpcAddress("dpc-publish");
    o.wave_address = *ipc::UniqueIpcAddress("dpc-waves");
    o.expected_subscribers = 1;
    o.publish_interval = absl::Milliseconds(20);
    auto c = DpCoordinator::Create(o);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    addresses_ = {o.stats_address, o.publish_address, o.wave_address};
    runner_ = std::thread([this] { run_status_ = coordinator_->Run(); });
  }
  void TearDown() override {
    coordinator_->Stop();
    runner_.join();
    EXPECT_TRUE(run_status_.ok()) << run_status_;
    for (const std::string& a : addresses_) ipc::ReleaseIpcAddress(a);
  }
  zmq::socket_t Connect(zmq::socket_type type, const std::string& address) {
    zmq::socket_t s(ipc::ZmqContext(), type);
    s.set(zmq::sockopt::linger, 0);
    if (type == zmq::socket_type::sub) s.set(zmq::sockopt::subscribe, "");
    s.connect(address);
    return s;
  }
  // The next wave message, or nullopt after 5 s.
  std::optional<DpWave> NextWave(zmq::socket_t& s) {
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(5000));
    zmq::message_t msg;
    if (!(item.revents & ZMQ_POLLIN) || !s.recv(msg)) return std::nullopt;
    absl::StatusOr<DpWave> w = DecodeDpWave(msg.to_string_view());
    if (!w.ok()) return std::nullopt;
    return *w;
  }
  void Report(zmq::socket_t& engine, int32_t index, int32_t running) {
    ASSERT_TRUE(engine.send(zmq::buffer(EncodeLoadReport({index, 0, running, 0.0})),
                            zmq::send_flags::none));
  }

  std::unique_ptr<DpCoordinator> coordinator_;
  std::vector<std::string> addresses_;
  std::thread runner_;
  absl::Status run_status_;
};

TEST_F(DpCoordinatorWaveTest, WorkStartsAWaveAndIdlenessEndsIt) {
  zmq::socket_t api = Connect(zmq::socket_type::sub, coordinator_->publish_endpoint());
  zmq::socket_t waves0 = Connect(zmq::socket_type::sub, coordinator_->wave_endpoint());
  zmq::socket_t waves1 = Connect(zmq::socket_type::sub, coordinator_->wave_endpoint());
  zmq::socket_t e0 = Connect(zmq::socket_type::push, coordinator_->stats_endpoint());
  zmq::socket_t e1 = Connect(zmq::socket_type::push, coordinator_->stats_endpoint());
  // The subscriptions must be in before the first wave message (a SUB misses what was sent
  // before it joined): an idle report from each engine, then wait until the files are gone —
  // the coordinator removes them only once both wave subscriptions and the API server's
  // arrived and both engines reported.
  ASSERT_NO_FATAL_FAILURE(Report(e0, 0, 0));
  ASSERT_NO_FATAL_FAILURE(Report(e1, 1, 0));
  const std::string stats_file = addresses_[0].substr(strlen("ipc://"));
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (access(stats_file.c_str(), F_OK) == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // polling a condition with a deadline
  }
  ASSERT_NE(access(stats_file.c_str(), F_OK), 0) << "socket files not released";
  EXPECT_EQ(coordinator_->waves_started(), 0u);

  ASSERT_NO_FATAL_FAILURE(Report(e1, 1, 1));  // engine 1 got a request
  for (zmq::socket_t* s : {&waves0, &waves1}) {
    std::optional<DpWave> w = NextWave(*s);
    ASSERT_TRUE(w.has_value());
    EXPECT_EQ(*w, (DpWave{0, true, 1}));
  }
  // Still busy (engine 0 now too, then engine 1 done): no message; both done: complete.
  ASSERT_NO_FATAL_FAILURE(Report(e0, 0, 2));
  ASSERT_NO_FATAL_FAILURE(Report(e1, 1, 0));
  ASSERT_NO_FATAL_FAILURE(Report(e0, 0, 0));
  std::optional<DpWave> w;
  for (zmq::socket_t* s : {&waves0, &waves1}) {
    w = NextWave(*s);
    ASSERT_TRUE(w.has_value());
    EXPECT_EQ(*w, (DpWave{0, false, -1}));
  }
  EXPECT_EQ(coordinator_->waves_completed(), 1u);

  // The next wave is wave 1; the publication says so.
  ASSERT_NO_FATAL_FAILURE(Report(e0, 0, 1));
  w = NextWave(waves1);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(*w, (DpWave{1, true, 0}));
  const absl::Time until = absl::Now() + absl::Seconds(5);
  bool seen = false;
  while (!seen && absl::Now() < until) {
    zmq::pollitem_t item{api.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(50));
    zmq::message_t msg;
    if (!(item.revents & ZMQ_POLLIN) || !api.recv(msg)) continue;
    absl::StatusOr<LoadPublication> p = DecodeLoadPublication(msg.to_string_view());
    seen = p.ok() && p->engines_running && p->current_wave == 1;
  }
  EXPECT_TRUE(seen) << "no publication of wave 1 running";
}

// An engine that subscribes during a wave (it joined late, or again) is told at once that the
// wave runs, then that it completed. TCP: the sockets stay open for engines that join later.
TEST(DpCoordinatorLateEngineTest, ALateSubscriberLearnsTheRunningWave) {
  DpCoordinatorOptions o;
  o.num_engines = 2;
  o.stats_address = o.publish_address = o.wave_address = "tcp://127.0.0.1:0";
  auto c = DpCoordinator::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  DpCoordinator& coordinator = **c;
  std::thread runner([&] { EXPECT_TRUE(coordinator.Run().ok()); });
  zmq::socket_t engine(ipc::ZmqContext(), zmq::socket_type::push);
  engine.set(zmq::sockopt::linger, 0);
  engine.connect(coordinator.stats_endpoint());
  ASSERT_TRUE(engine.send(zmq::buffer(EncodeLoadReport({0, 1, 0, 0.0})), zmq::send_flags::none));
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (coordinator.waves_started() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // polling a condition with a deadline
  }
  ASSERT_EQ(coordinator.waves_started(), 1u);
  zmq::socket_t late(ipc::ZmqContext(), zmq::socket_type::sub);
  late.set(zmq::sockopt::linger, 0);
  late.set(zmq::sockopt::subscribe, "");
  late.connect(coordinator.wave_endpoint());
  auto next = [&]() -> std::optional<DpWave> {
    zmq::pollitem_t item{late.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(5000));
    zmq::message_t msg;
    if (!(item.revents & ZMQ_POLLIN) || !late.recv(msg)) return std::nullopt;
    absl::StatusOr<DpWave> w = DecodeDpWave(msg.to_string_view());
    return w.ok() ? std::optional<DpWave>(*w) : std::nullopt;
  };
  std::optional<DpWave> w = next();
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(*w, (DpWave{0, true, -1}));
  ASSERT_TRUE(engine.send(zmq::buffer(EncodeLoadReport({0, 0, 0, 0.0})), zmq::send_flags::none));
  w = next();
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(*w, (DpWave{0, false, -1}));
  coordinator.Stop();
  runner.join();
}

// A lockstep engine that reported work and then went silent (it died) is taken as gone after
// engine_timeout: the wave completes, so the other engines stop stepping.
TEST(DpCoordinatorLateEngineTest, ASilentEngineDoesNotHoldTheWave) {
  DpCoordinatorOptions o;
  o.num_engines = 2;
  o.stats_address = o.publish_address = o.wave_address = "tcp://127.0.0.1:0";
  o.engine_timeout = absl::Milliseconds(300);
  auto c = DpCoordinator::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  DpCoordinator& coordinator = **c;
  std::thread runner([&] { EXPECT_TRUE(coordinator.Run().ok()); });
  zmq::socket_t engine(ipc::ZmqContext(), zmq::socket_type::push);
  engine.set(zmq::sockopt::linger, 0);
  engine.connect(coordinator.stats_endpoint());
  const absl::Time sent = absl::Now();
  ASSERT_TRUE(engine.send(zmq::buffer(EncodeLoadReport({1, 0, 1, 0.0})), zmq::send_flags::none));
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (coordinator.waves_completed() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // polling a condition with a deadline
  }
  EXPECT_EQ(coordinator.waves_started(), 1u);
  EXPECT_EQ(coordinator.waves_completed(), 1u);
  EXPECT_GE(absl::Now() - sent, absl::Milliseconds(300));  // not before the timeout
  coordinator.Stop();
  runner.join();
}

// Report datagrams: the sealed report reaches the publication; an oversized datagram, garbage,
// a report sealed with another key, a tampered one and a replay of the accepted one are counted
// and dropped.
class DpCoordinatorUdpTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DpCoordinatorUdpTest, SealedDatagramReportsArePublished) {
  const std::string host = GetParam();
  const int family = host == "[::1]" ? AF_INET6 : AF_INET;
  const int probe = socket(family, SOCK_DGRAM, 0);
  if (family == AF_INET6) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    const bool bound = probe >= 0 && bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    if (probe >= 0) close(probe);
    if (!bound) GTEST_SKIP() << "no IPv6 loopback here";
  } else if (probe >= 0) {
    close(probe);
  }
  absl::StatusOr<std::string> key = NewReportKey();
  ASSERT_TRUE(key.ok()) << key.status();
  DpCoordinatorOptions o;
  o.num_engines = 2;
  o.publish_address = "tcp://127.0.0.1:0";  // no ZMQ report socket
  o.udp_stats_address = host + ":0";
  o.report_key = *key;
  o.publish_interval = absl::Milliseconds(10);
  auto c = DpCoordinator::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  DpCoordinator& coordinator = **c;
  EXPECT_TRUE(coordinator.stats_endpoint().empty());
  ASSERT_TRUE(absl::StartsWith(coordinator.udp_stats_endpoint(), "udp://" + host + ":"))
      << coordinator.udp_stats_endpoint();
  std::thread runner([&] { EXPECT_TRUE(coordinator.Run().ok()); });
  zmq::socket_t sub(ipc::ZmqContext(), zmq::socket_type::sub);
  sub.set(zmq::sockopt::linger, 0);
  sub.set(zmq::sockopt::subscribe, "");
  sub.connect(coordinator.publish_endpoint());

  auto sender = ReportDatagramSender::Create(coordinator.udp_stats_endpoint(), *key);
  ASSERT_TRUE(sender.ok()) << sender.status();
  // Raw datagrams from a socket of our own, to the same port.
  sockaddr_storage addr{};
  socklen_t len = 0;
  const std::string& ep = coordinator.udp_stats_endpoint();
  const uint16_t port = static_cast<uint16_t>(std::stoi(ep.substr(ep.rfind(':') + 1)));
  if (family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    a->sin6_addr = in6addr_loopback;
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &a->sin_addr);
    len = sizeof *a;
  }
  const int fd = socket(family, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  auto raw = [&](const std::string& d) { return send(fd, d.data(), d.size(), 0) > 0; };
  const std::string report = EncodeLoadReport({1, 4, 2, 0.5, 7.0});
  std::string other_key = *key;
  other_key[0] ^= 1;
  std::string tampered = SealReportDatagram(EncodeLoadReport({1, 9, 2, 0.5, 7.0}), 5, *key);
  tampered[2] ^= 1;
  const std::string sealed = SealReportDatagram(report, 1000, *key);
  ASSERT_TRUE(raw(std::string(1000, 'x')));
  ASSERT_TRUE(raw("\xc1"));
  ASSERT_TRUE(raw(report));  // unsealed
  ASSERT_TRUE(raw(SealReportDatagram(EncodeLoadReport({1, 9, 9, 0.5, 7.0}), 2, other_key)));
  ASSERT_TRUE(raw(tampered));
  ASSERT_TRUE(raw(sealed));
  ASSERT_TRUE(raw(sealed));  // a replay
  ASSERT_TRUE(raw(SealReportDatagram(EncodeLoadReport({1, 8, 8, 0.5, 7.0}), 999, *key)));  // older
  // Engine 0 through the sender (sequence = its clock, far above 1000).
  ASSERT_TRUE((*sender)->Send(EncodeLoadReport({0, 3, 1, 0.25, 8.0})));
  bool seen = false;
  LoadPublication last;
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!seen && absl::Now() < deadline) {
    zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(50));
    zmq::message_t msg;
    if (!(item.revents & ZMQ_POLLIN) || !sub.recv(msg)) continue;
    absl::StatusOr<LoadPublication> p = DecodeLoadPublication(msg.to_string_view());
    if (!p.ok() || p->engines.size() != 2) continue;
    last = *p;
    seen = p->engines[0] == PublishedEngineLoad{3, 1, 0.25, true, 8.0} &&
           p->engines[1] == PublishedEngineLoad{4, 2, 0.5, true, 7.0};
  }
  close(fd);
  coordinator.Stop();
  runner.join();
  EXPECT_TRUE(seen) << "the sealed reports' figures were never published (last: engine 1 "
                    << (last.engines.size() == 2 ? last.engines[1].waiting : -1) << " waiting)";
  EXPECT_EQ(coordinator.reports_received(), 9u);
  EXPECT_EQ(coordinator.reports_dropped(), 7u);
}

INSTANTIATE_TEST_SUITE_P(Families, DpCoordinatorUdpTest, ::testing::Values("127.0.0.1", "[::1]"));

TEST(ReportDatagramTest, SealOpenAndRefusals) {
  absl::StatusOr<std::string> key = NewReportKey();
  ASSERT_TRUE(key.ok());
  ASSERT_EQ(key->size(), kReportKeyBytes);
  EXPECT_NE(*key, *NewReportKey());
  const std::string report = EncodeLoadReport({3, 1, 2, 0.125, 9.5});
  const std::string sealed = SealReportDatagram(report, 0x0102030405060708u, *key);
  EXPECT_LE(sealed.size(), kMaxReportDatagram);
  absl::StatusOr<OpenedReportDatagram> opened = OpenReportDatagram(sealed, *key);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->report, report);
  EXPECT_EQ(opened->sequence, 0x0102030405060708u);
  // Every single-bit flip is caught.
  for (size_t i = 0; i < sealed.size(); ++i) {
    std::string flipped = sealed;
    flipped[i] ^= 0x10;
    EXPECT_FALSE(OpenReportDatagram(flipped, *key).ok()) << "byte " << i;
  }
  EXPECT_FALSE(OpenReportDatagram(sealed.substr(0, 24), *key).ok());
  EXPECT_FALSE(OpenReportDatagram(std::string(kMaxReportDatagram + 1, 'a'), *key).ok());
  // Keys in hex.
  EXPECT_EQ(ReportKeyFromHex(absl::BytesToHexString(*key)), *key);
  EXPECT_FALSE(ReportKeyFromHex(std::string(64, 'z')).has_value());
  EXPECT_FALSE(ReportKeyFromHex("abcd").has_value());
  // Senders refuse what they cannot use.
  EXPECT_FALSE(ReportDatagramSender::Create("tcp://127.0.0.1:5", *key).ok());
  EXPECT_FALSE(ReportDatagramSender::Create("udp://127.0.0.1:5", "short").ok());
  EXPECT_FALSE(ReportDatagramSender::Create("udp://nohost", *key).ok());
  EXPECT_FALSE(ReportDatagramSender::Create("udp://[::1:5", *key).ok());
}

TEST(DpCoordinatorCreateTest, RefusesWhatItCannotServe) {
  DpCoordinatorOptions o;
  o.num_engines = 0;
  o.stats_address = "ipc:///nonexistent-dir/x";
  o.publish_address = "ipc:///nonexistent-dir/y";
  EXPECT_TRUE(absl::IsInvalidArgument(DpCoordinator::Create(o).status()));
  o.num_engines = 2;
  EXPECT_FALSE(DpCoordinator::Create(o).ok());  // cannot bind there
  // Datagrams need a key of the right size, and some report address is needed.
  o.stats_address = "";
  o.publish_address = "tcp://127.0.0.1:0";
  EXPECT_TRUE(absl::IsInvalidArgument(DpCoordinator::Create(o).status()));
  o.udp_stats_address = "127.0.0.1:0";
  o.report_key = "short";
  EXPECT_TRUE(absl::IsInvalidArgument(DpCoordinator::Create(o).status()));
  o.report_key = std::string(kReportKeyBytes, 'k');
  o.udp_stats_address = "localhost:0";  // a name, not an address
  EXPECT_TRUE(absl::IsInvalidArgument(DpCoordinator::Create(o).status()));
}

}  // namespace
}  // namespace vllm::core
