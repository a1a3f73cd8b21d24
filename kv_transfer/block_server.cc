#include "kv_transfer/block_server.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "ipc/curve.h"
#include "ipc/zmq_util.h"
#include "kv_transfer/codec.h"
#include "spdlog/spdlog.h"

namespace vllm::kv_transfer {
namespace {

// Messages read per wake-up before the stop flag is looked at again.
constexpr int kMaxBatch = 256;
// Most distinct warnings remembered by WarnOnce before it forgets them all.
constexpr size_t kMaxWarned = 1024;

absl::Status ValidateOptions(const BlockServerOptions& o) {
  VLLM_RETURN_IF_ERROR(ValidateKvCacheView(o.view));
  if (o.engine_id.size() > kMaxEngineIdBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "BlockServer: engine_id of %d bytes (at most %d)", o.engine_id.size(), kMaxEngineIdBytes));
  }
  const BlockServerLimits& l = o.limits;
  if (l.max_peers < 1 || l.max_held_requests < 1 || l.max_inflight_reads_per_peer < 1 ||
      l.max_inflight_reads_per_peer > kMaxInflightReads) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "BlockServer: limits out of range (max_peers %d, max_held_requests %d, "
        "max_inflight_reads_per_peer %d not in [1, %d])",
        l.max_peers, l.max_held_requests, l.max_inflight_reads_per_peer, kMaxInflightReads));
  }
  return absl::OkStatus();
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

// The peer's address of a received frame ("?" when libzmq does not know it).
std::string PeerAddress(zmq::message_t& frame) {
  try {
    const char* address = frame.gets("Peer-Address");
    return address != nullptr ? address : "?";
  } catch (const zmq::error_t&) {
    return "?";
  }
}

}  // namespace

BlockServer::BlockServer(BlockServerOptions options)
    : options_(std::move(options)), socket_(ipc::ZmqContext(), zmq::socket_type::router) {}

absl::StatusOr<std::unique_ptr<BlockServer>> BlockServer::Start(BlockServerOptions options) {
  VLLM_RETURN_IF_ERROR(ValidateOptions(options));
  std::unique_ptr<BlockServer> server(new BlockServer(std::move(options)));
  const BlockServerOptions& o = server->options_;
  zmq::socket_t& s = server->socket_;
  try {
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxHeaderBytes));
    s.set(zmq::sockopt::router_mandatory, 1);  // a reply to a gone peer fails instead of vanishing
    // One DATA per unanswered READ, plus room for an ERROR or ACK (past it READs wait).
    s.set(zmq::sockopt::sndhwm, o.limits.max_inflight_reads_per_peer + 2);
    s.set(zmq::sockopt::rcvhwm, 64);
  } catch (const zmq::error_t& e) {
    return absl::InternalError(absl::StrCat("BlockServer: socket options: ", e.what()));
  }
  if (!o.cluster_key_file.empty()) {
    VLLM_ASSIGN_OR_RETURN(ipc::CurveKeys keys, ipc::LoadCurveKeyFile(o.cluster_key_file));
    VLLM_RETURN_IF_ERROR(ipc::MakeCurveServer(s, keys));
  } else if (!IsLoopback(o.host)) {
    spdlog::warn(
        "the KV block server at {}:{} admits anyone who can reach it: pass --cluster-key-file "
        "to require the cluster key (CURVE)",
        o.host, o.port);
  }
  VLLM_ASSIGN_OR_RETURN(server->endpoint_, ipc::BindTcp(s, o.host, o.port));
  const size_t colon = server->endpoint_.rfind(':');
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(server->endpoint_.substr(colon + 1), &server->port_)) {
    return absl::InternalError(absl::StrCat("BlockServer: bound at ", server->endpoint_));
  }
  server->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (server->wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("BlockServer: eventfd: ", std::strerror(errno)));
  }
  BlockServer* self = server.get();
  server->thread_ = std::thread([self] {
    pthread_setname_np(pthread_self(), "kv-block-server");  // serves READs of held blocks
    self->Run();
  });
  spdlog::info("KV block server of engine {} listening at {}", o.engine_id, server->endpoint_);
  return server;
}

BlockServer::~BlockServer() {
  stop_.store(true);
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  if (wake_fd_ >= 0) ::close(wake_fd_);
  try {
    if (!endpoint_.empty()) socket_.unbind(endpoint_);  // frees the port now
  } catch (const zmq::error_t&) {
  }
}

