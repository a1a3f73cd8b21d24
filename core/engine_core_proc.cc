#include "core/engine_core_proc.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <deque>
#include <optional>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/msgpack_util.h"
#include "base/status_macros.h"
#include "core/codec.h"
#include "core/dp_engine_core_proc.h"
#include "core/engine_handshake.h"
#include "core/engine_sleep.h"
#include "core/kv_event_options.h"
#include "ipc/wait_strategy.h"
#include "ipc/zmq_util.h"
#include "spdlog/spdlog.h"

namespace vllm::core {
namespace {

constexpr absl::Duration kPollSlice = absl::Milliseconds(50);

std::string Pack(const auto&... fields) {
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> pk(b);
  pk.pack_array(sizeof...(fields));
  (pk.pack(fields), ...);
  return std::string(b.data(), b.size());
}

zmq::message_t Msg(std::string_view s) { return zmq::message_t(s.data(), s.size()); }

void MarkHeadLoss(absl::Status& status, HeadLoss loss) {
  status.SetPayload(kHeadLossPayload,
                    absl::Cord(loss == HeadLoss::kSilent ? "silent" : "unanswered"));
}

struct UtilityCall {
  uint64_t call_id = 0;
  std::string method;
  std::string args;  // msgpack (the call's bin), may be empty
};

// An ADD frame that could not be decoded but whose request id could be read: the request is
// answered with an error instead of being dropped (its client would wait forever).
struct UndecodableRequest {
  std::string request_id;
  absl::Status why;
};

// One decoded input frame.
using Input = std::variant<EngineCoreRequest, std::vector<std::string> /*abort*/, UtilityCall,
                           StartDpWave, UndecodableRequest, DpWave>;

// A decoded input frame and the frontend (API server) it came from.
struct FromFrontend {
  size_t frontend = 0;
  Input input;
};

// What the output thread sends: [kind, payload], to one frontend or (kAllFrontends) to each.
constexpr size_t kAllFrontends = static_cast<size_t>(-1);
// The DP coordinator's report socket: one frame, the payload (DpEngineCoreProc::SendReport).
constexpr size_t kCoordinator = kAllFrontends - 1;
struct Output {
  char kind;
  std::string payload;
  size_t frontend = kAllFrontends;
};

// One API server's sockets: the handshake DEALER (kept until READY), the input DEALER and the
// output PUSH.
struct Frontend {
  std::string handshake_address;
  std::optional<zmq::socket_t> handshake, input, output;
  int64_t last_input_ns = 0;  // input thread only
};

}  // namespace

class EngineCoreProc::Impl {
 public:
  explicit Impl(EngineCoreProcOptions options) : options_(std::move(options)) {}

  absl::Status Run() {
    absl::Status s = RunInner();
    StopThreads();
    return s;
  }

  void Stop() {
    stop_.store(true);
    absl::MutexLock lock(&mu_);
    // Wakes the main loop if it waits for input (the condition checks stop_).
    wake_ = true;
  }

