// EngineCoreClient's request path: requests, aborts and utility calls to the engines, the
// receive thread (outputs, utility replies, the coordinator's publications; over TCP it also
// drives the handshake socket, engine_core_handshake.cc) and the load balancer's figures.
#include "frontend/engine/engine_core_client.h"

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
#include "ipc/wait_strategy.h"
#include "spdlog/spdlog.h"

namespace vllm::frontend {
namespace {

constexpr absl::Duration kSlice = absl::Milliseconds(20);

zmq::message_t Msg(std::string_view s) { return zmq::message_t(s.data(), s.size()); }

absl::StatusOr<msgpack::object_handle> Unpack(const zmq::message_t& m) {
  return wire::UnpackBounded({m.data<uint8_t>(), m.size()});
}

}  // namespace

void EngineCoreClient::ReceiveLoop() {
  std::vector<zmq::message_t> parts;
  int64_t next_housekeeping_ns = 0, next_heartbeat_ns = 0;
  while (!stop_.load()) {
    if (!tcp()) {
      if (coordinator_.has_value()) {
        zmq::pollitem_t items[2] = {{output_->handle(), 0, ZMQ_POLLIN, 0},
                                    {coordinator_->handle(), 0, ZMQ_POLLIN, 0}};
        try {
          zmq::poll(items, 2, std::chrono::milliseconds(50));
        } catch (const zmq::error_t& e) {
          if (e.num() != EINTR) spdlog::error("engine client poll: {}", e.what());
        }
        if (items[1].revents & ZMQ_POLLIN) ReceivePublications();
        if ((items[0].revents & ZMQ_POLLIN) == 0) continue;
      }
      absl::Status s = ipc::RecvMultipart(*output_, parts, 2, ipc::MonoNowNs() + 50'000'000, kSlice,
                                          nullptr, "engine outputs");
      if (absl::IsDeadlineExceeded(s)) continue;
      if (!s.ok()) {
        spdlog::error("engine outputs: dropped a malformed frame ({})", s.ToString());
        continue;
      }
      HandleOutputFrame(parts);
      continue;
    }
    zmq::pollitem_t items[3] = {
        {output_->handle(), 0, ZMQ_POLLIN, 0},
        {handshake_->handle(), 0, ZMQ_POLLIN, 0},
        {coordinator_.has_value() ? coordinator_->handle() : nullptr, 0, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, coordinator_.has_value() ? 3 : 2, std::chrono::milliseconds(20));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) spdlog::error("engine client poll: {}", e.what());
    }
    if (items[2].revents & ZMQ_POLLIN) ReceivePublications();
    if (items[1].revents & ZMQ_POLLIN) {
      absl::Status s = ipc::RecvMultipart(*handshake_, parts, 3, ipc::MonoNowNs(), kSlice, nullptr,
                                          "engine handshake");
      if (s.ok()) {
        HandleHandshakeFrame(parts);
      } else if (!absl::IsDeadlineExceeded(s)) {
        spdlog::warn("engine handshake: dropped a frame: {}", s.ToString());
      }
    }
    if (items[0].revents & ZMQ_POLLIN) {
      // Several at a time, but bounded, so the handshake and heartbeats are not starved.
      for (int i = 0; i < 64; ++i) {
        absl::Status s = ipc::RecvMultipart(*output_, parts, 2, ipc::MonoNowNs(), kSlice, nullptr,
                                            "engine outputs");
        if (absl::IsDeadlineExceeded(s)) break;
        if (!s.ok()) {
          spdlog::error("engine outputs: dropped a malformed frame ({})", s.ToString());
          continue;
        }
        HandleOutputFrame(parts);
      }
    }
    if (const int64_t now = ipc::MonoNowNs(); now >= next_housekeeping_ns) {
      next_housekeeping_ns = now + absl::ToInt64Nanoseconds(kSlice);
      DrainRegistrations();
      UpdateEngineStates();
      if (now >= next_heartbeat_ns) {
        next_heartbeat_ns = now + 1'000'000'000;
        SendHeartbeats();
      }
    }
  }
}

void EngineCoreClient::ReceivePublications() {
  // Only the newest counts; a bounded number per call so outputs are not starved.
  std::optional<core::LoadPublication> newest;
  for (int i = 0; i < 64; ++i) {
    zmq::message_t msg;
    zmq::recv_result_t got;
    try {
      got = coordinator_->recv(msg, zmq::recv_flags::dontwait);
    } catch (const zmq::error_t&) {
      break;
    }
    if (!got) break;
    absl::StatusOr<core::LoadPublication> p = core::DecodeLoadPublication(msg.to_string_view());
    if (!p.ok() || msg.more() || p->engines.size() != static_cast<size_t>(num_engines_)) {
      spdlog::warn("DP coordinator: dropped a publication: {}",
                   p.ok() ? std::string("wrong shape") : p.status().ToString());
      continue;
    }
    newest = std::move(*p);
  }
  if (!newest.has_value()) return;
  absl::MutexLock lock(&lb_mu_);
  for (int32_t e = 0; e < num_engines_; ++e) {
    const core::PublishedEngineLoad& load = newest->engines[e];
    // Newer than what the engine sent this API server itself (the engine's clock on both).
    if (!load.reported || load.timestamp <= figures_time_[e]) continue;
    figures_time_[e] = load.timestamp;
    lb_->Update(e, EngineLoad{load.waiting, load.running, load.kv_cache_usage});
  }
}

