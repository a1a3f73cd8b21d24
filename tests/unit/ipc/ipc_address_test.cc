// Private ipc:// endpoints (the hardening issue, defect 6: the internal sockets were abstract
// Unix sockets that any local user could connect to).
#include "ipc/ipc_address.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ipc/wait_strategy.h"
#include "ipc/zmq_util.h"

namespace vllm::ipc {
namespace {

std::string PathOf(const std::string& address) {
  EXPECT_TRUE(absl::StartsWith(address, "ipc://")) << address;
  return address.substr(6);
}

std::string DirOf(const std::string& path) { return path.substr(0, path.rfind('/')); }

bool Exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

// Sets an environment variable for the scope of a test, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A directory of the test, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/ipc-address-test-XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Waits for a forked child within 10 s (a pidfd makes it one poll), killing it past that;
// returns its wait status, or -1.
int WaitChild(pid_t pid) {
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    poll(&p, 1, 10'000);
    close(pidfd);
  }
  int status = 0;
  if (waitpid(pid, &status, WNOHANG) == pid) return status;
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

// Sends one frame PUSH → PULL and receives it within 5 s.
void RoundTrip(zmq::socket_t& push, zmq::socket_t& pull, const std::string& text) {
  std::vector<zmq::message_t> out;
  out.emplace_back(text.data(), text.size());
  const int64_t deadline = MonoNowNs() + 5'000'000'000;
  ASSERT_TRUE(SendMultipart(push, out, deadline, absl::Milliseconds(10), nullptr, "send").ok());
  std::vector<zmq::message_t> in;
  ASSERT_TRUE(RecvMultipart(pull, in, 1, deadline, absl::Milliseconds(10), nullptr, "recv").ok());
  EXPECT_EQ(in.at(0).to_string(), text);
}

TEST(IpcAddressTest, IsASocketFileInAnOwnerOnlyDirectory) {
  const mode_t old_umask = umask(0);  // the directory's mode must not depend on the umask
  auto address = ScopedIpcAddress::Create("handshake");
  umask(old_umask);
  ASSERT_TRUE(address.ok()) << address.status();
  const std::string path = PathOf(address->address());
  EXPECT_NE(path[0], '@') << "abstract socket: any local user could connect";
  EXPECT_LE(path.size(), sizeof(sockaddr_un::sun_path) - 1);
  const std::string dir = DirOf(path);
  EXPECT_TRUE(
      absl::StartsWith(dir, absl::StrCat(IpcEndpointBaseDir(), "/vllm-ipc-", getpid(), "-")))
      << dir;
  struct stat st {};
  ASSERT_EQ(lstat(dir.c_str(), &st), 0) << dir;
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, geteuid());

  zmq::socket_t pull(ZmqContext(), zmq::socket_type::pull);
  pull.set(zmq::sockopt::linger, 0);
  pull.bind(address->address());
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  address->Release();
  EXPECT_FALSE(Exists(path));
  EXPECT_FALSE(Exists(dir)) << "the last release removes the directory";
}

TEST(IpcAddressTest, ConnectionsOutliveTheFileAndNothingNewConnects) {
  auto a = ScopedIpcAddress::Create("a");
  auto b = ScopedIpcAddress::Create("b");
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string path = PathOf(a->address());
  const std::string dir = DirOf(path);
  ASSERT_EQ(DirOf(PathOf(b->address())), dir) << "one directory per process";

  zmq::socket_t pull(ZmqContext(), zmq::socket_type::pull);
  zmq::socket_t push(ZmqContext(), zmq::socket_type::push);
  for (zmq::socket_t* s : {&pull, &push}) s->set(zmq::sockopt::linger, 0);
  pull.bind(a->address());
  push.connect(a->address());
  ASSERT_NO_FATAL_FAILURE(RoundTrip(push, pull, "before"));  // proves the connection

  a->Release();
  EXPECT_FALSE(Exists(path));
  EXPECT_TRUE(Exists(dir)) << "b still lives in it";
  ASSERT_NO_FATAL_FAILURE(RoundTrip(push, pull, "after"));

  // A newcomer finds no file: its connection never completes (ZMQ_IMMEDIATE: no pipe until
  // then, so the socket never becomes writable).
  zmq::socket_t late(ZmqContext(), zmq::socket_type::push);
  late.set(zmq::sockopt::linger, 0);
  late.set(zmq::sockopt::immediate, 1);
  late.connect(a->address());
  zmq::pollitem_t item{late.handle(), 0, ZMQ_POLLOUT, 0};
  EXPECT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(300)), 0);

  b->Release();
  EXPECT_FALSE(Exists(dir));
  // Released addresses are forgotten: releasing again or releasing a stranger is harmless.
  ReleaseIpcAddress(a->address());
  ReleaseIpcAddress("ipc:///tmp/not-ours");
  ReleaseIpcAddress("tcp://127.0.0.1:1");
}

// Root ignores 0700, so the stranger is a forked child that drops to nobody. The child makes
// only raw system calls (no allocation, no locks: the parent has ZMQ threads).
TEST(IpcAddressTest, AnotherUserCannotConnect) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become another user";
  auto address = ScopedIpcAddress::Create("output");
  ASSERT_TRUE(address.ok());
  zmq::socket_t pull(ZmqContext(), zmq::socket_type::pull);
  pull.set(zmq::sockopt::linger, 0);
  pull.bind(address->address());

  const std::string path = PathOf(address->address());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof addr.sun_path);
  std::memcpy(addr.sun_path, path.data(), path.size());
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    constexpr long kNobody = 65534;
    if (syscall(SYS_setgroups, 0, nullptr) != 0 || syscall(SYS_setgid, kNobody) != 0 ||
        syscall(SYS_setuid, kNobody) != 0) {
      _exit(100);
    }
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) _exit(101);
    const int rc = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
    _exit(rc == 0 ? 0 : (errno & 0x7f));
  }
  const int status = WaitChild(pid);
  ASSERT_TRUE(status != -1 && WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), EACCES) << "0: the other user connected";
}

