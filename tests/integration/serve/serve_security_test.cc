// The hardening issue's defect 6: any local process could stop the server through its internal
// ZMQ sockets. They were abstract Unix sockets (listed in /proc/net/unix, no permission check),
// and one 'F' (EXECUTOR_FAILED) frame sent to the API server's output socket (@vllm-output-…)
// made it answer 503 for ever.
//
// The server (TP 2: API server, engine core, two workers, so every kind of endpoint is made)
// is started with XDG_RUNTIME_DIR pointing at a directory of this test, watched with inotify:
//  (a) none of the server's processes holds an abstract Unix socket, and /proc/net/unix lists
//      no "@vllm" name at all;
//  (b) every endpoint directory the server makes is 0700 and owned by it, and once the server
//      is ready no socket file and no endpoint directory is left (nor after it exits);
//  (c) as root (root ignores 0700, so the attacker is a forked child running as nobody): while
//      the server starts, each socket file that appears refuses the child (EACCES, or ENOENT
//      once it is gone); once the server is ready, the child connects a ZMQ PUSH and a DEALER to
//      every Unix socket name the server's processes hold (abstract ones included, so a
//      regression to abstract names is caught) and sends an 'F' frame; nothing gets through,
//      and the server still answers a completion and /health 200.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/serve/serve_test_support.h"
#include "tests/support/process.h"

namespace vllm {
namespace {

constexpr uid_t kNobody = 65534;

// One line of /proc/net/unix: a socket's inode and bound name ('@' first: abstract; empty:
// unbound). A bound name stays listed after its file is unlinked.
struct UnixSocket {
  uint64_t inode = 0;
  std::string path;
};

std::vector<UnixSocket> ProcNetUnix() {
  std::vector<UnixSocket> out;
  std::ifstream in("/proc/net/unix");
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    UnixSocket s;
    if (f.size() < 7 || !absl::SimpleAtoi(f[6], &s.inode)) continue;
    if (f.size() > 7) s.path = absl::StrJoin(f.begin() + 7, f.end(), " ");
    out.push_back(std::move(s));
  }
  return out;
}

// Inodes of the sockets `pid` has open ("socket:[N]" links in /proc/<pid>/fd).
std::set<uint64_t> SocketInodesOf(pid_t pid) {
  std::set<uint64_t> out;
  const std::string dir = absl::StrCat("/proc/", pid, "/fd");
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    char target[256];
    const ssize_t n = readlinkat(dirfd(d), e->d_name, target, sizeof target - 1);
    if (n <= 0) continue;
    const std::string link(target, static_cast<size_t>(n));
    uint64_t inode = 0;
    if (absl::StartsWith(link, "socket:[") && link.back() == ']' &&
        absl::SimpleAtoi(link.substr(8, link.size() - 9), &inode)) {
      out.insert(inode);
    }
  }
  closedir(d);
  return out;
}

// The bound names of the Unix sockets that `pids` hold.
std::set<std::string> UnixSocketNamesOf(const std::vector<pid_t>& pids) {
  std::set<uint64_t> inodes;
  for (pid_t pid : pids) inodes.merge(SocketInodesOf(pid));
  std::set<std::string> out;
  for (const UnixSocket& s : ProcNetUnix()) {
    if (!s.path.empty() && inodes.count(s.inode) > 0) out.insert(s.path);
  }
  return out;
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
        out.push_back(e->d_name);
      }
    }
    closedir(d);
  }
  return out;
}

// connect() to a Unix socket name as /proc/net/unix writes it; 0 on success, else errno.
int RawConnect(const std::string& name) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (name.empty() || name.size() >= sizeof addr.sun_path) return ENAMETOOLONG;
  std::memcpy(addr.sun_path, name.data(), name.size());
  if (name[0] == '@') addr.sun_path[0] = '\0';  // abstract: the length delimits the name
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  const int rc = connect(fd, reinterpret_cast<const sockaddr*>(&addr), len);
  const int err = rc == 0 ? 0 : errno;
  close(fd);
  return err;
}