void EngineCoreClient::HandleOutputFrame(std::vector<zmq::message_t>& parts) {
  if (parts.size() != 2 || parts[0].size() != 1) {
    // Not one of ours (a frame of the wrong shape cannot be attributed to a request).
    spdlog::error("engine outputs: dropped a malformed frame ({} parts)", parts.size());
    return;
  }
  const char kind = *parts[0].data<char>();
  if (kind == core::kOutputKindOutputs) {
    ReceivedOutputs received;
    const std::string_view bytes = parts[1].to_string_view();
    absl::StatusOr<core::EngineCoreOutputs> outs = core::DecodeEngineCoreOutputs(bytes);
    if (outs.ok()) {
      if (outs->engine_index >= 0 && outs->engine_index < num_engines_) {
        if (tcp()) {
          absl::MutexLock lock(&mu_);
          slots_[outs->engine_index].last_seen_ns = ipc::MonoNowNs();
        }
        absl::MutexLock lock(&lb_mu_);
        for (const core::EngineCoreOutput& o : outs->outputs) {
          if (!o.finished()) continue;
          if (auto it = outstanding_.find(o.request_id); it != outstanding_.end()) {
            lb_->Finished(it->second);
            outstanding_.erase(it);
          }
        }
        // The engine's own figures (every API server gets them when they change); the
        // coordinator's publication replaces them only when it carries newer ones.
        if (outs->scheduler_stats.has_value() &&
            outs->timestamp >= figures_time_[outs->engine_index]) {
          figures_time_[outs->engine_index] = outs->timestamp;
          const core::SchedulerStats& st = *outs->scheduler_stats;
          lb_->Update(outs->engine_index,
                      EngineLoad{st.num_waiting_reqs, st.num_running_reqs, st.kv_cache_usage});
        }
      }
      received.outputs = std::move(*outs);
    } else {
      received.failed_request_ids = core::RecoverOutputRequestIds(bytes);
      received.decode_error = absl::InternalError(
          absl::StrCat("the engine sent an output for this request that could not be decoded: ",
                       outs.status().message()));
      spdlog::error(
          "engine outputs: a frame of {} bytes could not be decoded ({}); failing {}", bytes.size(),
          outs.status().ToString(),
          received.failed_request_ids.empty()
              ? std::string("every request in flight (no request id could be read)")
              : absl::StrCat("requests ", absl::StrJoin(received.failed_request_ids, ", ")));
    }
    absl::MutexLock lock(&mu_);
    outputs_.push_back(std::move(received));
  } else if (kind == core::kOutputKindHeartbeat) {
    absl::StatusOr<int32_t> engine = core::DecodeHeartbeat(parts[1].to_string_view());
    if (engine.ok() && *engine < num_engines_ && tcp()) {
      absl::MutexLock lock(&mu_);
      slots_[*engine].last_seen_ns = ipc::MonoNowNs();
    }
  } else if (kind == core::kOutputKindUtility) {
    ReceiveUtilityReply(parts[1]);
  } else if (kind == core::kOutputKindFailed) {
    // Only one engine sends on a connection, but the frame says which: a frame that cannot
    // be read is attributed to engine 0 when there is only one, and dropped otherwise.
    auto oh = Unpack(parts[1]);
    std::optional<int32_t> engine;
    std::string message = "failed";
    if (oh.ok() && oh->get().type == msgpack::type::ARRAY && oh->get().via.array.size == 3) {
      auto m = wire::ConvertAs<std::string>(oh->get().via.array.ptr[2], "message");
      auto e = wire::ConvertAs<int32_t>(oh->get().via.array.ptr[0], "engine");
      if (e.ok() && *e >= 0 && *e < num_engines_) engine = *e;
      if (m.ok()) message = absl::StrCat("failed: ", *m);
    }
    if (!engine.has_value() && num_engines_ == 1) engine = 0;
    if (!engine.has_value()) {
      spdlog::error("engine outputs: dropped an EXECUTOR_FAILED frame naming no engine");
      return;
    }
    EngineDied(*engine, absl::UnavailableError(
                            absl::StrCat("engine ", *engine + options_.first_rank, " ", message)));
  } else {
    spdlog::error("engine outputs: dropped a frame of unknown kind {:#04x}",
                  static_cast<unsigned char>(kind));
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
  auto id = wire::ConvertAs<uint64_t>(f[0], "call_id");
  auto code = wire::ConvertAs<int32_t>(f[1], "code");
  auto message = wire::ConvertAs<std::string>(f[2], "message");
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
  const int32_t engine = request.data_parallel_rank.value_or(0);
  absl::Status sent = Send(engine, core::EngineCoreRequestType::kAdd, core::Encode(request));
  absl::MutexLock lock(&lb_mu_);
  if (sent.ok()) {
    outstanding_[request.request_id] = engine;
  } else {
    lb_->Finished(engine);  // picked, never sent
  }
  return sent;
}

absl::Status EngineCoreClient::AbortRequests(std::span<const std::string> request_ids,
                                             int32_t engine_index) {
  {
    absl::MutexLock lock(&lb_mu_);
    for (const std::string& id : request_ids) {
      if (auto it = outstanding_.find(id); it != outstanding_.end()) {
        lb_->Finished(it->second);
        outstanding_.erase(it);
      }
    }
  }
  return Send(engine_index, core::EngineCoreRequestType::kAbort,
              core::EncodeAbortRequests(request_ids));
}

absl::StatusOr<std::string> EngineCoreClient::CallUtility(const std::string& method,
                                                          absl::Duration timeout,
                                                          int32_t engine_index,
                                                          std::string_view args) {
  const uint64_t id = next_call_id_.fetch_add(1);
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> pk(b);
  pk.pack_array(3);
  pk.pack(id);
  pk.pack(method);
  pk.pack_bin(static_cast<uint32_t>(args.size()));
  pk.pack_bin_body(args.data(), static_cast<uint32_t>(args.size()));
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