TEST(IpcAddressTest, BaseDirectoryFromTheEnvironmentWhenShortEnough) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  {
    ScopedEnv xdg("XDG_RUNTIME_DIR", tmp.path());
    EXPECT_EQ(IpcEndpointBaseDir(), tmp.path());
    auto a = ScopedIpcAddress::Create("x");
    ASSERT_TRUE(a.ok());
    EXPECT_TRUE(absl::StartsWith(a->address(), "ipc://" + tmp.path() + "/vllm-ipc-"));
  }
  // Too long for sun_path once the directory and file names are added: not used.
  const std::string long_dir = tmp.path() + "/" + std::string(60, 'd');
  ASSERT_EQ(mkdir(long_dir.c_str(), 0700), 0);
  {
    ScopedEnv xdg("XDG_RUNTIME_DIR", long_dir);
    ScopedEnv tmpdir("TMPDIR", "relative/is/ignored");
    EXPECT_EQ(IpcEndpointBaseDir(), "/tmp");
    auto a = ScopedIpcAddress::Create("a-very-long-tag-that-is-cut");
    ASSERT_TRUE(a.ok());
    EXPECT_LE(PathOf(a->address()).size(), sizeof(sockaddr_un::sun_path) - 1);
    zmq::socket_t pull(ZmqContext(), zmq::socket_type::pull);
    pull.set(zmq::sockopt::linger, 0);
    EXPECT_NO_THROW(pull.bind(a->address()));
  }
}

// A directory like the one a process killed during start-up leaves: its socket files have no
// listener and its pid is gone.
TEST(IpcAddressTest, StaleDirectoriesOfDeadProcessesAreRemoved) {
  TempDir base;
  ASSERT_FALSE(base.path().empty());
  const pid_t dead = fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) _exit(0);
  ASSERT_NE(WaitChild(dead), -1);

  auto make_dir = [&](pid_t pid, const char* suffix) {
    const std::string dir = absl::StrCat(base.path(), "/vllm-ipc-", pid, "-", suffix);
    EXPECT_EQ(mkdir(dir.c_str(), 0700), 0) << dir;
    return dir;
  };
  // Binds a socket at `path`; listens and stays open when `listen_on` (a live endpoint).
  auto bind_socket = [](const std::string& path, bool listen_on) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());
    EXPECT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0) << path;
    if (listen_on) {
      EXPECT_EQ(listen(fd, 4), 0);
      return fd;
    }
    close(fd);
    return -1;
  };
  const std::string stale = make_dir(dead, "AAAAAA");
  bind_socket(stale + "/output-2", false);
  bind_socket(stale + "/input-1", false);
  const std::string alive_pid = make_dir(getppid(), "BBBBBB");
  bind_socket(alive_pid + "/output-2", false);
  const std::string listening = make_dir(dead, "CCCCCC");
  const int live_fd = bind_socket(listening + "/output-2", true);
  const std::string not_a_socket = make_dir(dead, "DDDDDD");
  if (std::FILE* f = std::fopen((not_a_socket + "/data").c_str(), "w")) std::fclose(f);
  const std::string fresh_empty = make_dir(dead, "EEEEEE");

  RemoveStaleIpcDirs(base.path());
  EXPECT_FALSE(Exists(stale)) << "dead pid, nobody listening: removed";
  EXPECT_TRUE(Exists(alive_pid)) << "its process lives";
  EXPECT_TRUE(Exists(listening)) << "someone listens on it";
  EXPECT_TRUE(Exists(not_a_socket)) << "holds something else than sockets";
  EXPECT_TRUE(Exists(fresh_empty)) << "empty but young: may be about to get its first socket";
  close(live_fd);
}

TEST(AcceptCounterTest, CountsAcceptedConnections) {
  auto address = ScopedIpcAddress::Create("pull");
  ASSERT_TRUE(address.ok());
  zmq::socket_t pull(ZmqContext(), zmq::socket_type::pull);
  pull.set(zmq::sockopt::linger, 0);
  pull.bind(address->address());
  auto counter = AcceptCounter::Start(pull);
  ASSERT_TRUE(counter.ok()) << counter.status();
  zmq::socket_t p1(ZmqContext(), zmq::socket_type::push);
  zmq::socket_t p2(ZmqContext(), zmq::socket_type::push);
  for (zmq::socket_t* s : {&p1, &p2}) {
    s->set(zmq::sockopt::linger, 0);
    s->connect(address->address());
  }
  EXPECT_TRUE((*counter)
                  ->WaitForAccepted(2, MonoNowNs() + 10'000'000'000, absl::Milliseconds(10),
                                    nullptr, "pushers")
                  .ok());
  absl::Status three = (*counter)->WaitForAccepted(3, MonoNowNs() + 100'000'000,
                                                   absl::Milliseconds(10), nullptr, "pushers");
  EXPECT_EQ(three.code(), absl::StatusCode::kDeadlineExceeded) << three;
  EXPECT_NE(three.message().find("2 of 3"), std::string::npos) << three;
  // Once the peers are in, the name can go; what they send still arrives.
  address->Release();
  counter->reset();
  ASSERT_NO_FATAL_FAILURE(RoundTrip(p1, pull, "one"));
  ASSERT_NO_FATAL_FAILURE(RoundTrip(p2, pull, "two"));
}

}  // namespace
}  // namespace vllm::ipc
