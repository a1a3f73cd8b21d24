#include "kv_transfer/block_reader.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>
#include <zmq.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "ipc/curve.h"
#include "ipc/zmq_util.h"
#include "kv_transfer/codec.h"
#include "kv_transfer/kv_wire.h"
#include "spdlog/spdlog.h"

namespace vllm::kv_transfer {
namespace {

// Messages read from one connection per turn of the loop.
constexpr int kMaxBatch = 64;
// Longest the thread sleeps without looking at the deadlines.
constexpr absl::Duration kMaxPoll = absl::Milliseconds(50);
// Socket events that end a connection (libzmq's monitor).
constexpr int kConnEvents = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED |
                            ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                            ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;

std::string EventReason(uint16_t event, const std::string& endpoint) {
  switch (event) {
    case ZMQ_EVENT_DISCONNECTED:
      return absl::StrCat("connection to ", endpoint, " lost");
    case ZMQ_EVENT_CONNECT_RETRIED:
      return absl::StrCat("cannot connect to ", endpoint, " (refused or unreachable)");
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      return absl::StrCat(endpoint,
                          " refused this reader's CURVE key: give both sides the same "
                          "--cluster-key-file");
    default:
      return absl::StrCat("ZMQ handshake with ", endpoint,
                          " failed: both sides need the same --cluster-key-file (or neither)");
  }
}

absl::Status ValidateSpec(const LoadSpec& s, const KvCacheView& view) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("LoadSpec of request ", s.req_id, ": ", what));
  };
  if (s.req_id.empty() || s.req_id.size() > kMaxRequestIdBytes) return bad("bad req_id length");
  if (s.remote_request_id.empty() || s.remote_request_id.size() > kMaxRequestIdBytes) {
    return bad("remote_request_id empty or too long");
  }
  if (s.remote_engine_id.empty() || s.remote_engine_id.size() > kMaxEngineIdBytes) {
    return bad("remote_engine_id empty or too long");
  }
  if (s.remote_host.empty() || s.remote_host.size() > kMaxHostBytes) {
    return bad("remote_host empty or too long");
  }
  if (s.remote_port < 1 || s.remote_port > 65535) {
    return bad(absl::StrFormat("remote_port %d is not in [1, 65535]", s.remote_port));
  }
  if (s.local_block_ids.size() != s.remote_block_ids.size()) {
    return bad(absl::StrFormat("%d local blocks for %d remote ones", s.local_block_ids.size(),
                               s.remote_block_ids.size()));
  }
  if (s.local_block_ids.size() > kMaxRemoteBlockIds) return bad("too many blocks");
  for (int32_t id : s.local_block_ids) {
    if (absl::Status st = CheckBlockId(view, id); !st.ok()) {
      return bad(absl::StrCat("local ", st.message()));
    }
  }
  for (int32_t id : s.remote_block_ids) {
    if (id < 0) return bad(absl::StrFormat("remote block id %d is negative", id));
  }
  return absl::OkStatus();
}

}  // namespace

// The reader thread's state: connections, transfers, READs in flight. Used by that thread
// only (constructed and destroyed on it too).
class BlockReader::Loop {
 public:
  Loop(BlockReader& owner, std::optional<ipc::CurveKeys> curve)
      : owner_(owner),
        options_(owner.options_),
        curve_(std::move(curve)),
        blocks_per_read_(
            options_.max_blocks_per_read > 0
                ? std::min(options_.max_blocks_per_read, BlocksPerDataMessage(options_.view.layout))
                : BlocksPerDataMessage(options_.view.layout)) {}

  // One turn: queued commands, READs, one poll, what arrived, deadlines.
  void RunOnce();

