// EngineCoreClient's handshake and engine registry: binding the sockets, HELLO → CONFIG →
// READY with every engine (ipc:// once; over TCP for as long as the client lives, so an engine
// whose node restarted joins again), REGISTER frames, heartbeats and which engines are live or
// dead. The request path is engine_core_client.cc.
#include <pthread.h>

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/msgpack_util.h"
#include "base/status_macros.h"
#include "core/codec.h"
#include "core/dp_coordinator.h"
#include "core/engine_core_proc.h"
#include "core/engine_handshake.h"
#include "frontend/engine/engine_core_client.h"
#include "frontend/engine/listen_address.h"
#include "ipc/wait_strategy.h"
#include "spdlog/spdlog.h"

namespace vllm::frontend {
namespace {

constexpr absl::Duration kSlice = absl::Milliseconds(20);

zmq::message_t Msg(std::string_view s) { return zmq::message_t(s.data(), s.size()); }

int64_t MonoDeadline(absl::Time deadline) {
  return ipc::MonoNowNs() + absl::ToInt64Nanoseconds(deadline - absl::Now());
}

}  // namespace

absl::StatusOr<std::unique_ptr<EngineCoreClient>> EngineCoreClient::Create(int32_t num_engines) {
  EngineCoreClientOptions options;
  options.num_engines = num_engines;
  return Create(options);
}

absl::StatusOr<std::unique_ptr<EngineCoreClient>> EngineCoreClient::Create(
    const EngineCoreClientOptions& options) {
  const int32_t num_engines = options.num_engines;
  if (num_engines < 1) return absl::InvalidArgumentError("need at least one engine");
  std::unique_ptr<EngineCoreClient> c(new EngineCoreClient());
  c->options_ = options;
  c->num_engines_ = num_engines;
  const bool tcp = !options.tcp_address.empty();
  try {
    c->handshake_.emplace(ipc::ZmqContext(), zmq::socket_type::router);
    c->handshake_->set(zmq::sockopt::linger, 0);
    c->input_.emplace(ipc::ZmqContext(), zmq::socket_type::router);
    c->input_->set(zmq::sockopt::linger, 0);
    c->input_->set(zmq::sockopt::router_mandatory, 1);  // a send to a gone engine fails
    // An engine that joins again (its node restarted) takes its identity over at once.
    c->input_->set(zmq::sockopt::router_handover, 1);
    c->output_.emplace(ipc::ZmqContext(), zmq::socket_type::pull);
    c->output_->set(zmq::sockopt::linger, 0);
  } catch (const zmq::error_t& e) {
    return absl::InternalError(absl::StrCat("engine client sockets: ", e.what()));
  }
  if (tcp) {
    // The engines of every node reach the head at --data-parallel-address: handshake at
    // --data-parallel-rpc-port, input and output at free ports reported in CONFIG.
    VLLM_ASSIGN_OR_RETURN(const std::string ip, ResolveListenAddress(options.tcp_address));
    if (options.curve.has_value()) {
      for (zmq::socket_t* sock : {&*c->handshake_, &*c->input_, &*c->output_}) {
        VLLM_RETURN_IF_ERROR(ipc::MakeCurveServer(*sock, *options.curve));
      }
    }
    absl::StatusOr<std::string> bound = ipc::BindTcp(*c->handshake_, ip, options.handshake_port);
    if (!bound.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "cannot bind the data-parallel handshake socket at ", ip, ":", options.handshake_port,
          " (--data-parallel-address, --data-parallel-rpc-port): ", bound.status().message()));
    }
    c->handshake_address_ = *bound;
    for (int32_t port : options.peer_handshake_ports) {
      c->peer_handshake_addresses_.push_back(absl::StrCat("tcp://", ip, ":", port));
    }
    VLLM_ASSIGN_OR_RETURN(c->input_address_, ipc::BindTcp(*c->input_, ip, 0));
    VLLM_ASSIGN_OR_RETURN(c->output_address_, ipc::BindTcp(*c->output_, ip, 0));
  } else {
    // Socket files in this process's private (0700) directory: only this user's processes
    // can connect. WaitForEngines() removes them once every engine is connected; the
    // destructor does if it never got that far.
    VLLM_ASSIGN_OR_RETURN(c->handshake_address_, ipc::UniqueIpcAddress("handshake"));
    VLLM_ASSIGN_OR_RETURN(c->input_address_, ipc::UniqueIpcAddress("input"));
    VLLM_ASSIGN_OR_RETURN(c->output_address_, ipc::UniqueIpcAddress("output"));
    try {
      c->handshake_->bind(c->handshake_address_);
      c->input_->bind(c->input_address_);
      c->output_->bind(c->output_address_);
    } catch (const zmq::error_t& e) {
      return absl::InternalError(absl::StrCat("engine client sockets: ", e.what()));
    }
    // Engines may send nothing on the output socket before READY, so only the accept events
    // show that their PUSH sockets are connected.
    VLLM_ASSIGN_OR_RETURN(c->output_accepts_, ipc::AcceptCounter::Start(*c->output_));
  }
  if (!options.coordinator_publish.empty()) {
    try {
      c->coordinator_.emplace(ipc::ZmqContext(), zmq::socket_type::sub);
      c->coordinator_->set(zmq::sockopt::linger, 0);
      if (options.curve.has_value()) {
        VLLM_RETURN_IF_ERROR(ipc::MakeCurveClient(*c->coordinator_, *options.curve));
      }
      c->coordinator_->set(zmq::sockopt::subscribe, "");
      c->coordinator_->connect(options.coordinator_publish);
    } catch (const zmq::error_t& e) {
      return absl::InvalidArgumentError(absl::StrCat("the DP coordinator's publications at '",
                                                     options.coordinator_publish, "': ", e.what()));
    }
  }
  {
    absl::MutexLock lock(&c->lb_mu_);
    c->figures_time_.assign(num_engines, 0.0);
    c->lb_.emplace(num_engines, std::max(1, options.client_count),
                   std::clamp(options.client_index, 0, std::max(1, options.client_count) - 1));
    if (tcp) {
      for (int32_t i = 0; i < num_engines; ++i) c->lb_->SetAlive(i, false);  // until they join
    }
  }
  absl::MutexLock lock(&c->mu_);
  c->engines_.resize(num_engines);
  c->engine_failures_.resize(num_engines);
  c->slots_.resize(num_engines);
  if (tcp) {
    // No engine serves before it joined.
    for (int32_t i = 0; i < num_engines; ++i) {
      c->engine_failures_[i] =
          absl::UnavailableError(absl::StrCat("data-parallel engine ", i, " has not joined"));
    }
    c->num_dead_ = num_engines;
    c->failure_ = absl::UnavailableError("no data-parallel engine has joined yet");
  }
  return c;
}

