#include "ipc/message_queue.h"

#include <sys/stat.h>

#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "base/msgpack_util.h"
#include "gtest/gtest.h"
#include "ipc/curve.h"
#include "ipc/zmq_util.h"
#include "tests/support/mq_pattern.h"

namespace vllm::ipc {
namespace {

using ::vllm::testing::PatternCheck;
using ::vllm::testing::PatternMessage;

absl::Time In(absl::Duration d) { return absl::Now() + d; }

// A writer with readers attached from threads of this process (each opens the segment on its
// own, as another process would).
struct Fixture {
  std::unique_ptr<MessageQueueWriter> writer;
  std::vector<std::unique_ptr<MessageQueueReader>> readers;
};

absl::StatusOr<Fixture> MakeQueue(MessageQueueOptions opt, WaitOptions reader_wait = {},
                                  const std::optional<CurveKeys>& remote_reader_curve = {}) {
  Fixture f;
  auto w = MessageQueueWriter::Create(opt);
  if (!w.ok()) return w.status();
  f.writer = std::move(*w);
  for (uint32_t r = 0; r < opt.n_readers; ++r) {
    const bool local = f.writer->handle().LocalIndex(static_cast<int32_t>(r)) >= 0;
    auto rd = MessageQueueReader::Attach(f.writer->handle(), static_cast<int32_t>(r), reader_wait,
                                         local ? std::nullopt : remote_reader_curve);
    if (!rd.ok()) return rd.status();
    f.readers.push_back(std::move(*rd));
  }
  std::vector<absl::Status> ready(opt.n_readers);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < opt.n_readers; ++r) {
    threads.emplace_back(
        [&, r] { ready[r] = f.readers[r]->WaitUntilReady(In(absl::Seconds(20))); });
  }
  absl::Status wst = f.writer->WaitUntilReady(In(absl::Seconds(20)));
  for (auto& t : threads) t.join();
  if (!wst.ok()) return wst;
  for (auto& st : ready) {
    if (!st.ok()) return st;
  }
  return f;
}

// Streams `count` pattern messages to every reader thread and checks each one.
void StreamAndCheck(Fixture& f, uint64_t count, uint64_t seed, size_t chunk) {
  std::vector<std::string> errors(f.readers.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < f.readers.size(); ++r) {
    threads.emplace_back([&, r] {
      for (uint64_t i = 0; i < count; ++i) {
        std::string problem;
        absl::Status st = f.readers[r]->Dequeue(
            [&](ByteSpan b) {
              problem = PatternCheck(seed, i, chunk, b.data(), b.size());
              return absl::OkStatus();
            },
            In(absl::Seconds(30)));
        if (!st.ok()) problem = st.ToString();
        if (!problem.empty()) {
          errors[r] = problem;
          return;
        }
      }
    });
  }
  for (uint64_t i = 0; i < count; ++i) {
    auto msg = PatternMessage(seed, i, chunk);
    absl::Status st = f.writer->Enqueue(msg, In(absl::Seconds(30)));
    if (!st.ok()) {
      ADD_FAILURE() << "enqueue " << i << ": " << st;
      f.writer->Close();
      for (auto& rd : f.readers) rd->Cancel();
      break;
    }
  }
  for (auto& t : threads) t.join();
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "reader " << r;
}

class MessageQueueTest : public ::testing::TestWithParam<int> {};

TEST_P(MessageQueueTest, BroadcastsEveryMessageInOrderIncludingOversize) {
  MessageQueueOptions opt;
  opt.n_readers = static_cast<uint32_t>(GetParam());
  opt.max_chunk_bytes = 1024;
  opt.max_chunks = 8;
  auto f = MakeQueue(opt);
  ASSERT_TRUE(f.ok()) << f.status();
  // Every reader has subscribed: the oversize socket's file is gone (its messages still flow
  // over the established connections below).
  const std::string local = f->writer->handle().local_address;
  ASSERT_EQ(local.rfind("ipc:///", 0), 0u) << local;
  struct stat st {};
  EXPECT_NE(lstat(local.substr(6).c_str(), &st), 0) << local << " still exists";
  StreamAndCheck(*f, 20000, 11, opt.max_chunk_bytes);
}

INSTANTIATE_TEST_SUITE_P(Readers, MessageQueueTest, ::testing::Values(1, 2, 4));

TEST(MessageQueueRemoteTest, TcpReaderGetsTheSameStreamAsLocalOnes) {
  MessageQueueOptions opt;
  opt.n_readers = 3;
  opt.local_reader_ranks = std::vector<int32_t>{0, 2};
  opt.max_chunk_bytes = 1024;
  auto f = MakeQueue(opt);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->readers[0]->is_local());
  EXPECT_FALSE(f->readers[1]->is_local());
  EXPECT_NE(f->writer->handle().remote_address.find("tcp://127.0.0.1:"), std::string::npos);
  StreamAndCheck(*f, 5000, 12, opt.max_chunk_bytes);
  // Close reaches the remote reader too.
  f->writer->Close();
  EXPECT_EQ(f->readers[1]->DequeueBytes(In(absl::Seconds(10))).status().code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(f->readers[0]->DequeueBytes(In(absl::Seconds(10))).status().code(),
            absl::StatusCode::kCancelled);
}

// vLLM's VLLM_PORT: internal TCP ports chosen automatically (port 0, "tcp://host:*") are the
// first free ones from it upward; a port in use is skipped.
TEST(VllmPortTest, AutomaticPortsStartAtVllmPort) {
  auto port_of = [](const std::string& endpoint) {
    return std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  };
  // A port the kernel picked, kept bound: VLLM_PORT names a port in use.
  zmq::socket_t a(ZmqContext(), zmq::socket_type::pull), b(ZmqContext(), zmq::socket_type::pull),
      c(ZmqContext(), zmq::socket_type::pull);
  for (zmq::socket_t* s : {&a, &b, &c}) s->set(zmq::sockopt::linger, 0);
  a.bind("tcp://127.0.0.1:*");
  const int base = port_of(a.get(zmq::sockopt::last_endpoint));
  ASSERT_EQ(setenv("VLLM_PORT", std::to_string(base).c_str(), 1), 0);
  struct Unset {
    ~Unset() { unsetenv("VLLM_PORT"); }
  } unset;
  EXPECT_EQ(VllmPortBase(), base);
  auto first = BindTcp(b, "127.0.0.1", 0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_GT(port_of(*first), base);
  EXPECT_LT(port_of(*first), base + kVllmPortAttempts);
  auto second = BindEndpoint(c, "tcp://127.0.0.1:*");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(port_of(*second), port_of(*first));
  EXPECT_LT(port_of(*second), base + kVllmPortAttempts);
}

TEST(MessageQueueCurveTest, ReadersWithTheClusterKeyGetEveryMessage) {
  auto keys = GenerateCurveKeys();
  ASSERT_TRUE(keys.ok()) << keys.status();
  MessageQueueOptions opt;
  opt.n_readers = 3;
  opt.local_reader_ranks = std::vector<int32_t>{0};
  opt.max_chunk_bytes = 1024;
  opt.remote_curve = *keys;
  auto f = MakeQueue(opt, {}, *keys);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->writer->handle().remote_curve);
  const std::string text = f->writer->handle().ToText();
  auto decoded = Handle::FromText(text);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->Encode().find(keys->secret_key), std::string::npos) << "key in the handle";
  EXPECT_EQ(decoded->Encode().find(keys->public_key), std::string::npos) << "key in the handle";
  StreamAndCheck(*f, 3000, 13, opt.max_chunk_bytes);
}

