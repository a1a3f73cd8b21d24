// kv_transfer/file_store.h: blocks written to a file and read back into other blocks; every
// kind of bad file (corrupt byte, truncated, wrong layout, wrong version, bad magic) is refused
// before the cache is touched; keys are hex only; files are 0600 and written atomically.
#include "kv_transfer/file_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/unit/kv_transfer/kv_test_util.h"

namespace vllm::kv_transfer::file_store {
namespace {

using testing::HeapCache;
using testing::TinyLayout;

constexpr char kKey[] = "0123456789abcdef";

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/kv-file-store-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/store";  // created by WriteBlocks
    source_.FillRandom(7);
    destination_.Fill(0xAB);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  std::string Path() const { return EntryPath(dir_, kKey, 0); }
  // Flips one byte of the file at `offset`.
  void FlipByte(off_t offset) {
    const int fd = ::open(Path().c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    uint8_t b = 0;
    ASSERT_EQ(::pread(fd, &b, 1, offset), 1);
    b ^= 0x40;
    ASSERT_EQ(::pwrite(fd, &b, 1, offset), 1);
    ::close(fd);
  }
  // The destination is untouched: every byte still 0xAB.
  bool DestinationUntouched() const {
    for (int32_t b = 0; b < destination_.view().num_blocks; ++b) {
      for (uint8_t byte : destination_.Block(b)) {
        if (byte != 0xAB) return false;
      }
    }
    return true;
  }

  std::string root_, dir_;
  HeapCache source_{TinyLayout(), 8};
  HeapCache destination_{TinyLayout(), 8};
  const std::vector<int32_t> stored_ = {5, 2, 7};
  const std::vector<int32_t> into_ = {0, 1, 3};
};

TEST_F(FileStoreTest, RoundTrip) {
  ASSERT_TRUE(WriteBlocks(dir_, kKey, TinyLayout(), source_.view(), stored_, 40).ok());
  struct stat st {};
  ASSERT_EQ(::stat(Path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(static_cast<size_t>(st.st_size), kKvFileHeaderBytes + 3 * 96 * 1024);
  ASSERT_EQ(::stat((dir_ + "/" + kKey).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // No temporary file left beside it.
  int files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir_ + "/" + kKey)) {
    ++files;
  }
  EXPECT_EQ(files, 1);

  EXPECT_TRUE(Exists(dir_, kKey, 0));
  EXPECT_FALSE(Exists(dir_, kKey, 1));
  EXPECT_FALSE(Exists(dir_, "abcd", 0));
  auto tokens = StoredTokens(dir_, kKey, 0);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(*tokens, 40);

  int32_t num_tokens = 0;
  absl::Status s = ReadBlocks(dir_, kKey, TinyLayout(), destination_.view(), into_, &num_tokens);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(num_tokens, 40);
  for (size_t i = 0; i < stored_.size(); ++i) {
    EXPECT_EQ(destination_.Block(into_[i]), source_.Block(stored_[i])) << i;
  }
  EXPECT_EQ(destination_.Block(2), std::vector<uint8_t>(96 * 1024, 0xAB));

  // Writing again replaces the entry atomically.
  ASSERT_TRUE(WriteBlocks(dir_, kKey, TinyLayout(), source_.view(), stored_, 33).ok());
  EXPECT_EQ(*StoredTokens(dir_, kKey, 0), 33);
}

TEST_F(FileStoreTest, CorruptDataByteIsAChecksumErrorAndTouchesNothing) {
  ASSERT_TRUE(WriteBlocks(dir_, kKey, TinyLayout(), source_.view(), stored_, 40).ok());
  FlipByte(kKvFileHeaderBytes + 100000);
  int32_t num_tokens = -1;
  absl::Status s = ReadBlocks(dir_, kKey, TinyLayout(), destination_.view(), into_, &num_tokens);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "checksum")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), Path())) << s;
  EXPECT_EQ(num_tokens, -1);
  EXPECT_TRUE(DestinationUntouched());
}

TEST_F(FileStoreTest, CorruptHeaderIsRefused) {
  ASSERT_TRUE(WriteBlocks(dir_, kKey, TinyLayout(), source_.view(), stored_, 40).ok());
  FlipByte(48);  // num_tokens
  int32_t num_tokens = 0;
  absl::Status s = ReadBlocks(dir_, kKey, TinyLayout(), destination_.view(), into_, &num_tokens);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "header checksum")) << s;
  EXPECT_FALSE(Exists(dir_, kKey, 0));
  EXPECT_TRUE(DestinationUntouched());
}

