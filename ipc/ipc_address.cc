#include "ipc/ipc_address.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <set>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"

namespace vllm::ipc {
namespace {

constexpr absl::string_view kScheme = "ipc://";
constexpr absl::string_view kDirPrefix = "vllm-ipc-";
// sun_path holds 108 bytes with the terminating NUL.
constexpr size_t kMaxSocketPath = sizeof(sockaddr_un::sun_path) - 1;
constexpr size_t kMaxTag = 16;
// "<tag>-<n>": a 16-character tag and a 20-digit counter at most.
constexpr size_t kMaxFileName = kMaxTag + 1 + 20;
// "/vllm-ipc-<pid>-XXXXXX/": a pid has at most 10 digits.
constexpr size_t kDirOverhead = 1 + kDirPrefix.size() + 10 + 7 + 1;
constexpr size_t kMaxBase = kMaxSocketPath - kDirOverhead - kMaxFileName;
// An empty stale directory is removed only when this old: a live process in another pid
// namespace sharing <base> makes its directory an instant before it binds the first socket.
constexpr time_t kEmptyDirGraceSeconds = 60;

// The process's endpoint directory and the socket files in it not released yet. Leaked on
// purpose: the atexit hook runs after static destructors may have run.
struct Registry {
  absl::Mutex mu;
  pid_t pid ABSL_GUARDED_BY(mu) = 0;  // who made `dir` (a forked child must not touch it)
  std::string dir ABSL_GUARDED_BY(mu);
  std::set<std::string> live ABSL_GUARDED_BY(mu);  // socket file paths
  uint64_t counter ABSL_GUARDED_BY(mu) = 0;
  bool atexit_hooked ABSL_GUARDED_BY(mu) = false;
};

Registry& Reg() {
  static Registry* r = new Registry;
  return *r;
}

// Removes every file still registered and the directory. Caller holds r.mu.
void RemoveAllLocked(Registry& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r.mu) {
  if (r.pid != getpid() || r.dir.empty()) return;
  for (const std::string& path : r.live) unlink(path.c_str());
  r.live.clear();
  rmdir(r.dir.c_str());
  r.dir.clear();
}

void RemoveAllAtExit() {
  Registry& r = Reg();
  absl::MutexLock lock(&r.mu);
  RemoveAllLocked(r);
}

std::string SanitizedTag(absl::string_view tag) {
  std::string out;
  for (char c : tag.substr(0, kMaxTag)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_';
    out.push_back(ok ? c : '_');
  }
  return out.empty() ? "ep" : out;
}

bool UsableBase(const char* dir) {
  if (dir == nullptr || dir[0] != '/' || std::strlen(dir) > kMaxBase) return false;
  struct stat st {};
  return stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
}

absl::StatusOr<std::string> MakePrivateDir() {
  const std::string base = IpcEndpointBaseDir();
  RemoveStaleIpcDirs(base);
  std::string dir = absl::StrCat(base == "/" ? "" : base, "/", kDirPrefix, getpid(), "-XXXXXX");
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot make a private directory for ipc:// "
                     "endpoints: mkdtemp(",
                     dir, "): ", std::strerror(errno)));
  }
  // mkdtemp asks for 0700 minus the umask; binding needs all three owner bits, and nothing
  // more may be granted.
  if (chmod(dir.c_str(), 0700) != 0) {
    const int err = errno;
    rmdir(dir.c_str());
    return absl::UnavailableError(
        absl::StrCat("chmod 0700 ", dir, " (ipc:// endpoints): ", std::strerror(err)));
  }
  return dir;
}

// True when a socket file has no listener: connect() is refused. A listener with a full
// backlog (EAGAIN) or any other answer counts as alive.
bool NobodyListens(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int rc = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  const int err = errno;
  close(fd);
  return rc != 0 && err == ECONNREFUSED;
}