EngineCoreClient::~EngineCoreClient() {
  stop_.store(true);
  if (receiver_.joinable()) receiver_.join();
  output_accepts_.reset();  // before output_ closes
  for (const std::string* a : {&handshake_address_, &input_address_, &output_address_}) {
    ipc::ReleaseIpcAddress(*a);
  }
}

absl::Status EngineCoreClient::WaitForEngines(absl::Time deadline,
                                              const std::function<absl::Status()>& check) {
  if (tcp()) return WaitForEnginesTcp(deadline, check);
  std::vector<bool> ready(num_engines_, false);
  int32_t num_ready = 0;
  std::vector<zmq::message_t> parts;
  while (num_ready < num_engines_) {
    absl::Status s = ipc::RecvMultipart(*handshake_, parts, 3, MonoDeadline(deadline), kSlice,
                                        check, "engine handshake");
    if (absl::IsDeadlineExceeded(s)) {
      std::vector<int32_t> missing;
      for (int32_t i = 0; i < num_engines_; ++i) {
        if (!ready[i]) missing.push_back(i);
      }
      return absl::DeadlineExceededError(
          absl::StrCat("engine(s) ", absl::StrJoin(missing, ", "), " did not become ready"));
    }
    VLLM_RETURN_IF_ERROR(s);
    if (parts.size() != 3) return absl::DataLossError("engine handshake: malformed frame");
    const std::string kind(parts[1].to_string_view());
    const std::string_view payload = parts[2].to_string_view();
    if (kind == "HELLO") {
      VLLM_RETURN_IF_ERROR(core::DecodeHello(payload).status());
      std::vector<zmq::message_t> reply;
      reply.push_back(zmq::message_t(parts[0].data(), parts[0].size()));
      reply.push_back(Msg("CONFIG"));
      reply.push_back(Msg(ConfigFrame()));
      VLLM_RETURN_IF_ERROR(
          ipc::SendMultipart(*handshake_, reply, MonoDeadline(deadline), kSlice, check, "CONFIG"));
    } else if (kind == "READY") {
      VLLM_ASSIGN_OR_RETURN(const core::ReadyMessage r, core::DecodeReady(payload));
      if (r.engine_index >= num_engines_ || ready[r.engine_index]) {
        return absl::DataLossError("engine handshake: bad READY");
      }
      ready[r.engine_index] = true;
      {
        absl::MutexLock lock(&mu_);
        engines_[r.engine_index] = {r.num_gpu_blocks, r.max_model_len, "localhost"};
      }
      ++num_ready;
    } else if (kind == "FAILED") {
      absl::StatusOr<std::string> why = core::DecodeHandshakeMessage(payload);
      return absl::UnavailableError(absl::StrCat(
          "engine failed to start: ", why.ok() ? *why : std::string(why.status().message())));
    } else {
      return absl::DataLossError(absl::StrCat("engine handshake: unexpected '", kind, "'"));
    }
  }
  VLLM_RETURN_IF_ERROR(WaitForRegistrations(deadline, check));
  absl::Status outputs_connected = output_accepts_->WaitForAccepted(
      num_engines_, MonoDeadline(deadline), kSlice, check, "engine output connections");
  if (absl::IsDeadlineExceeded(outputs_connected)) {
    return absl::DeadlineExceededError(
        absl::StrCat("engine(s) did not connect their output socket (", output_accepts_->accepted(),
                     " of ", num_engines_, ")"));
  }
  VLLM_RETURN_IF_ERROR(outputs_connected);
  output_accepts_.reset();
  // Every engine is connected on all three sockets: remove the socket files (the connections
  // stay; ZMQ never needs to reconnect a Unix socket between live processes, see
  // ipc/ipc_address.h), so nothing else can connect and a kill -9 leaves nothing behind.
  for (const std::string* a : {&handshake_address_, &input_address_, &output_address_}) {
    ipc::ReleaseIpcAddress(*a);
  }
  receiver_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "vllm-ecc-recv");  // engine outputs → queue
    ReceiveLoop();
  });
  return absl::OkStatus();
}