TEST_F(FileStoreTest, TruncatedFileIsRefused) {
  ASSERT_TRUE(WriteBlocks(dir_, kKey, TinyLayout(), source_.view(), stored_, 40).ok());
  std::filesystem::resize_file(Path(), kKvFileHeaderBytes + 2 * 96 * 1024 + 17);
  int32_t num_tokens = 0;
  absl::Status s = ReadBlocks(dir_, kKey, TinyLayout(), destination_.view(), into_, &num_tokens);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "truncated")) << s;
  EXPECT_FALSE(Exists(dir_, kKey, 0));
  EXPECT_TRUE(DestinationUntouched());

  std::filesystem::resize_file(Path(), 10);  // shorter than the header
  s = ReadBlocks(dir_, kKey, TinyLayout(), destination_.view(), into_, &num_tokens);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(DestinationUntouched());
}

TEST_F(FileStoreTest, WrongLayoutNamesTheField) {
  KvLayout other = TinyLayout();
  other.block_size = 32;
  HeapCache cache(other, 4);
  const std::vector<int32_t> blocks = {0, 1, 2};
  ASSERT_TRUE(WriteBlocks(dir_, kKey, other, cache.view(), blocks, 40).ok());
  int32_t num_tokens = 0;
  absl::Status s = ReadBlocks(dir_, kKey, TinyLayout(), destination_.view(), into_, &num_tokens);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "block_size 32 != 16")) << s;
  EXPECT_TRUE(DestinationUntouched());
}

TEST_F(FileStoreTest, WrongBlockCountIsRefused) {
  ASSERT_TRUE(WriteBlocks(dir_, kKey, TinyLayout(), source_.view(), stored_, 40).ok());
  int32_t num_tokens = 0;
  const std::vector<int32_t> two = {0, 1};
  absl::Status s = ReadBlocks(dir_, kKey, TinyLayout(), destination_.view(), two, &num_tokens);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_TRUE(DestinationUntouched());
}

TEST_F(FileStoreTest, MissingFileIsNotFound) {
  int32_t num_tokens = 0;
  absl::Status s = ReadBlocks(dir_, kKey, TinyLayout(), destination_.view(), into_, &num_tokens);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_TRUE(absl::IsNotFound(StoredTokens(dir_, kKey, 0).status()));
}

TEST_F(FileStoreTest, NotAKvFile) {
  std::filesystem::create_directories(dir_ + "/" + kKey);
  std::ofstream(Path()) << std::string(200, 'x');
  int32_t num_tokens = 0;
  absl::Status s = ReadBlocks(dir_, kKey, TinyLayout(), destination_.view(), into_, &num_tokens);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "magic")) << s;
}

TEST_F(FileStoreTest, KeysAreHexOnly) {
  const std::vector<std::string> keys = {
      "", "../etc", "ABCDEF", "12 34", "a/b", "0x12", std::string(300, 'a')};
  for (const std::string& key : keys) {
    EXPECT_TRUE(
        absl::IsInvalidArgument(WriteBlocks(dir_, key, TinyLayout(), source_.view(), stored_, 1)))
        << key;
    int32_t n = 0;
    EXPECT_TRUE(absl::IsInvalidArgument(
        ReadBlocks(dir_, key, TinyLayout(), destination_.view(), into_, &n)))
        << key;
    EXPECT_FALSE(Exists(dir_, key, 0));
  }
  EXPECT_FALSE(std::filesystem::exists(dir_));  // nothing was created
}

TEST_F(FileStoreTest, BadArgumentsAreRefusedBeforeAnyIo) {
  const std::vector<int32_t> out_of_range = {8};
  EXPECT_TRUE(absl::IsInvalidArgument(
      WriteBlocks(dir_, kKey, TinyLayout(), source_.view(), out_of_range, 1)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      WriteBlocks(dir_, kKey, TinyLayout(), source_.view(), stored_, 3 * 16 + 1)));
  KvLayout other = TinyLayout();
  other.head_dim = 64;
  EXPECT_TRUE(absl::IsInvalidArgument(WriteBlocks(dir_, kKey, other, source_.view(), stored_, 1)));
  EXPECT_FALSE(std::filesystem::exists(dir_));
}

TEST(KvFileHeaderTest, RoundTripAndRanges) {
  KvFileHeader h{TinyLayout(), 3, 40, 0x1234567890abcdefULL};
  const std::string bytes = EncodeKvFileHeader(h);
  ASSERT_EQ(bytes.size(), kKvFileHeaderBytes);
  auto decoded = DecodeKvFileHeader(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, h);
  // Fields out of range, with a valid header checksum: still refused.
  h.num_tokens = 3 * 16 + 1;
  const std::string too_many = EncodeKvFileHeader(h);
  EXPECT_TRUE(absl::IsInvalidArgument(
      DecodeKvFileHeader(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(too_many.data()),
                                                  too_many.size()))
          .status()));
  h.num_tokens = 0;
  h.layout.dtype_bytes = 3;
  const std::string bad_layout = EncodeKvFileHeader(h);
  EXPECT_TRUE(absl::IsInvalidArgument(
      DecodeKvFileHeader(
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bad_layout.data()),
                                   bad_layout.size()))
          .status()));
  EXPECT_TRUE(absl::IsDataLoss(DecodeKvFileHeader({}).status()));
}

}  // namespace
}  // namespace vllm::kv_transfer::file_store