 private:
  absl::Status RunInner() {
    VLLM_RETURN_IF_ERROR(Handshake());
    input_thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "vllm-ec-input");  // frames → input queue
      InputLoop();
    });
    return MainLoop();
  }

  // A socket of ours connected to `address` (CURVE client when the cluster key is set).
  // InvalidArgument for an address ZMQ refuses (the frontend's CONFIG is another process's
  // word).
  absl::StatusOr<zmq::socket_t> Connect(zmq::socket_type type, int linger_ms,
                                        const std::string& address,
                                        const std::string& routing_id = "") {
    zmq::socket_t socket(ipc::ZmqContext(), type);
    socket.set(zmq::sockopt::linger, linger_ms);
    // A connect whose SYNs are dropped (a partition) is given up after a second and tried
    // again, instead of waiting out the kernel's SYN back-off (up to a minute between tries),
    // so the head is reached within a second of the network healing.
    socket.set(zmq::sockopt::connect_timeout, 1000);
    if (!routing_id.empty()) socket.set(zmq::sockopt::routing_id, routing_id);
    if (options_.curve.has_value()) {
      VLLM_RETURN_IF_ERROR(ipc::MakeCurveClient(socket, *options_.curve));
    }
    try {
      socket.connect(address);
    } catch (const zmq::error_t& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot connect to '", address.substr(0, 256), "': ", e.what()));
    }
    return socket;
  }

  // Polled while the handshake waits: a Stop() ends it.
  absl::Status HandshakeCheck() const {
    return stop_.load() ? absl::CancelledError("stopped during the handshake") : absl::OkStatus();
  }

  // HELLO → CONFIG with every frontend (the addresses given, then the peers API server 0's
  // CONFIG names), build the engine, READY (or FAILED) to each.
  absl::Status Handshake() {
    const int64_t deadline =
        ipc::MonoNowNs() + absl::ToInt64Nanoseconds(options_.handshake_timeout);
    std::vector<std::string> addresses = {options_.handshake_address};
    for (const std::string& a : options_.extra_handshake_addresses) {
      if (std::find(addresses.begin(), addresses.end(), a) == addresses.end()) {
        addresses.push_back(a);
      }
    }
    for (size_t i = 0; i < addresses.size(); ++i) {
      VLLM_ASSIGN_OR_RETURN(std::vector<std::string> peers, JoinFrontend(addresses[i], deadline));
      for (std::string& peer : peers) {
        if (addresses.size() < kMaxFrontends &&
            std::find(addresses.begin(), addresses.end(), peer) == addresses.end()) {
          addresses.push_back(std::move(peer));
        }
      }
    }
    if (!coordinator_.coordinator_stats.empty()) {
      auto connect = [this](zmq::socket_type type, const std::string& address) {
        return Connect(type, 0, address);
      };
      VLLM_ASSIGN_OR_RETURN(
          dp_, DpEngineCoreProc::Connect(options_.engine_index, coordinator_, connect));
    }
    // From here the output thread sends heartbeats, also while the model loads.
    output_thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "vllm-ec-output");  // output queue → PUSH
      OutputLoop();
    });

    absl::StatusOr<std::unique_ptr<EngineCore>> engine = options_.make_engine();
    std::string kind, payload;
    if (engine.ok()) {
      engine_ = std::move(*engine);
      sleep_ = std::make_unique<EngineSleep>(*engine_);
      kind = "READY";
      payload = EncodeReady({options_.engine_index, engine_->num_gpu_blocks(),
                             engine_->scheduler().config().model.max_model_len});
    } else {
      kind = "FAILED";
      payload = EncodeHandshakeMessage(engine.status().ToString());
    }
    auto check = [this] { return HandshakeCheck(); };
    for (auto& f : frontends_) {
      std::vector<zmq::message_t> reply;
      reply.push_back(Msg(kind));
      reply.push_back(Msg(payload));
      VLLM_RETURN_IF_ERROR(
          ipc::SendMultipart(*f->handshake, reply, deadline, kPollSlice, check, "READY"));
    }
    return engine.status();
  }

  // HELLO → CONFIG with the frontend at `address`; connects its input (REGISTER sent) and
  // output sockets. Returns the other frontends its CONFIG names.
  absl::StatusOr<std::vector<std::string>> JoinFrontend(const std::string& address,
                                                        int64_t deadline) {
    const bool tcp = absl::StartsWith(address, "tcp://");
    absl::StatusOr<zmq::socket_t> connected = Connect(zmq::socket_type::dealer, 1000, address);
    if (!connected.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the frontend: ", connected.status().message(),
                       tcp ? " (check --data-parallel-address and --data-parallel-rpc-port)" : ""));
    }
    auto f = std::make_unique<Frontend>();
    f->handshake_address = address;
    f->handshake.emplace(std::move(*connected));
    zmq::socket_t& hs = *f->handshake;
    auto check = [this] { return HandshakeCheck(); };
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown");
    std::vector<zmq::message_t> out;
    out.push_back(Msg("HELLO"));
    out.push_back(
        Msg(EncodeHello({options_.engine_index, options_.data_parallel_size, std::string(host)})));
    std::vector<zmq::message_t> parts;
    absl::Status asked = ipc::SendMultipart(hs, out, deadline, kPollSlice, check, "HELLO");
    if (asked.ok()) {
      asked = ipc::RecvMultipart(hs, parts, 2, deadline, kPollSlice, check, "CONFIG");
    }
    if (absl::IsDeadlineExceeded(asked)) {
      absl::Status unanswered = absl::DeadlineExceededError(absl::StrCat(
          "no answer from the frontend at ", address, " within ",
          absl::FormatDuration(options_.handshake_timeout),
          tcp ? " (check --data-parallel-address and --data-parallel-rpc-port, that the head "
                "node runs, and --cluster-key-file on both sides)"
              : ""));
      if (tcp) MarkHeadLoss(unanswered, HeadLoss::kUnanswered);
      return unanswered;
    }
    VLLM_RETURN_IF_ERROR(asked);
    if (parts.size() == 2 && parts[0].to_string_view() == "REJECT") {
      absl::StatusOr<std::string> why = DecodeHandshakeMessage(parts[1].to_string_view());
      return absl::FailedPreconditionError(absl::StrCat(
          "the frontend at ", address, " refused data-parallel engine ", options_.engine_index,
          ": ", why.ok() ? *why : absl::StrCat("(unreadable: ", why.status().message(), ")")));
    }
    if (parts.size() != 2 || parts[0].to_string_view() != "CONFIG") {
      return absl::DataLossError("engine handshake: expected CONFIG from the frontend");
    }
    VLLM_ASSIGN_OR_RETURN(EngineAddresses addresses, DecodeAddresses(parts[1].to_string_view()));
    if (coordinator_.coordinator_stats.empty()) {  // every API server names the same one
      coordinator_.coordinator_stats = addresses.coordinator_stats;
      coordinator_.coordinator_waves = addresses.coordinator_waves;
      coordinator_.coordinator_report_key = addresses.coordinator_report_key;
    }

    VLLM_ASSIGN_OR_RETURN(zmq::socket_t input,
                          Connect(zmq::socket_type::dealer, 0, addresses.input,
                                  absl::StrCat("engine-", options_.engine_index)));
    f->input.emplace(std::move(input));
    // Registers our routing id with the frontend's ROUTER before READY: a ROUTER send to an
    // identity whose connection is still being set up fails with EHOSTUNREACH (it is
    // router_mandatory), so the frontend waits for this frame (vLLM sends b"" likewise).
    {
      std::vector<zmq::message_t> hello;
      hello.push_back(Msg("REGISTER"));
      VLLM_RETURN_IF_ERROR(
          ipc::SendMultipart(*f->input, hello, deadline, kPollSlice, check, "input registration"));
    }
    // Linger: deliver the last outputs (and 'F') on exit.
    VLLM_ASSIGN_OR_RETURN(zmq::socket_t output,
                          Connect(zmq::socket_type::push, 2000, addresses.output));
    f->output.emplace(std::move(output));
    f->last_input_ns = ipc::MonoNowNs();
    frontends_.push_back(std::move(f));
    return std::move(addresses.peers);
  }

  // Reads every frontend's input socket; requests remember which frontend sent them.
  void InputLoop() {
    std::vector<zmq::pollitem_t> items;
    for (auto& f : frontends_) {
      items.push_back({static_cast<void*>(*f->input), 0, ZMQ_POLLIN, 0});
    }
    zmq::socket_t* waves = dp_ != nullptr ? dp_->wave_socket() : nullptr;
    if (waves != nullptr) items.push_back({static_cast<void*>(*waves), 0, ZMQ_POLLIN, 0});
    std::vector<zmq::message_t> parts;
    const int64_t frontend_timeout_ns = absl::ToInt64Nanoseconds(options_.frontend_timeout);
    // The silence counts from now: joining (the model load, the KV cache) may have taken longer
    // than the timeout, and the frontend's heartbeats only start once the engine is ready.
    for (auto& f : frontends_) f->last_input_ns = ipc::MonoNowNs();
    while (!stop_.load()) {
      try {
        zmq::poll(items, std::chrono::milliseconds(absl::ToInt64Milliseconds(kPollSlice)));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR)
          spdlog::warn("engine {}: input poll: {}", options_.engine_index, e.what());
        continue;
      }
      const int64_t now = ipc::MonoNowNs();
      if (waves != nullptr && (items.back().revents & ZMQ_POLLIN)) {
        if (std::optional<DpWave> wave = dp_->ReceiveWave(); wave.has_value()) {
          absl::MutexLock lock(&mu_);
          inputs_.push_back({0, Input(*wave)});
          wake_ = true;
        }
      }
      for (size_t i = 0; i < frontends_.size(); ++i) {
        Frontend& f = *frontends_[i];
        if ((items[i].revents & ZMQ_POLLIN) == 0) {
          if (frontend_timeout_ns > 0 && now - f.last_input_ns > frontend_timeout_ns) {
            FrontendLost(f.handshake_address);
            return;
          }
          continue;
        }
        absl::Status s =
            ipc::RecvMultipart(*f.input, parts, 2, now, kPollSlice, nullptr, "engine input");
        if (absl::IsDeadlineExceeded(s)) continue;
        f.last_input_ns = ipc::MonoNowNs();
        if (!s.ok()) {
          spdlog::warn("engine {}: dropped an input frame: {}", options_.engine_index,
                       s.ToString());
          continue;
        }
        if (parts.size() == 2 && parts[0].size() == 1 &&
            *parts[0].data<uint8_t>() == static_cast<uint8_t>(EngineCoreRequestType::kHeartbeat)) {
          continue;  // the frontend is alive; nothing else to do
        }
        absl::StatusOr<Input> input = Decode(parts);
        if (!input.ok()) {
          std::optional<std::string> id;
          if (parts.size() == 2 && parts[0].size() == 1 &&
              *parts[0].data<uint8_t>() == static_cast<uint8_t>(EngineCoreRequestType::kAdd)) {
            id = RecoverRequestId(parts[1].to_string_view());
          }
          if (!id.has_value()) {
            spdlog::warn("engine {}: dropped an input frame: {}", options_.engine_index,
                         input.status().ToString());
            continue;
          }
          input = Input(UndecodableRequest{std::move(*id), input.status()});
        }
        absl::MutexLock lock(&mu_);
        inputs_.push_back({i, std::move(*input)});
        wake_ = true;
      }
    }
  }

  static absl::StatusOr<Input> Decode(const std::vector<zmq::message_t>& parts) {
    if (parts.size() != 2 || parts[0].size() != 1) {
      return absl::DataLossError("expected [type, payload]");
    }
    const auto type = static_cast<EngineCoreRequestType>(*parts[0].data<uint8_t>());
    const std::string_view payload = parts[1].to_string_view();
    switch (type) {
      case EngineCoreRequestType::kAdd: {
        VLLM_ASSIGN_OR_RETURN(EngineCoreRequest r, DecodeEngineCoreRequest(payload));
        return Input(std::move(r));
      }
      case EngineCoreRequestType::kAbort: {
        VLLM_ASSIGN_OR_RETURN(std::vector<std::string> ids, DecodeAbortRequests(payload));
        return Input(std::move(ids));
      }
      case EngineCoreRequestType::kStartDpWave: {
        VLLM_ASSIGN_OR_RETURN(StartDpWave w, DecodeStartDpWave(payload));
        return Input(w);
      }
      case EngineCoreRequestType::kUtility: {
        VLLM_ASSIGN_OR_RETURN(auto oh,
                              wire::UnpackBounded({parts[1].data<uint8_t>(), parts[1].size()}));
        const msgpack::object& o = oh.get();
        if (o.type != msgpack::type::ARRAY || o.via.array.size < 2) {
          return absl::DataLossError("utility call: expected [call_id, method, ...]");
        }
        UtilityCall call;
        VLLM_ASSIGN_OR_RETURN(call.call_id,
                              wire::ConvertAs<uint64_t>(o.via.array.ptr[0], "call_id"));
        VLLM_ASSIGN_OR_RETURN(call.method,
                              wire::ConvertAs<std::string>(o.via.array.ptr[1], "method"));
        if (o.via.array.size >= 3 && o.via.array.ptr[2].type == msgpack::type::BIN) {
          call.args.assign(o.via.array.ptr[2].via.bin.ptr, o.via.array.ptr[2].via.bin.size);
        }
        return Input(std::move(call));
      }
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("unknown request type ", static_cast<int>(type)));
    }
  }

  // The frontend sent nothing (not even a heartbeat) for frontend_timeout: the main loop ends
  // with an error, so the process exits and its launcher can start a fresh engine that joins
  // the head again.
  void FrontendLost(const std::string& address) {
    const absl::Status lost = absl::UnavailableError(absl::StrCat(
        "the frontend at ", address, " sent nothing for ",
        absl::FormatDuration(options_.frontend_timeout), ": taking the head node as gone"));
    spdlog::error("engine {}: {}", options_.engine_index, std::string(lost.message()));
    absl::MutexLock lock(&mu_);
    lost_ = lost;
    MarkHeadLoss(lost_, HeadLoss::kSilent);
    stop_.store(true);
    wake_ = true;
  }

  // Applies queued inputs; waits for some when the engine has nothing to do.
  void TakeInputs() {
    std::deque<FromFrontend> inputs;
    {
      absl::MutexLock lock(&mu_);
      if (!CanStep() && !InWave()) {
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return wake_; };
        mu_.AwaitWithTimeout(absl::Condition(&ready), kPollSlice);
      }
      wake_ = false;
      inputs.swap(inputs_);
    }
    for (FromFrontend& input : inputs) Apply(input.frontend, input.input);
  }

  // Tells frontend `frontend` that request `id` ended at once with an error.
  void Reject(size_t frontend, const std::string& id, const absl::Status& why) {
    EngineCoreOutputs outs;
    outs.engine_index = options_.engine_index;
    EngineCoreOutput& o = outs.outputs.emplace_back();
    o.request_id = id;
    o.finish_reason = FinishReason::kError;
    outs.finished_requests.push_back(id);
    spdlog::warn("engine {}: request {} rejected: {}", options_.engine_index, id, why.ToString());
    Send({kOutputKindOutputs, Encode(outs), frontend});
  }

  void Apply(size_t frontend, Input& input) {
    if (auto* r = std::get_if<EngineCoreRequest>(&input)) {
      if (!sleep_->Hold(frontend, *r)) AddRequest(frontend, std::move(*r));
    } else if (auto* bad = std::get_if<UndecodableRequest>(&input)) {
      Reject(frontend, bad->request_id, bad->why);
    } else if (auto* ids = std::get_if<std::vector<std::string>>(&input)) {
      engine_->AbortRequests(*ids);
      sleep_->DropHeld(*ids);
      for (const std::string& id : *ids) frontend_of_.erase(id);
    } else if (auto* call = std::get_if<UtilityCall>(&input)) {
      absl::Status status;
      std::string result;
      if (call->method == "reset_prefix_cache") {
        result = Pack(engine_->scheduler().ResetPrefixCache());
      } else if (call->method == "sleep") {
        std::optional<absl::Status> answer =
            sleep_->Sleep(frontend, call->call_id, call->args, [this]() { AbortAllRequests(); });
        if (!answer.has_value()) return;  // answered by MaybeFinishSleep once drained
        status = *answer;
        result = Pack(true);
      } else if (call->method == "wake_up") {
        absl::StatusOr<bool> awake = WakeUp(call->args);
        status = awake.status();
        result = Pack(awake.value_or(false));
      } else if (call->method == "is_sleeping") {
        result = Pack(sleep_->sleeping());
      } else if (call->method == "ping") {
        result = Pack(true);
      } else {
        status =
            absl::InvalidArgumentError(absl::StrCat("unknown utility method '", call->method, "'"));
      }
      SendUtilityReply(frontend, call->call_id, status, result);
    } else if (auto* wave = std::get_if<DpWave>(&input)) {
      if (dp_ != nullptr) dp_->ApplyWave(*wave);
    }
    // StartDpWave on the input socket: our engines take waves from the coordinator only.
  }

  void AddRequest(size_t frontend, EngineCoreRequest request) {
    const std::string id = request.request_id;
    if (absl::Status s = engine_->AddRequest(std::move(request)); !s.ok()) {
      Reject(frontend, id, s);
    } else if (frontends_.size() > 1) {
      frontend_of_[id] = frontend;
    }
  }

  void SendUtilityReply(size_t frontend, uint64_t call_id, const absl::Status& status,
                        const std::string& result) {
    Send({kOutputKindUtility,
          Pack(call_id, static_cast<int32_t>(status.code()), std::string(status.message()),
               msgpack::type::raw_ref(result.data(), static_cast<uint32_t>(result.size()))),
          frontend});
  }

  // Sleep mode=abort (core/engine_sleep.h): every request ends, finish_reason "abort", and
  // its frontend is told (vLLM's _send_abort_outputs).
  void AbortAllRequests() {
    const std::vector<std::string> running = engine_->scheduler().RequestIds();
    engine_->AbortRequests(running);
    std::vector<std::pair<std::string, size_t>> ids;  // with the frontend to tell
    for (const std::string& id : running) {
      auto it = frontend_of_.find(id);
      ids.emplace_back(id, it == frontend_of_.end() ? 0 : it->second);
      if (it != frontend_of_.end()) frontend_of_.erase(it);
    }
    for (EngineSleep::Held& held : sleep_->TakeHeld()) {
      ids.emplace_back(held.second.request_id, held.first);
    }
    if (ids.empty()) return;
    std::vector<EngineCoreOutputs> outs(frontends_.size());
    for (const auto& [id, f] : ids) {
      EngineCoreOutput& o = outs[f].outputs.emplace_back();
      o.request_id = id;
      o.finish_reason = FinishReason::kAbort;
      outs[f].finished_requests.push_back(id);
    }
    for (size_t f = 0; f < outs.size(); ++f) {
      if (outs[f].outputs.empty()) continue;
      outs[f].engine_index = options_.engine_index;
      Send({kOutputKindOutputs, Encode(outs[f]), f});
    }
    spdlog::info("engine {}: sleep aborted {} requests", options_.engine_index, ids.size());
  }

  // The "wake_up" utility; fully awake: the requests held while paused go to the scheduler,
  // and a sleep that still waited is answered Aborted.
  absl::StatusOr<bool> WakeUp(const std::string& args) {
    std::vector<EngineSleep::Held> resumed;
    std::optional<EngineSleep::Pending> cancelled;
    VLLM_ASSIGN_OR_RETURN(bool awake, sleep_->WakeUp(args, &resumed, &cancelled));
    if (cancelled.has_value()) {
      SendUtilityReply(cancelled->frontend, cancelled->call_id,
                       absl::AbortedError("woken up before the requests finished"), Pack(false));
    }
    for (auto& [frontend, request] : resumed) AddRequest(frontend, std::move(request));
    return awake;
  }

  // A sleep that waited for the requests to finish: answered once they have.
  void MaybeFinishSleep() {
    if (auto done = sleep_->MaybeFinish()) {
      SendUtilityReply(done->first.frontend, done->first.call_id, done->second, Pack(true));
    }
  }

  // The engine has requests to step and is neither paused nor asleep.
  bool CanStep() { return engine_->scheduler().HasRequests() && sleep_->may_step(); }

  // Lockstep and some engine has work: this engine steps even without work of its own.
  bool InWave() const { return dp_ != nullptr && dp_->InWave(); }

  // The engine's figures to the DP coordinator (if any) when DpEngineCoreProc says so.
  void MaybeReport() {
    if (dp_ == nullptr) return;
    if (std::optional<std::string> report = dp_->MaybeReport(engine_->scheduler())) {
      Send({kOutputKindOutputs, std::move(*report), kCoordinator});
    }
  }

  absl::Status MainLoop() {
    spdlog::info("engine {}: ready ({} KV blocks)", options_.engine_index,
                 engine_->num_gpu_blocks());
    while (!stop_.load()) {
      TakeInputs();
      MaybeFinishSleep();
      MaybeReport();
      if (!CanStep()) {
        // vLLM runs no dummy batch while the executor sleeps.
        if (InWave() && !engine_->executor_sleeping()) {
          // Lockstep: another engine has work, so this one steps too.
          if (absl::Status s = dp_->DummyStep(engine_->executor()); !s.ok())
            return ReportExecutorFailure(s);
          continue;
        }
        // Idle: a worker that dies now must still take the engine down at once, or the
        // server would look healthy until the next request fails.
        if (absl::Status health = engine_->executor().CheckHealth(); !health.ok()) {
          return ReportExecutorFailure(health);
        }
        continue;
      }
      absl::StatusOr<EngineCore::StepResult> step = engine_->RunOneStep();
      if (!step.ok()) return ReportExecutorFailure(step.status());
      if (step->outputs.has_value()) SendStepOutputs(*step->outputs);
      MaybeFinishSleep();
      MaybeReport();
      // Lockstep: a step that ran nothing (requests waiting for KV space) still steps the
      // model, as vLLM's busy loop does.
      if (!step->model_executed && InWave()) {
        if (absl::Status s = dp_->DummyStep(engine_->executor()); !s.ok())
          return ReportExecutorFailure(s);
      }
    }
    absl::MutexLock lock(&mu_);
    return lost_;  // OK unless the frontend was lost
  }

  // EXECUTOR_FAILED: tells every client, then the main loop goes down with `status`.
  absl::Status ReportExecutorFailure(const absl::Status& status) {
    spdlog::error("engine {}: {}", options_.engine_index, status.ToString());
    Send({kOutputKindFailed,
          Pack(options_.engine_index, static_cast<int32_t>(status.code()),
               std::string(status.message())),
          kAllFrontends});
    return status;
  }

  // Outputs for requests always go out. A step without any (e.g. the one that tells the
  // workers about aborted requests) still goes out when its gauges differ from the last ones
  // sent (otherwise a client's /metrics would show the aborted requests running forever) or
  // its counters, which cover this step only, are not zero.
  bool ShouldSend(const EngineCoreOutputs& outs) {
    bool send = !outs.outputs.empty() || !outs.finished_requests.empty();
    if (outs.scheduler_stats.has_value()) {
      const SchedulerStats& s = *outs.scheduler_stats;
      send = send || s.num_running_reqs != last_sent_stats_.num_running_reqs ||
             s.num_waiting_reqs != last_sent_stats_.num_waiting_reqs ||
             s.kv_cache_usage != last_sent_stats_.kv_cache_usage || s.num_preemptions != 0 ||
             s.prefix_cache_stats != PrefixCacheStats{} ||
             s.structured_output_stats != structured_output::StructuredOutputStats{} ||
             !s.spec_decoding_stats.empty();
      if (send) last_sent_stats_ = s;
    }
    return send;
  }

  // One frontend: the step's outputs as they are (when ShouldSend). Several: each frontend
  // gets the outputs of its own requests, with the step's figures (which every frontend's
  // balancer needs) — a frontend without outputs in this step only when ShouldSend says the
  // figures are worth sending.
  void SendStepOutputs(EngineCoreOutputs& outs) {
    const bool figures = ShouldSend(outs);
    if (frontends_.size() == 1) {
      if (figures) Send({kOutputKindOutputs, Encode(outs), 0});
      return;
    }
    std::vector<EngineCoreOutputs> split(frontends_.size());
    for (EngineCoreOutputs& part : split) {
      part.engine_index = outs.engine_index;
      part.scheduler_stats = outs.scheduler_stats;
      part.timestamp = outs.timestamp;
      part.wave_complete = outs.wave_complete;
      part.start_wave = outs.start_wave;
    }
    auto owner = [this](const std::string& id) -> size_t {
      auto it = frontend_of_.find(id);
      return it == frontend_of_.end() ? 0 : it->second;
    };
    for (EngineCoreOutput& o : outs.outputs) {
      const size_t f = owner(o.request_id);
      split[f].outputs.push_back(std::move(o));
    }
    for (std::string& id : outs.finished_requests) {
      const size_t f = owner(id);
      frontend_of_.erase(id);
      split[f].finished_requests.push_back(std::move(id));
    }
    for (size_t f = 0; f < split.size(); ++f) {
      if (figures || !split[f].outputs.empty() || !split[f].finished_requests.empty()) {
        Send({kOutputKindOutputs, Encode(split[f]), f});
      }
    }
  }

  void Send(Output output) {
    absl::MutexLock lock(&out_mu_);
    outputs_.push_back(std::move(output));
  }

  void OutputLoop() {
    while (true) {
      std::deque<Output> batch;
      {
        absl::MutexLock lock(&out_mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(out_mu_) {
          return !outputs_.empty() || output_done_;
        };
        if (!out_mu_.AwaitWithTimeout(absl::Condition(&ready), options_.heartbeat_interval)) {
          // A second without anything to send: tell the frontend this engine is alive.
          outputs_.push_back(
              {kOutputKindHeartbeat, EncodeHeartbeat(options_.engine_index), kAllFrontends});
        }
        if (outputs_.empty() && output_done_) return;
        batch.swap(outputs_);
      }
      for (Output& o : batch) {
        if (o.frontend == kCoordinator) {
          dp_->SendReport(o.payload);
          continue;
        }
        for (size_t f = 0; f < frontends_.size(); ++f) {
          if (o.frontend != kAllFrontends && o.frontend != f) continue;
          std::vector<zmq::message_t> parts;
          parts.push_back(Msg(std::string_view(&o.kind, 1)));
          parts.push_back(Msg(o.payload));
          absl::Status s =
              ipc::SendMultipart(*frontends_[f]->output, parts,
                                 ipc::MonoNowNs() + absl::ToInt64Nanoseconds(absl::Seconds(30)),
                                 kPollSlice, nullptr, "engine output");
          if (!s.ok()) {
            spdlog::error("engine {}: output to {} lost: {}", options_.engine_index,
                          frontends_[f]->handshake_address, s.ToString());
          }
        }
      }
    }
  }

  void StopThreads() {
    stop_.store(true);
    if (input_thread_.joinable()) input_thread_.join();
    {
      absl::MutexLock lock(&out_mu_);
      output_done_ = true;
    }
    if (output_thread_.joinable()) output_thread_.join();
    if (engine_) engine_->Shutdown();
  }

  const EngineCoreProcOptions options_;
  std::atomic<bool> stop_{false};
  std::unique_ptr<EngineCore> engine_;  // main loop only
  SchedulerStats last_sent_stats_;      // main loop only
  // The API servers, fixed after the handshake: input sockets are the input thread's, output
  // sockets the output thread's.
  std::vector<std::unique_ptr<Frontend>> frontends_;
  // With several frontends: the frontend of each request in the engine (main loop only).
  absl::flat_hash_map<std::string, size_t> frontend_of_;
  // The DP coordinator's addresses from the first CONFIG (coordinator_stats empty: none), and
  // the DP part of the engine when there is one (fixed after the handshake; each of its
  // members belongs to the thread its header names).
  EngineAddresses coordinator_;
  std::unique_ptr<DpEngineCoreProc> dp_;
  std::thread input_thread_, output_thread_;

  absl::Mutex mu_;
  std::deque<FromFrontend> inputs_ ABSL_GUARDED_BY(mu_);
  absl::Status lost_ ABSL_GUARDED_BY(mu_);  // the frontend went silent (FrontendLost)
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<EngineSleep> sleep_;  // the main loop's; made with engine_

  absl::Mutex out_mu_;
  std::deque<Output> outputs_ ABSL_GUARDED_BY(out_mu_);
  bool output_done_ ABSL_GUARDED_BY(out_mu_) = false;
};

HeadLoss HeadLossOf(const absl::Status& status) {
  const absl::optional<absl::Cord> loss = status.GetPayload(kHeadLossPayload);
  if (!loss.has_value()) return HeadLoss::kNone;
  return *loss == "silent" ? HeadLoss::kSilent : HeadLoss::kUnanswered;
}

EngineCoreProc::EngineCoreProc(EngineCoreProcOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
EngineCoreProc::~EngineCoreProc() = default;
absl::Status EngineCoreProc::Run() { return impl_->Run(); }
void EngineCoreProc::Stop() { impl_->Stop(); }

}  // namespace vllm::core