// A reader without the key (it forged the handle's CURVE flag away) or with another key attaches
// without error but receives nothing, and the writer does not count it as attached; the reader
// with the key then gets every message.
TEST(MessageQueueCurveTest, ReadersWithoutTheClusterKeyGetNothing) {
  auto keys = GenerateCurveKeys();
  auto other = GenerateCurveKeys();
  ASSERT_TRUE(keys.ok() && other.ok());
  MessageQueueOptions opt;
  opt.n_readers = 1;
  opt.local_reader_ranks = std::vector<int32_t>{};
  opt.remote_curve = *keys;
  auto w = MessageQueueWriter::Create(opt);
  ASSERT_TRUE(w.ok()) << w.status();
  MessageQueueWriter& writer = **w;

  auto keyless = MessageQueueReader::Attach(writer.handle(), 0);
  ASSERT_FALSE(keyless.ok());
  EXPECT_EQ(keyless.status().code(), absl::StatusCode::kFailedPrecondition) << keyless.status();

  Handle forged = writer.handle();
  forged.remote_curve = false;
  auto plain = MessageQueueReader::Attach(forged, 0);
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto wrong = MessageQueueReader::Attach(writer.handle(), 0, {}, *other);
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  // One that knows the writer's public key (not a secret) but not the cluster secret: CURVE
  // alone would let it in; the ZAP handler does not.
  zmq::socket_t spy(ZmqContext(), zmq::socket_type::sub);
  spy.set(zmq::sockopt::linger, 0);
  spy.set(zmq::sockopt::curve_serverkey, keys->public_key);
  spy.set(zmq::sockopt::curve_publickey, other->public_key);
  spy.set(zmq::sockopt::curve_secretkey, other->secret_key);
  spy.set(zmq::sockopt::subscribe, "");
  spy.connect(writer.handle().remote_address);

  absl::Status early = writer.WaitUntilReady(In(absl::Milliseconds(1500)));
  EXPECT_EQ(early.code(), absl::StatusCode::kDeadlineExceeded) << early;
  // What the intruders' calls returned: never OK; the refusal is reported as such (not as a
  // slow writer) at least once.
  std::vector<absl::Status> seen[2];
  for (int i = 0; i < 2; ++i) {
    MessageQueueReader& intruder = i == 0 ? **plain : **wrong;
    seen[i].push_back(intruder.WaitUntilReady(In(absl::Milliseconds(300))));
  }

  auto good = MessageQueueReader::Attach(writer.handle(), 0, {}, *keys);
  ASSERT_TRUE(good.ok()) << good.status();
  absl::Status good_ready;
  std::thread t([&] { good_ready = (*good)->WaitUntilReady(In(absl::Seconds(20))); });
  absl::Status ready = writer.WaitUntilReady(In(absl::Seconds(20)));
  t.join();
  ASSERT_TRUE(ready.ok()) << ready;
  ASSERT_TRUE(good_ready.ok()) << good_ready;
  for (int i = 0; i < 3; ++i) {
    const std::string msg = "secret " + std::to_string(i);
    ASSERT_TRUE(writer.Enqueue({reinterpret_cast<const uint8_t*>(msg.data()), msg.size()}).ok());
    auto got = (*good)->DequeueBytes(In(absl::Seconds(10)));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(std::string(got->begin(), got->end()), msg);
  }
  for (int i = 0; i < 2; ++i) {
    MessageQueueReader& intruder = i == 0 ? **plain : **wrong;
    auto refused = [&] {
      for (const absl::Status& st : seen[i]) {
        if (st.code() == absl::StatusCode::kPermissionDenied) return true;
      }
      return false;
    };
    const absl::Time until = In(absl::Seconds(5));
    do {
      auto got = intruder.DequeueBytes(In(absl::Milliseconds(500)));
      ASSERT_FALSE(got.ok()) << "intruder " << i << " received " << got->size() << " bytes";
      seen[i].push_back(got.status());
    } while (!refused() && absl::Now() < until);
    for (const absl::Status& st : seen[i]) EXPECT_FALSE(st.ok());
    EXPECT_TRUE(refused()) << "intruder " << i << ": " << seen[i].back();
  }
  zmq::pollitem_t item{spy.handle(), 0, ZMQ_POLLIN, 0};
  EXPECT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(300)), 0) << "the spy got a frame";
}