absl::Status BlockServer::Hold(const std::string& req_id, const std::vector<int32_t>& block_ids) {
  if (req_id.empty() || req_id.size() > kMaxRequestIdBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "BlockServer::Hold: request id of %d bytes (1 to %d)", req_id.size(), kMaxRequestIdBytes));
  }
  for (int32_t id : block_ids) {
    if (absl::Status s = CheckBlockId(options_.view, id); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("BlockServer::Hold(", req_id, "): ", s.message()));
    }
  }
  absl::flat_hash_set<int32_t> ids(block_ids.begin(), block_ids.end());
  absl::MutexLock lock(&mu_);
  if (!held_.contains(req_id) &&
      held_.size() >= static_cast<size_t>(options_.limits.max_held_requests)) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("BlockServer::Hold(%s): %d requests held already", req_id, held_.size()));
  }
  unheld_since_.erase(req_id);
  if (early_done_.erase(req_id) > 0) {  // its reader is done already: nothing to serve
    finished_.push_back(req_id);
    RememberGone(req_id);
    return absl::OkStatus();
  }
  held_[req_id] = std::move(ids);
  return absl::OkStatus();
}

namespace {
constexpr size_t kMaxRemembered = 4096;
}  // namespace

void BlockServer::RememberGone(const std::string& req_id) {
  if (!gone_.insert(req_id).second) return;
  gone_order_.push_back(req_id);
  if (gone_order_.size() > kMaxRemembered) {
    gone_.erase(gone_order_.front());
    gone_order_.pop_front();
  }
}

bool BlockServer::AwaitingHold(const KvRead& read) {
  absl::MutexLock lock(&mu_);
  if (held_.contains(read.request_id) || gone_.contains(read.request_id)) {
    unheld_since_.erase(read.request_id);
    return false;
  }
  const absl::Time now = absl::Now();
  auto it = unheld_since_.find(read.request_id);
  if (it == unheld_since_.end()) {
    if (unheld_since_.size() >= kMaxRemembered) return false;
    it = unheld_since_.emplace(read.request_id, now).first;
    ++stats_.awaited_hold;
  }
  if (now - it->second < options_.limits.hold_grace) return true;
  unheld_since_.erase(it);
  return false;
}

void BlockServer::Release(const std::string& req_id) {
  // Copies run under mu_: once we hold it, none of this request's is in progress.
  absl::MutexLock lock(&mu_);
  held_.erase(req_id);
  finished_.erase(std::remove(finished_.begin(), finished_.end(), req_id), finished_.end());
  RememberGone(req_id);
}

std::vector<std::string> BlockServer::TakeFinished() {
  absl::MutexLock lock(&mu_);
  return std::exchange(finished_, {});
}

BlockServer::Stats BlockServer::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void BlockServer::Run() {
  zmq::pollitem_t items[2] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                              {nullptr, wake_fd_, ZMQ_POLLIN, 0}};
  std::vector<zmq::message_t> parts;
  while (!stop_.load()) {
    try {
      bool deferred = false;
      for (const auto& [identity, peer] : peers_) deferred = deferred || !peer.deferred.empty();
      // A peer whose send queue was full is retried every millisecond (libzmq does not say
      // when one peer's queue has room again).
      ipc::PollItems(items, 2, deferred ? absl::Milliseconds(1) : absl::Seconds(1));
      FlushDeferred();
      for (int i = 0; i < kMaxBatch && !stop_.load() && ipc::TryRecvMultipart(socket_, parts, 3);
           ++i) {
        const std::string address = PeerAddress(parts.back());
        if (parts.size() != 2) {
          WarnOnce(absl::StrCat("parts ", address),
                   absl::StrFormat("KV block server: a message of %s parts from %s ignored",
                                   parts.size() > 2 ? "3 or more" : "1", address));
          continue;
        }
        HandleMessage(parts[0].to_string(), address,
                      std::span<const uint8_t>(parts[1].data<uint8_t>(), parts[1].size()));
      }
    } catch (const zmq::error_t& e) {
      // Never expected (the context is never terminated); keep serving rather than crash.
      spdlog::error("KV block server: {}", e.what());
    }
  }
}

