#include "ipc/message_queue.h"

#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "ipc/shm_segment.h"
#include "ipc/zmq_util.h"

namespace vllm::ipc {
namespace {

constexpr char kKindData = 'D';
constexpr char kKindReady = 'R';
constexpr char kKindClosed = 'C';
constexpr absl::string_view kShmPrefix = "vllm-mq-";

zmq::message_t KindFrame(char kind) { return zmq::message_t(&kind, 1); }

void SetCommonOptions(zmq::socket_t& s) { s.set(zmq::sockopt::linger, 0); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// MessageQueueWriter

void MessageQueueWriter::RemoveSegmentsOfDeadWriters() {
  ShmSegment::RemoveStale(std::string(kShmPrefix));
}

absl::StatusOr<std::unique_ptr<MessageQueueWriter>> MessageQueueWriter::Create(
    const MessageQueueOptions& options) {
  if (options.n_readers < 1) return absl::InvalidArgumentError("n_readers must be at least 1");
  std::vector<int32_t> local;
  if (options.local_reader_ranks) {
    local = *options.local_reader_ranks;
  } else {
    local.resize(options.n_readers);
    std::iota(local.begin(), local.end(), 0);
  }
  auto w = std::unique_ptr<MessageQueueWriter>(new MessageQueueWriter());
  w->wait_ = options.wait;
  w->n_local_ = static_cast<uint32_t>(local.size());
  w->n_remote_ = options.n_readers - w->n_local_;
  Handle& h = w->handle_;
  h.n_readers = options.n_readers;
  h.local_reader_ranks = local;
  h.max_chunks = options.max_chunks;
  h.max_chunk_bytes = options.max_chunk_bytes;
  if (w->n_local_ > 0) {
    RemoveSegmentsOfDeadWriters();
    h.shm_name = absl::StrCat(kShmPrefix, UniqueToken());
    VLLM_ASSIGN_OR_RETURN(auto ring,
                          ShmRingBuffer::Create(h.shm_name, w->n_local_, options.max_chunks,
                                                options.max_chunk_bytes));
    w->ring_ = std::make_unique<RingWriter>(std::move(ring), options.wait);
    w->local_.emplace(ZmqContext(), zmq::socket_type::xpub);
    SetCommonOptions(*w->local_);
    w->local_->set(zmq::sockopt::xpub_verbose, 1);
    // Unbounded is safe here: the ring admits at most max_chunks messages ahead of a reader.
    w->local_->set(zmq::sockopt::sndhwm, 0);
    VLLM_ASSIGN_OR_RETURN(w->local_address_, ScopedIpcAddress::Create("mq"));
    h.local_address = w->local_address_.address();
    try {
      w->local_->bind(h.local_address);
    } catch (const zmq::error_t& e) {
      return absl::UnavailableError(absl::StrCat("cannot bind ", h.local_address, ": ", e.what()));
    }
  }
  if (w->n_remote_ > 0) {
    w->remote_.emplace(ZmqContext(), zmq::socket_type::xpub);
    SetCommonOptions(*w->remote_);
    w->remote_->set(zmq::sockopt::xpub_verbose, 1);
    w->remote_->set(zmq::sockopt::xpub_nodrop, 1);
    w->remote_->set(zmq::sockopt::sndhwm, std::max(1, options.remote_send_hwm));
    if (options.remote_curve) {
      VLLM_RETURN_IF_ERROR(MakeCurveServer(*w->remote_, *options.remote_curve));
      h.remote_curve = true;
    }
    VLLM_ASSIGN_OR_RETURN(h.remote_address,
                          BindTcp(*w->remote_, options.remote_host, options.remote_port));
  }
  // Validate what readers will decode.
  VLLM_RETURN_IF_ERROR(Handle::Decode(h.Encode()).status());
  return w;
}

MessageQueueWriter::~MessageQueueWriter() { Close(); }

absl::Status MessageQueueWriter::CheckCancelled() const {
  return cancelled_.load(std::memory_order_relaxed) ? absl::CancelledError("cancelled")
                                                    : absl::OkStatus();
}

absl::Status MessageQueueWriter::CountSubscriptions(zmq::socket_t& socket, uint32_t& count) {
  while (true) {
    zmq::message_t msg;
    if (!socket.recv(msg, zmq::recv_flags::dontwait)) return absl::OkStatus();
    if (msg.size() >= 1) {
      const uint8_t op = *static_cast<const uint8_t*>(msg.data());
      if (op == 1) ++count;
      if (op == 0 && count > 0) --count;
    }
  }
}

absl::Status MessageQueueWriter::WaitUntilReady(absl::Time deadline) {
  if (ready_) return absl::OkStatus();
  const int64_t deadline_ns = MonoDeadline(deadline);
  if (ring_) VLLM_RETURN_IF_ERROR(ring_->WaitForReaders(deadline_ns));
  const int64_t slice_ms = std::max<int64_t>(1, absl::ToInt64Milliseconds(wait_.liveness_interval));
  while (local_subscribed_ < n_local_ || remote_subscribed_ < n_remote_) {
    VLLM_RETURN_IF_ERROR(CheckCancelled());
    if (MonoNowNs() >= deadline_ns) {
      return absl::DeadlineExceededError(
          absl::StrCat("timed out waiting for readers to subscribe: local ", local_subscribed_, "/",
                       n_local_, ", remote ", remote_subscribed_, "/", n_remote_,
                       " (remote address ", handle_.remote_address, ")"));
    }
    zmq::pollitem_t items[2];
    int n = 0;
    if (local_) items[n++] = {local_->handle(), 0, ZMQ_POLLIN, 0};
    if (remote_) items[n++] = {remote_->handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(items, n, std::chrono::milliseconds(slice_ms));
    if (local_) VLLM_RETURN_IF_ERROR(CountSubscriptions(*local_, local_subscribed_));
    if (remote_) VLLM_RETURN_IF_ERROR(CountSubscriptions(*remote_, remote_subscribed_));
  }
  // Everyone has mapped the segment and connected (a subscription arrives over an established
  // connection): drop both names so no crash can leak them, before the readers hear READY.
  if (ring_) ring_->ring().segment().Unlink();
  local_address_.Release();
  for (auto* s : {local_ ? &*local_ : nullptr, remote_ ? &*remote_ : nullptr}) {
    if (s == nullptr) continue;
    std::vector<zmq::message_t> parts;
    parts.push_back(KindFrame(kKindReady));
    VLLM_RETURN_IF_ERROR(SendMultipart(
        *s, parts, deadline_ns, wait_.liveness_interval, [this] { return CheckCancelled(); },
        "ready message"));
  }
  ready_ = true;
  return absl::OkStatus();
}

absl::Status MessageQueueWriter::EnqueueParts(absl::Span<const ByteSpan> parts, Deadline deadline) {
  if (!ready_) {
    return absl::FailedPreconditionError("Enqueue before WaitUntilReady() completed");
  }
  if (closed_) return absl::FailedPreconditionError("Enqueue after Close()");
  VLLM_RETURN_IF_ERROR(CheckCancelled());
  // Only a wait resolves the deadline (a clock read or two); a free chunk needs none.
  auto deadline_mono = [&] { return deadline.MonoNs(); };
  size_t total = 0;
  for (const ByteSpan& p : parts) total += p.size();

  std::optional<zmq::message_t> frame;  // the payload as one ZMQ frame, made at most once
  auto make_frame = [&]() -> zmq::message_t& {
    if (!frame) {
      frame.emplace(total);
      uint8_t* out = static_cast<uint8_t*>(frame->data());
      for (const ByteSpan& p : parts) {
        if (!p.empty()) std::memcpy(out, p.data(), p.size());
        out += p.size();
      }
    }
    return *frame;
  };
  auto check = [this] { return CheckCancelled(); };

  if (ring_) {
    const bool overflow = total > ring_->ring().max_chunk_bytes();
    const uint64_t in_ring = overflow ? 0 : total;
    uint8_t* chunk = ring_->TryAcquire(in_ring);
    if (chunk == nullptr) {
      VLLM_ASSIGN_OR_RETURN(chunk, ring_->Acquire(in_ring, deadline_mono()));
    }
    if (!overflow) {
      for (const ByteSpan& p : parts) {
        if (!p.empty()) std::memcpy(chunk, p.data(), p.size());
        chunk += p.size();
      }
    } else {
      // Send first, then publish: a reader that sees the overflow mark finds the frame queued.
      std::vector<zmq::message_t> out;
      out.push_back(KindFrame(kKindData));
      out.emplace_back();
      out.back().copy(make_frame());  // shares the buffer, no byte copy
      VLLM_RETURN_IF_ERROR(SendMultipart(*local_, out, deadline_mono(), wait_.liveness_interval,
                                         check, "local overflow send"));
    }
    ring_->Publish(total, overflow ? kChunkOverflow : 0);
  }
  if (remote_) {
    std::vector<zmq::message_t> out;
    out.push_back(KindFrame(kKindData));
    out.push_back(std::move(make_frame()));
    VLLM_RETURN_IF_ERROR(SendMultipart(
        *remote_, out, deadline_mono(), wait_.liveness_interval, check,
        absl::StrCat("remote readers at ", handle_.remote_address, " to take a message")));
  }
  return absl::OkStatus();
}

void MessageQueueWriter::Close() {
  if (closed_) return;
  closed_ = true;
  if (ring_) ring_->Close();
  if (remote_ && ready_) {
    std::vector<zmq::message_t> parts;
    parts.push_back(KindFrame(kKindClosed));
    // Best effort: a remote reader that is gone does not hold up shutdown.
    (void)SendMultipart(*remote_, parts, MonoNowNs() + 100'000'000, absl::Milliseconds(10), nullptr,
                        "close message");
  }
}

void MessageQueueWriter::Cancel() {
  cancelled_.store(true, std::memory_order_relaxed);
  if (ring_) ring_->Cancel();
}

// ---------------------------------------------------------------------------------------------
// MessageQueueReader

absl::StatusOr<std::unique_ptr<MessageQueueReader>> MessageQueueReader::Attach(
    const Handle& handle, int32_t rank, const WaitOptions& wait,
    const std::optional<CurveKeys>& curve) {
  if (rank < 0 || static_cast<uint32_t>(rank) >= handle.n_readers) {
    return absl::InvalidArgumentError(
        absl::StrCat("reader rank ", rank, " is outside 0..", handle.n_readers - 1));
  }
  auto r = std::unique_ptr<MessageQueueReader>(new MessageQueueReader());
  r->handle_ = handle;
  r->rank_ = rank;
  r->wait_ = wait;
  const int index = handle.LocalIndex(rank);
  r->sub_.emplace(ZmqContext(), zmq::socket_type::sub);
  SetCommonOptions(*r->sub_);
  r->sub_->set(zmq::sockopt::rcvhwm, 0);
  if (index >= 0) {
    VLLM_ASSIGN_OR_RETURN(
        auto ring, ShmRingBuffer::Open(handle.shm_name,
                                       static_cast<uint32_t>(handle.local_reader_ranks.size()),
                                       handle.max_chunks, handle.max_chunk_bytes));
    VLLM_ASSIGN_OR_RETURN(r->ring_,
                          RingReader::Attach(std::move(ring), static_cast<uint32_t>(index), wait));
    r->sub_->connect(handle.local_address);
  } else {
    if (handle.remote_curve && !curve) {
      return absl::FailedPreconditionError(
          absl::StrCat("the queue at ", handle.remote_address,
                       " accepts only readers holding the cluster key (CURVE): none was given"));
    }
    if (!handle.remote_curve && curve) {
      return absl::FailedPreconditionError(
          absl::StrCat("a cluster key was given but the writer at ", handle.remote_address,
                       " does not use CURVE (give the writer the key too)"));
    }
    if (curve) VLLM_RETURN_IF_ERROR(MakeCurveClient(*r->sub_, *curve));
    // Notice a writer that vanished, or that refused us: ZMQ reports the TCP connection's
    // state on a monitor.
    const std::string monitor_address = absl::StrCat("inproc://mq-monitor-", UniqueToken());
    if (zmq_socket_monitor(r->sub_->handle(), monitor_address.c_str(),
                           ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED |
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0) {
      return absl::InternalError(absl::StrCat("zmq_socket_monitor: ", zmq_strerror(zmq_errno())));
    }
    r->monitor_.emplace(ZmqContext(), zmq::socket_type::pair);
    SetCommonOptions(*r->monitor_);
    r->monitor_->connect(monitor_address);
    r->sub_->set(zmq::sockopt::heartbeat_ivl, 1000);
    r->sub_->set(zmq::sockopt::heartbeat_timeout, 5000);
    if (handle.remote_address.find('[') != std::string::npos) r->sub_->set(zmq::sockopt::ipv6, 1);
    try {
      r->sub_->connect(handle.remote_address);
    } catch (const zmq::error_t& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot connect to ", handle.remote_address, ": ", e.what()));
    }
  }
  r->sub_->set(zmq::sockopt::subscribe, "");
  return r;
}

MessageQueueReader::~MessageQueueReader() {
  if (monitor_ && sub_) zmq_socket_monitor(sub_->handle(), nullptr, 0);
}

absl::Status MessageQueueReader::Check() const {
  if (cancelled_.load(std::memory_order_relaxed)) return absl::CancelledError("cancelled");
  if (!monitor_) return absl::OkStatus();
  auto* self = const_cast<MessageQueueReader*>(this);
  while (true) {
    zmq::message_t event;
    if (!self->monitor_->recv(event, zmq::recv_flags::dontwait)) return absl::OkStatus();
    uint16_t id = 0;
    uint32_t value = 0;
    if (event.size() >= 6) {
      std::memcpy(&id, event.data(), 2);
      std::memcpy(&value, static_cast<const uint8_t*>(event.data()) + 2, 4);
    }
    while (event.more()) (void)self->monitor_->recv(event, zmq::recv_flags::none);
    if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) self->connected_ = true;
    if (id == ZMQ_EVENT_DISCONNECTED && connected_) {
      self->connected_ = false;
      return absl::UnavailableError(absl::StrCat("lost the connection to the writer at ",
                                                 handle_.remote_address,
                                                 " (it died, or the network failed)"));
    }
    if (id == ZMQ_EVENT_DISCONNECTED && handle_.remote_curve) {
      // The writer hangs up during the CURVE handshake when our box does not open with its
      // key: we hold another cluster key.
      return absl::PermissionDeniedError(absl::StrCat(
          "the writer at ", handle_.remote_address,
          " closed the connection during the CURVE handshake: does this reader hold the same "
          "cluster key as the writer?"));
    }
    if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
      return absl::PermissionDeniedError(absl::StrCat("the writer at ", handle_.remote_address,
                                                      " refused this reader (ZAP status ", value,
                                                      "): its CURVE key is not the cluster key"));
    }
    if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "security handshake with the writer at %s failed (ZMQ protocol error %#x): do both "
          "sides use the same cluster key setting?",
          handle_.remote_address, value));
    }
  }
}