 private:
  struct PendingRead {
    std::string req_id;
    uint64_t generation = 0;
    KvRead read;
    std::vector<int32_t> local_ids;
  };
  struct Transfer {
    LoadSpec spec;
    uint64_t generation = 0;
    std::string conn_key;
    absl::Time deadline;
    size_t next_block = 0;  // first block not asked for yet
    size_t blocks_done = 0;
  };
  // A DONE waiting for the connection's WELCOME, sent only to the engine it was meant for.
  struct QueuedDone {
    std::string remote_request_id;
    std::string engine_id;
  };
  struct Conn {
    std::string key;  // host:port
    std::string endpoint;
    zmq::socket_t socket;
    zmq::socket_t monitor;  // PAIR receiving the socket's events
    bool ready = false;     // WELCOME received
    int32_t window = 1;
    std::string server_engine_id;
    absl::flat_hash_map<uint64_t, PendingRead> reads;
    std::deque<std::string> turn;  // transfers with blocks left to ask for, in turn
    absl::flat_hash_set<std::string> transfers;
    std::vector<QueuedDone> done_queue;
    absl::Time last_heard;
    absl::Time last_used;

    ~Conn() {
      if (socket) zmq_socket_monitor(socket.handle(), nullptr, 0);
    }
  };

  void ApplyCommands();
  void StartTransfer(LoadSpec spec, uint64_t generation);
  void CancelTransfer(const std::string& req_id);
  absl::StatusOr<Conn*> GetConn(const std::string& host, int port);
  absl::StatusOr<std::unique_ptr<Conn>> Connect(const std::string& host, int port);
  void Admit(Conn& c, const std::string& req_id);
  void IssueReads(Conn& c);
  void PollOnce();
  void DrainConn(Conn& c);
  void DrainMonitor(Conn& c);
  void HandleMessage(Conn& c, std::vector<zmq::message_t>& parts);
  void HandleWelcome(Conn& c, const KvWelcome& welcome);
  void HandleData(Conn& c, const KvDataHeader& header, std::vector<zmq::message_t>& parts);
  void HandleError(Conn& c, const KvError& error);
  void CheckDeadlines();
  void Complete(Transfer& t);
  void Fail(const std::string& req_id, const std::string& reason, bool send_done);
  void SendDone(Conn& c, const Transfer& t);
  bool Send(Conn& c, const KvMessage& message);
  void ResetConn(const std::string& key, const std::string& reason);
  Conn* FindConn(const std::string& key) {
    auto it = conns_.find(key);
    return it == conns_.end() ? nullptr : it->second.get();
  }

  BlockReader& owner_;
  const BlockReaderOptions& options_;
  const std::optional<ipc::CurveKeys> curve_;
  const int32_t blocks_per_read_;
  absl::flat_hash_map<std::string, std::unique_ptr<Conn>> conns_;
  absl::flat_hash_map<std::string, Transfer> transfers_;
  uint64_t next_read_id_ = 1;
  absl::Time next_deadline_check_ = absl::InfinitePast();
};

void BlockReader::Loop::RunOnce() {
  ApplyCommands();
  std::vector<std::string> keys;
  for (const auto& [key, conn] : conns_) keys.push_back(key);
  for (const std::string& key : keys) {
    if (Conn* c = FindConn(key)) IssueReads(*c);  // a failed send resets (erases) a connection
  }
  PollOnce();
  CheckDeadlines();
}

void BlockReader::Loop::ApplyCommands() {
  for (Command& command : owner_.TakeCommands()) {
    if (auto* submit = std::get_if<SubmitCommand>(&command)) {
      StartTransfer(std::move(submit->spec), submit->generation);
    } else {
      CancelTransfer(std::get<CancelCommand>(command).req_id);
    }
  }
}

void BlockReader::Loop::StartTransfer(LoadSpec spec, uint64_t generation) {
  const std::string req_id = spec.req_id;
  Transfer t;
  t.generation = generation;
  t.deadline = absl::Now() + options_.transfer_timeout;
  t.conn_key = absl::StrCat(spec.remote_host, ":", spec.remote_port);
  absl::StatusOr<Conn*> conn = GetConn(spec.remote_host, spec.remote_port);
  t.spec = std::move(spec);
  transfers_[req_id] = std::move(t);
  if (!conn.ok()) {
    Fail(req_id, std::string(conn.status().message()), /*send_done=*/false);
    return;
  }
  (*conn)->transfers.insert(req_id);
  (*conn)->last_used = absl::Now();
  if ((*conn)->ready) Admit(**conn, req_id);
}

