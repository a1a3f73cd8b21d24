// MessageQueue across real processes: the test process (or a helper) writes, helper processes
// (tests/support/mq_test_helper) read and check every message. Every test checks that no child
// and no /dev/shm entry is left behind.
#include <signal.h>
#include <sys/wait.h>

#include <list>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ipc/message_queue.h"
#include "tests/support/mq_pattern.h"
#include "tests/support/process.h"

namespace vllm::ipc {
namespace {

using ::vllm::testing::DescribeWaitStatus;
using ::vllm::testing::PatternMessage;
using ::vllm::testing::Subprocess;

std::string Helper() { return ::vllm::testing::BinDir() + "/mq_test_helper"; }

class MessageQueueProcessTest : public ::testing::Test {
 protected:
  void SetUp() override { shm_before_ = ::vllm::testing::ShmEntries(); }
  void TearDown() override {
    children_.clear();  // kills and reaps anything still running
    std::set<std::string> after = ::vllm::testing::ShmEntries();
    for (const std::string& name : after) {
      EXPECT_TRUE(shm_before_.count(name)) << "left in /dev/shm: " << name;
    }
  }

  Subprocess& Start(std::vector<std::string> args) {
    args.insert(args.begin(), Helper());
    auto p = Subprocess::Spawn(args);
    EXPECT_TRUE(p.ok()) << p.status();
    children_.push_back(std::move(*p));
    return children_.back();
  }

  // Starts reader processes for ranks [0, n) and returns once each printed READY.
  std::vector<Subprocess*> StartReaders(const Handle& h, int n, uint64_t count, uint64_t seed,
                                        std::vector<std::string> extra = {}) {
    std::vector<Subprocess*> out;
    for (int r = 0; r < n; ++r) {
      std::vector<std::string> args = {"reader",
                                       "--handle",
                                       h.ToText(),
                                       "--rank",
                                       absl::StrCat(r),
                                       "--count",
                                       absl::StrCat(count),
                                       "--seed",
                                       absl::StrCat(seed),
                                       "--chunk",
                                       absl::StrCat(h.max_chunk_bytes)};
      args.insert(args.end(), extra.begin(), extra.end());
      out.push_back(&Start(args));
    }
    return out;
  }

  void ExpectLine(Subprocess* p, const std::string& prefix, absl::Duration timeout) {
    auto line = p->ReadLine(timeout);
    ASSERT_TRUE(line.ok()) << "pid " << p->pid() << ": " << line.status();
    EXPECT_TRUE(absl::StartsWith(*line, prefix)) << "pid " << p->pid() << " said: " << *line;
  }