absl::Status MessageQueueReader::RecvFrame(int64_t deadline_ns, absl::string_view what) {
  auto check = [this]() -> absl::Status {
    VLLM_RETURN_IF_ERROR(Check());
    // A local reader whose writer died gets no frame: the ring's liveness slot tells.
    if (ring_ && !ring_->ring().segment().SlotHeldByOther(0)) {
      return absl::UnavailableError(absl::StrCat("writer (pid ", ring_->ring().header()->writer_pid,
                                                 ") of '", handle_.shm_name, "' died"));
    }
    return absl::OkStatus();
  };
  VLLM_RETURN_IF_ERROR(
      RecvMultipart(*sub_, parts_, 2, deadline_ns, wait_.liveness_interval, check, what));
  if (parts_.empty() || parts_[0].size() != 1) {
    return absl::DataLossError(absl::StrCat("malformed frame on ", what, ": bad kind part"));
  }
  return absl::OkStatus();
}

absl::Status MessageQueueReader::WaitUntilReady(absl::Time deadline) {
  const int64_t deadline_ns = MonoDeadline(deadline);
  while (true) {
    VLLM_RETURN_IF_ERROR(RecvFrame(deadline_ns, "the writer's ready message"));
    const char kind = *static_cast<const char*>(parts_[0].data());
    if (kind == kKindReady) return absl::OkStatus();
    if (kind == kKindClosed) return absl::CancelledError("queue closed before it was ready");
    // Anything else before READY is not ours to read: skip it.
  }
}