void BlockReader::Loop::CancelTransfer(const std::string& req_id) {
  auto it = transfers_.find(req_id);
  if (it != transfers_.end()) {
    if (Conn* c = FindConn(it->second.conn_key)) {
      SendDone(*c, it->second);
      c->transfers.erase(req_id);
    }
    transfers_.erase(it);
  }
  owner_.ForgetCancel(req_id);
}

absl::StatusOr<BlockReader::Loop::Conn*> BlockReader::Loop::GetConn(const std::string& host,
                                                                    int port) {
  const std::string key = absl::StrCat(host, ":", port);
  if (Conn* c = FindConn(key)) return c;
  if (conns_.size() >= static_cast<size_t>(options_.max_connections)) {
    Conn* idle = nullptr;
    for (auto& [k, c] : conns_) {
      if (c->transfers.empty() && c->reads.empty() &&
          (idle == nullptr || c->last_used < idle->last_used)) {
        idle = c.get();
      }
    }
    if (idle == nullptr) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%d connections to KV block servers busy already (max_connections)", conns_.size()));
    }
    conns_.erase(idle->key);
  }
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<Conn> conn, Connect(host, port));
  Conn* raw = conn.get();
  conns_[key] = std::move(conn);
  return raw;
}

absl::StatusOr<std::unique_ptr<BlockReader::Loop::Conn>> BlockReader::Loop::Connect(
    const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  auto c = std::make_unique<Conn>();
  c->key = absl::StrCat(host, ":", port);
  c->endpoint = v6 ? absl::StrCat("tcp://[", host, "]:", port) : absl::StrCat("tcp://", c->key);
  c->last_heard = c->last_used = absl::Now();
  try {
    c->socket = zmq::socket_t(ipc::ZmqContext(), zmq::socket_type::dealer);
    c->socket.set(zmq::sockopt::linger, 0);
    c->socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxDataBytes));
    if (v6) c->socket.set(zmq::sockopt::ipv6, 1);
    if (curve_.has_value()) VLLM_RETURN_IF_ERROR(ipc::MakeCurveClient(c->socket, *curve_));
    const std::string monitor = absl::StrCat("inproc://kv-reader-monitor-", ipc::UniqueToken());
    if (zmq_socket_monitor(c->socket.handle(), monitor.c_str(), kConnEvents) != 0) {
      return absl::InternalError(absl::StrCat("zmq_socket_monitor: ", zmq_strerror(zmq_errno())));
    }
    c->monitor = zmq::socket_t(ipc::ZmqContext(), zmq::socket_type::pair);
    c->monitor.set(zmq::sockopt::linger, 0);
    c->monitor.connect(monitor);
    c->socket.connect(c->endpoint);
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("cannot connect to ", c->endpoint, ": ", e.what()));
  }
  if (!Send(*c, KvHello{options_.engine_id, options_.view.layout})) {
    return absl::UnavailableError(absl::StrCat("cannot send HELLO to ", c->endpoint));
  }
  return c;
}

void BlockReader::Loop::Admit(Conn& c, const std::string& req_id) {
  auto it = transfers_.find(req_id);
  if (it == transfers_.end()) return;
  Transfer& t = it->second;
  if (t.spec.remote_engine_id != c.server_engine_id) {
    Fail(req_id,
         absl::StrFormat("the server at %s is engine %s, the request's blocks are on engine %s",
                         c.endpoint, c.server_engine_id, t.spec.remote_engine_id),
         /*send_done=*/false);
    return;
  }
  if (t.spec.remote_block_ids.empty()) {
    Complete(t);
    return;
  }
  c.turn.push_back(req_id);
}