// Every wait blocks on the futex (no spinning) and nothing re-checks periodically: a lost
// wake-up would leave a side asleep until its 20 s deadline and fail the test.
TEST(MessageQueueStressTest, NoLostWakeups) {
  WaitOptions strict;
  strict.spin_window_min = strict.spin_window_max = absl::ZeroDuration();
  strict.min_spin = absl::ZeroDuration();
  strict.yields = 0;
  strict.liveness_interval = absl::Hours(1);
  MessageQueueOptions opt;
  opt.n_readers = 3;
  opt.max_chunks = 2;  // the writer blocks often too: every other message needs a data buffer
  opt.max_chunk_bytes = 256;
  opt.wait = strict;
  auto f = MakeQueue(opt, strict);
  ASSERT_TRUE(f.ok()) << f.status();
  const uint64_t kCount = 30000;
  std::vector<uint64_t> got(opt.n_readers, 0);
  std::vector<absl::Status> errs(opt.n_readers);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < opt.n_readers; ++r) {
    threads.emplace_back([&, r] {
      std::minstd_rand rng(r);
      for (uint64_t i = 0; i < kCount; ++i) {
        uint64_t v = ~0ull;
        errs[r] = f->readers[r]->Dequeue(
            [&](ByteSpan b) {
              std::memcpy(&v, b.data(), 8);
              return absl::OkStatus();
            },
            In(absl::Seconds(20)));
        if (!errs[r].ok() || v != i) return;
        got[r] = i + 1;
        if (rng() % 64 == 0) std::this_thread::yield();
      }
    });
  }
  std::minstd_rand rng(99);
  uint8_t message[200] = {};
  for (uint64_t i = 0; i < kCount; ++i) {
    std::memcpy(message, &i, 8);
    // Odd messages are larger than a slot holds: they take one of the 2 data buffers.
    absl::Status st =
        f->writer->Enqueue({message, i % 2 == 1 ? sizeof message : 8}, In(absl::Seconds(20)));
    if (!st.ok()) {
      ADD_FAILURE() << "writer lost a wake-up at " << i << ": " << st;
      for (auto& rd : f->readers) rd->Cancel();
      break;
    }
    if (rng() % 64 == 0) std::this_thread::yield();
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < opt.n_readers; ++r) {
    EXPECT_EQ(got[r], kCount) << "reader " << r << ": " << errs[r];
  }
}