absl::Status EngineCoreClient::WaitForEnginesTcp(absl::Time deadline,
                                                 const std::function<absl::Status()>& check) {
  // The receive thread runs the handshake from the start: engines join (and join again
  // later) while it serves outputs.
  receiver_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "vllm-ecc-recv");  // handshake, outputs → queue
    ReceiveLoop();
  });
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (!startup_error_.ok()) return true;
        for (const EngineSlot& slot : slots_) {
          if (slot.state != JoinState::kLive) return false;
        }
        return true;
      };
      mu_.AwaitWithDeadline(absl::Condition(&done), std::min(deadline, absl::Now() + kSlice));
      if (!startup_error_.ok()) return startup_error_;
      if (done()) {
        started_ = true;
        return absl::OkStatus();
      }
      if (absl::Now() >= deadline) {
        std::vector<int32_t> missing;
        for (int32_t i = 0; i < num_engines_; ++i) {
          if (slots_[i].state != JoinState::kLive) missing.push_back(i);
        }
        return absl::DeadlineExceededError(absl::StrCat(
            "data-parallel engine(s) ", absl::StrJoin(missing, ", "), " did not join the head at ",
            handshake_address_, " in time (VLLM_ENGINE_READY_TIMEOUT_S)"));
      }
    }
    if (check) VLLM_RETURN_IF_ERROR(check());
  }
}

std::vector<EngineCoreClient::EngineInfo> EngineCoreClient::engines() const {
  absl::MutexLock lock(&mu_);
  return engines_;
}