// Connects a ZMQ PUSH and a DEALER to `name` and offers each an 'F' frame (the engine's
// EXECUTOR_FAILED kind) for up to 300 ms. ZMQ_IMMEDIATE: a send succeeds only over a completed
// connection, so true means the frame went to the server.
bool SendFailedFrame(zmq::context_t& ctx, const std::string& name) {
  bool delivered = false;
  for (zmq::socket_type type : {zmq::socket_type::push, zmq::socket_type::dealer}) {
    try {
      zmq::socket_t s(ctx, type);
      s.set(zmq::sockopt::linger, 200);
      s.set(zmq::sockopt::immediate, 1);
      s.connect("ipc://" + name);
      const absl::Time until = absl::Now() + absl::Milliseconds(300);
      while (absl::Now() < until) {
        zmq::message_t kind("F", 1);
        if (s.send(kind, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
          (void)s.send(zmq::str_buffer("forged"), zmq::send_flags::none);
          delivered = true;
          break;
        }
        zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLOUT, 0};
        zmq::poll(&item, 1, std::chrono::milliseconds(20));  // waits for a connection, bounded
      }
    } catch (const zmq::error_t&) {
      // A name ZMQ refuses cannot be reached through ZMQ either.
    }
  }
  return delivered;
}

// What the unprivileged child managed for one name.
struct Probe {
  std::string name;
  int connect_errno = -1;      // 0: connect() succeeded
  bool zmq_delivered = false;  // an 'F' frame went over a completed ZMQ connection
};

// Forks a child that drops to nobody (groups, gid, uid) and tries every name: a raw connect(),
// and with `zmq_frames` the ZMQ 'F' frames. Requires root. The child is killed and reaped if
// it does not finish within 30 s.
absl::StatusOr<std::vector<Probe>> ProbeAsNobody(const std::vector<std::string>& names,
                                                 bool zmq_frames) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    close(fds[0]);
    if (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0 ||
        getuid() != kNobody || geteuid() != kNobody) {
      dprintf(fds[1], "cannot become nobody: %s\n", std::strerror(errno));
      _exit(3);
    }
    std::optional<zmq::context_t> ctx;
    if (zmq_frames) ctx.emplace(1);
    for (const std::string& name : names) {
      const int err = RawConnect(name);
      const bool delivered = zmq_frames && SendFailedFrame(*ctx, name);
      dprintf(fds[1], "%d %d\n", err, delivered ? 1 : 0);
    }
    ctx.reset();
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()))) <= 0) {
      continue;
    }
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n == 0) break;
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  // EOF comes an instant before the child can be reaped: wait for its exit on a pidfd.
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    poll(&p, 1,
         static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()))));
    close(pidfd);
  }
  int status = 0;
  if (waitpid(pid, &status, WNOHANG) != pid) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return absl::DeadlineExceededError("the nobody child did not finish in 30 s");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(
        absl::StrCat("nobody child: ", testing::DescribeWaitStatus(status), ": ", out));
  }
  std::vector<Probe> probes;
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  if (lines.size() != names.size()) return absl::InternalError("nobody child: " + out);
  for (size_t i = 0; i < names.size(); ++i) {
    Probe p;
    p.name = names[i];
    int delivered = 0;
    if (std::sscanf(lines[i].c_str(), "%d %d", &p.connect_errno, &delivered) != 2) {
      return absl::InternalError("nobody child: " + lines[i]);
    }
    p.zmq_delivered = delivered != 0;
    probes.push_back(p);
  }
  return probes;
}

// A directory this test owns, given to the server as XDG_RUNTIME_DIR (the base of its endpoint
// directories). 0755, so that only the endpoint directories' own mode keeps nobody out.
// Restores the environment and removes the directory when it goes.
class RuntimeDir {
 public:
  RuntimeDir() {
    std::string tmpl = "/tmp/vllm-sec-test-XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr && chmod(tmpl.c_str(), 0755) == 0) path_ = tmpl;
    if (const char* old = getenv("XDG_RUNTIME_DIR")) old_ = old;
    if (!path_.empty()) setenv("XDG_RUNTIME_DIR", path_.c_str(), 1);
  }
  ~RuntimeDir() {
    if (old_) {
      setenv("XDG_RUNTIME_DIR", old_->c_str(), 1);
    } else {
      unsetenv("XDG_RUNTIME_DIR");
    }
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::optional<std::string> old_;
};

// Watches the runtime directory while the server starts: each endpoint directory that appears
// is stat'ed and watched in turn; each socket file that appears is probed by nobody (as root).
class EndpointWatch {
 public:
  struct Dir {
    mode_t mode = 0;
    uid_t uid = 0;
  };