absl::Status MessageQueueReader::Dequeue(absl::FunctionRef<absl::Status(ByteSpan)> visit,
                                         Deadline deadline) {
  return ring_ ? DequeueLocal(visit, deadline) : DequeueRemote(visit, deadline.MonoNs());
}

absl::Status MessageQueueReader::DequeueLocal(absl::FunctionRef<absl::Status(ByteSpan)> visit,
                                              const Deadline& deadline) {
  // A message already there needs no deadline (no clock read on the fast path).
  std::optional<RingReader::Chunk> ready = ring_->TryAcquire();
  if (!ready) {
    VLLM_ASSIGN_OR_RETURN(ready, ring_->Acquire(deadline.MonoNs()));
  }
  const RingReader::Chunk chunk = *ready;
  absl::Status result;
  if (chunk.flags & kChunkOverflow) {
    // The frame is queued before the chunk is published; a deadline here leaves the chunk
    // unreleased so the next call retries the same message.
    VLLM_RETURN_IF_ERROR(RecvFrame(deadline.MonoNs(), "an oversize message's frame"));
    const char kind = *static_cast<const char*>(parts_[0].data());
    if (kind != kKindData || parts_.size() != 2 || parts_[1].size() != chunk.size) {
      result = absl::DataLossError(absl::StrCat("overflow frame does not match its chunk (",
                                                parts_.size() == 2 ? parts_[1].size() : 0,
                                                " bytes vs ", chunk.size, ")"));
    } else {
      result = visit({static_cast<const uint8_t*>(parts_[1].data()), parts_[1].size()});
    }
  } else if (chunk.data == nullptr) {
    result = absl::DataLossError(absl::StrCat("a slot of the ring names no valid payload (",
                                              chunk.size, " bytes, flags ", chunk.flags, ")"));
  } else if (chunk.size > ring_->ring().max_chunk_bytes()) {
    result = absl::DataLossError(absl::StrCat("chunk claims ", chunk.size, " bytes, more than ",
                                              ring_->ring().max_chunk_bytes()));
  } else {
    result = visit({chunk.data, chunk.size});
  }
  ring_->Release();
  return result;
}

