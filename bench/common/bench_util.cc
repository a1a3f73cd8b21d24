#include "bench/common/bench_util.h"

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <new>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace vllm::bench {

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

void ReplaceMarkdownSection(std::string* doc, const std::string& begin, const std::string& end,
                            const std::string& section) {
  const size_t b = doc->find(begin), e = doc->find(end);
  if (b != std::string::npos && e != std::string::npos && e > b) {
    doc->replace(b, e + end.size() - b, section);
  } else {
    if (!doc->empty() && doc->back() != '\n') *doc += "\n";
    *doc += "\n" + section + "\n";
  }
}

std::string MachineLine() {
  std::string cpu = "unknown CPU";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  }
  utsname u{};
  uname(&u);
  return cpu + ", " + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + " cores, Linux " + u.release;
}
namespace {

// The p-th percentile (0 < p <= 1) of sorted, non-empty `v` by nearest rank.
double NearestRank(const std::vector<double>& v, double p) {
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

}  // namespace

LatencyStats Summarize(std::vector<double> samples_ns) {
  LatencyStats stats;
  if (samples_ns.empty()) return stats;
  std::sort(samples_ns.begin(), samples_ns.end());
  double sum = 0;
  for (double s : samples_ns) sum += s;
  stats.samples = samples_ns.size();
  stats.min_us = samples_ns.front() / 1e3;
  stats.mean_us = sum / static_cast<double>(samples_ns.size()) / 1e3;
  stats.p50_us = NearestRank(samples_ns, 0.50) / 1e3;
  stats.p99_us = NearestRank(samples_ns, 0.99) / 1e3;
  return stats;
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

uint64_t TouchBytes(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  // Four independent accumulators let the loop run at load bandwidth rather than at the
  // latency of one dependent add chain. memcpy keeps unaligned loads well defined.
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    uint64_t w[4];
    std::memcpy(w, p + i, sizeof(w));
    a0 += w[0];
    a1 += w[1];
    a2 += w[2];
    a3 += w[3];
  }
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, sizeof(w));
    a0 += w;
  }
  for (; i < n; ++i) a1 += p[i];
  return a0 + a1 + a2 + a3;
}

// ----------------------------------------------------------------------------------------------
// AlignedBuffer

void AlignedBuffer::FreeDeleter::operator()(uint8_t* p) const { std::free(p); }

AlignedBuffer::AlignedBuffer(size_t size) : size_(size) {
  if (size == 0) return;
  constexpr size_t kAlign = 4096;
  const size_t rounded = (size + kAlign - 1) / kAlign * kAlign;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(kAlign, rounded));
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  data_.reset(p);
}

// ----------------------------------------------------------------------------------------------
// ChildProcess

absl::StatusOr<ChildProcess> ChildProcess::Fork(std::function<int()> body) {
  std::fflush(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    return absl::InternalError(absl::StrCat("fork() failed: ", std::strerror(errno)));
  }
  if (pid > 0) return ChildProcess(pid);

  // Child. The death signal must be armed before checking the parent: if the parent died in
  // between, getppid() already shows the reaper's pid.
  int code = kParentGoneExitCode;
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) == 0 && getppid() == parent) {
    try {
      code = body();
    } catch (const std::exception& e) {
      std::cerr << "child " << getpid() << ": exception: " << e.what() << std::endl;
      code = kExceptionExitCode;
    } catch (...) {
      std::cerr << "child " << getpid() << ": unknown exception" << std::endl;
      code = kExceptionExitCode;
    }
  }
  std::fflush(nullptr);
  _exit(code);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      reaped_(other.reaped_),
      wait_status_(other.wait_status_) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    Kill();
    pid_ = std::exchange(other.pid_, -1);
    reaped_ = other.reaped_;
    wait_status_ = other.wait_status_;
  }
  return *this;
}

ChildProcess::~ChildProcess() { Kill(); }

void ChildProcess::Kill() {
  if (pid_ <= 0 || reaped_) return;
  kill(pid_, SIGKILL);
  Reap(/*block=*/true);
}

bool ChildProcess::Reap(bool block) {
  if (reaped_) return true;
  if (pid_ <= 0) return false;
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    reaped_ = true;
    wait_status_ = status;
  } else if (r < 0) {
    // ECHILD: someone else reaped it (or SIGCHLD is ignored). Report it as lost.
    reaped_ = true;
    wait_status_ = -1;
  }
  return reaped_;
}