void BlockServer::HandleMessage(const std::string& identity, const std::string& address,
                                std::span<const uint8_t> header) {
  absl::StatusOr<KvMessage> message = DecodeKvMessage(header);
  auto peer = peers_.find(identity);
  if (!message.ok()) {
    WarnOnce(absl::StrCat("bad ", address),
             absl::StrFormat("KV block server: a bad frame from %s: %s", address,
                             message.status().ToString()));
    // A reader that has not said HELLO (e.g. another version) learns why it is not served.
    if (peer == peers_.end()) {
      Send(identity, KvRefuse{std::string(message.status().message())}, nullptr);
      absl::MutexLock lock(&mu_);
      ++stats_.refused;
    } else {
      SendError(identity, 0, std::string(message.status().message()));
    }
    return;
  }
  if (const auto* hello = std::get_if<KvHello>(&*message)) {
    HandleHello(identity, address, *hello);
    return;
  }
  if (peer == peers_.end()) {
    // read_id 0: the connection is unusable (the reader closes it and makes a new one).
    SendError(identity, 0, "no HELLO on this connection (or it was evicted): say HELLO");
    return;
  }
  peer->second.last_active = absl::Now();
  if (auto* read = std::get_if<KvRead>(&*message)) {
    HandleRead(identity, peer->second, std::move(*read));
  } else if (const auto* done = std::get_if<KvDone>(&*message)) {
    HandleDone(identity, *done);
  } else {
    SendError(identity, 0,
              absl::StrCat("unexpected ", KvMessageName(*message),
                           " (a server takes HELLO, "
                           "READ and DONE)"));
  }
}

void BlockServer::HandleHello(const std::string& identity, const std::string& address,
                              const KvHello& hello) {
  const KvLayout& ours = options_.view.layout;
  if (const std::string diff = KvLayoutDifference(hello.layout, ours); !diff.empty()) {
    const std::string reason = absl::StrFormat(
        "KV layout of reader %s differs from server %s's (reader's value first): %s",
        hello.engine_id, options_.engine_id, diff);
    WarnOnce(absl::StrCat("layout ", hello.engine_id, " ", diff),
             absl::StrCat("KV block server: refused ", address, ": ", reason));
    Send(identity, KvRefuse{reason}, nullptr);
    absl::MutexLock lock(&mu_);
    ++stats_.refused;
    return;
  }
  if (!peers_.contains(identity) &&
      peers_.size() >= static_cast<size_t>(options_.limits.max_peers)) {
    EvictLongestIdlePeer();
  }
  peers_[identity] = Peer{hello.engine_id, address, absl::Now(), {}};
  Send(identity, KvWelcome{options_.engine_id, ours, options_.limits.max_inflight_reads_per_peer},
       nullptr);
}

void BlockServer::EvictLongestIdlePeer() {
  auto oldest = std::min_element(peers_.begin(), peers_.end(), [](const auto& a, const auto& b) {
    return a.second.last_active < b.second.last_active;
  });
  if (oldest == peers_.end()) return;
  spdlog::info(
      "KV block server: {} readers connected (the limit); forgetting the longest idle, "
      "engine {} at {}",
      peers_.size(), oldest->second.engine_id, oldest->second.address);
  peers_.erase(oldest);
}

absl::Status BlockServer::CopyBlocks(const KvRead& read, zmq::message_t* data) {
  const KvLayout& layout = options_.view.layout;
  const int32_t max_blocks = BlocksPerDataMessage(layout);
  if (read.block_ids.size() > static_cast<size_t>(max_blocks)) {
    return absl::InvalidArgumentError(absl::StrFormat("READ of %d blocks exceeds %d per message",
                                                      read.block_ids.size(), max_blocks));
  }
  const size_t block = static_cast<size_t>(layout.block_bytes());
  absl::MutexLock lock(&mu_);
  auto held = held_.find(read.request_id);
  if (held == held_.end()) {
    return absl::NotFoundError(absl::StrFormat(
        "request %s is not held by engine %s (never prefilled here, released, or read already)",
        read.request_id, options_.engine_id));
  }
  for (int32_t id : read.block_ids) {
    if (!held->second.contains(id)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("block %d is not one of request %s's blocks", id, read.request_id));
    }
  }
  data->rebuild(read.block_ids.size() * block);
  uint8_t* out = data->data<uint8_t>();
  for (size_t i = 0; i < read.block_ids.size(); ++i) {
    CopyBlockOut(options_.view, read.block_ids[i], out + i * block);
  }
  return absl::OkStatus();
}

void BlockServer::HandleRead(const std::string& identity, Peer& peer, KvRead read) {
  if (peer.deferred.empty() && TryServe(identity, read)) return;
  if (peer.deferred.size() >= static_cast<size_t>(options_.limits.max_inflight_reads_per_peer)) {
    SendError(identity, read.read_id,
              absl::StrFormat("more than %d READs unanswered on this connection",
                              options_.limits.max_inflight_reads_per_peer));
    return;
  }
  peer.deferred.push_back(std::move(read));
}

void BlockServer::FlushDeferred() {
  for (auto& [identity, peer] : peers_) {
    while (!peer.deferred.empty() && TryServe(identity, peer.deferred.front())) {
      peer.deferred.pop_front();
    }
  }
}

