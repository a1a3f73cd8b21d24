// Boost.Interprocess 1.74 takes a message_queue's mutex with an untimed lock even inside
// timed_send/timed_receive, and the mutex is not robust: a reader killed while it holds it (it
// copies each message out under the lock) would block the writer forever. This documented
// switch makes every such lock a timed one that throws after the given time, which CatchAll
// turns into an error. Its price is one calendar-clock read per lock (about 60 ns here), on
// both sides. It must precede every Boost include of this file (no other file of ours includes
// Boost.Interprocess synchronisation).
#define BOOST_INTERPROCESS_ENABLE_TIMEOUT_WHEN_LOCKING
#define BOOST_INTERPROCESS_TIMEOUT_WHEN_LOCKING_DURATION_MS 10000

#include "bench/ipc/ipc_peers.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/date_time/gregorian/gregorian_types.hpp>
#include <boost/date_time/posix_time/posix_time_types.hpp>
#include <boost/interprocess/ipc/message_queue.hpp>
#include <cstdint>
#include <cstring>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "bench/common/bench_util.h"

namespace vllm::bench {
namespace {

namespace bip = boost::interprocess;

// A wait in the writer fails after this long without progress.
constexpr absl::Duration kProgressTimeout = absl::Seconds(60);
// Blocking calls in the writer return this often so it can notice a reader that died.
constexpr int kPollSliceMs = 100;
// A reader gives up after this long without a message (it also dies with the writer); longer
// than the writer's kProgressTimeout, so that the writer is the one reporting a stall.
constexpr int kReaderTimeoutMs = 120'000;
// How long a reader's context keeps trying to deliver its last reply after the reader is done.
constexpr int kReaderLingerMs = 5'000;
// Bound on the bytes queued per reader by the throughput tests' flow control.
constexpr size_t kMaxQueuedBytesPerReader = size_t{64} << 20;
constexpr int kMaxReaders = 64;
constexpr size_t kSeqBytes = sizeof(uint64_t);

// Exit statuses of reader processes (ChildProcess adds 124 and 125).
constexpr int kExitTimedOut = 3;
constexpr int kExitBadMessage = 4;

enum class ReplyMode { kEachMessage, kOnceAtEnd };

// The writer's message: a fixed byte pattern whose first 8 bytes are overwritten with the
// sequence number before each send. Since TouchBytes is a sum of words, the expected checksum
// of message `seq` is (sum of bytes [8, n)) + seq, computed once.
class Payload {
 public:
  explicit Payload(size_t size) : buffer_(size) {
    uint8_t* p = buffer_.data();
    for (size_t i = 0; i < size; ++i) p[i] = static_cast<uint8_t>(i * 131 + 17);
    tail_sum_ = TouchBytes(p + kSeqBytes, size - kSeqBytes);
  }

  void Stamp(uint64_t seq) { std::memcpy(buffer_.data(), &seq, kSeqBytes); }
  uint64_t Checksum(uint64_t seq) const { return tail_sum_ + seq; }
  const uint8_t* data() const { return buffer_.data(); }
  size_t size() const { return buffer_.size(); }

  static uint64_t ReadSeq(const void* message) {
    uint64_t seq;
    std::memcpy(&seq, message, kSeqBytes);
    return seq;
  }

 private:
  AlignedBuffer buffer_;
  uint64_t tail_sum_ = 0;
};

// What every reader does with every message, whatever the transport: checks its size and
// sequence number, then TouchBytes() it in place.
class ReaderCheck {
 public:
  ReaderCheck(int reader, size_t payload_bytes) : reader_(reader), payload_bytes_(payload_bytes) {}

  // Returns false, after printing why, if the message is not the next expected one.
  bool Consume(const void* data, size_t size) {
    if (size != payload_bytes_) {
      Complain(absl::StrCat("got a ", size, "-byte message, expected ", payload_bytes_));
      return false;
    }
    const uint64_t seq = Payload::ReadSeq(data);
    if (seq != count_) {
      Complain(absl::StrCat("got message ", seq, ", expected ", count_));
      return false;
    }
    last_checksum_ = TouchBytes(data, size);
    checksum_sum_ += last_checksum_;
    ++count_;
    return true;
  }

  PeerReply LastMessageReply() const { return PeerReply{Index(), count_ - 1, last_checksum_, {}}; }
  PeerReply StreamAck() const { return PeerReply{Index(), count_, checksum_sum_, {}}; }