  explicit EndpointWatch(std::string base) : base_(std::move(base)) {
    fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd_ >= 0) base_wd_ = inotify_add_watch(fd_, base_.c_str(), IN_CREATE);
  }
  ~EndpointWatch() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0 && base_wd_ >= 0; }

  // Handles the events queued so far; never blocks.
  void Drain() {
    alignas(inotify_event) char buf[8192];
    while (true) {
      const ssize_t n = read(fd_, buf, sizeof buf);
      if (n <= 0) return;
      for (ssize_t off = 0; off < n;) {
        const auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
        off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
        if (ev->len == 0) continue;
        const std::string name(ev->name);
        if (ev->wd == base_wd_) {
          if ((ev->mask & IN_ISDIR) != 0) NewDir(absl::StrCat(base_, "/", name));
        } else if (auto it = watched_.find(ev->wd); it != watched_.end()) {
          NewEntry(absl::StrCat(it->second, "/", name));
        }
      }
    }
  }

  const std::map<std::string, Dir>& dirs() const { return dirs_; }
  const std::vector<std::string>& dirs_gone_early() const { return dirs_gone_early_; }
  const std::vector<Probe>& probes() const { return probes_; }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  void NewDir(const std::string& dir) {
    struct stat st {};
    if (lstat(dir.c_str(), &st) != 0) {
      dirs_gone_early_.push_back(dir);
      return;
    }
    dirs_[dir] = {st.st_mode, st.st_uid};
    const int wd = inotify_add_watch(fd_, dir.c_str(), IN_CREATE);
    if (wd >= 0) watched_[wd] = dir;
    // Entries made before the watch was added.
    for (const std::string& e : ListDir(dir)) NewEntry(absl::StrCat(dir, "/", e));
  }

  void NewEntry(const std::string& path) {
    if (!probed_.insert(path).second) return;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode) || geteuid() != 0) return;
    absl::StatusOr<std::vector<Probe>> p = ProbeAsNobody({path}, /*zmq_frames=*/false);
    if (!p.ok()) {
      errors_.push_back(p.status().ToString());
      return;
    }
    probes_.insert(probes_.end(), p->begin(), p->end());
  }

  std::string base_;
  int fd_ = -1;
  int base_wd_ = -1;
  std::map<int, std::string> watched_;  // watch descriptor → endpoint directory
  std::map<std::string, Dir> dirs_;
  std::vector<std::string> dirs_gone_early_;
  std::set<std::string> probed_;
  std::vector<Probe> probes_;
  std::vector<std::string> errors_;
};

class ServeSecurityTest : public testing::ServeTest {};

