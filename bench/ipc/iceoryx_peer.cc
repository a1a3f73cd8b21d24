#include "bench/ipc/iceoryx_peer.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/common/bench_util.h"

#ifdef VLLM_HAVE_ICEORYX
#include "base/status_macros.h"
#include "bench/ipc/iceoryx_roudi.h"
#include "bench/ipc/ipc_peers.h"
#include "iceoryx_hoofs/log/logmanager.hpp"
#include "iceoryx_posh/mepoo/chunk_header.hpp"
#include "iceoryx_posh/popo/untyped_publisher.hpp"
#include "iceoryx_posh/popo/untyped_subscriber.hpp"
#include "iceoryx_posh/popo/wait_set.hpp"
#include "iceoryx_posh/runtime/posh_runtime.hpp"
#include "ipc/wait_strategy.h"
#endif

namespace vllm::bench {

const char* IceoryxWaitName(IceoryxWait wait) {
  return wait == IceoryxWait::kWaitSet ? "WaitSet" : "busy poll";
}

#ifndef VLLM_HAVE_ICEORYX

namespace {
constexpr char kNotBuilt[] =
    "built without iceoryx: CMake did not find iceoryx_posh (Debian libiceoryx-posh-dev, "
    "libiceoryx-hoofs-dev, iceoryx; scripts/setup.sh installs them) when it configured ipc_bench";
}  // namespace

std::string IceoryxUnavailableReason() { return kNotBuilt; }

absl::StatusOr<std::vector<double>> IceoryxRoundTrip(const RoundTripConfig&, IceoryxWait) {
  return absl::UnavailableError(kNotBuilt);
}

absl::StatusOr<ThroughputResult> IceoryxThroughput(const ThroughputConfig&, IceoryxWait) {
  return absl::UnavailableError(kNotBuilt);
}

void StopIceoryxRouDi() {}

int RunIceoryxChild(int, char**) {
  std::fprintf(stderr, "%s\n", kNotBuilt);
  return 2;
}

#else  // VLLM_HAVE_ICEORYX

namespace {

using iox::popo::UntypedPublisher;
using iox::popo::UntypedSubscriber;
using WaitSet = iox::popo::WaitSet<>;

constexpr int kMaxReaders = 64;
// A wait in the writer fails after this long without progress; readers give up after longer.
constexpr absl::Duration kProgressTimeout = absl::Seconds(60);
constexpr absl::Duration kReaderTimeout = absl::Seconds(120);
// A whole measurement (the writer process) fails after this long.
constexpr absl::Duration kRunTimeout = absl::Seconds(600);
constexpr int kSliceMs = 100;
constexpr size_t kMaxQueuedBytes = size_t{64} << 20;
// The sequence number of the writer's handshake probes (see Handshake).
constexpr uint64_t kProbe = ~uint64_t{0};
// Depth of the writer's reply queues: room for every answer to outstanding probes.
constexpr uint64_t kReplyQueueCapacity = 16;

// Spin-waiting as kBusyPoll does: pause, and give the core away every 256 empty polls.
inline void BusyPause(uint32_t spins) {
  ipc::CpuRelax();
  if ((spins & 255) == 0) sched_yield();
}

iox::capro::IdString_t Id(const std::string& s) {
  return iox::capro::IdString_t(iox::cxx::TruncateToCapacity, s.c_str(), s.size());
}

iox::capro::ServiceDescription Topic(const std::string& instance, const std::string& event) {
  return iox::capro::ServiceDescription(Id("vllm-bench"), Id(instance), Id(event));
}

void InitRuntime(const std::string& name) {
  iox::log::LogManager::GetLogManager().SetDefaultLogLevel(iox::log::LogLevel::kWarn,
                                                           iox::log::LogLevelOutput::kHideLogLevel);
  iox::runtime::PoshRuntime::initRuntime(
      iox::RuntimeName_t(iox::cxx::TruncateToCapacity, name.c_str(), name.size()));
}

iox::popo::PublisherOptions BlockingPublisher() {
  iox::popo::PublisherOptions options;
  options.historyCapacity = 0;
  options.subscriberTooSlowPolicy = iox::popo::ConsumerTooSlowPolicy::WAIT_FOR_CONSUMER;
  return options;
}

iox::popo::SubscriberOptions BlockingSubscriber(uint64_t queue_capacity) {
  iox::popo::SubscriberOptions options;
  options.queueCapacity = queue_capacity;
  options.historyRequest = 0;
  options.queueFullPolicy = iox::popo::QueueFullPolicy::BLOCK_PRODUCER;
  return options;
}

uint64_t StreamQueueCapacity(size_t payload_bytes) {
  return std::clamp<uint64_t>(kMaxQueuedBytes / payload_bytes, 2, 256);
}

// The writer's payload: a fixed pattern whose first 8 bytes carry the sequence number, so the
// checksum of message `seq` is tail_sum + seq (TouchBytes is a sum of words).
struct Payload {
  explicit Payload(size_t n) : buffer(n) {
    for (size_t i = 0; i < n; ++i) buffer.data()[i] = static_cast<uint8_t>(i * 131 + 17);
    tail_sum = TouchBytes(buffer.data() + 8, n - 8);
  }
  AlignedBuffer buffer;
  uint64_t tail_sum = 0;
};

bool ParseU64(const char* s, uint64_t& out) { return absl::SimpleAtoi(s, &out); }

// ---------------------------------------------------------------------------------------------
// Reader process

struct ReaderArgs {
  std::string instance;
  uint64_t reader = 0;
  uint64_t payload_bytes = 0;
  uint64_t messages = 0;
  bool stream = false;
  IceoryxWait wait = IceoryxWait::kWaitSet;
  uint64_t queue_capacity = 2;
};

// Takes the next sample, waiting as `wait` says; nullptr after kReaderTimeout.
const void* NextSample(UntypedSubscriber& sub, WaitSet* waitset, IceoryxWait wait) {
  int64_t deadline = 0;
  for (uint32_t spins = 1;; ++spins) {
    auto taken = sub.take();
    if (!taken.has_error()) return taken.value();
    if (wait == IceoryxWait::kWaitSet) {
      if (!waitset->timedWait(iox::units::Duration::fromMilliseconds(kSliceMs)).empty()) continue;
    } else {
      BusyPause(spins);
      if ((spins & 0xffff) != 0) continue;
    }
    const int64_t now = NowNs();
    if (deadline == 0) deadline = now + absl::ToInt64Nanoseconds(kReaderTimeout);
    if (now > deadline) return nullptr;
  }
}

bool PublishReply(UntypedPublisher& pub, const PeerReply& reply) {
  const int64_t deadline = NowNs() + absl::ToInt64Nanoseconds(kReaderTimeout);
  while (NowNs() < deadline) {
    auto loaned = pub.loan(sizeof(PeerReply));
    if (!loaned.has_error()) {
      std::memcpy(loaned.value(), &reply, sizeof(PeerReply));
      pub.publish(loaned.value());
      return true;
    }
    absl::SleepFor(absl::Microseconds(50));  // the pool is empty: chunks are still in use
  }
  return false;
}

int ReaderMain(const ReaderArgs& a) {
  auto fail = [&](const std::string& why) {
    std::fprintf(stderr, "iceoryx reader %llu (pid %d): %s\n",
                 static_cast<unsigned long long>(a.reader), getpid(), why.c_str());
    return 1;
  };
  InitRuntime(absl::StrCat("vllm-bench-r", a.reader, "-", getpid()));
  UntypedSubscriber data(Topic(a.instance, "data"), BlockingSubscriber(a.queue_capacity));
  std::optional<WaitSet> waitset;
  if (a.wait == IceoryxWait::kWaitSet) {
    waitset.emplace();
    if (waitset->attachState(data, iox::popo::SubscriberState::HAS_DATA).has_error()) {
      return fail("cannot attach the subscriber to a WaitSet");
    }
  }
  UntypedPublisher reply(Topic(a.instance, absl::StrCat("reply-", a.reader)), BlockingPublisher());

  uint64_t sum_of_sums = 0;
  for (uint64_t i = 0; i < a.messages;) {
    const void* sample = NextSample(data, waitset ? &*waitset : nullptr, a.wait);
    if (sample == nullptr) return fail(absl::StrCat("no message ", i, " within the timeout"));
    const uint32_t size = iox::mepoo::ChunkHeader::fromUserPayload(sample)->userPayloadSize();
    uint64_t seq = 0;
    if (size >= 8) std::memcpy(&seq, sample, 8);
    const uint64_t sum = TouchBytes(sample, size);
    data.release(sample);
    if (seq == kProbe) {  // the writer's handshake, before message 0: answer, do not count
      if (!PublishReply(reply, PeerReply{a.reader, kProbe, 0, {}})) return fail("cannot answer");
      continue;
    }
    if (size != a.payload_bytes || seq != i) {
      return fail(absl::StrCat("got message ", seq, " of ", size, " bytes, expected ", i, " of ",
                               a.payload_bytes));
    }
    sum_of_sums += sum;
    ++i;
    if (!a.stream && !PublishReply(reply, PeerReply{a.reader, seq, sum, {}})) {
      return fail("cannot publish a reply");
    }
  }
  if (a.stream && !PublishReply(reply, PeerReply{a.reader, a.messages, sum_of_sums, {}})) {
    return fail("cannot publish the ack");
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Writer process

struct WriterArgs {
  bool stream = false;
  uint64_t payload_bytes = 0;
  uint64_t n_readers = 0;
  uint64_t messages = 0;  // iterations (round trip) or stream length
  uint64_t warmup = 0;
  IceoryxWait wait = IceoryxWait::kWaitSet;
  std::string result_path;
};

std::vector<std::string> SelfArgs(std::vector<std::string> tail) {
  std::vector<std::string> args = {"ipc_bench", kIceoryxChildCommand};
  for (std::string& t : tail) args.push_back(std::move(t));
  return args;
}

// Forks and re-executes this binary with `args`.
absl::StatusOr<ChildProcess> SpawnSelf(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return ChildProcess::Fork([&argv] {
    execv("/proc/self/exe", argv.data());
    std::perror("execv /proc/self/exe");
    return 127;
  });
}

// The writer's ports: the data publisher and one reply subscriber per reader, all attached to
// one WaitSet in kWaitSet mode.
struct WriterPorts {
  WriterPorts(const std::string& instance, const WriterArgs& a)
      : data(Topic(instance, "data"), BlockingPublisher()) {
    for (uint64_t r = 0; r < a.n_readers; ++r) {
      replies.push_back(std::make_unique<UntypedSubscriber>(
          Topic(instance, absl::StrCat("reply-", r)), BlockingSubscriber(kReplyQueueCapacity)));
    }
    if (a.wait == IceoryxWait::kWaitSet) {
      waitset.emplace();
      for (auto& sub : replies) {
        if (waitset->attachState(*sub, iox::popo::SubscriberState::HAS_DATA).has_error()) {
          attach_failed = true;
        }
      }
    }
  }
  UntypedPublisher data;
  std::vector<std::unique_ptr<UntypedSubscriber>> replies;
  std::optional<WaitSet> waitset;
  bool attach_failed = false;
};

// Loans a chunk, writes the payload stamped with `seq` into it and publishes it (publish blocks
// while a reader's queue is full). Retries while the pool has no free chunk.
absl::Status PublishPayload(UntypedPublisher& pub, const Payload& payload, uint64_t seq,
                            std::vector<ChildProcess>& readers) {
  int64_t deadline = 0;
  while (true) {
    auto loaned = pub.loan(static_cast<uint32_t>(payload.buffer.size()));
    if (!loaned.has_error()) {
      void* chunk = loaned.value();
      std::memcpy(chunk, payload.buffer.data(), payload.buffer.size());
      std::memcpy(chunk, &seq, 8);
      pub.publish(chunk);
      return absl::OkStatus();
    }
    VLLM_RETURN_IF_ERROR(CheckChildrenNotFailed(readers));
    const int64_t now = NowNs();
    if (deadline == 0) deadline = now + absl::ToInt64Nanoseconds(kProgressTimeout);
    if (now > deadline) return absl::ResourceExhaustedError("no free chunk to loan");
    absl::SleepFor(absl::Microseconds(50));
  }
}

// Makes sure every reader is connected both ways before message 0. A subscription's state says
// nothing here (with iceoryx's many-to-many ports it reads SUBSCRIBED before any publisher has
// attached the subscriber's queue), so the writer publishes probes (sequence number kProbe)
// every millisecond until every reader has answered one on its reply topic. Readers answer and
// skip every probe; AwaitReplies skips answers that arrive late.
absl::Status Handshake(WriterPorts& ports, const Payload& payload,
                       std::vector<ChildProcess>& readers) {
  const size_t n = ports.replies.size();
  const uint64_t all = n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
  uint64_t heard = 0;
  const int64_t deadline = NowNs() + absl::ToInt64Nanoseconds(kProgressTimeout);
  while (heard != all) {
    VLLM_RETURN_IF_ERROR(PublishPayload(ports.data, payload, kProbe, readers));
    const int64_t until = NowNs() + 1'000'000;
    do {
      for (size_t r = 0; r < n; ++r) {
        for (auto taken = ports.replies[r]->take(); !taken.has_error();
             taken = ports.replies[r]->take()) {
          PeerReply reply{};
          std::memcpy(&reply, taken.value(), sizeof(PeerReply));
          ports.replies[r]->release(taken.value());
          if (reply.seq != kProbe || reply.reader != r) {
            return absl::DataLossError(
                absl::StrCat("reader ", r, ": unexpected reply ", reply.seq, " in the handshake"));
          }
          heard |= uint64_t{1} << r;
        }
      }
      if (heard == all) break;
      absl::SleepFor(absl::Microseconds(100));
    } while (NowNs() < until);
    VLLM_RETURN_IF_ERROR(CheckChildrenNotFailed(readers));
    if (NowNs() > deadline) return absl::DeadlineExceededError("readers never connected");
  }
  return absl::OkStatus();
}

// Collects one reply from every reader; `expect(r)` gives reader r's expected {seq, checksum}.
template <typename Expect>
absl::Status AwaitReplies(WriterPorts& ports, IceoryxWait wait, Expect expect,
                          std::vector<ChildProcess>& readers) {
  const size_t n = ports.replies.size();
  uint64_t pending = n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
  int64_t deadline = 0;
  for (uint32_t spins = 1; pending != 0; ++spins) {
    bool progress = false;
    for (size_t r = 0; r < n; ++r) {
      if ((pending & (uint64_t{1} << r)) == 0) continue;
      auto taken = ports.replies[r]->take();
      if (taken.has_error()) continue;
      PeerReply reply{};
      const uint32_t size =
          iox::mepoo::ChunkHeader::fromUserPayload(taken.value())->userPayloadSize();
      std::memcpy(&reply, taken.value(), std::min<size_t>(size, sizeof(PeerReply)));
      ports.replies[r]->release(taken.value());
      if (size == sizeof(PeerReply) && reply.reader == r && reply.seq == kProbe) {
        progress = true;  // a late answer to a handshake probe
        continue;
      }
      const auto [seq, checksum] = expect(r);
      if (size != sizeof(PeerReply) || reply.reader != r || reply.seq != seq ||
          reply.checksum != checksum) {
        return absl::DataLossError(absl::StrCat("reader ", r, " replied (", reply.reader, ", ",
                                                reply.seq, ", ", reply.checksum, "), expected (", r,
                                                ", ", seq, ", ", checksum, ")"));
      }
      pending &= ~(uint64_t{1} << r);
      progress = true;
    }
    if (progress || pending == 0) continue;
    if (wait == IceoryxWait::kWaitSet) {
      if (!ports.waitset->timedWait(iox::units::Duration::fromMilliseconds(kSliceMs)).empty()) {
        continue;
      }
    } else {
      BusyPause(spins);
      if ((spins & 0xffff) != 0) continue;
    }
    VLLM_RETURN_IF_ERROR(CheckChildrenNotFailed(readers));
    const int64_t now = NowNs();
    if (deadline == 0) deadline = now + absl::ToInt64Nanoseconds(kProgressTimeout);
    if (now > deadline) return absl::DeadlineExceededError("no reply within the timeout");
  }
  return absl::OkStatus();
}

// Runs the measurement in the writer process; returns the figures to hand back.
absl::StatusOr<std::vector<double>> Measure(const WriterArgs& a) {
  const std::string instance = absl::StrCat("run-", getpid());
  std::vector<ChildProcess> readers;
  const uint64_t per_reader = a.stream ? a.messages : a.warmup + a.messages;
  const uint64_t capacity = a.stream ? StreamQueueCapacity(a.payload_bytes) : 2;
  for (uint64_t r = 0; r < a.n_readers; ++r) {
    VLLM_ASSIGN_OR_RETURN(
        ChildProcess child,
        SpawnSelf(SelfArgs({"reader", instance, absl::StrCat(r), absl::StrCat(a.payload_bytes),
                            absl::StrCat(per_reader), a.stream ? "stream" : "echo",
                            a.wait == IceoryxWait::kWaitSet ? "waitset" : "busy",
                            absl::StrCat(capacity)})));
    readers.push_back(std::move(child));
  }
  InitRuntime(absl::StrCat("vllm-bench-w-", getpid()));
  WriterPorts ports(instance, a);
  if (ports.attach_failed) return absl::InternalError("cannot attach to a WaitSet");
  Payload payload(a.payload_bytes);
  VLLM_RETURN_IF_ERROR(Handshake(ports, payload, readers));
  std::vector<double> out;
  if (a.stream) {
    const int64_t t0 = NowNs();
    for (uint64_t i = 0; i < a.messages; ++i) {
      VLLM_RETURN_IF_ERROR(PublishPayload(ports.data, payload, i, readers));
    }
    const uint64_t n = a.messages;
    const uint64_t sum = n * (n - 1) / 2 + n * payload.tail_sum;
    VLLM_RETURN_IF_ERROR(AwaitReplies(
        ports, a.wait,
        [&](size_t) {
          return std::pair<uint64_t, uint64_t>{n, sum};
        },
        readers));
    const double seconds = static_cast<double>(NowNs() - t0) / 1e9;
    out = {static_cast<double>(n) / seconds};
  } else {
    out.reserve(a.messages);
    for (uint64_t it = 0; it < a.warmup + a.messages; ++it) {
      const int64_t t0 = NowNs();
      VLLM_RETURN_IF_ERROR(PublishPayload(ports.data, payload, it, readers));
      VLLM_RETURN_IF_ERROR(AwaitReplies(
          ports, a.wait,
          [&](size_t) {
            return std::pair<uint64_t, uint64_t>{it, it + payload.tail_sum};
          },
          readers));
      const int64_t t1 = NowNs();
      if (it >= a.warmup) out.push_back(static_cast<double>(t1 - t0));
    }
  }
  VLLM_RETURN_IF_ERROR(WaitForChildren(readers, kProgressTimeout));
  return out;
}

int WriterMain(const WriterArgs& a) {
  absl::StatusOr<std::vector<double>> figures = Measure(a);
  if (!figures.ok()) {
    std::fprintf(stderr, "iceoryx writer (pid %d): %s\n", getpid(),
                 figures.status().ToString().c_str());
    return 1;
  }
  std::ofstream out(a.result_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(figures->data()),
            static_cast<std::streamsize>(figures->size() * sizeof(double)));
  return out.good() ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------
// The calling process

absl::Status ValidateShape(size_t payload_bytes, int n_readers) {
  if (payload_bytes < 8 || payload_bytes > iceoryx_internal::kMaxPayloadBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("iceoryx rows take payloads of 8 B to 1 MiB, got ", payload_bytes));
  }
  if (n_readers < 1 || n_readers > kMaxReaders) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_readers must be in [1, 64], got ", n_readers));
  }
  return absl::OkStatus();
}

// Runs a writer process with `args` (its result path appended) and returns its figures.
absl::StatusOr<std::vector<double>> RunWriter(std::vector<std::string> args) {
  const std::string reason = IceoryxUnavailableReason();
  if (!reason.empty()) return absl::UnavailableError(reason);
  VLLM_ASSIGN_OR_RETURN(const std::string dir, iceoryx_internal::EnsureRouDi());
  static int counter = 0;
  const std::string result = absl::StrCat(dir, "/result-", counter++);
  args.push_back(result);
  VLLM_ASSIGN_OR_RETURN(ChildProcess writer, SpawnSelf(SelfArgs(std::move(args))));
  const absl::Status status = writer.Wait(kRunTimeout);
  std::string bytes;
  {
    std::ifstream in(result, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    bytes = ss.str();
  }
  std::remove(result.c_str());
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("iceoryx writer: ", status.message()));
  }
  std::vector<double> figures(bytes.size() / sizeof(double));
  std::memcpy(figures.data(), bytes.data(), figures.size() * sizeof(double));
  return figures;
}

const char* WaitArg(IceoryxWait wait) { return wait == IceoryxWait::kWaitSet ? "waitset" : "busy"; }

bool ParseWait(const char* s, IceoryxWait& wait) {
  const std::string v = s;
  if (v != "waitset" && v != "busy") return false;
  wait = v == "waitset" ? IceoryxWait::kWaitSet : IceoryxWait::kBusyPoll;
  return true;
}

}  // namespace

std::string IceoryxUnavailableReason() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (access((dir + "/iox-roudi").c_str(), X_OK) == 0) return "";
  }
  return "iox-roudi not found in PATH (Debian package iceoryx)";
}

