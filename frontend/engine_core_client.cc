#include "frontend/engine_core_client.h"

#include <pthread.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "core/codec.h"
#include "core/engine_core_proc.h"
#include "ipc/msgpack_util.h"
#include "ipc/wait_strategy.h"
#include "spdlog/spdlog.h"

namespace vllm::frontend {
namespace {

constexpr absl::Duration kSlice = absl::Milliseconds(20);

zmq::message_t Msg(std::string_view s) { return zmq::message_t(s.data(), s.size()); }

int64_t MonoDeadline(absl::Time deadline) {
  return ipc::MonoNowNs() + absl::ToInt64Nanoseconds(deadline - absl::Now());
}

absl::StatusOr<msgpack::object_handle> Unpack(const zmq::message_t& m) {
  return ipc::UnpackBounded({m.data<uint8_t>(), m.size()});
}

}  // namespace

absl::StatusOr<std::unique_ptr<EngineCoreClient>> EngineCoreClient::Create(int32_t num_engines) {
  if (num_engines < 1) return absl::InvalidArgumentError("need at least one engine");
  std::unique_ptr<EngineCoreClient> c(new EngineCoreClient());
  c->num_engines_ = num_engines;
  // Socket files in this process's private (0700) directory: only this user's processes can
  // connect. WaitForEngines() removes them once every engine is connected; the destructor
  // does if it never got that far.
  VLLM_ASSIGN_OR_RETURN(c->handshake_address_, ipc::UniqueIpcAddress("handshake"));
  VLLM_ASSIGN_OR_RETURN(c->input_address_, ipc::UniqueIpcAddress("input"));
  VLLM_ASSIGN_OR_RETURN(c->output_address_, ipc::UniqueIpcAddress("output"));
  try {
    c->handshake_.emplace(ipc::ZmqContext(), zmq::socket_type::router);
    c->handshake_->set(zmq::sockopt::linger, 0);
    c->handshake_->bind(c->handshake_address_);
    c->input_.emplace(ipc::ZmqContext(), zmq::socket_type::router);
    c->input_->set(zmq::sockopt::linger, 0);
    c->input_->set(zmq::sockopt::router_mandatory, 1);  // a send to a gone engine fails
    c->input_->bind(c->input_address_);
    c->output_.emplace(ipc::ZmqContext(), zmq::socket_type::pull);
    c->output_->set(zmq::sockopt::linger, 0);
    c->output_->bind(c->output_address_);
  } catch (const zmq::error_t& e) {
    return absl::InternalError(absl::StrCat("engine client sockets: ", e.what()));
  }
  // Engines send nothing on the output socket before READY, so only the accept events show
  // that their PUSH sockets are connected.
  VLLM_ASSIGN_OR_RETURN(c->output_accepts_, ipc::AcceptCounter::Start(*c->output_));
  c->engines_.resize(num_engines);
  c->engine_failures_.resize(num_engines);
  {
    absl::MutexLock lock(&c->lb_mu_);
    c->lb_.emplace(num_engines, /*client_count=*/1, /*client_index=*/0);
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
    VLLM_ASSIGN_OR_RETURN(auto oh, Unpack(parts[2]));
    if (kind == "HELLO") {
      std::vector<zmq::message_t> reply;
      reply.push_back(zmq::message_t(parts[0].data(), parts[0].size()));
      reply.push_back(Msg("CONFIG"));
      msgpack::sbuffer b;
      msgpack::pack(b, std::vector<std::string>{input_address_, output_address_});
      reply.push_back(Msg(std::string_view(b.data(), b.size())));
      VLLM_RETURN_IF_ERROR(
          ipc::SendMultipart(*handshake_, reply, MonoDeadline(deadline), kSlice, check, "CONFIG"));
    } else if (kind == "READY") {
      VLLM_ASSIGN_OR_RETURN(auto v, ipc::ConvertAs<std::vector<int32_t>>(oh.get(), "READY"));
      if (v.size() != 3 || v[0] < 0 || v[0] >= num_engines_ || ready[v[0]]) {
        return absl::DataLossError("engine handshake: bad READY");
      }
      ready[v[0]] = true;
      engines_[v[0]] = {v[1], v[2]};
      ++num_ready;
    } else if (kind == "FAILED") {
      VLLM_ASSIGN_OR_RETURN(auto v, ipc::ConvertAs<std::vector<std::string>>(oh.get(), "FAILED"));
      return absl::UnavailableError(
          absl::StrCat("engine failed to start: ", v.empty() ? "" : v[0]));
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

void EngineCoreClient::ReceiveLoop() {
  std::vector<zmq::message_t> parts;
  while (!stop_.load()) {
    absl::Status s = ipc::RecvMultipart(*output_, parts, 2, ipc::MonoNowNs() + 50'000'000, kSlice,
                                        nullptr, "engine outputs");
    if (absl::IsDeadlineExceeded(s)) continue;
    if (!s.ok() || parts.size() != 2 || parts[0].size() != 1) {
      // Not one of ours (a frame of the wrong shape cannot be attributed to a request).
      spdlog::error("engine outputs: dropped a malformed frame ({})",
                    s.ok() ? absl::StrCat(parts.size(), " parts") : s.ToString());
      continue;
    }
    const char kind = *parts[0].data<char>();
    if (kind == core::kOutputKindOutputs) {
      ReceivedOutputs received;
      const std::string_view bytes = parts[1].to_string_view();
      absl::StatusOr<core::EngineCoreOutputs> outs = core::DecodeEngineCoreOutputs(bytes);
      if (outs.ok()) {
        if (outs->scheduler_stats.has_value() && outs->engine_index >= 0 &&
            outs->engine_index < num_engines_) {
          const core::SchedulerStats& st = *outs->scheduler_stats;
          absl::MutexLock lock(&lb_mu_);
          lb_->Update(outs->engine_index,
                      EngineLoad{st.num_waiting_reqs, st.num_running_reqs, st.kv_cache_usage});
        }
        received.outputs = std::move(*outs);
      } else {
        received.failed_request_ids = core::RecoverOutputRequestIds(bytes);
        received.decode_error = absl::InternalError(
            absl::StrCat("the engine sent an output for this request that could not be decoded: ",
                         outs.status().message()));
        spdlog::error(
            "engine outputs: a frame of {} bytes could not be decoded ({}); failing {}",
            bytes.size(), outs.status().ToString(),
            received.failed_request_ids.empty()
                ? std::string("every request in flight (no request id could be read)")
                : absl::StrCat("requests ", absl::StrJoin(received.failed_request_ids, ", ")));
      }
      absl::MutexLock lock(&mu_);
      outputs_.push_back(std::move(received));
    } else if (kind == core::kOutputKindUtility) {
      ReceiveUtilityReply(parts[1]);
    } else if (kind == core::kOutputKindFailed) {
      // Only one engine sends on a connection, but the frame says which: a frame that cannot
      // be read is attributed to engine 0 when there is only one, and dropped otherwise.
      auto oh = Unpack(parts[1]);
      std::optional<int32_t> engine;
      std::string message = "failed";
      if (oh.ok() && oh->get().type == msgpack::type::ARRAY && oh->get().via.array.size == 3) {
        auto m = ipc::ConvertAs<std::string>(oh->get().via.array.ptr[2], "message");
        auto e = ipc::ConvertAs<int32_t>(oh->get().via.array.ptr[0], "engine");
        if (e.ok() && *e >= 0 && *e < num_engines_) engine = *e;
        if (m.ok()) message = absl::StrCat("failed: ", *m);
      }
      if (!engine.has_value() && num_engines_ == 1) engine = 0;
      if (!engine.has_value()) {
        spdlog::error("engine outputs: dropped an EXECUTOR_FAILED frame naming no engine");
        continue;
      }
      EngineDied(*engine, absl::UnavailableError(absl::StrCat("engine ", *engine, " ", message)));
    } else {
      spdlog::error("engine outputs: dropped a frame of unknown kind {:#04x}",
                    static_cast<unsigned char>(kind));
    }
  }
}

void EngineCoreClient::ReceiveUtilityReply(const zmq::message_t& payload) {
  auto oh = Unpack(payload);
  if (!oh.ok() || oh->get().type != msgpack::type::ARRAY || oh->get().via.array.size != 4) {
    // The caller waiting for it times out (its call id cannot be read).
    spdlog::error("engine outputs: dropped a malformed utility reply");
    return;
  }
  const msgpack::object* f = oh->get().via.array.ptr;
  auto id = ipc::ConvertAs<uint64_t>(f[0], "call_id");
  auto code = ipc::ConvertAs<int32_t>(f[1], "code");
  auto message = ipc::ConvertAs<std::string>(f[2], "message");
  if (!id.ok()) {
    spdlog::error("engine outputs: dropped a utility reply without a call id");
    return;
  }
  absl::MutexLock lock(&mu_);
  if (!code.ok() || !message.ok() || f[3].type != msgpack::type::BIN || *code < 0 ||
      *code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated)) {
    utility_results_[*id] = absl::DataLossError("malformed utility reply from the engine");
  } else if (*code == 0) {
    utility_results_[*id] = std::string(f[3].via.bin.ptr, f[3].via.bin.size);
  } else {
    utility_results_[*id] = absl::Status(static_cast<absl::StatusCode>(*code), *message);
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
  EngineDied(engine_index, absl::UnavailableError(
                               absl::StrCat("engine ", engine_index, " died: ", why.message())));
}

void EngineCoreClient::EngineDied(int32_t engine_index, absl::Status status) {
  if (engine_index < 0 || engine_index >= num_engines_) return;
  // The balancer stops picking the engine before anyone can see the event (lock order:
  // lb_mu_, then mu_).
  absl::MutexLock lb_lock(&lb_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (!engine_failures_[engine_index].ok()) return;
    engine_failures_[engine_index] = status;
    ReceivedOutputs event;
    event.dead_engine = engine_index;
    event.engine_failure = status;
    outputs_.push_back(std::move(event));
    if (++num_dead_ == num_engines_) {
      failure_ = num_engines_ == 1
                     ? status
                     : absl::UnavailableError(
                           absl::StrCat("every engine is dead (the last: ", status.message(), ")"));
    }
  }
  lb_->SetAlive(engine_index, false);
}

absl::StatusOr<int32_t> EngineCoreClient::PickEngine() {
  std::optional<int32_t> engine;
  {
    absl::MutexLock lock(&lb_mu_);
    engine = lb_->Pick();
  }
  if (engine.has_value()) return *engine;
  absl::Status s = failure();
  return s.ok() ? absl::UnavailableError("no engine is alive") : s;
}

absl::Status EngineCoreClient::Send(int32_t engine_index, core::EngineCoreRequestType type,
                                    std::string payload) {
  VLLM_RETURN_IF_ERROR(EngineFailure(engine_index));
  const std::string identity = absl::StrCat("engine-", engine_index);
  const char type_byte = static_cast<char>(type);
  std::vector<zmq::message_t> parts;
  parts.push_back(Msg(identity));
  parts.push_back(Msg(std::string_view(&type_byte, 1)));
  parts.push_back(Msg(payload));
  absl::MutexLock lock(&send_mu_);
  return ipc::SendMultipart(
      *input_, parts, ipc::MonoNowNs() + 5'000'000'000, kSlice,
      [this, engine_index] { return EngineFailure(engine_index); }, "request to the engine");
}

absl::Status EngineCoreClient::AddRequest(const core::EngineCoreRequest& request) {
  return Send(request.data_parallel_rank.value_or(0), core::EngineCoreRequestType::kAdd,
              core::Encode(request));
}

absl::Status EngineCoreClient::AbortRequests(std::span<const std::string> request_ids,
                                             int32_t engine_index) {
  return Send(engine_index, core::EngineCoreRequestType::kAbort,
              core::EncodeAbortRequests(request_ids));
}

absl::StatusOr<std::string> EngineCoreClient::CallUtility(const std::string& method,
                                                          absl::Duration timeout,
                                                          int32_t engine_index) {
  const uint64_t id = next_call_id_.fetch_add(1);
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> pk(b);
  pk.pack_array(3);
  pk.pack(id);
  pk.pack(method);
  pk.pack_bin(0);
  VLLM_RETURN_IF_ERROR(
      Send(engine_index, core::EngineCoreRequestType::kUtility, std::string(b.data(), b.size())));
  absl::MutexLock lock(&mu_);
  auto done = [this, id, engine_index]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return utility_results_.contains(id) || !engine_failures_[engine_index].ok();
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&done), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("utility call ", method, " timed out"));
  }
  auto it = utility_results_.find(id);
  if (it == utility_results_.end()) return engine_failures_[engine_index];
  absl::StatusOr<std::string> result = std::move(it->second);
  utility_results_.erase(it);
  return result;
}

absl::StatusOr<EngineCoreClient::ReceivedOutputs> EngineCoreClient::GetOutputs(
    absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !outputs_.empty() || !failure_.ok();
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
    return absl::DeadlineExceededError("no engine outputs");
  }
  if (outputs_.empty()) return failure_;
  ReceivedOutputs out = std::move(outputs_.front());
  outputs_.pop_front();
  return out;
}

}  // namespace vllm::frontend