TEST_F(ServeSecurityTest, InternalSocketsArePrivateToTheServersUser) {
  RuntimeDir runtime;
  ASSERT_FALSE(runtime.path().empty()) << "cannot make a runtime directory";
  EndpointWatch watch(runtime.path());
  ASSERT_TRUE(watch.ok()) << "inotify: " << std::strerror(errno);

  // StartServer(), but watching the runtime directory while waiting for the ready line.
  std::vector<std::string> argv = {
      testing::BinDir() + "/vllm-launch", "--port", "0", "--kv-cache-memory", "64MiB", "-tp", "2"};
  auto spawned = testing::Subprocess::Spawn(argv);
  ASSERT_TRUE(spawned.ok()) << spawned.status();
  server_.emplace(std::move(*spawned));
  const absl::Time start_deadline = absl::Now() + absl::Seconds(60);
  std::string ready_line;
  while (true) {
    watch.Drain();
    auto line = server_->ReadLine(absl::Milliseconds(5));  // bounded: the watch needs turns
    if (line.ok()) {
      ready_line = *line;
      break;
    }
    ASSERT_TRUE(absl::IsDeadlineExceeded(line.status())) << line.status();
    ASSERT_LT(absl::Now(), start_deadline) << "no ready line within 60 s";
  }
  watch.Drain();
  const size_t colon = ready_line.rfind(':');
  const size_t slash = ready_line.rfind("/v1");
  ASSERT_NE(colon, std::string::npos) << ready_line;
  ASSERT_TRUE(absl::SimpleAtoi(ready_line.substr(colon + 1, slash - colon - 1), &port_))
      << ready_line;

  // (a) No abstract socket in the server's processes, no "@vllm" name on this host.
  const std::vector<pid_t> pids = Descendants();
  ASSERT_GE(pids.size(), 4u) << "server, engine core and two workers";
  const std::set<std::string> names = UnixSocketNamesOf(pids);
  for (const std::string& name : names) {
    EXPECT_NE(name[0], '@') << "abstract Unix socket held by the server: " << name;
  }
  for (const UnixSocket& s : ProcNetUnix()) {
    EXPECT_FALSE(absl::StartsWith(s.path, "@vllm")) << "abstract socket listed: " << s.path;
  }

  // (b) Endpoint directories: 0700, the server's; gone with their socket files once ready.
  EXPECT_FALSE(watch.dirs().empty())
      << "the server made no endpoint directory in " << runtime.path();
  for (const auto& [dir, d] : watch.dirs()) {
    EXPECT_TRUE(S_ISDIR(d.mode)) << dir;
    EXPECT_EQ(d.mode & 07777, 0700u) << dir;
    EXPECT_EQ(d.uid, geteuid()) << dir;
  }
  EXPECT_TRUE(ListDir(runtime.path()).empty()) << "left in the runtime directory after start-up: "
                                               << absl::StrJoin(ListDir(runtime.path()), ", ");
  for (const std::string& name : names) {
    if (name[0] == '@') continue;
    struct stat st {};
    EXPECT_NE(lstat(name.c_str(), &st), 0) << "socket file still there: " << name;
  }

  // (c) Nobody cannot reach any of them: not while the server starts, not once it runs.
  if (geteuid() == 0) {
    EXPECT_TRUE(watch.errors().empty()) << absl::StrJoin(watch.errors(), "; ");
    int refused_by_mode = 0;
    for (const Probe& p : watch.probes()) {
      EXPECT_TRUE(p.connect_errno == EACCES || p.connect_errno == ENOENT)
          << "nobody connecting to " << p.name << " during start-up: "
          << (p.connect_errno == 0 ? "connected" : std::strerror(p.connect_errno));
      if (p.connect_errno == EACCES) ++refused_by_mode;
    }
    EXPECT_GE(refused_by_mode, 1) << "no live socket file was probed during start-up ("
                                  << watch.probes().size() << " probes)";
    std::printf(
        "start-up: %zu endpoint directories, %zu socket files probed, %d refused (EACCES)\n",
        watch.dirs().size(), watch.probes().size(), refused_by_mode);

    std::vector<std::string> targets(names.begin(), names.end());
    absl::StatusOr<std::vector<Probe>> probes = ProbeAsNobody(targets, /*zmq_frames=*/true);
    ASSERT_TRUE(probes.ok()) << probes.status();
    for (const Probe& p : *probes) {
      EXPECT_NE(p.connect_errno, 0) << "nobody connected to " << p.name;
      EXPECT_FALSE(p.zmq_delivered) << "nobody delivered an 'F' frame to " << p.name;
    }
    EXPECT_FALSE(targets.empty());
  } else {
    std::printf("not root: skipping the unprivileged-peer probes\n");
  }

  // The server is unharmed.
  const nlohmann::json req = {{"prompt", "In the beginning"}, {"max_tokens", 4}};
  auto completion = testing::Http(port_, "POST", "/v1/completions", req.dump());
  ASSERT_TRUE(completion.ok()) << completion.status();
  EXPECT_EQ(completion->status, 200) << completion->body;
  auto health = testing::Http(port_, "GET", "/health");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->status, 200) << health->body;

  // Ctrl-C: a clean exit leaves nothing in the runtime directory either.
  server_->Kill(SIGINT);
  auto status = server_->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(testing::DescribeWaitStatus(*status), "exited 0");
  EXPECT_TRUE(ListDir(runtime.path()).empty()) << absl::StrJoin(ListDir(runtime.path()), ", ");
}

}  // namespace
}  // namespace vllm