absl::Status EngineCoreClient::WaitForRegistrations(absl::Time deadline,
                                                    const std::function<absl::Status()>& check) {
  // Each engine's DEALER sends one "REGISTER" frame after connecting; until the ROUTER has
  // seen it, a send to that engine's identity can fail with EHOSTUNREACH.
  std::vector<bool> registered(num_engines_, false);
  int32_t num_registered = 0;
  std::vector<zmq::message_t> parts;
  while (num_registered < num_engines_) {
    absl::Status s = ipc::RecvMultipart(*input_, parts, 2, MonoDeadline(deadline), kSlice, check,
                                        "engine input registration");
    if (absl::IsDeadlineExceeded(s)) {
      return absl::DeadlineExceededError("engine(s) did not connect their input socket");
    }
    VLLM_RETURN_IF_ERROR(s);
    if (parts.size() != 2 || parts[1].to_string_view() != "REGISTER") {
      return absl::DataLossError("engine input registration: malformed frame");
    }
    for (int32_t i = 0; i < num_engines_; ++i) {
      if (!registered[i] && parts[0].to_string_view() == absl::StrCat("engine-", i)) {
        registered[i] = true;
        ++num_registered;
      }
    }
  }
  return absl::OkStatus();
}

std::string EngineCoreClient::ConfigFrame() const {
  core::EngineAddresses a;
  a.input = input_address_;
  a.output = output_address_;
  a.peers = peer_handshake_addresses_;
  a.coordinator_stats = options_.coordinator_stats;
  a.coordinator_waves = options_.coordinator_waves;
  a.coordinator_report_key = options_.coordinator_report_key;
  return core::EncodeAddresses(a);
}

void EngineCoreClient::SendHandshake(const zmq::message_t& peer, std::string_view kind,
                                     std::string payload) {
  std::vector<zmq::message_t> reply;
  reply.push_back(zmq::message_t(peer.data(), peer.size()));
  reply.push_back(Msg(kind));
  reply.push_back(Msg(payload));
  if (absl::Status s = ipc::SendMultipart(*handshake_, reply, ipc::MonoNowNs() + 1'000'000'000,
                                          kSlice, nullptr, "handshake reply");
      !s.ok()) {
    spdlog::warn("engine handshake: {} not sent: {}", kind, s.ToString());
  }
}

void EngineCoreClient::HandleHandshakeFrame(std::vector<zmq::message_t>& parts) {
  if (parts.size() != 3) {
    spdlog::warn("engine handshake: dropped a frame of {} parts", parts.size());
    return;
  }
  const std::string peer(parts[0].to_string_view());
  const std::string kind(parts[1].to_string_view());
  const std::string_view payload = parts[2].to_string_view();
  // Where the frame came from (the TCP peer), for messages and for telling a restarted engine
  // from a second node claiming the same rank.
  const char* peer_address = parts[2].gets("Peer-Address");
  const std::string from = peer_address != nullptr ? peer_address : "unknown address";
  auto reject = [&](const std::string& why) {
    spdlog::error("engine handshake: refused an engine from {}: {}", from, why);
    SendHandshake(parts[0], "REJECT", core::EncodeHandshakeMessage(why));
  };
  if (kind == "HELLO") {
    absl::StatusOr<core::HelloMessage> hello = core::DecodeHello(payload);
    if (!hello.ok()) return reject(std::string(hello.status().message()));
    const int32_t index = hello->engine_index;
    const int32_t size = hello->data_parallel_size;
    const std::string& host = hello->host;
    if (size != num_engines_) {
      return reject(absl::StrCat("--data-parallel-size ", size, " on node ", host, " but ",
                                 num_engines_, " at the head"));
    }
    if (index >= num_engines_) {
      return reject(absl::StrCat("data-parallel rank ", index, " is not in [0, ", num_engines_,
                                 ") (check --data-parallel-start-rank and "
                                 "--data-parallel-size-local)"));
    }
    const std::string node = absl::StrCat(host, " (", from, ")");
    bool replaced = false;
    std::string holder;  // set: another node serves the rank
    {
      absl::MutexLock lock(&mu_);
      EngineSlot& slot = slots_[index];
      // The same rank again: a restarted engine from the same node takes over (the old one is
      // gone, or will be); one from another node is a configuration mistake.
      const bool taken = slot.state == JoinState::kLive || slot.state == JoinState::kJoining;
      if (taken && engines_[index].host != node) {
        holder = engines_[index].host;
      } else {
        replaced = slot.state == JoinState::kLive;
        if (slot.state == JoinState::kDead || replaced) {
          spdlog::info("data-parallel engine {} on node {} joins again{}", index, node,
                       replaced ? " (a new process: the old one is taken as dead)" : "");
        }
        slot.state = JoinState::kJoining;
        slot.peer = peer;
        slot.ready = false;
        slot.registered = false;
        slot.last_seen_ns = ipc::MonoNowNs();
        engines_[index].host = node;
      }
    }
    if (!holder.empty()) {
      return reject(absl::StrCat("data-parallel rank ", index, " is already served by node ",
                                 holder, " (check --data-parallel-start-rank)"));
    }
    if (replaced) {
      EngineDied(index,
                 absl::UnavailableError(absl::StrCat(
                     "engine ", index, " was replaced by a new engine process of node ", node)));
    }
    SendHandshake(parts[0], "CONFIG", ConfigFrame());
    return;
  }
  // READY / FAILED come from a joining engine's handshake connection.
  absl::MutexLock lock(&mu_);
  int32_t index = -1;
  for (int32_t i = 0; i < num_engines_; ++i) {
    if (slots_[i].state == JoinState::kJoining && slots_[i].peer == peer) index = i;
  }
  if (index < 0) {
    spdlog::warn("engine handshake: dropped a {} from an engine that is not joining ({})",
                 kind.substr(0, 16), from);
    return;
  }
  EngineSlot& slot = slots_[index];
  slot.last_seen_ns = ipc::MonoNowNs();
  if (kind == "READY") {
    absl::StatusOr<core::ReadyMessage> r = core::DecodeReady(payload);
    if (!r.ok() || r->engine_index != index) {
      spdlog::error("engine handshake: bad READY from engine {}", index);
      slot.state = JoinState::kDead;
      return;
    }
    slot.ready = true;
    engines_[index].num_gpu_blocks = r->num_gpu_blocks;
    engines_[index].max_model_len = r->max_model_len;
  } else if (kind == "FAILED") {
    absl::StatusOr<std::string> why = core::DecodeHandshakeMessage(payload);
    const std::string message =
        absl::StrCat("data-parallel engine ", index, " on node ", engines_[index].host,
                     " failed to start: ", why.ok() ? *why : std::string("(unreadable reason)"));
    spdlog::error("{}", message);
    slot.state = JoinState::kDead;
    if (!started_ && startup_error_.ok()) startup_error_ = absl::UnavailableError(message);
  } else {
    spdlog::warn("engine handshake: dropped an unexpected '{}' from engine {}", kind.substr(0, 16),
                 index);
  }
}