// The stale directory `name` in `base` is removed if it qualifies (see the header).
void RemoveIfStale(const std::string& base, const std::string& name) {
  absl::string_view rest(name);
  if (!absl::ConsumePrefix(&rest, kDirPrefix)) return;
  const size_t dash = rest.find('-');
  int pid = 0;
  if (dash == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, dash), &pid) ||
      pid <= 0 || pid == getpid()) {
    return;
  }
  if (kill(pid, 0) == 0 || errno != ESRCH) return;  // alive (EPERM: someone else's, alive)
  const std::string dir = absl::StrCat(base, "/", name);
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return;
  struct stat st {};
  if (fstat(dfd, &st) != 0 || st.st_uid != geteuid()) {
    close(dfd);
    return;
  }
  std::vector<std::string> entries;
  bool stale = true;
  if (DIR* d = fdopendir(dup(dfd))) {
    while (dirent* e = readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      struct stat est {};
      if (fstatat(dfd, e->d_name, &est, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISSOCK(est.st_mode) ||
          !NobodyListens(absl::StrCat(dir, "/", e->d_name))) {
        stale = false;
        break;
      }
      entries.push_back(e->d_name);
    }
    closedir(d);
  } else {
    stale = false;
  }
  if (stale && entries.empty() && time(nullptr) - st.st_mtime < kEmptyDirGraceSeconds) {
    stale = false;
  }
  if (stale) {
    for (const std::string& e : entries) unlinkat(dfd, e.c_str(), 0);
  }
  close(dfd);
  if (stale) rmdir(dir.c_str());
}

}  // namespace

std::string IpcEndpointBaseDir() {
  for (const char* var : {"XDG_RUNTIME_DIR", "TMPDIR"}) {
    const char* dir = getenv(var);
    if (UsableBase(dir)) {
      std::string out(dir);
      while (out.size() > 1 && out.back() == '/') out.pop_back();
      return out;
    }
  }
  return "/tmp";
}

void RemoveStaleIpcDirs(const std::string& base) {
  DIR* d = opendir(base.c_str());
  if (d == nullptr) return;
  std::vector<std::string> candidates;
  while (dirent* e = readdir(d)) {
    if (absl::StartsWith(e->d_name, kDirPrefix)) candidates.push_back(e->d_name);
  }
  closedir(d);
  for (const std::string& name : candidates) RemoveIfStale(base, name);
}

absl::StatusOr<std::string> UniqueIpcAddress(absl::string_view tag) {
  Registry& r = Reg();
  absl::MutexLock lock(&r.mu);
  if (r.pid != getpid()) {
    // First use, or a forked child: the directory in the registry (if any) is the parent's.
    r.pid = getpid();
    r.dir.clear();
    r.live.clear();
  }
  if (r.dir.empty()) {
    absl::StatusOr<std::string> dir = MakePrivateDir();
    if (!dir.ok()) return dir.status();
    r.dir = std::move(*dir);
    if (!r.atexit_hooked) {
      r.atexit_hooked = true;
      std::atexit(RemoveAllAtExit);
    }
  }
  std::string path = absl::StrCat(r.dir, "/", SanitizedTag(tag), "-", r.counter++);
  r.live.insert(path);
  return absl::StrCat(kScheme, path);
}

void ReleaseIpcAddress(absl::string_view address) {
  if (!absl::ConsumePrefix(&address, kScheme)) return;
  Registry& r = Reg();
  absl::MutexLock lock(&r.mu);
  if (r.pid != getpid()) return;
  auto it = r.live.find(std::string(address));
  if (it == r.live.end()) return;
  unlink(it->c_str());  // ENOENT when it was never bound: nothing to do
  r.live.erase(it);
  if (r.live.empty()) {
    rmdir(r.dir.c_str());
    r.dir.clear();
  }
}

absl::StatusOr<ScopedIpcAddress> ScopedIpcAddress::Create(absl::string_view tag) {
  absl::StatusOr<std::string> address = UniqueIpcAddress(tag);
  if (!address.ok()) return address.status();
  ScopedIpcAddress out(std::move(*address));
  out.owned_ = true;
  return out;
}

ScopedIpcAddress::ScopedIpcAddress(ScopedIpcAddress&& other) noexcept
    : address_(std::move(other.address_)), owned_(std::exchange(other.owned_, false)) {}

ScopedIpcAddress& ScopedIpcAddress::operator=(ScopedIpcAddress&& other) noexcept {
  if (this != &other) {
    Release();
    address_ = std::move(other.address_);
    owned_ = std::exchange(other.owned_, false);
  }
  return *this;
}

void ScopedIpcAddress::Release() {
  if (!owned_) return;
  owned_ = false;
  ReleaseIpcAddress(address_);
}

}  // namespace vllm::ipc