absl::Status MessageQueueReader::DequeueRemote(absl::FunctionRef<absl::Status(ByteSpan)> visit,
                                               int64_t deadline_ns) {
  while (true) {
    VLLM_RETURN_IF_ERROR(RecvFrame(
        deadline_ns, absl::StrCat("a message from the writer at ", handle_.remote_address)));
    const char kind = *static_cast<const char*>(parts_[0].data());
    if (kind == kKindClosed) {
      return absl::CancelledError(
          absl::StrCat("queue at ", handle_.remote_address, " was closed by its writer"));
    }
    if (kind == kKindReady) continue;  // a repeat after reconnection
    if (kind != kKindData || parts_.size() != 2) {
      return absl::DataLossError("malformed data frame from the writer");
    }
    return visit({static_cast<const uint8_t*>(parts_[1].data()), parts_[1].size()});
  }
}

absl::StatusOr<std::vector<uint8_t>> MessageQueueReader::DequeueBytes(Deadline deadline) {
  std::vector<uint8_t> out;
  VLLM_RETURN_IF_ERROR(Dequeue(
      [&](ByteSpan bytes) {
        out.assign(bytes.begin(), bytes.end());
        return absl::OkStatus();
      },
      deadline));
  return out;
}

void MessageQueueReader::Cancel() {
  cancelled_.store(true, std::memory_order_relaxed);
  if (ring_) ring_->Cancel();
}

}  // namespace vllm::ipc
