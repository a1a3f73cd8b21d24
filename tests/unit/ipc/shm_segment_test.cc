#include "ipc/shm_segment.h"

#include <sys/stat.h>

#include <string>

#include "gtest/gtest.h"
#include "ipc/zmq_util.h"

namespace vllm::ipc {
namespace {

class ShmSegmentTest : public ::testing::Test {
 protected:
  std::string name_ = "vllm-test-seg-" + UniqueToken();
};

// The hardening issue, defect 6: segments were created 0644 (Boost's default), readable by
// every local user until they are unlinked. Only the owner may open them now, whatever the
// umask.
TEST_F(ShmSegmentTest, CreatedOwnerOnlyWhileItHasAName) {
  const mode_t old_umask = umask(0);  // the mode must not depend on a kind umask
  auto seg = ShmSegment::Create(name_, 4096);
  umask(old_umask);
  ASSERT_TRUE(seg.ok()) << seg.status();
  struct stat st {};
  ASSERT_EQ(stat(("/dev/shm/" + name_).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, geteuid());

  // A second process of the same user can still open it (the readers do).
  auto other = ShmSegment::Open(name_);
  ASSERT_TRUE(other.ok()) << other.status();
  (*seg)->Unlink();
  EXPECT_NE(stat(("/dev/shm/" + name_).c_str(), &st), 0);
}

}  // namespace
}  // namespace vllm::ipc