void EngineCoreClient::DrainRegistrations() {
  std::vector<int32_t> registered;
  {
    absl::MutexLock lock(&send_mu_);
    std::vector<zmq::message_t> parts;
    for (int i = 0; i < 64; ++i) {
      absl::Status s = ipc::RecvMultipart(*input_, parts, 2, ipc::MonoNowNs(), kSlice, nullptr,
                                          "engine input registration");
      if (absl::IsDeadlineExceeded(s)) break;
      if (!s.ok() || parts.size() != 2 || parts[1].to_string_view() != "REGISTER") {
        spdlog::warn("engine input: dropped an unexpected frame");
        continue;
      }
      absl::string_view id(parts[0].data<char>(), parts[0].size());
      int32_t index = -1;
      if (absl::ConsumePrefix(&id, "engine-") && absl::SimpleAtoi(id, &index) && index >= 0 &&
          index < num_engines_) {
        registered.push_back(index);
      }
    }
  }
  if (registered.empty()) return;
  absl::MutexLock lock(&mu_);
  for (int32_t i : registered) {
    if (slots_[i].state == JoinState::kJoining) slots_[i].registered = true;
  }
}

void EngineCoreClient::SendHeartbeats() {
  std::vector<int32_t> live;
  {
    absl::MutexLock lock(&mu_);
    for (int32_t i = 0; i < num_engines_; ++i) {
      if (slots_[i].state == JoinState::kLive) live.push_back(i);
    }
  }
  const char type = static_cast<char>(core::EngineCoreRequestType::kHeartbeat);
  absl::MutexLock lock(&send_mu_);
  for (int32_t i : live) {
    std::vector<zmq::message_t> parts;
    parts.push_back(Msg(absl::StrCat("engine-", i)));
    parts.push_back(Msg(std::string_view(&type, 1)));
    parts.push_back(Msg(""));
    // Never blocks the receive thread: a heartbeat that does not fit now is skipped (an
    // engine that reads nothing for a while is busy or gone; either way, one less is fine).
    (void)ipc::SendMultipart(*input_, parts, ipc::MonoNowNs(), kSlice, nullptr, "heartbeat");
  }
}