absl::Status ChildProcess::ExitStatus() const {
  if (wait_status_ == -1) {
    return absl::InternalError(absl::StrCat("child pid ", pid_, " could not be reaped"));
  }
  if (WIFEXITED(wait_status_)) {
    const int code = WEXITSTATUS(wait_status_);
    if (code == 0) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("child pid ", pid_, " exited with status ", code));
  }
  if (WIFSIGNALED(wait_status_)) {
    const int sig = WTERMSIG(wait_status_);
    return absl::InternalError(
        absl::StrCat("child pid ", pid_, " was killed by signal ", sig, " (", strsignal(sig), ")"));
  }
  return absl::InternalError(
      absl::StrCat("child pid ", pid_, " ended with wait status ", wait_status_));
}

absl::Status ChildProcess::Wait(absl::Duration timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("Wait() on an empty ChildProcess");
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration nap = absl::Microseconds(50);
  while (!Reap(/*block=*/false)) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("child pid ", pid_, " still running after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(nap);
    nap = std::min(nap * 2, absl::Milliseconds(10));
  }
  return ExitStatus();
}

absl::Status ChildProcess::CheckNotFailed() {
  if (pid_ <= 0 || !Reap(/*block=*/false)) return absl::OkStatus();
  return ExitStatus();
}

absl::Status CheckChildrenNotFailed(std::vector<ChildProcess>& children) {
  for (ChildProcess& child : children) {
    absl::Status status = child.CheckNotFailed();
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status WaitForChildren(std::vector<ChildProcess>& children, absl::Duration timeout) {
  for (ChildProcess& child : children) {
    absl::Status status = child.Wait(timeout);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

// ----------------------------------------------------------------------------------------------
// CPU time

double ProcessCpuSeconds(pid_t pid) {
  // /proc/<pid>/schedstat's first field is the main thread's exact run time in ns.
  {
    std::ifstream exact(absl::StrCat("/proc/", pid, "/schedstat"));
    unsigned long long run_ns = 0;
    if (exact >> run_ns) return static_cast<double>(run_ns) / 1e9;
  }
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(in, line)) return -1.0;
  // Field 2 (comm) is parenthesised and may contain spaces; fields resume after the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return -1.0;
  std::istringstream fields(line.substr(close + 1));
  // Fields 3..13 precede utime (14) and stime (15).
  std::string skip;
  for (int field = 3; field <= 13; ++field) fields >> skip;
  unsigned long long utime = 0, stime = 0;
  if (!(fields >> utime >> stime)) return -1.0;
  const long ticks = sysconf(_SC_CLK_TCK);
  if (ticks <= 0) return -1.0;
  return static_cast<double>(utime + stime) / static_cast<double>(ticks);
}

double SelfCpuSeconds() {
  rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0) return -1.0;
  auto seconds = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

void PinToCpu(int cpu) {
  if (cpu < 0 || cpu >= CPU_SETSIZE) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)sched_setaffinity(0, sizeof(set), &set);
}

// ----------------------------------------------------------------------------------------------
// SharedCounter

namespace {

// The mapped layout: the counter alone in its cache line.
struct alignas(64) SharedCounterLine {
  std::atomic<uint64_t> value{0};
};
static_assert(sizeof(SharedCounterLine) == 64);
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "a process-shared atomic must be lock-free");

}  // namespace

absl::StatusOr<SharedCounter> SharedCounter::Create() {
  void* p = mmap(nullptr, sizeof(SharedCounterLine), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("mmap of a shared counter failed: ", std::strerror(errno)));
  }
  auto* line = new (p) SharedCounterLine();
  return SharedCounter(&line->value);
}

SharedCounter::SharedCounter(SharedCounter&& other) noexcept
    : value_(std::exchange(other.value_, nullptr)) {}

SharedCounter& SharedCounter::operator=(SharedCounter&& other) noexcept {
  if (this != &other) {
    if (value_ != nullptr) munmap(value_, sizeof(SharedCounterLine));
    value_ = std::exchange(other.value_, nullptr);
  }
  return *this;
}

SharedCounter::~SharedCounter() {
  if (value_ != nullptr) munmap(value_, sizeof(SharedCounterLine));
}

absl::Status SharedCounter::WaitAtLeast(uint64_t target, absl::Duration timeout) const {
  const int64_t deadline = NowNs() + absl::ToInt64Nanoseconds(timeout);
  for (int spin = 0; spin < 1000; ++spin) {
    if (value_->load(std::memory_order_acquire) >= target) return absl::OkStatus();
  }
  absl::Duration nap = absl::Microseconds(20);
  while (value_->load(std::memory_order_acquire) < target) {
    if (NowNs() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "shared counter did not reach ", target, " within ", absl::FormatDuration(timeout),
          " (value ", value_->load(std::memory_order_relaxed), ")"));
    }
    absl::SleepFor(nap);
    nap = std::min(nap * 2, absl::Milliseconds(1));
  }
  return absl::OkStatus();
}

}  // namespace vllm::bench