TEST(MessageQueueErrorsTest, EnqueueBeforeReadyIsRefused) {
  MessageQueueOptions opt;
  auto w = MessageQueueWriter::Create(opt);
  ASSERT_TRUE(w.ok());
  const uint8_t b[1] = {1};
  EXPECT_EQ((*w)->Enqueue(b).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(MessageQueueErrorsTest, DeadlineNamesTheWriter) {
  MessageQueueOptions opt;
  auto f = MakeQueue(opt);
  ASSERT_TRUE(f.ok());
  auto st = f->readers[0]->DequeueBytes(In(absl::Milliseconds(20)));
  ASSERT_EQ(st.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(st.status().message().find("writer (pid"), std::string::npos) << st.status();
}

TEST(MessageQueueErrorsTest, ReaderRejectsBadRankAndWriterBadOptions) {
  MessageQueueOptions opt;
  auto w = MessageQueueWriter::Create(opt);
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(MessageQueueReader::Attach((*w)->handle(), 1).ok());
  EXPECT_FALSE(MessageQueueReader::Attach((*w)->handle(), -1).ok());
  opt.max_chunk_bytes = 1000;  // not a multiple of 64
  EXPECT_EQ(MessageQueueWriter::Create(opt).status().code(), absl::StatusCode::kInvalidArgument);
  opt = {};
  opt.local_reader_ranks = std::vector<int32_t>{};
  opt.remote_host = "0.0.0.0";
  EXPECT_EQ(MessageQueueWriter::Create(opt).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MessageQueueErrorsTest, CorruptChunkSizeIsDataLossAndLosesNothingElse) {
  MessageQueueOptions opt;
  opt.max_chunk_bytes = 256;
  auto w = MessageQueueWriter::Create(opt);
  ASSERT_TRUE(w.ok());
  // A second mapping of the segment (taken before the name is unlinked) to corrupt it with.
  auto corrupter = ShmRingBuffer::Open((*w)->handle().shm_name, 1, opt.max_chunks, 256);
  ASSERT_TRUE(corrupter.ok()) << corrupter.status();
  auto r = MessageQueueReader::Attach((*w)->handle(), 0);
  ASSERT_TRUE(r.ok());
  std::thread t([&] { EXPECT_TRUE((*r)->WaitUntilReady(In(absl::Seconds(10))).ok()); });
  ASSERT_TRUE((*w)->WaitUntilReady(In(absl::Seconds(10))).ok());
  t.join();
  const uint8_t first[4] = {1, 2, 3, 4}, second[2] = {5, 6};
  ASSERT_TRUE((*w)->Enqueue(first).ok());
  ASSERT_TRUE((*w)->Enqueue(second).ok());
  (*corrupter)->meta(0)->size = uint64_t{1} << 40;  // claims more than a chunk holds
  auto bad = (*r)->DequeueBytes(In(absl::Seconds(5)));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss) << bad.status();
  auto good = (*r)->DequeueBytes(In(absl::Seconds(5)));
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(*good, std::vector<uint8_t>({5, 6}));
}

TEST(MessageQueueErrorsTest, MalformedRemoteFramesAreRejected) {
  // A rogue writer: a raw XPUB speaking a broken version of the protocol.
  zmq::socket_t pub(ZmqContext(), zmq::socket_type::xpub);
  pub.set(zmq::sockopt::linger, 0);
  auto addr = BindTcp(pub, "127.0.0.1", 0);
  ASSERT_TRUE(addr.ok());
  Handle h;
  h.n_readers = 1;
  h.remote_address = *addr;
  h.max_chunks = 1;
  h.max_chunk_bytes = 64;
  auto reader = MessageQueueReader::Attach(h, 0);
  ASSERT_TRUE(reader.ok()) << reader.status();
  zmq::message_t sub;
  ASSERT_TRUE(pub.recv(sub));  // the reader's subscription
  auto send = [&](std::vector<std::string> parts) {
    for (size_t i = 0; i < parts.size(); ++i) {
      pub.send(zmq::buffer(parts[i]),
               i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  };
  send({"R"});
  ASSERT_TRUE((*reader)->WaitUntilReady(In(absl::Seconds(10))).ok());
  send({"D"});             // data kind without payload
  send({"D", "x", "y"});   // too many parts
  send({"DD", "x"});       // bad kind frame
  send({"D", "payload"});  // finally a good one
  int data_loss = 0;
  std::string good;
  for (int i = 0; i < 4; ++i) {
    auto got = (*reader)->DequeueBytes(In(absl::Seconds(10)));
    if (got.ok()) {
      good.assign(got->begin(), got->end());
      break;
    }
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
    ++data_loss;
  }
  EXPECT_EQ(data_loss, 3);
  EXPECT_EQ(good, "payload");
}

TEST(MessageQueueMsgpackTest, EnqueueMsgpackParsesInPlace) {
  MessageQueueOptions opt;
  auto f = MakeQueue(opt);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(f->writer->EnqueueMsgpack(std::make_tuple(std::string("step"), 7)).ok());
  std::string method;
  int arg = 0;
  ASSERT_TRUE(f->readers[0]
                  ->Dequeue([&](ByteSpan b) -> absl::Status {
                    auto oh = wire::UnpackBounded(b);
                    if (!oh.ok()) return oh.status();
                    auto t = wire::ConvertAs<std::tuple<std::string, int>>(oh->get(), "call");
                    if (!t.ok()) return t.status();
                    method = std::get<0>(*t);
                    arg = std::get<1>(*t);
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_EQ(method, "step");
  EXPECT_EQ(arg, 7);
}

}  // namespace
}  // namespace vllm::ipc