void BlockReader::Loop::IssueReads(Conn& c) {
  while (c.ready && c.reads.size() < static_cast<size_t>(c.window) && !c.turn.empty()) {
    const std::string req_id = std::move(c.turn.front());
    c.turn.pop_front();
    auto it = transfers_.find(req_id);
    if (it == transfers_.end()) continue;  // failed or cancelled meanwhile
    Transfer& t = it->second;
    const size_t total = t.spec.remote_block_ids.size();
    const size_t n = std::min(static_cast<size_t>(blocks_per_read_), total - t.next_block);
    PendingRead pr{req_id, t.generation, KvRead{}, {}};
    pr.read.read_id = next_read_id_++;
    pr.read.request_id = t.spec.remote_request_id;
    pr.read.first_index = static_cast<int32_t>(t.next_block);
    pr.read.block_ids.assign(t.spec.remote_block_ids.begin() + t.next_block,
                             t.spec.remote_block_ids.begin() + t.next_block + n);
    pr.local_ids.assign(t.spec.local_block_ids.begin() + t.next_block,
                        t.spec.local_block_ids.begin() + t.next_block + n);
    t.next_block += n;
    if (t.next_block < total) c.turn.push_back(req_id);
    if (!Send(c, pr.read)) {
      ResetConn(c.key, absl::StrCat("cannot send READ to ", c.endpoint));
      return;
    }
    c.reads.emplace(pr.read.read_id, std::move(pr));
  }
}