absl::StatusOr<std::vector<double>> IceoryxRoundTrip(const RoundTripConfig& config,
                                                     IceoryxWait wait) {
  VLLM_RETURN_IF_ERROR(ValidateShape(config.payload_bytes, config.n_readers));
  if (config.iterations < 1 || config.warmup < 0) {
    return absl::InvalidArgumentError("need iterations >= 1 and warmup >= 0");
  }
  VLLM_ASSIGN_OR_RETURN(std::vector<double> samples,
                        RunWriter({"writer", "echo", absl::StrCat(config.payload_bytes),
                                   absl::StrCat(config.n_readers), absl::StrCat(config.iterations),
                                   absl::StrCat(config.warmup), WaitArg(wait)}));
  if (samples.size() != static_cast<size_t>(config.iterations)) {
    return absl::DataLossError(absl::StrCat("iceoryx writer returned ", samples.size(),
                                            " samples, expected ", config.iterations));
  }
  return samples;
}

absl::StatusOr<ThroughputResult> IceoryxThroughput(const ThroughputConfig& config,
                                                   IceoryxWait wait) {
  VLLM_RETURN_IF_ERROR(ValidateShape(config.payload_bytes, config.n_readers));
  if (config.messages < 1) return absl::InvalidArgumentError("need messages >= 1");
  VLLM_ASSIGN_OR_RETURN(std::vector<double> figures,
                        RunWriter({"writer", "stream", absl::StrCat(config.payload_bytes),
                                   absl::StrCat(config.n_readers), absl::StrCat(config.messages),
                                   "0", WaitArg(wait)}));
  if (figures.size() != 1) return absl::DataLossError("iceoryx writer returned no figure");
  ThroughputResult result;
  result.messages_per_s = figures[0];
  result.gb_per_s = figures[0] * static_cast<double>(config.payload_bytes) / 1e9;
  return result;
}

