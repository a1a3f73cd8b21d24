#include "ipc/shm_ring_buffer.h"

#include <cstring>
#include <thread>

#include "gtest/gtest.h"
#include "ipc/zmq_util.h"

namespace vllm::ipc {
namespace {

class ShmRingBufferTest : public ::testing::Test {
 protected:
  std::string name_ = "vllm-mq-" + UniqueToken();
  WaitOptions fast_;
  void SetUp() override { fast_.liveness_interval = absl::Milliseconds(5); }
  int64_t In(absl::Duration d) { return MonoNowNs() + absl::ToInt64Nanoseconds(d); }
};

TEST_F(ShmRingBufferTest, ValidatesGeometry) {
  EXPECT_EQ(ShmRingBuffer::Create(name_, 0, 10, 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmRingBuffer::Create(name_, 1, 0, 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmRingBuffer::Create(name_, 1, 10, 100).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmRingBuffer::Create(name_, kMaxShmReaders + 1, 10, 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ShmRingBufferTest, OpenChecksHeaderAgainstHandle) {
  auto ring = ShmRingBuffer::Create(name_, 2, 4, 1024);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_TRUE(ShmRingBuffer::Open(name_, 2, 4, 1024).ok());
  EXPECT_EQ(ShmRingBuffer::Open(name_, 3, 4, 1024).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmRingBuffer::Open(name_, 2, 4, 2048).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmRingBuffer::Open("vllm-mq-does-not-exist", 2, 4, 1024).status().code(),
            absl::StatusCode::kNotFound);
  // Corrupt the magic: a reader must refuse the segment.
  std::atomic_ref<uint64_t>((*ring)->header()->magic).store(0);
  EXPECT_EQ(ShmRingBuffer::Open(name_, 2, 4, 1024).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(ShmRingBufferTest, CreatorUnlinksNameOnDestruction) {
  {
    auto ring = ShmRingBuffer::Create(name_, 1, 2, 64);
    ASSERT_TRUE(ring.ok());
  }
  EXPECT_EQ(ShmRingBuffer::Open(name_, 1, 2, 64).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ShmRingBufferTest, WrapsAroundInOrderAndBlocksWhenFull) {
  auto ring = ShmRingBuffer::Create(name_, 1, 3, 256);
  ASSERT_TRUE(ring.ok());
  RingWriter writer(std::move(*ring), fast_);
  auto reader_ring = ShmRingBuffer::Open(name_, 1, 3, 256);
  ASSERT_TRUE(reader_ring.ok());
  auto reader = RingReader::Attach(std::move(*reader_ring), 0, fast_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_TRUE(writer.WaitForReaders(In(absl::Seconds(5))).ok());
  // Small payloads sit in the slots, larger ones in the 3 data buffers: both wrap in order.
  for (uint64_t i = 0; i < 2 * SlotCount(3) + 10; ++i) {
    const uint64_t size = i % 3 == 0 ? 200 : 8;
    auto chunk = writer.Acquire(size, In(absl::Seconds(5)));
    ASSERT_TRUE(chunk.ok()) << chunk.status();
    std::memcpy(*chunk, &i, 8);
    writer.Publish(size, 0);
    auto got = (*reader)->Acquire(In(absl::Seconds(5)));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size, size);
    ASSERT_EQ((got->flags & kChunkInline) != 0, size <= kInlineBytes);
    uint64_t v = 0;
    std::memcpy(&v, got->data, 8);
    ASSERT_EQ(v, i);
    (*reader)->Release();
  }
  // Fill the data buffers: the 4th large message must time out naming the reader behind.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(writer.Acquire(200, In(absl::Seconds(5))).ok());
    writer.Publish(200, 0);
  }
  auto full = writer.Acquire(200, In(absl::Milliseconds(30)));
  ASSERT_EQ(full.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(full.status().message().find("reader(s) 0"), std::string::npos) << full.status();
  // Small messages still go (slots are free); then fill the slots too.
  uint64_t small = 0;
  while (writer.TryAcquire(8) != nullptr) {
    writer.Publish(8, 0);
    ++small;
  }
  EXPECT_EQ(small, SlotCount(3) - 3);
  auto no_slot = writer.Acquire(8, In(absl::Milliseconds(30)));
  ASSERT_EQ(no_slot.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(no_slot.status().message().find("a free slot"), std::string::npos) << no_slot.status();
}

TEST_F(ShmRingBufferTest, SecondAttachOfSameReaderIsRefused) {
  auto ring = ShmRingBuffer::Create(name_, 1, 2, 64);
  ASSERT_TRUE(ring.ok());
  auto a = RingReader::Attach(*ShmRingBuffer::Open(name_, 1, 2, 64), 0, fast_);
  ASSERT_TRUE(a.ok());
  auto b = RingReader::Attach(*ShmRingBuffer::Open(name_, 1, 2, 64), 0, fast_);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition) << b.status();
}

TEST_F(ShmRingBufferTest, WriterReportsReaderThatWentAway) {
  auto ring = ShmRingBuffer::Create(name_, 1, 1, 256);
  ASSERT_TRUE(ring.ok());
  RingWriter writer(std::move(*ring), fast_);
  auto reader = RingReader::Attach(*ShmRingBuffer::Open(name_, 1, 1, 256), 0, fast_);
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE(writer.Acquire(256, In(absl::Seconds(5))).ok());
  writer.Publish(256, 0);
  reader->reset();  // closes its descriptor: its liveness lock goes, like a dead process's
  auto st = writer.Acquire(256, In(absl::Seconds(10)));
  ASSERT_EQ(st.status().code(), absl::StatusCode::kUnavailable) << st.status();
  EXPECT_NE(st.status().message().find("reader 0"), std::string::npos);
}

TEST_F(ShmRingBufferTest, ReaderDrainsThenReportsCloseAndDeadWriter) {
  auto ring = ShmRingBuffer::Create(name_, 1, 4, 64);
  ASSERT_TRUE(ring.ok());
  auto writer = std::make_unique<RingWriter>(std::move(*ring), fast_);
  auto reader = RingReader::Attach(*ShmRingBuffer::Open(name_, 1, 4, 64), 0, fast_);
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE(writer->Acquire(0, In(absl::Seconds(5))).ok());
  writer->Publish(0, 0);
  writer->Close();
  ASSERT_TRUE((*reader)->Acquire(In(absl::Seconds(5))).ok()) << "published before close";
  (*reader)->Release();
  EXPECT_EQ((*reader)->Acquire(In(absl::Seconds(5))).status().code(), absl::StatusCode::kCancelled);
  writer.reset();
  // Closed wins over dead here; a second reader of a never-closed dead writer:
  auto ring2 = ShmRingBuffer::Create(name_ + "b", 1, 4, 64);
  ASSERT_TRUE(ring2.ok());
  auto w2 = std::make_unique<RingWriter>(std::move(*ring2), fast_);
  auto r2 = RingReader::Attach(*ShmRingBuffer::Open(name_ + "b", 1, 4, 64), 0, fast_);
  ASSERT_TRUE(r2.ok());
  w2.reset();
  auto st = (*r2)->Acquire(In(absl::Seconds(10)));
  EXPECT_EQ(st.status().code(), absl::StatusCode::kUnavailable) << st.status();
}

TEST_F(ShmRingBufferTest, CancelEndsAWaitFromAnotherThread) {
  auto ring = ShmRingBuffer::Create(name_, 1, 2, 64);
  ASSERT_TRUE(ring.ok());
  RingWriter writer(std::move(*ring), fast_);
  WaitOptions slow = fast_;
  slow.liveness_interval = absl::Hours(1);  // only the cancel's wake-up can end the wait
  auto reader = RingReader::Attach(*ShmRingBuffer::Open(name_, 1, 2, 64), 0, slow);
  ASSERT_TRUE(reader.ok());
  absl::Status result;
  std::thread t([&] { result = (*reader)->Acquire(In(absl::Seconds(30))).status(); });
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while ((*reader)->ring().header()->readers_sleeping.load() == 0 && absl::Now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_GT((*reader)->ring().header()->readers_sleeping.load(), 0u) << "reader never blocked";
  (*reader)->Cancel();
  t.join();
  EXPECT_EQ(result.code(), absl::StatusCode::kCancelled) << result;
}

}  // namespace
}  // namespace vllm::ipc