bool BlockServer::TryServe(const std::string& identity, const KvRead& read) {
  if (AwaitingHold(read)) return false;
  // The identity frame claims room in the peer's queue (ROUTER_MANDATORY: EAGAIN when full,
  // EHOSTUNREACH when gone); once it is accepted the rest of the message goes too, so the
  // blocks are copied only for a reply that will be sent.
  try {
    if (!socket_.send(zmq::buffer(identity),
                      zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      return false;
    }
  } catch (const zmq::error_t&) {
    absl::MutexLock lock(&mu_);
    ++stats_.dropped;
    return true;  // the reader is gone: nothing to answer
  }
  zmq::message_t data;
  absl::Status copied = CopyBlocks(read, &data);
  try {
    if (!copied.ok()) {
      WarnOnce(absl::StrCat("read ", read.request_id),
               absl::StrCat("KV block server: READ refused: ", copied.message()));
      const std::string header = EncodeKvMessage(
          KvError{read.read_id, std::string(copied.message()).substr(0, kMaxReasonBytes)});
      (void)socket_.send(zmq::buffer(header), zmq::send_flags::dontwait);
      absl::MutexLock lock(&mu_);
      ++stats_.errors_sent;
      return true;
    }
    const int32_t n = static_cast<int32_t>(read.block_ids.size());
    const size_t block = static_cast<size_t>(options_.view.layout.block_bytes());
    KvDataHeader header{read.read_id, read.request_id, read.first_index, n, {}};
    header.checksums.reserve(n);
    const auto* bytes = data.data<uint8_t>();
    for (int32_t i = 0; i < n; ++i) {
      header.checksums.push_back(KvChecksum(std::span<const uint8_t>(bytes + i * block, block)));
    }
    const std::string encoded = EncodeKvMessage(header);
    (void)socket_.send(zmq::buffer(encoded), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    (void)socket_.send(data, zmq::send_flags::dontwait);
    absl::MutexLock lock(&mu_);
    ++stats_.reads_served;
    stats_.blocks_served += n;
  } catch (const zmq::error_t& e) {
    spdlog::error("KV block server: cannot send the answer to a READ: {}", e.what());
  }
  return true;
}

void BlockServer::HandleDone(const std::string& identity, const KvDone& done) {
  {
    absl::MutexLock lock(&mu_);
    if (held_.erase(done.request_id) > 0) {
      finished_.push_back(done.request_id);
      RememberGone(done.request_id);
    } else if (!gone_.contains(done.request_id) && early_done_.insert(done.request_id).second) {
      early_done_order_.push_back(done.request_id);
      if (early_done_order_.size() > kMaxRemembered) {
        early_done_.erase(early_done_order_.front());
        early_done_order_.pop_front();
      }
    }
  }
  Send(identity, KvAck{done.request_id}, nullptr);
}

void BlockServer::SendError(const std::string& identity, uint64_t read_id,
                            const std::string& reason) {
  Send(identity, KvError{read_id, reason.substr(0, kMaxReasonBytes)}, nullptr);
  absl::MutexLock lock(&mu_);
  ++stats_.errors_sent;
}

void BlockServer::Send(const std::string& identity, const KvMessage& message,
                       zmq::message_t* data) {
  const std::string header = EncodeKvMessage(message);
  const auto more = zmq::send_flags::sndmore | zmq::send_flags::dontwait;
  bool sent = false;
  try {
    // ROUTER_MANDATORY: EAGAIN (optional empty) when the peer's queue is full, EHOSTUNREACH
    // (thrown) when it is gone. Once the identity frame is accepted the rest goes too.
    if (socket_.send(zmq::buffer(identity), more)) {
      if (data != nullptr) {
        (void)socket_.send(zmq::buffer(header), more);
        sent = socket_.send(*data, zmq::send_flags::dontwait).has_value();
      } else {
        sent = socket_.send(zmq::buffer(header), zmq::send_flags::dontwait).has_value();
      }
    }
  } catch (const zmq::error_t&) {
    sent = false;
  }
  if (!sent) {
    auto peer = peers_.find(identity);
    WarnOnce(absl::StrCat("drop ", identity),
             absl::StrFormat("KV block server: a %s to %s dropped (reader gone, or more READs "
                             "unanswered than the %d allowed)",
                             KvMessageName(message),
                             peer == peers_.end() ? "a reader" : peer->second.address,
                             options_.limits.max_inflight_reads_per_peer));
    absl::MutexLock lock(&mu_);
    ++stats_.dropped;
  }
}

void BlockServer::WarnOnce(const std::string& key, const std::string& message) {
  if (warned_.size() >= kMaxWarned) warned_.clear();
  if (warned_.insert(key).second) spdlog::warn("{}", message);
}

}  // namespace vllm::kv_transfer