  // Prints `why` and returns `exit_code`, for `return check.Fail(...)` in a reader's body.
  int Fail(int exit_code, absl::string_view why) const {
    Complain(why);
    return exit_code;
  }

 private:
  uint64_t Index() const { return static_cast<uint64_t>(reader_); }
  void Complain(absl::string_view why) const {
    std::cerr << "benchmark reader " << reader_ << " (pid " << getpid() << "): " << why
              << std::endl;
  }

  int reader_;
  size_t payload_bytes_;
  uint64_t count_ = 0;
  uint64_t last_checksum_ = 0;
  uint64_t checksum_sum_ = 0;
};

// Checks one reply in the writer: from a valid reader not yet heard from in this round
// (`seen` is a bit mask, n_readers <= 64), carrying the expected sequence number and checksum.
absl::Status CheckReply(const PeerReply& reply, uint64_t seq, uint64_t checksum, int n_readers,
                        uint64_t& seen) {
  if (reply.reader >= static_cast<uint64_t>(n_readers)) {
    return absl::DataLossError(absl::StrCat("reply from unknown reader ", reply.reader));
  }
  const uint64_t bit = uint64_t{1} << reply.reader;
  if ((seen & bit) != 0) {
    return absl::DataLossError(absl::StrCat("second reply from reader ", reply.reader));
  }
  seen |= bit;
  if (reply.seq != seq || reply.checksum != checksum) {
    return absl::DataLossError(absl::StrCat("reader ", reply.reader, " replied (seq ", reply.seq,
                                            ", checksum ", reply.checksum, "), expected (", seq,
                                            ", ", checksum, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PeerReply> DecodeReply(const void* data, size_t size) {
  if (size != sizeof(PeerReply)) {
    return absl::DataLossError(absl::StrCat("reply of ", size, " bytes, expected 64"));
  }
  PeerReply reply;
  std::memcpy(&reply, data, sizeof(reply));
  return reply;
}

// Bounds a wait in the writer that is made of short blocking slices: call OnIdle() after each
// slice that made no progress. It fails once a reader has failed, or kProgressTimeout after the
// first idle slice. Cheap to construct on a hot path (no clock read until the first idle).
class IdleWait {
 public:
  IdleWait(std::vector<ChildProcess>& readers, absl::string_view what)
      : readers_(readers), what_(what) {}

  absl::Status OnIdle() {
    absl::Status readers_ok = CheckChildrenNotFailed(readers_);
    if (!readers_ok.ok()) {
      return absl::AbortedError(absl::StrCat(what_, ": ", readers_ok.message()));
    }
    const int64_t now = NowNs();
    if (first_idle_ns_ == 0) {
      first_idle_ns_ = now;
    } else if (now - first_idle_ns_ > absl::ToInt64Nanoseconds(kProgressTimeout)) {
      return absl::DeadlineExceededError(
          absl::StrCat(what_, ": no progress for ", absl::FormatDuration(kProgressTimeout)));
    }
    return absl::OkStatus();
  }

 private:
  std::vector<ChildProcess>& readers_;
  absl::string_view what_;
  int64_t first_idle_ns_ = 0;
};

absl::Status ValidateShape(size_t payload_bytes, int n_readers) {
  if (payload_bytes < kSeqBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "payload_bytes must be >= 8 (it carries a sequence number), got ", payload_bytes));
  }
  if (n_readers < 1 || n_readers > kMaxReaders) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_readers must be in [1, ", kMaxReaders, "], got ", n_readers));
  }
  return absl::OkStatus();
}

absl::Status Validate(const RoundTripConfig& config) {
  VLLM_RETURN_IF_ERROR(ValidateShape(config.payload_bytes, config.n_readers));
  if (config.iterations < 1 || config.warmup < 0) {
    return absl::InvalidArgumentError(absl::StrCat("need iterations >= 1 and warmup >= 0, got ",
                                                   config.iterations, " and ", config.warmup));
  }
  return absl::OkStatus();
}

absl::Status Validate(const ThroughputConfig& config) {
  VLLM_RETURN_IF_ERROR(ValidateShape(config.payload_bytes, config.n_readers));
  if (config.messages < 1) {
    return absl::InvalidArgumentError(absl::StrCat("need messages >= 1, got ", config.messages));
  }
  return absl::OkStatus();
}

// A name no other run uses: "vllm-bench-<pid>-<n>".
std::string UniqueName() {
  static std::atomic<int> counter{0};
  return absl::StrCat("vllm-bench-", getpid(), "-", counter.fetch_add(1));
}

// Runs `body`, turning an escaping exception (zmq::error_t, interprocess_exception,
// std::bad_alloc) into a Status. ChildProcess destructors kill the readers while it unwinds.
template <typename T, typename Body>
absl::StatusOr<T> CatchAll(absl::string_view what, Body body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
}

// The writer's side of a round-trip test, common to every transport. `broadcast(payload)`
// sends the stamped payload to every reader; `receive_reply()` returns the next reply.
template <typename Broadcast, typename ReceiveReply>
absl::StatusOr<std::vector<double>> TimeRoundTrips(const RoundTripConfig& config, Payload& payload,
                                                   Broadcast broadcast,
                                                   ReceiveReply receive_reply) {
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(config.iterations));
  const auto warmup = static_cast<uint64_t>(config.warmup);
  const uint64_t total = warmup + static_cast<uint64_t>(config.iterations);
  int64_t previous = NowNs();
  for (uint64_t seq = 0; seq < total; ++seq) {
    payload.Stamp(seq);
    VLLM_RETURN_IF_ERROR(broadcast(payload));
    uint64_t seen = 0;
    for (int i = 0; i < config.n_readers; ++i) {
      VLLM_ASSIGN_OR_RETURN(const PeerReply reply, receive_reply());
      VLLM_RETURN_IF_ERROR(CheckReply(reply, seq, payload.Checksum(seq), config.n_readers, seen));
    }
    const int64_t now = NowNs();
    if (seq >= warmup) samples.push_back(static_cast<double>(now - previous));
    previous = now;
  }
  return samples;
}

// The writer's side of a throughput test, common to every transport. A sender that never
// blocks would not notice a dead reader (a PUB socket just drops its pipe), so the readers are
// also checked every kPollSliceMs while sending.
template <typename Broadcast, typename ReceiveReply>
absl::StatusOr<ThroughputResult> TimeStream(const ThroughputConfig& config, Payload& payload,
                                            std::vector<ChildProcess>& readers, Broadcast broadcast,
                                            ReceiveReply receive_reply) {
  const auto messages = static_cast<uint64_t>(config.messages);
  constexpr int64_t kCheckEveryNs = int64_t{kPollSliceMs} * 1'000'000;
  uint64_t expected_sum = 0;
  const int64_t start = NowNs();
  int64_t next_check = start + kCheckEveryNs;
  for (uint64_t seq = 0; seq < messages; ++seq) {
    payload.Stamp(seq);
    expected_sum += payload.Checksum(seq);
    VLLM_RETURN_IF_ERROR(broadcast(payload));
    if (seq % 64 == 63 && NowNs() >= next_check) {
      absl::Status readers_ok = CheckChildrenNotFailed(readers);
      if (!readers_ok.ok()) {
        return absl::AbortedError(absl::StrCat("streaming: ", readers_ok.message()));
      }
      next_check = NowNs() + kCheckEveryNs;
    }
  }
  uint64_t seen = 0;
  for (int i = 0; i < config.n_readers; ++i) {
    VLLM_ASSIGN_OR_RETURN(const PeerReply ack, receive_reply());
    VLLM_RETURN_IF_ERROR(CheckReply(ack, messages, expected_sum, config.n_readers, seen));
  }
  const double elapsed_ns = static_cast<double>(std::max<int64_t>(NowNs() - start, 1));
  ThroughputResult result;
  result.messages_per_s = static_cast<double>(messages) * 1e9 / elapsed_ns;
  result.gb_per_s = static_cast<double>(messages * payload.size()) / elapsed_ns;
  return result;
}

// ----------------------------------------------------------------------------------------------
// ZeroMQ

struct ZmqEndpoints {
  std::string broadcast;  // writer XPUB (bind) -> reader SUB (connect)
  std::string replies;    // reader PUSH (connect) -> writer PULL (bind)
};

// Abstract-namespace endpoints ('@'): nothing is created in the file system.
ZmqEndpoints MakeZmqEndpoints() {
  return ZmqEndpoints{absl::StrCat("ipc://@", UniqueName()), absl::StrCat("ipc://@", UniqueName())};
}

// A reader process's body. Its context is created here, after the fork.
int ZmqReaderMain(const ZmqEndpoints& endpoints, int reader, size_t payload_bytes,
                  uint64_t messages, ReplyMode mode, int hwm) {
  zmq::context_t context(1);
  zmq::socket_t sub(context, zmq::socket_type::sub);
  sub.set(zmq::sockopt::rcvhwm, hwm);
  sub.set(zmq::sockopt::rcvtimeo, kReaderTimeoutMs);
  sub.set(zmq::sockopt::reconnect_ivl, 10);  // the writer binds after forking its readers
  sub.set(zmq::sockopt::linger, 0);
  sub.set(zmq::sockopt::subscribe, "");
  sub.connect(endpoints.broadcast);
  zmq::socket_t push(context, zmq::socket_type::push);
  push.set(zmq::sockopt::sndtimeo, kReaderTimeoutMs);
  push.set(zmq::sockopt::reconnect_ivl, 10);
  push.set(zmq::sockopt::linger, kReaderLingerMs);
  push.connect(endpoints.replies);

  ReaderCheck check(reader, payload_bytes);
  zmq::message_t message;
  for (uint64_t i = 0; i < messages; ++i) {
    if (!sub.recv(message)) return check.Fail(kExitTimedOut, "no message within the timeout");
    if (!check.Consume(message.data(), message.size())) return kExitBadMessage;
    if (mode == ReplyMode::kEachMessage) {
      const PeerReply reply = check.LastMessageReply();
      if (!push.send(zmq::buffer(&reply, sizeof(reply)))) {
        return check.Fail(kExitTimedOut, "could not send a reply");
      }
    }
  }
  if (mode == ReplyMode::kOnceAtEnd) {
    const PeerReply ack = check.StreamAck();
    if (!push.send(zmq::buffer(&ack, sizeof(ack)))) {
      return check.Fail(kExitTimedOut, "could not send the ack");
    }
  }
  return 0;
}

// The writer's sockets, created after the readers are forked. Declaration order makes the
// sockets close before the context terminates; linger 0 keeps that from blocking.
struct ZmqWriter {
  ZmqWriter(const ZmqEndpoints& endpoints, int hwm, bool no_drop) {
    xpub.set(zmq::sockopt::linger, 0);
    xpub.set(zmq::sockopt::sndhwm, hwm);
    xpub.set(zmq::sockopt::xpub_verbose, 1);  // pass every subscription up, duplicates too
    if (no_drop) xpub.set(zmq::sockopt::xpub_nodrop, 1);  // block at the HWM, never drop
    xpub.set(zmq::sockopt::sndtimeo, kPollSliceMs);
    xpub.set(zmq::sockopt::rcvtimeo, kPollSliceMs);
    xpub.bind(endpoints.broadcast);
    pull.set(zmq::sockopt::linger, 0);
    pull.set(zmq::sockopt::rcvtimeo, kPollSliceMs);
    pull.bind(endpoints.replies);
  }