void BlockReader::Loop::PollOnce() {
  std::vector<zmq::pollitem_t> items;
  std::vector<Conn*> order;
  items.push_back({nullptr, owner_.wake_fd_, ZMQ_POLLIN, 0});
  for (auto& [key, conn] : conns_) {
    items.push_back({conn->socket.handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({conn->monitor.handle(), 0, ZMQ_POLLIN, 0});
    order.push_back(conn.get());
  }
  absl::Duration timeout = kMaxPoll;
  for (const auto& [id, t] : transfers_) {
    timeout = std::min(timeout, std::max(t.deadline - absl::Now(), absl::ZeroDuration()));
  }
  ipc::PollItems(items.data(), items.size(), timeout);
  if (items[0].revents != 0) {
    uint64_t count = 0;
    (void)!::read(owner_.wake_fd_, &count, sizeof(count));
  }
  // Data first, then the events: a message that arrived before a disconnect is still used.
  std::vector<std::string> keys;
  for (size_t i = 0; i < order.size(); ++i) {
    if (items[1 + 2 * i].revents != 0 || items[2 + 2 * i].revents != 0) {
      keys.push_back(order[i]->key);
    }
  }
  for (const std::string& key : keys) {
    if (Conn* c = FindConn(key)) DrainConn(*c);
    if (Conn* c = FindConn(key)) DrainMonitor(*c);
  }
}

void BlockReader::Loop::DrainConn(Conn& c) {
  const std::string key = c.key;
  std::vector<zmq::message_t> parts;
  for (int i = 0; i < kMaxBatch; ++i) {
    Conn* conn = FindConn(key);  // a message may have reset the connection
    if (conn == nullptr) return;
    parts.clear();
    zmq::message_t first;
    if (!ipc::TryRecv(conn->socket, first)) return;
    bool more = first.more();
    parts.push_back(std::move(first));
    while (more) {
      zmq::message_t next;
      if (!conn->socket.recv(next, zmq::recv_flags::none)) break;
      more = next.more();
      if (parts.size() < 3) parts.push_back(std::move(next));
    }
    conn->last_heard = absl::Now();
    HandleMessage(*conn, parts);
  }
}

void BlockReader::Loop::DrainMonitor(Conn& c) {
  while (true) {
    zmq::message_t event;
    if (!ipc::TryRecv(c.monitor, event)) return;
    uint16_t id = 0;
    if (event.size() >= 2) std::memcpy(&id, event.data(), 2);
    while (event.more()) (void)c.monitor.recv(event, zmq::recv_flags::none);  // the endpoint
    if ((id & kConnEvents) != 0) {
      ResetConn(c.key, EventReason(id, c.endpoint));
      return;
    }
  }
}

void BlockReader::Loop::HandleMessage(Conn& c, std::vector<zmq::message_t>& parts) {
  if (parts.size() > 2) {
    ResetConn(c.key, absl::StrCat("a message of 3 or more parts from ", c.endpoint));
    return;
  }
  absl::StatusOr<KvMessage> m =
      DecodeKvMessage(std::span<const uint8_t>(parts[0].data<uint8_t>(), parts[0].size()));
  if (!m.ok()) {
    ResetConn(c.key, absl::StrCat("a bad frame from ", c.endpoint, ": ", m.status().message()));
    return;
  }
  if (const auto* welcome = std::get_if<KvWelcome>(&*m)) {
    HandleWelcome(c, *welcome);
  } else if (const auto* refuse = std::get_if<KvRefuse>(&*m)) {
    ResetConn(c.key, absl::StrCat(c.endpoint, " refused this reader: ", refuse->reason));
  } else if (const auto* header = std::get_if<KvDataHeader>(&*m)) {
    HandleData(c, *header, parts);
  } else if (const auto* error = std::get_if<KvError>(&*m)) {
    HandleError(c, *error);
  } else if (!std::holds_alternative<KvAck>(*m)) {
    ResetConn(c.key, absl::StrCat("unexpected ", KvMessageName(*m), " from ", c.endpoint));
  }
}

void BlockReader::Loop::HandleWelcome(Conn& c, const KvWelcome& welcome) {
  if (c.ready) return;
  if (const std::string diff = KvLayoutDifference(welcome.layout, options_.view.layout);
      !diff.empty()) {
    ResetConn(c.key, absl::StrCat("the KV layout of ", c.endpoint,
                                  " differs (server's value first): ", diff));
    return;
  }
  c.ready = true;
  c.server_engine_id = welcome.engine_id;
  c.window = std::clamp(welcome.max_inflight_reads, 1, options_.max_inflight_reads);
  for (const QueuedDone& done : std::exchange(c.done_queue, {})) {
    if (done.engine_id == c.server_engine_id) Send(c, KvDone{done.remote_request_id});
  }
  const std::vector<std::string> waiting(c.transfers.begin(), c.transfers.end());
  for (const std::string& req_id : waiting) Admit(c, req_id);
}

void BlockReader::Loop::HandleData(Conn& c, const KvDataHeader& header,
                                   std::vector<zmq::message_t>& parts) {
  auto read = c.reads.find(header.read_id);
  if (read == c.reads.end()) return;  // unasked for: ignored
  PendingRead pr = std::move(read->second);
  c.reads.erase(read);
  auto it = transfers_.find(pr.req_id);
  if (it == transfers_.end() || it->second.generation != pr.generation) return;  // gone
  Transfer& t = it->second;
  std::span<const uint8_t> data;
  if (parts.size() == 2) data = {parts[1].data<uint8_t>(), parts[1].size()};
  if (absl::Status s = CheckDataMessage(header, pr.read, options_.view.layout, data); !s.ok()) {
    Fail(pr.req_id, absl::StrCat("from ", c.endpoint, ": ", s.message()), /*send_done=*/true);
    return;
  }
  if (!owner_.WriteBlocks(pr.req_id, pr.local_ids, data.data())) return;  // cancelled
  t.blocks_done += pr.local_ids.size();
  if (t.blocks_done == t.spec.remote_block_ids.size()) Complete(t);
}

void BlockReader::Loop::HandleError(Conn& c, const KvError& error) {
  if (error.read_id == 0) {
    ResetConn(c.key, absl::StrCat(c.endpoint, " reports: ", error.reason));
    return;
  }
  auto read = c.reads.find(error.read_id);
  if (read == c.reads.end()) return;
  PendingRead pr = std::move(read->second);
  c.reads.erase(read);
  auto it = transfers_.find(pr.req_id);
  if (it == transfers_.end() || it->second.generation != pr.generation) return;
  Fail(pr.req_id, absl::StrCat(c.endpoint, " answers: ", error.reason), /*send_done=*/true);
}

void BlockReader::Loop::CheckDeadlines() {
  const absl::Time now = absl::Now();
  if (now < next_deadline_check_) return;
  next_deadline_check_ = now + absl::Milliseconds(5);
  std::vector<std::string> late;
  for (const auto& [req_id, t] : transfers_) {
    if (t.deadline <= now) late.push_back(req_id);
  }
  for (const std::string& req_id : late) {
    auto it = transfers_.find(req_id);
    if (it == transfers_.end()) continue;  // failed with its connection just now
    const Transfer& t = it->second;
    const std::string reason = absl::StrFormat("timed out after %s (%d of %d blocks read)",
                                               absl::FormatDuration(options_.transfer_timeout),
                                               t.blocks_done, t.spec.remote_block_ids.size());
    Conn* c = FindConn(t.conn_key);
    // A server that said nothing for the whole timeout is taken as gone: the connection is
    // closed (failing every transfer on it), so its unanswered READs do not block the next.
    if (c != nullptr && (!c->ready || now - c->last_heard >= options_.transfer_timeout)) {
      ResetConn(c->key, absl::StrCat("no answer from ", c->endpoint, ": ", reason));
    } else {
      Fail(req_id, reason, /*send_done=*/true);
    }
  }
}

void BlockReader::Loop::Complete(Transfer& t) {
  const std::string req_id = t.spec.req_id;
  const uint64_t generation = t.generation;
  if (Conn* c = FindConn(t.conn_key)) {
    SendDone(*c, t);
    c->transfers.erase(req_id);
  }
  transfers_.erase(req_id);
  owner_.Report(req_id, generation, /*ok=*/true);
}

void BlockReader::Loop::Fail(const std::string& req_id, const std::string& reason, bool send_done) {
  auto it = transfers_.find(req_id);
  if (it == transfers_.end()) return;
  const Transfer& t = it->second;
  spdlog::warn("KV load of request {} (request {} of engine {} at {}:{}) failed: {}", req_id,
               t.spec.remote_request_id, t.spec.remote_engine_id, t.spec.remote_host,
               t.spec.remote_port, reason);
  if (Conn* c = FindConn(t.conn_key)) {
    if (send_done) SendDone(*c, t);
    c->transfers.erase(req_id);
  }
  const uint64_t generation = t.generation;
  transfers_.erase(it);
  owner_.Report(req_id, generation, /*ok=*/false);
}

void BlockReader::Loop::SendDone(Conn& c, const Transfer& t) {
  if (!c.ready) {
    c.done_queue.push_back({t.spec.remote_request_id, t.spec.remote_engine_id});
  } else if (c.server_engine_id == t.spec.remote_engine_id) {
    Send(c, KvDone{t.spec.remote_request_id});
  }
}

bool BlockReader::Loop::Send(Conn& c, const KvMessage& message) {
  const std::string bytes = EncodeKvMessage(message);
  try {
    return c.socket.send(zmq::buffer(bytes), zmq::send_flags::dontwait).has_value();
  } catch (const zmq::error_t&) {
    return false;
  }
}

void BlockReader::Loop::ResetConn(const std::string& key, const std::string& reason) {
  auto it = conns_.find(key);
  if (it == conns_.end()) return;
  std::unique_ptr<Conn> conn = std::move(it->second);
  conns_.erase(it);
  for (const std::string& req_id : conn->transfers) Fail(req_id, reason, /*send_done=*/false);
}

// ---- BlockReader -------------------------------------------------------------------------

BlockReader::BlockReader(BlockReaderOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<BlockReader>> BlockReader::Start(BlockReaderOptions options) {
  VLLM_RETURN_IF_ERROR(ValidateKvCacheView(options.view));
  if (options.engine_id.size() > kMaxEngineIdBytes) {
    return absl::InvalidArgumentError("BlockReader: engine_id too long");
  }
  if (options.transfer_timeout <= absl::ZeroDuration() || options.max_inflight_reads < 1 ||
      options.max_inflight_reads > kMaxInflightReads || options.max_connections < 1 ||
      options.max_blocks_per_read < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "BlockReader: options out of range (transfer_timeout %s, max_inflight_reads %d not in "
        "[1, %d], max_connections %d, max_blocks_per_read %d)",
        absl::FormatDuration(options.transfer_timeout), options.max_inflight_reads,
        kMaxInflightReads, options.max_connections, options.max_blocks_per_read));
  }
  std::optional<ipc::CurveKeys> curve;
  if (!options.cluster_key_file.empty()) {
    VLLM_ASSIGN_OR_RETURN(curve, ipc::LoadCurveKeyFile(options.cluster_key_file));
  }
  std::unique_ptr<BlockReader> reader(new BlockReader(std::move(options)));
  reader->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (reader->wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("BlockReader: eventfd: ", std::strerror(errno)));
  }
  reader->loop_ = std::make_unique<Loop>(*reader, std::move(curve));
  BlockReader* self = reader.get();
  reader->thread_ = std::thread([self] {
    pthread_setname_np(pthread_self(), "kv-block-reader");  // loads remote KV blocks
    self->Run();
  });
  return reader;
}