void StopIceoryxRouDi() { iceoryx_internal::StopRouDi(); }

// argv: <exe> iox-child writer echo|stream PAYLOAD READERS MESSAGES WARMUP WAIT RESULT
//       <exe> iox-child reader INSTANCE READER PAYLOAD MESSAGES echo|stream WAIT QUEUE_CAPACITY
int RunIceoryxChild(int argc, char** argv) {
  dup2(STDERR_FILENO, STDOUT_FILENO);  // iceoryx logs to stdout too; the caller's is for tables
  const std::string role = argc >= 3 ? argv[2] : "";
  if (role == "writer" && argc == 10) {
    WriterArgs a;
    a.stream = std::string(argv[3]) == "stream";
    a.result_path = argv[9];
    if (ParseU64(argv[4], a.payload_bytes) && ParseU64(argv[5], a.n_readers) &&
        ParseU64(argv[6], a.messages) && ParseU64(argv[7], a.warmup) &&
        ParseWait(argv[8], a.wait) && a.payload_bytes >= 8 && a.n_readers >= 1 &&
        a.n_readers <= kMaxReaders) {
      return WriterMain(a);
    }
  } else if (role == "reader" && argc == 10) {
    ReaderArgs a;
    a.instance = argv[3];
    a.stream = std::string(argv[7]) == "stream";
    if (ParseU64(argv[4], a.reader) && ParseU64(argv[5], a.payload_bytes) &&
        ParseU64(argv[6], a.messages) && ParseWait(argv[8], a.wait) &&
        ParseU64(argv[9], a.queue_capacity)) {
      return ReaderMain(a);
    }
  }
  std::fprintf(stderr,
               "usage: %s %s writer echo|stream PAYLOAD READERS MESSAGES WARMUP waitset|busy "
               "RESULT_FILE\n       %s %s reader INSTANCE READER PAYLOAD MESSAGES echo|stream "
               "waitset|busy QUEUE_CAPACITY\n",
               argv[0], kIceoryxChildCommand, argv[0], kIceoryxChildCommand);
  return 2;
}

#endif  // VLLM_HAVE_ICEORYX

}  // namespace vllm::bench