  std::set<std::string> shm_before_;
  std::list<Subprocess> children_;
};

// Writer in this process, N reader processes, 100 000 messages of mixed sizes (2 % over the
// chunk size, so the ZMQ overflow path runs), checked for order and content by every reader.

class BroadcastTest : public MessageQueueProcessTest, public ::testing::WithParamInterface<int> {};

TEST_P(BroadcastTest, EveryReaderProcessGetsEveryMessageInOrder) {
  const int n = GetParam();
  const uint64_t kCount = 100000, kSeed = 42;
  MessageQueueOptions opt;
  opt.n_readers = static_cast<uint32_t>(n);
  opt.max_chunk_bytes = 4096;
  auto w = MessageQueueWriter::Create(opt);
  ASSERT_TRUE(w.ok()) << w.status();
  auto readers = StartReaders((*w)->handle(), n, kCount, kSeed);
  ASSERT_TRUE((*w)->WaitUntilReady(absl::Now() + absl::Seconds(30)).ok());
  for (Subprocess* r : readers) ExpectLine(r, "READY", absl::Seconds(30));
  for (uint64_t i = 0; i < kCount; ++i) {
    auto msg = PatternMessage(kSeed, i, opt.max_chunk_bytes);
    absl::Status st = (*w)->Enqueue(msg, absl::Now() + absl::Seconds(30));
    ASSERT_TRUE(st.ok()) << "message " << i << ": " << st;
  }
  for (Subprocess* r : readers) {
    ExpectLine(r, "OK 100000", absl::Seconds(60));
    auto st = r->Wait(absl::Seconds(10));
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(DescribeWaitStatus(*st), "exited 0");
  }
}

INSTANTIATE_TEST_SUITE_P(Readers, BroadcastTest, ::testing::Values(1, 2, 4));

// A writer process with two local readers and one on TCP (127.0.0.1): the TCP reader checks
// the same 100 000-message stream the local ones do.
TEST_F(MessageQueueProcessTest, TcpReaderReceivesTheSameStream) {
  Subprocess& writer = Start({"writer", "--readers", "3", "--remote", "1", "--count", "100000",
                              "--seed", "7", "--chunk", "4096", "--hold"});
  auto line = writer.ReadLine(absl::Seconds(30));
  ASSERT_TRUE(line.ok()) << line.status();
  ASSERT_TRUE(absl::StartsWith(*line, "HANDLE ")) << *line;
  auto h = Handle::FromText(line->substr(7));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->local_reader_ranks, std::vector<int32_t>({0, 1}));
  EXPECT_TRUE(absl::StartsWith(h->remote_address, "tcp://127.0.0.1:"));
  auto readers = StartReaders(*h, 3, 100000, 7);
  ExpectLine(&writer, "READY", absl::Seconds(30));
  for (Subprocess* r : readers) ExpectLine(r, "READY", absl::Seconds(30));
  for (Subprocess* r : readers) ExpectLine(r, "OK 100000", absl::Seconds(120));
  ExpectLine(&writer, "DONE", absl::Seconds(30));
  writer.Kill(SIGKILL);  // it holds until every reader has everything
  ASSERT_TRUE(writer.Wait(absl::Seconds(10)).ok());
}

// kill -9 of a reader: the writer, blocked on the full ring, reports that reader promptly.
TEST_F(MessageQueueProcessTest, WriterReportsKilledReader) {
  MessageQueueOptions opt;
  opt.n_readers = 2;
  opt.max_chunk_bytes = 1024;
  opt.max_chunks = 4;
  auto w = MessageQueueWriter::Create(opt);
  ASSERT_TRUE(w.ok());
  auto healthy = StartReaders((*w)->handle(), 1, 0, 1);  // rank 0 reads forever
  Subprocess& stalled =
      Start({"reader", "--handle", (*w)->handle().ToText(), "--rank", "1", "--stall"});
  ASSERT_TRUE((*w)->WaitUntilReady(absl::Now() + absl::Seconds(30)).ok());
  ExpectLine(&stalled, "READY", absl::Seconds(30));
  // Fill the ring: rank 1 never reads, so the writer soon has to wait for it (once 4 messages
  // too large for a slot hold the 4 data buffers, or all 1,024 slots are taken).
  absl::Status blocked;
  uint64_t i = 0;
  for (; i < 2 * SlotCount(opt.max_chunks); ++i) {
    blocked = (*w)->Enqueue(PatternMessage(1, i, 1024), absl::Now() + absl::Milliseconds(200));
    if (!blocked.ok()) break;
  }
  ASSERT_EQ(blocked.code(), absl::StatusCode::kDeadlineExceeded) << blocked;
  const auto msg = PatternMessage(1, i, 1024);
  EXPECT_TRUE(absl::StrContains(blocked.message(), "reader(s) 1")) << blocked;

  stalled.Kill(SIGKILL);
  ASSERT_TRUE(stalled.Wait(absl::Seconds(10)).ok());
  const absl::Time t0 = absl::Now();
  auto st = (*w)->Enqueue(msg, absl::Now() + absl::Seconds(10));
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), absl::StrCat("pid ", stalled.pid()))) << st;
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2)) << "reported within the liveness interval";
}

// kill -9 of the writer: every reader — two on shared memory, one on TCP — drains what was
// published, then reports the dead writer.
TEST_F(MessageQueueProcessTest, ReadersReportKilledWriter) {
  Subprocess& writer =
      Start({"writer", "--readers", "3", "--remote", "1", "--count", "0", "--chunk", "4096"});
  auto line = writer.ReadLine(absl::Seconds(30));
  ASSERT_TRUE(line.ok() && absl::StartsWith(*line, "HANDLE ")) << line.status();
  auto h = Handle::FromText(line->substr(7));
  ASSERT_TRUE(h.ok());
  auto readers = StartReaders(*h, 3, 0, 1);  // read and check until an error
  ExpectLine(&writer, "READY", absl::Seconds(30));
  for (Subprocess* r : readers) ExpectLine(r, "READY", absl::Seconds(30));
  writer.Kill(SIGKILL);
  ASSERT_TRUE(writer.Wait(absl::Seconds(10)).ok());
  for (Subprocess* r : readers) {
    auto said = r->ReadLine(absl::Seconds(10));
    ASSERT_TRUE(said.ok()) << said.status();
    EXPECT_TRUE(absl::StartsWith(*said, "ERROR UNAVAILABLE")) << *said;
    const bool names_writer =
        absl::StrContains(*said, absl::StrCat("writer (pid ", writer.pid(), ")")) ||
        absl::StrContains(*said, "lost the connection to the writer at " + h->remote_address);
    EXPECT_TRUE(names_writer) << *said;
    auto st = r->Wait(absl::Seconds(10));
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(DescribeWaitStatus(*st), "exited 3");
  }
}

// A handle for a segment that is gone, or garbage, is an error in the reader, not a crash.
TEST_F(MessageQueueProcessTest, ReaderRejectsBadHandles) {
  Subprocess& bad = Start({"reader", "--handle", "%%%not-a-handle", "--rank", "0"});
  ExpectLine(&bad, "ERROR INVALID_ARGUMENT", absl::Seconds(10));
  MessageQueueOptions opt;
  Handle h;
  {
    auto w = MessageQueueWriter::Create(opt);
    ASSERT_TRUE(w.ok());
    h = (*w)->handle();
  }  // writer gone, name unlinked
  Subprocess& gone = Start({"reader", "--handle", h.ToText(), "--rank", "0"});
  ExpectLine(&gone, "ERROR NOT_FOUND", absl::Seconds(10));
}

}  // namespace
}  // namespace vllm::ipc