BlockReader::~BlockReader() {
  stop_.store(true);
  if (thread_.joinable()) {
    Wake();
    thread_.join();
  }
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void BlockReader::Run() {
  while (!stop_.load()) {
    try {
      loop_->RunOnce();
    } catch (const zmq::error_t& e) {
      // Never expected (the context is never terminated); keep going rather than crash.
      spdlog::error("KV block reader: {}", e.what());
    }
  }
  loop_.reset();  // closes the sockets on the thread that used them
}

void BlockReader::Wake() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

absl::Status BlockReader::Submit(const LoadSpec& spec) {
  VLLM_RETURN_IF_ERROR(ValidateSpec(spec, options_.view));
  {
    absl::MutexLock lock(&mu_);
    if (active_.contains(spec.req_id)) {
      return absl::AlreadyExistsError(
          absl::StrCat("BlockReader: request ", spec.req_id, " is loading already"));
    }
    const uint64_t generation = next_generation_++;
    active_[spec.req_id] = generation;
    commands_.push_back(SubmitCommand{spec, generation});
  }
  Wake();
  return absl::OkStatus();
}

BlockReader::Results BlockReader::TakeResults() {
  absl::MutexLock lock(&mu_);
  Results taken = std::exchange(results_, {});
  for (const std::string& id : taken.finished) active_.erase(id);
  for (const std::string& id : taken.failed) active_.erase(id);
  return taken;
}

void BlockReader::Cancel(const std::string& req_id) {
  {
    absl::MutexLock write_lock(&write_mu_);
    absl::MutexLock lock(&mu_);
    if (active_.erase(req_id) == 0) return;
    auto drop = [&](std::vector<std::string>& v) {
      v.erase(std::remove(v.begin(), v.end(), req_id), v.end());
    };
    drop(results_.finished);
    drop(results_.failed);
    cancelled_.insert(req_id);
    commands_.push_back(CancelCommand{req_id});
  }
  Wake();
}

size_t BlockReader::num_pending() const {
  absl::MutexLock lock(&mu_);
  return active_.size() - results_.finished.size() - results_.failed.size();
}

std::deque<BlockReader::Command> BlockReader::TakeCommands() {
  absl::MutexLock lock(&mu_);
  return std::exchange(commands_, {});
}

void BlockReader::Report(const std::string& req_id, uint64_t generation, bool ok) {
  absl::MutexLock lock(&mu_);
  auto it = active_.find(req_id);
  if (it == active_.end() || it->second != generation) return;  // cancelled
  (ok ? results_.finished : results_.failed).push_back(req_id);
}

bool BlockReader::WriteBlocks(const std::string& req_id, const std::vector<int32_t>& local_ids,
                              const uint8_t* data) {
  const size_t block = static_cast<size_t>(options_.view.layout.block_bytes());
  absl::MutexLock lock(&write_mu_);
  if (cancelled_.contains(req_id)) return false;
  for (size_t i = 0; i < local_ids.size(); ++i) {
    CopyBlockIn(options_.view, local_ids[i], data + i * block);
  }
  return true;
}

void BlockReader::ForgetCancel(const std::string& req_id) {
  absl::MutexLock lock(&write_mu_);
  cancelled_.erase(req_id);
}

}  // namespace vllm::kv_transfer