void EngineCoreClient::UpdateEngineStates() {
  std::vector<int32_t> joined;
  std::vector<std::pair<int32_t, absl::Status>> silent;
  {
    absl::MutexLock lock(&mu_);
    const int64_t now = ipc::MonoNowNs();
    const int64_t timeout_ns = absl::ToInt64Nanoseconds(options_.heartbeat_timeout);
    for (int32_t i = 0; i < num_engines_; ++i) {
      EngineSlot& slot = slots_[i];
      if (slot.state == JoinState::kJoining && slot.ready && slot.registered) {
        slot.state = JoinState::kLive;
        joined.push_back(i);
        continue;
      }
      if ((slot.state == JoinState::kJoining || slot.state == JoinState::kLive) &&
          now - slot.last_seen_ns > timeout_ns) {
        const std::string what =
            absl::StrCat("data-parallel engine ", i, " on node ", engines_[i].host,
                         " sent nothing for ", absl::FormatDuration(options_.heartbeat_timeout),
                         ": its process or node is gone (or the network between them)");
        if (slot.state == JoinState::kJoining) {
          spdlog::error("{}", what);
          if (!started_ && startup_error_.ok()) {
            startup_error_ = absl::UnavailableError(absl::StrCat(what, ", during start-up"));
          }
        } else {
          silent.emplace_back(i, absl::UnavailableError(absl::StrCat(
                                     "engine ", i + options_.first_rank, " died: ", what)));
        }
        slot.state = JoinState::kDead;
      }
    }
    for (int32_t i : joined) {
      if (!engine_failures_[i].ok()) {
        engine_failures_[i] = absl::OkStatus();
        --num_dead_;
      }
      failure_ = absl::OkStatus();
      spdlog::info("data-parallel engine {} on node {} joined ({} KV blocks)", i, engines_[i].host,
                   engines_[i].num_gpu_blocks);
    }
  }
  for (auto& [i, why] : silent) EngineDied(i, why);
  if (!joined.empty()) {
    absl::MutexLock lock(&lb_mu_);
    for (int32_t i : joined) {
      lb_->Update(i, EngineLoad{});  // a new engine process: nothing queued (not its old figures)
      lb_->Reset(i);
      lb_->SetAlive(i, true);
    }
  }
}

absl::Status EngineCoreClient::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

absl::Status EngineCoreClient::EngineFailure(int32_t engine_index) const {
  if (engine_index < 0 || engine_index >= num_engines_) {
    return absl::InvalidArgumentError(absl::StrCat("no engine ", engine_index));
  }
  absl::MutexLock lock(&mu_);
  return engine_failures_[engine_index];
}

void EngineCoreClient::MarkEngineDead(int32_t engine_index, const absl::Status& why) {
  EngineDied(engine_index,
             absl::UnavailableError(absl::StrCat("engine ", engine_index + options_.first_rank,
                                                 " died: ", why.message())));
}

void EngineCoreClient::EngineDied(int32_t engine_index, absl::Status status) {
  if (engine_index < 0 || engine_index >= num_engines_) return;
  // The balancer stops picking the engine before anyone can see the event (lock order:
  // lb_mu_, then mu_).
  absl::MutexLock lb_lock(&lb_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (!engine_failures_[engine_index].ok()) return;
    if (slots_[engine_index].state == JoinState::kLive) {
      slots_[engine_index].state = JoinState::kDead;
    }
    engine_failures_[engine_index] = status;
    spdlog::error("{}", std::string(status.message()));
    ReceivedOutputs event;
    event.dead_engine = engine_index;
    event.engine_failure = status;
    outputs_.push_back(std::move(event));
    if (++num_dead_ == num_engines_) {
      failure_ = num_engines_ == 1
                     ? status
                     : absl::UnavailableError(
                           absl::StrCat("every engine is dead (the last: ", status.message(), ")"));
      if (options_.on_every_engine_dead) options_.on_every_engine_dead(failure_);
    }
  }
  lb_->SetAlive(engine_index, false);
  lb_->Reset(engine_index);
  absl::erase_if(outstanding_,
                 [engine_index](const auto& entry) { return entry.second == engine_index; });
}

}  // namespace vllm::frontend