  zmq::context_t context{1};
  zmq::socket_t xpub{context, zmq::socket_type::xpub};
  zmq::socket_t pull{context, zmq::socket_type::pull};
};

// The slow-joiner handshake: once the XPUB has passed up one subscription per reader, every
// reader's pipe is attached and receives everything sent from now on.
absl::Status AwaitSubscriptions(zmq::socket_t& xpub, int n_readers,
                                std::vector<ChildProcess>& readers) {
  IdleWait wait(readers, "waiting for ZeroMQ subscriptions");
  zmq::message_t message;
  int subscribed = 0;
  while (subscribed < n_readers) {
    if (xpub.recv(message)) {
      if (message.size() >= 1 && *static_cast<const uint8_t*>(message.data()) == 1) ++subscribed;
    } else {
      VLLM_RETURN_IF_ERROR(wait.OnIdle());
    }
  }
  return absl::OkStatus();
}

absl::Status ZmqBroadcast(zmq::socket_t& xpub, const Payload& payload,
                          std::vector<ChildProcess>& readers) {
  IdleWait wait(readers, "sending on ZeroMQ");
  while (!xpub.send(zmq::buffer(payload.data(), payload.size()))) {
    VLLM_RETURN_IF_ERROR(wait.OnIdle());
  }
  return absl::OkStatus();
}

absl::StatusOr<PeerReply> ZmqReceiveReply(zmq::socket_t& pull, std::vector<ChildProcess>& readers) {
  IdleWait wait(readers, "waiting for a ZeroMQ reply");
  zmq::message_t message;
  while (!pull.recv(message)) VLLM_RETURN_IF_ERROR(wait.OnIdle());
  return DecodeReply(message.data(), message.size());
}

absl::StatusOr<std::vector<ChildProcess>> ForkZmqReaders(const ZmqEndpoints& endpoints,
                                                         int n_readers, size_t payload_bytes,
                                                         uint64_t messages, ReplyMode mode,
                                                         int hwm) {
  std::vector<ChildProcess> readers;
  for (int r = 0; r < n_readers; ++r) {
    VLLM_ASSIGN_OR_RETURN(ChildProcess child, ChildProcess::Fork([=] {
                            return ZmqReaderMain(endpoints, r, payload_bytes, messages, mode, hwm);
                          }));
    readers.push_back(std::move(child));
  }
  return readers;
}

// ZeroMQ's default high-water mark (messages) for the round trip, where at most one message is
// in flight; for streams, enough to queue about kMaxQueuedBytesPerReader.
constexpr int kZmqRoundTripHwm = 1000;
int ZmqStreamHwm(size_t payload_bytes) {
  return static_cast<int>(std::clamp<size_t>(kMaxQueuedBytesPerReader / payload_bytes, 4, 100'000));
}

absl::StatusOr<std::vector<double>> ZmqRoundTripImpl(const RoundTripConfig& config) {
  const ZmqEndpoints endpoints = MakeZmqEndpoints();
  const auto messages = static_cast<uint64_t>(config.warmup) + config.iterations;
  VLLM_ASSIGN_OR_RETURN(auto readers,
                        ForkZmqReaders(endpoints, config.n_readers, config.payload_bytes, messages,
                                       ReplyMode::kEachMessage, kZmqRoundTripHwm));
  Payload payload(config.payload_bytes);
  ZmqWriter writer(endpoints, kZmqRoundTripHwm, /*no_drop=*/false);
  VLLM_RETURN_IF_ERROR(AwaitSubscriptions(writer.xpub, config.n_readers, readers));
  VLLM_ASSIGN_OR_RETURN(
      std::vector<double> samples,
      TimeRoundTrips(
          config, payload, [&](const Payload& p) { return ZmqBroadcast(writer.xpub, p, readers); },
          [&] { return ZmqReceiveReply(writer.pull, readers); }));
  VLLM_RETURN_IF_ERROR(WaitForChildren(readers, kProgressTimeout));
  return samples;
}

absl::StatusOr<ThroughputResult> ZmqThroughputImpl(const ThroughputConfig& config) {
  const ZmqEndpoints endpoints = MakeZmqEndpoints();
  const int hwm = ZmqStreamHwm(config.payload_bytes);
  VLLM_ASSIGN_OR_RETURN(
      auto readers,
      ForkZmqReaders(endpoints, config.n_readers, config.payload_bytes,
                     static_cast<uint64_t>(config.messages), ReplyMode::kOnceAtEnd, hwm));
  Payload payload(config.payload_bytes);
  ZmqWriter writer(endpoints, hwm, /*no_drop=*/true);
  VLLM_RETURN_IF_ERROR(AwaitSubscriptions(writer.xpub, config.n_readers, readers));
  VLLM_ASSIGN_OR_RETURN(ThroughputResult result,
                        TimeStream(
                            config, payload, readers,
                            [&](const Payload& p) { return ZmqBroadcast(writer.xpub, p, readers); },
                            [&] { return ZmqReceiveReply(writer.pull, readers); }));
  VLLM_RETURN_IF_ERROR(WaitForChildren(readers, kProgressTimeout));
  return result;
}

// ----------------------------------------------------------------------------------------------
// boost::interprocess::message_queue

// An absolute deadline `ms` from now, as Boost.Interprocess wants it (UTC ptime). Built from
// CLOCK_REALTIME with integer arithmetic, avoiding microsec_clock's calendar conversion.
boost::posix_time::ptime BoostDeadlineIn(int ms) {
  static const boost::posix_time::ptime kEpoch(boost::gregorian::date(1970, 1, 1));
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return kEpoch + boost::posix_time::seconds(now.tv_sec) +
         boost::posix_time::microseconds(now.tv_nsec / 1000 + int64_t{ms} * 1000);
}

// One request queue per reader and one reply queue, named uniquely; every name is removed
// from /dev/shm when this is destroyed (also when creation fails half way).
class BoostQueues {
 public:
  // Creates the queues; throws bip::interprocess_exception on failure.
  BoostQueues(int n_readers, size_t payload_bytes, size_t request_depth) {
    const std::string base = UniqueName();
    for (int r = 0; r < n_readers; ++r) {
      request_names_.push_back(absl::StrCat(base, "-req", r));
      requests_.push_back(CreateQueue(request_names_.back(), request_depth, payload_bytes));
    }
    reply_name_ = absl::StrCat(base, "-rep");
    replies_ = CreateQueue(reply_name_, static_cast<size_t>(n_readers), sizeof(PeerReply));
  }
  BoostQueues(const BoostQueues&) = delete;
  BoostQueues& operator=(const BoostQueues&) = delete;

  ~BoostQueues() {
    requests_.clear();
    replies_.reset();
    for (const std::string& name : request_names_) bip::message_queue::remove(name.c_str());
    if (!reply_name_.empty()) bip::message_queue::remove(reply_name_.c_str());
  }

  const std::string& request_name(int r) const { return request_names_[static_cast<size_t>(r)]; }
  const std::string& reply_name() const { return reply_name_; }
  bip::message_queue& request(int r) { return *requests_[static_cast<size_t>(r)]; }
  bip::message_queue& replies() { return *replies_; }

 private:
  // The name must already be recorded, so that it is removed even if creation throws midway.
  static std::unique_ptr<bip::message_queue> CreateQueue(const std::string& name, size_t depth,
                                                         size_t max_bytes) {
    bip::message_queue::remove(name.c_str());
    return std::make_unique<bip::message_queue>(bip::create_only, name.c_str(), depth, max_bytes);
  }

  std::vector<std::string> request_names_;
  std::string reply_name_;
  std::vector<std::unique_ptr<bip::message_queue>> requests_;
  std::unique_ptr<bip::message_queue> replies_;
};

// A reader process's body: opens its queues by name, as an unrelated process would.
int BoostReaderMain(const std::string& request_name, const std::string& reply_name, int reader,
                    size_t payload_bytes, uint64_t messages, ReplyMode mode,
                    std::atomic<uint64_t>* ready) {
  bip::message_queue requests(bip::open_only, request_name.c_str());
  bip::message_queue replies(bip::open_only, reply_name.c_str());
  AlignedBuffer buffer(requests.get_max_msg_size());
  ready->fetch_add(1, std::memory_order_release);

  ReaderCheck check(reader, payload_bytes);
  auto send = [&](const PeerReply& reply) {
    return replies.timed_send(&reply, sizeof(reply), 0, BoostDeadlineIn(kReaderTimeoutMs));
  };
  for (uint64_t i = 0; i < messages; ++i) {
    bip::message_queue::size_type received = 0;
    unsigned int priority = 0;
    if (!requests.timed_receive(buffer.data(), buffer.size(), received, priority,
                                BoostDeadlineIn(kReaderTimeoutMs))) {
      return check.Fail(kExitTimedOut, "no message within the timeout");
    }
    if (!check.Consume(buffer.data(), received)) return kExitBadMessage;
    if (mode == ReplyMode::kEachMessage && !send(check.LastMessageReply())) {
      return check.Fail(kExitTimedOut, "could not send a reply");
    }
  }
  if (mode == ReplyMode::kOnceAtEnd && !send(check.StreamAck())) {
    return check.Fail(kExitTimedOut, "could not send the ack");
  }
  return 0;
}

// Sends one copy of the payload to every reader's queue, blocking while a queue is full.
absl::Status BoostBroadcast(BoostQueues& queues, int n_readers, const Payload& payload,
                            std::vector<ChildProcess>& readers) {
  for (int r = 0; r < n_readers; ++r) {
    IdleWait wait(readers, "sending on a Boost message_queue");
    while (!queues.request(r).timed_send(payload.data(), payload.size(), 0,
                                         BoostDeadlineIn(kPollSliceMs))) {
      VLLM_RETURN_IF_ERROR(wait.OnIdle());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PeerReply> BoostReceiveReply(bip::message_queue& replies,
                                            std::vector<ChildProcess>& readers) {
  IdleWait wait(readers, "waiting for a Boost message_queue reply");
  PeerReply reply;
  bip::message_queue::size_type received = 0;
  unsigned int priority = 0;
  while (!replies.timed_receive(&reply, sizeof(reply), received, priority,
                                BoostDeadlineIn(kPollSliceMs))) {
    VLLM_RETURN_IF_ERROR(wait.OnIdle());
  }
  return DecodeReply(&reply, received);
}

// Forks the readers and waits until each has opened its queues.
absl::StatusOr<std::vector<ChildProcess>> ForkBoostReaders(BoostQueues& queues, int n_readers,
                                                           size_t payload_bytes, uint64_t messages,
                                                           ReplyMode mode) {
  VLLM_ASSIGN_OR_RETURN(SharedCounter ready, SharedCounter::Create());
  std::atomic<uint64_t>* ready_count = &ready.value();
  std::vector<ChildProcess> readers;
  for (int r = 0; r < n_readers; ++r) {
    VLLM_ASSIGN_OR_RETURN(
        ChildProcess child,
        ChildProcess::Fork([request = queues.request_name(r), reply = queues.reply_name(), r,
                            payload_bytes, messages, mode, ready_count] {
          return BoostReaderMain(request, reply, r, payload_bytes, messages, mode, ready_count);
        }));
    readers.push_back(std::move(child));
  }
  IdleWait wait(readers, "waiting for Boost readers to open their queues");
  while (
      !ready.WaitAtLeast(static_cast<uint64_t>(n_readers), absl::Milliseconds(kPollSliceMs)).ok()) {
    VLLM_RETURN_IF_ERROR(wait.OnIdle());
  }
  return readers;
}

absl::StatusOr<std::vector<double>> BoostRoundTripImpl(const RoundTripConfig& config) {
  // One message is in flight per reader at a time.
  BoostQueues queues(config.n_readers, config.payload_bytes, /*request_depth=*/1);
  const auto messages = static_cast<uint64_t>(config.warmup) + config.iterations;
  VLLM_ASSIGN_OR_RETURN(auto readers,
                        ForkBoostReaders(queues, config.n_readers, config.payload_bytes, messages,
                                         ReplyMode::kEachMessage));
  Payload payload(config.payload_bytes);
  VLLM_ASSIGN_OR_RETURN(
      std::vector<double> samples,
      TimeRoundTrips(
          config, payload,
          [&](const Payload& p) { return BoostBroadcast(queues, config.n_readers, p, readers); },
          [&] { return BoostReceiveReply(queues.replies(), readers); }));
  VLLM_RETURN_IF_ERROR(WaitForChildren(readers, kProgressTimeout));
  return samples;
}

absl::StatusOr<ThroughputResult> BoostThroughputImpl(const ThroughputConfig& config) {
  const size_t depth = std::clamp<size_t>(kMaxQueuedBytesPerReader / config.payload_bytes, 2, 64);
  BoostQueues queues(config.n_readers, config.payload_bytes, depth);
  VLLM_ASSIGN_OR_RETURN(
      auto readers,
      ForkBoostReaders(queues, config.n_readers, config.payload_bytes,
                       static_cast<uint64_t>(config.messages), ReplyMode::kOnceAtEnd));
  Payload payload(config.payload_bytes);
  VLLM_ASSIGN_OR_RETURN(
      ThroughputResult result,
      TimeStream(
          config, payload, readers,
          [&](const Payload& p) { return BoostBroadcast(queues, config.n_readers, p, readers); },
          [&] { return BoostReceiveReply(queues.replies(), readers); }));
  VLLM_RETURN_IF_ERROR(WaitForChildren(readers, kProgressTimeout));
  return result;
}

// ----------------------------------------------------------------------------------------------
// Cache-line ping-pong

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until `line` holds `want` (acquire). Every 4096 spins it checks the clock, and calls
// `on_slow()` (which may fail) once per ~kPollSliceMs of waiting; fails after kProgressTimeout.
template <typename OnSlow>
absl::Status SpinUntil(const std::atomic<uint64_t>& line, uint64_t want, OnSlow on_slow) {
  int64_t deadline = 0;
  int64_t next_check = 0;
  for (uint32_t spins = 1;; ++spins) {
    if (line.load(std::memory_order_acquire) == want) return absl::OkStatus();
    CpuRelax();
    if ((spins & 4095) != 0) continue;
    const int64_t now = NowNs();
    if (deadline == 0) {
      deadline = now + absl::ToInt64Nanoseconds(kProgressTimeout);
      next_check = now + int64_t{kPollSliceMs} * 1'000'000;
    } else if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("ping-pong: value ", want, " not seen in ",
                                                      absl::FormatDuration(kProgressTimeout)));
    } else if (now >= next_check) {
      VLLM_RETURN_IF_ERROR(on_slow());
      next_check = now + int64_t{kPollSliceMs} * 1'000'000;
    }
  }
}

// The child's side: waits for each odd value and answers with the next even one.
int PingPongChildMain(std::atomic<uint64_t>* line, uint64_t round_trips) {
  for (uint64_t k = 0; k < round_trips; ++k) {
    const absl::Status status = SpinUntil(*line, 2 * k + 1, [] { return absl::OkStatus(); });
    if (!status.ok()) {
      std::cerr << "ping-pong child (pid " << getpid() << "): " << status << std::endl;
      return kExitTimedOut;
    }
    line->store(2 * k + 2, std::memory_order_release);
  }
  return 0;
}

absl::StatusOr<std::vector<double>> PingPongImpl(int iterations, int warmup) {
  VLLM_ASSIGN_OR_RETURN(SharedCounter shared, SharedCounter::Create());
  std::atomic<uint64_t>* line = &shared.value();
  const auto total = static_cast<uint64_t>(warmup) + static_cast<uint64_t>(iterations);
  std::vector<ChildProcess> children;
  VLLM_ASSIGN_OR_RETURN(ChildProcess child, ChildProcess::Fork([line, total] {
                          return PingPongChildMain(line, total);
                        }));
  children.push_back(std::move(child));
  auto child_ok = [&]() -> absl::Status {
    absl::Status status = CheckChildrenNotFailed(children);
    if (status.ok()) return status;
    return absl::AbortedError(absl::StrCat("ping-pong: ", status.message()));
  };

  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(iterations));
  int64_t previous = NowNs();
  for (uint64_t k = 0; k < total; ++k) {
    line->store(2 * k + 1, std::memory_order_release);
    VLLM_RETURN_IF_ERROR(SpinUntil(*line, 2 * k + 2, child_ok));
    const int64_t now = NowNs();
    if (k >= static_cast<uint64_t>(warmup)) samples.push_back(static_cast<double>(now - previous));
    previous = now;
  }
  VLLM_RETURN_IF_ERROR(WaitForChildren(children, kProgressTimeout));
  return samples;
}

}  // namespace

absl::StatusOr<std::vector<double>> ZmqIpcRoundTrip(const RoundTripConfig& config) {
  VLLM_RETURN_IF_ERROR(Validate(config));
  return CatchAll<std::vector<double>>("ZeroMQ round trip",
                                       [&] { return ZmqRoundTripImpl(config); });
}

absl::StatusOr<std::vector<double>> BoostMqRoundTrip(const RoundTripConfig& config) {
  VLLM_RETURN_IF_ERROR(Validate(config));
  return CatchAll<std::vector<double>>("Boost message_queue round trip",
                                       [&] { return BoostRoundTripImpl(config); });
}

absl::StatusOr<std::vector<double>> CacheLinePingPong(int iterations, int warmup) {
  if (iterations < 1 || warmup < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("need iterations >= 1 and warmup >= 0, got ", iterations, " and ", warmup));
  }
  return CatchAll<std::vector<double>>("cache-line ping-pong",
                                       [&] { return PingPongImpl(iterations, warmup); });
}

absl::StatusOr<ThroughputResult> ZmqIpcThroughput(const ThroughputConfig& config) {
  VLLM_RETURN_IF_ERROR(Validate(config));
  return CatchAll<ThroughputResult>("ZeroMQ throughput", [&] { return ZmqThroughputImpl(config); });
}

absl::StatusOr<ThroughputResult> BoostMqThroughput(const ThroughputConfig& config) {
  VLLM_RETURN_IF_ERROR(Validate(config));
  return CatchAll<ThroughputResult>("Boost message_queue throughput",
                                    [&] { return BoostThroughputImpl(config); });
}

double MemcpyBandwidthGBps(size_t block_bytes, size_t working_set_bytes, double min_seconds) {
  if (block_bytes == 0) return 0.0;
  const size_t slots = std::max<size_t>(1, working_set_bytes / block_bytes);
  AlignedBuffer source(block_bytes);
  AlignedBuffer ring(slots * block_bytes);
  std::memset(source.data(), 0x5a, block_bytes);
  for (size_t s = 0; s < slots; ++s) {  // one untimed lap: caches and TLB in steady state
    std::memcpy(ring.data() + s * block_bytes, source.data(), block_bytes);
  }
  ClobberMemory();
  // Read the clock about once per MiB copied.
  const size_t copies_per_check = std::max<size_t>(1, (size_t{1} << 20) / block_bytes);
  const auto min_ns = static_cast<int64_t>(min_seconds * 1e9);
  size_t slot = 0;
  uint64_t copied = 0;
  const int64_t start = NowNs();
  int64_t elapsed = 0;
  do {
    for (size_t i = 0; i < copies_per_check; ++i) {
      std::memcpy(ring.data() + slot * block_bytes, source.data(), block_bytes);
      ClobberMemory();
      slot = slot + 1 == slots ? 0 : slot + 1;
    }
    copied += copies_per_check * block_bytes;
    elapsed = NowNs() - start;
  } while (elapsed < min_ns);
  return static_cast<double>(copied) / static_cast<double>(std::max<int64_t>(elapsed, 1));
}

}  // namespace vllm::bench
