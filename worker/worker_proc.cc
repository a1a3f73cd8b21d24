#include "worker/worker_proc.h"

#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "config/config_codec.h"
#include "core/codec.h"
#include "ipc/message_queue.h"
#include "ipc/signal_watcher.h"
#include "ipc/zmq_util.h"
#include "kernels/comm/group_spec.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "worker/stage_link.h"
#include "worker/worker_protocol.h"
#if VLLM_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/nccl_communicator.h"
#endif

namespace vllm::worker {
namespace {

absl::string_view View(std::string_view s) { return absl::string_view(s.data(), s.size()); }

template <typename T>
absl::Status ParseInt(const std::string& flag, const std::string& value, T lo, T hi, T* out) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(value, &v) || v < static_cast<int64_t>(lo) ||
      v > static_cast<int64_t>(hi)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": expected an integer in [", lo, ", ", hi, "], got '", value, "'"));
  }
  *out = static_cast<T>(v);
  return absl::OkStatus();
}

class WorkerProc {
 public:
  explicit WorkerProc(const WorkerProcOptions& options) : options_(options) {}

  int Run() {
    InstallSignalThread();
    absl::Status started = Start();
    SendReady(started);
    if (!started.ok()) {
      spdlog::error("worker rank {}: start-up failed: {}", options_.rank, started.ToString());
      return 1;
    }
    absl::Status ended = Loop();
    LogStageStats();
    if (ended.ok() || absl::IsCancelled(ended)) {
      spdlog::info("worker rank {}: shut down", options_.rank);
      return 0;
    }
    spdlog::error("worker rank {}: {}", options_.rank, ended.ToString());
    return 1;
  }

 private:
  // SIGTERM cancels the queue wait (on the SignalWatcher's thread) so the loop ends cleanly.
  // SIGINT is ignored: Ctrl-C reaches the whole process group, and the engine shuts its
  // workers down through the queue.
  void InstallSignalThread() {
    signal(SIGINT, SIG_IGN);
    auto watcher = ipc::SignalWatcher::Start({SIGTERM}, [this](int) {
      terminated_.store(true);
      if (ipc::MessageQueueReader* r = reader_.load(); r != nullptr) r->Cancel();
      if (ipc::MessageQueueReader* r = stage_reader_.load(); r != nullptr) r->Cancel();
    });
    if (watcher.ok()) {
      watcher_ = std::move(*watcher);
    } else {
      spdlog::warn("worker rank {}: {}", options_.rank, watcher.status().ToString());
    }
  }

  absl::Status Start() {
    const absl::Time deadline = absl::Now() + options_.startup_timeout;
    if (!options_.cluster_key_file.empty()) {
      VLLM_ASSIGN_OR_RETURN(curve_, ipc::LoadCurveKeyFile(options_.cluster_key_file));
    }
    VLLM_ASSIGN_OR_RETURN(ipc::Handle handle, ipc::Handle::FromText(options_.broadcast_handle));
    VLLM_ASSIGN_OR_RETURN(
        broadcast_, ipc::MessageQueueReader::Attach(handle, options_.rank, {}, CurveFor(handle)));
    reader_.store(broadcast_.get());
    ipc::MessageQueueOptions response;
    response.n_readers = 1;
    response.max_chunks = 4;
    response.max_chunk_bytes = 1 << 20;
    // The executor runs on node 0: from any other node it reads this rank's answers over TCP.
    if (options_.config.parallel.node_of_rank(options_.rank) != 0) RemoteReaders(response);
    VLLM_ASSIGN_OR_RETURN(response_, ipc::MessageQueueWriter::Create(response));
    // Rank = pp_rank × TP + tp_rank; the collectives run within the stage's TP group.
    const int32_t tp = options_.config.parallel.tensor_parallel_size;
    const int32_t pp_rank = options_.rank / tp;
    kernels::Communicator* comm = &single_rank_;
    if (tp > 1) {
      VLLM_ASSIGN_OR_RETURN(kernels::comm::CommGroupSpec spec,
                            kernels::comm::CommGroupSpec::Decode(options_.comm_spec));
      kernels::comm::CommOptions comm_options;
      comm_options.hostname = options_.node_address;
      comm_options.curve = curve_;
      VLLM_ASSIGN_OR_RETURN(group_, kernels::comm::JoinGroup(spec, options_.rank % tp,
                                                             deadline - absl::Now(), comm_options));
      comm = group_.get();
    }
    VLLM_RETURN_IF_ERROR(InitDevice(deadline));
    VLLM_ASSIGN_OR_RETURN(worker_, Worker::Create(options_.config, comm, DeviceComm(), pp_rank));
    worker_->set_cluster_key_file(options_.cluster_key_file);
    if (pp_rank + 1 < options_.config.parallel.pipeline_parallel_size) {
      ipc::MessageQueueOptions stage;
      const config::ParallelConfig& p = options_.config.parallel;
      if (p.node_of_rank(options_.rank + tp) != p.node_of_rank(options_.rank)) {
        RemoteReaders(stage);  // the next stage is on another node
      }
      VLLM_ASSIGN_OR_RETURN(stage_writer_, CreateStageQueue(StageLimits().max_num_tokens,
                                                            StageLimits().hidden_size, stage));
    }
    if (terminated_.load()) return absl::CancelledError("SIGTERM during start-up");
    return absl::OkStatus();
  }

  // A queue whose reader is on another node: TCP on this node's address, CURVE with the key.
  void RemoteReaders(ipc::MessageQueueOptions& o) const {
    o.local_reader_ranks = std::vector<int32_t>{};
    o.remote_host = options_.node_address;
    o.remote_curve = curve_;
  }

  // The key to attach to `handle` with: the cluster key when this side reads over TCP from a
  // writer that requires CURVE (ipc/message_queue.h), else none.
  std::optional<ipc::CurveKeys> CurveFor(const ipc::Handle& handle, int32_t rank) const {
    if (handle.LocalIndex(rank) >= 0 || !handle.remote_curve) return std::nullopt;
    return curve_;
  }
  std::optional<ipc::CurveKeys> CurveFor(const ipc::Handle& handle) const {
    return CurveFor(handle, options_.rank);
  }

  // The NCCL group InitDevice formed, or null (CPU, or a group of one).
  kernels::cuda::DeviceCommunicator* DeviceComm() const {
#if VLLM_HAVE_CUDA
    return nccl_.get();
#else
    return nullptr;
#endif
  }

  // On CUDA: makes GPU `rank` current (of those CUDA_VISIBLE_DEVICES leaves visible) and, with
  // TP > 1, reads the NCCL id from the executor's first broadcast call (init_device) and joins
  // the NCCL group before the model loads. Nothing on the CPU.
  absl::Status InitDevice(absl::Time deadline) {
    // The engine factory resolved the device (never kAuto here).
    VLLM_RETURN_IF_ERROR(CheckResolvedDevice(options_.config.device.device));
    if (options_.config.device.device != Device::kCuda) return absl::OkStatus();
#if VLLM_HAVE_CUDA
    int count = 0;
    if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
      cudaGetLastError();
      return absl::FailedPreconditionError(absl::StrCat(
          "--device cuda: no usable GPU (cudaGetDeviceCount: ", cudaGetErrorString(e), ")"));
    }
    // Data-parallel engines on one node take consecutive blocks of GPUs.
    const int32_t gpu = options_.config.parallel.local_device_index(options_.rank);
    if (gpu >= count) {
      const char* visible = getenv("CUDA_VISIBLE_DEVICES");
      return absl::FailedPreconditionError(
          absl::StrFormat("rank %d of data-parallel engine %d needs GPU %d but only %d %s visible "
                          "(CUDA_VISIBLE_DEVICES=%s)",
                          options_.rank, options_.config.parallel.data_parallel_rank, gpu, count,
                          count == 1 ? "is" : "are", visible ? visible : "unset"));
    }
    if (cudaError_t e = cudaSetDevice(gpu); e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("cudaSetDevice(", gpu, "): ", cudaGetErrorString(e)));
    }
    if (options_.world_size() == 1) return absl::OkStatus();  // Worker uses a single-rank group
    VLLM_RETURN_IF_ERROR(broadcast_->WaitUntilReady(deadline));
    broadcast_ready_ = true;
    std::string nccl_id;
    VLLM_RETURN_IF_ERROR(broadcast_->Dequeue(
        [&](ipc::ByteSpan bytes) -> absl::Status {
          VLLM_ASSIGN_OR_RETURN(auto framed, DecodeCall(bytes));
          if (framed.header.method != kInitDeviceMethod) {
            return absl::FailedPreconditionError(absl::StrCat("expected ", kInitDeviceMethod,
                                                              " as the first call, got '",
                                                              framed.header.method, "'"));
          }
          nccl_id.assign(reinterpret_cast<const char*>(framed.payload.data()),
                         framed.payload.size());
          return absl::OkStatus();
        },
        deadline));
    VLLM_ASSIGN_OR_RETURN(
        nccl_, kernels::cuda::NcclCommunicator::Create(
                   nccl_id, options_.rank, options_.world_size(), deadline - absl::Now()));
    spdlog::info("worker rank {}: NCCL group of {} formed on GPU {}", options_.rank,
                 options_.world_size(), options_.config.parallel.local_device_index(options_.rank));
    return absl::OkStatus();
#else
    (void)deadline;
    return absl::FailedPreconditionError(
        "--device cuda: this build has no CUDA backend (configure with -DVLLM_CUDA=ON)");
#endif
  }

  void SendReady(const absl::Status& status) {
    ReadyMessage ready;
    ready.rank = options_.rank;
    ready.pid = getpid();
    ready.code = status.code();
    ready.message = std::string(status.message());
    if (status.ok()) ready.response_handle = response_->handle().ToText();
    if (status.ok() && stage_writer_ != nullptr)
      ready.stage_handle = stage_writer_->handle().ToText();
    const std::string bytes = EncodeReady(ready);
    try {
      zmq::socket_t push(ipc::ZmqContext(), zmq::socket_type::push);
      push.set(zmq::sockopt::linger, 2000);  // deliver before the process exits
      if (curve_.has_value() && options_.ready_address.rfind("tcp://", 0) == 0) {
        if (absl::Status s = ipc::MakeCurveClient(push, *curve_); !s.ok()) {
          spdlog::error("worker rank {}: {}", options_.rank, s.ToString());
        }
      }
      push.connect(options_.ready_address);
      push.send(zmq::buffer(bytes), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      spdlog::error("worker rank {}: cannot report readiness to {}: {}", options_.rank,
                    options_.ready_address, e.what());
    }
  }

  absl::Status Loop() {
    const absl::Time deadline = absl::Now() + options_.startup_timeout;
    VLLM_RETURN_IF_ERROR(response_->WaitUntilReady(deadline));
    if (!broadcast_ready_) VLLM_RETURN_IF_ERROR(broadcast_->WaitUntilReady(deadline));
    spdlog::info("worker rank {} (pid {}): ready", options_.rank, getpid());
    while (true) {
      absl::Status status;
      VLLM_RETURN_IF_ERROR(broadcast_->Dequeue([&](ipc::ByteSpan bytes) {
        status = Take(bytes);  // a malformed call is answered with its error
        return absl::OkStatus();
      }));
      result_.clear();
      if (status.ok()) status = Dispatch(&result_);
      const bool reply =
          !status.ok() || header_.reply_rank < 0 || header_.reply_rank == options_.rank;
      if (reply) {
        EncodeReplyPrefixTo(
            {header_.call_id, options_.rank, status.code(), std::string(status.message())},
            &reply_prefix_);
        const ipc::ByteSpan parts[2] = {
            {reinterpret_cast<const uint8_t*>(reply_prefix_.data()), reply_prefix_.size()},
            {reinterpret_cast<const uint8_t*>(result_.data()), result_.size()}};
        VLLM_RETURN_IF_ERROR(response_->EnqueueParts(parts));
      }
      if (status.ok() && header_.method == kShutdownMethod) return absl::OkStatus();
      if (result_.capacity() > kMaxKeptBytes) std::string().swap(result_);
      if (payload_.capacity() > kMaxKeptBytes) std::string().swap(payload_);
    }
  }

  // Decodes a call in place (the bytes live in shared memory only during Dequeue) into
  // header_ and step_ (execute_model) or payload_ (every other method).
  absl::Status Take(ipc::ByteSpan bytes) {
    auto framed = DecodeCall(bytes);
    if (!framed.ok()) {
      header_ = CallHeader();
      return framed.status();
    }
    header_ = std::move(framed->header);
    const auto& p = framed->payload;
    if (header_.method == kExecuteModelMethod) {
      return core::DecodeSchedulerOutputInto(
          std::string_view(reinterpret_cast<const char*>(p.data()), p.size()), &step_);
    }
    payload_.assign(reinterpret_cast<const char*>(p.data()), p.size());
    return absl::OkStatus();
  }

  absl::Status Dispatch(std::string* result) {
    const std::string& method = header_.method;
    const ipc::ByteSpan payload(reinterpret_cast<const uint8_t*>(payload_.data()), payload_.size());
    if (method == kExecuteModelMethod) {
      VLLM_ASSIGN_OR_RETURN(const core::ModelRunnerOutput out, worker_->ExecuteModel(step_));
      core::EncodeTo(out, result);
      return absl::OkStatus();
    }
    if (method == kGetKVCacheSpecMethod) {
      VLLM_RETURN_IF_ERROR(CheckEmptyPayload(payload, method));
      *result = EncodeKVCacheSpec(worker_->GetKVCacheSpec());
      return absl::OkStatus();
    }
    if (method == kDetermineAvailableMemoryMethod) {
      VLLM_RETURN_IF_ERROR(CheckEmptyPayload(payload, method));
      VLLM_ASSIGN_OR_RETURN(const int64_t available, worker_->DetermineAvailableMemory());
      *result = EncodeAvailableMemory(available);
      return absl::OkStatus();
    }
    if (method == kInitializeKVCacheMethod) {
      VLLM_ASSIGN_OR_RETURN(const InitializeKVCacheArgs args, DecodeInitializeKVCacheArgs(payload));
      return worker_->InitializeKVCache(args.num_blocks, args.block_size);
    }
    if (method == kExecuteDummyBatchMethod) {
      VLLM_RETURN_IF_ERROR(CheckEmptyPayload(payload, method));
      return worker_->ExecuteDummyBatch();
    }
    if (method == kInitPipelineMethod) {
      VLLM_ASSIGN_OR_RETURN(const std::vector<std::string> handles, DecodeStageHandles(payload));
      return LinkStages(handles);
    }
    if (method == kSleepMethod) {
      VLLM_ASSIGN_OR_RETURN(const int32_t level, DecodeSleepLevel(payload));
      return worker_->Sleep(level);
    }
    if (method == kWakeUpMethod) {
      VLLM_ASSIGN_OR_RETURN(const WakeUpArgs args, DecodeWakeUpArgs(payload));
      return worker_->WakeUp(args.weights, args.kv_cache);
    }
    if (method == kEchoMethod) {
      *result = payload_;
      return absl::OkStatus();
    }
    if (method == kShutdownMethod) return CheckEmptyPayload(payload, method);
    return absl::InvalidArgumentError(absl::StrCat("unknown worker method '", method, "'"));
  }

  // Where this worker's time went (docs/BENCHMARKS.md reads these lines; stage 0 without PP).
  void LogStageStats() const {
    // Every worker process: with PP the stages' balance, without it how much of the time between
    // steps the engine leaves the workers idle (what async scheduling could fill).
    if (worker_ == nullptr) return;
    const ModelRunner::StageStats& st = worker_->runner().stage_stats();
    if (st.steps == 0) return;
    const double span_s = static_cast<double>(st.last_step_end_ns - st.first_step_ns) * 1e-9;
    const double per_step_ms = 1e-6 / static_cast<double>(st.steps);
    spdlog::info(
        "worker rank {} (pipeline stage {}): {} steps, busy {:.1f} % of the {:.2f} s from the "
        "first to the last; per step: computing {:.3f} ms, receiving {:.3f} ms, sending {:.3f} ms "
        "({:.0f} bytes)",
        options_.rank, options_.rank / options_.config.parallel.tensor_parallel_size, st.steps,
        100.0 * st.busy_fraction(), span_s, static_cast<double>(st.busy_ns) * per_step_ms,
        static_cast<double>(st.receive_ns) * per_step_ms,
        static_cast<double>(st.send_ns) * per_step_ms,
        static_cast<double>(st.bytes_sent) / static_cast<double>(st.steps));
  }

  StageFrameLimits StageLimits() const {
    StageFrameLimits limits;
    limits.hidden_size = worker_->model_config().hidden_size;
    limits.num_layers = worker_->model_config().num_hidden_layers;
    limits.max_num_tokens = options_.config.scheduler.max_num_batched_tokens;
    return limits;
  }

  // init_pipeline: attaches to the previous stage's queue (the same TP rank, one stage back),
  // waits until both of this rank's stage queues are connected, and links the runner to them.
  absl::Status LinkStages(const std::vector<std::string>& handles) {
    const int32_t tp = options_.config.parallel.tensor_parallel_size;
    if (stage_link_ != nullptr) return absl::FailedPreconditionError("stages are linked already");
    if (static_cast<int32_t>(handles.size()) != options_.world_size()) {
      return absl::InvalidArgumentError(absl::StrFormat("init_pipeline: %d handles for %d ranks",
                                                        handles.size(), options_.world_size()));
    }
    const absl::Time deadline = absl::Now() + options_.startup_timeout;
    if (options_.rank >= tp) {
      VLLM_ASSIGN_OR_RETURN(const ipc::Handle handle,
                            ipc::Handle::FromText(handles[options_.rank - tp]));
      VLLM_ASSIGN_OR_RETURN(stage_reader_owned_,
                            ipc::MessageQueueReader::Attach(handle, 0, {}, CurveFor(handle, 0)));
      stage_reader_.store(stage_reader_owned_.get());
      if (terminated_.load()) stage_reader_owned_->Cancel();
    }
    if (stage_writer_ != nullptr) VLLM_RETURN_IF_ERROR(stage_writer_->WaitUntilReady(deadline));
    if (stage_reader_owned_ != nullptr) {
      VLLM_RETURN_IF_ERROR(stage_reader_owned_->WaitUntilReady(deadline));
    }
    stage_link_ = std::make_unique<QueueStageLink>(stage_reader_owned_.get(), stage_writer_.get(),
                                                   StageLimits());
    worker_->runner().SetStageLinks(stage_reader_owned_ ? stage_link_.get() : nullptr,
                                    stage_writer_ ? stage_link_.get() : nullptr);
    spdlog::info("worker rank {}: pipeline stage {} of {} linked", options_.rank,
                 options_.rank / tp, options_.config.parallel.pipeline_parallel_size);
    return absl::OkStatus();
  }

  const WorkerProcOptions options_;
  // The call being answered, and the buffers reused from call to call (one grown past
  // kMaxKeptBytes is released after use).
  static constexpr size_t kMaxKeptBytes = size_t{4} << 20;
  CallHeader header_;
  core::SchedulerOutput step_;  // execute_model's argument
  std::string payload_;         // every other method's
  std::string result_;
  std::string reply_prefix_;
  std::optional<ipc::CurveKeys> curve_;  // from --cluster-key-file
  std::atomic<bool> terminated_{false};
  std::atomic<ipc::MessageQueueReader*> reader_{nullptr};
  std::unique_ptr<ipc::MessageQueueReader> broadcast_;
  std::unique_ptr<ipc::MessageQueueWriter> response_;
  kernels::SingleRankCommunicator single_rank_;
  std::unique_ptr<kernels::Communicator> group_;
  bool broadcast_ready_ = false;  // WaitUntilReady done (InitDevice does it early)
#if VLLM_HAVE_CUDA
  std::unique_ptr<kernels::cuda::NcclCommunicator> nccl_;  // cuda with TP > 1
#endif
  std::unique_ptr<Worker> worker_;
  // Pipeline parallelism: the queue to the next stage (stages before the last), the one from
  // the previous stage (stages after the first) and the runner's link over them.
  std::unique_ptr<ipc::MessageQueueWriter> stage_writer_;
  std::unique_ptr<ipc::MessageQueueReader> stage_reader_owned_;
  std::atomic<ipc::MessageQueueReader*> stage_reader_{nullptr};
  std::unique_ptr<QueueStageLink> stage_link_;
  std::unique_ptr<ipc::SignalWatcher> watcher_;  // declared last: stops first
};

}  // namespace

std::vector<std::string> ToWorkerProcFlags(const WorkerProcOptions& o) {
  std::vector<std::string> f = {"--rank",
                                absl::StrCat(o.rank),
                                "--broadcast-handle",
                                o.broadcast_handle,
                                "--ready-address",
                                o.ready_address,
                                "--parent-pid",
                                absl::StrCat(o.parent_pid),
                                "--startup-timeout-s",
                                absl::StrCat(absl::ToInt64Seconds(o.startup_timeout)),
                                "--config-fd",
                                absl::StrCat(config::kConfigFd)};
  if (!o.comm_spec.empty()) {
    f.push_back("--comm-spec");
    f.push_back(o.comm_spec);
  }
  if (o.node_address != WorkerProcOptions().node_address) {
    f.push_back("--node-address");
    f.push_back(o.node_address);
  }
  if (!o.cluster_key_file.empty()) {
    f.push_back("--cluster-key-file");
    f.push_back(o.cluster_key_file);
  }
  return f;
}

absl::StatusOr<WorkerProcOptions> ParseWorkerProcFlags(const std::vector<std::string>& flags) {
  WorkerProcOptions o;
  bool have_rank = false, have_handle = false, have_ready = false, have_parent = false;
  int32_t config_fd = -1;
  for (size_t i = 0; i < flags.size(); i += 2) {
    const std::string& flag = flags[i];
    if (i + 1 >= flags.size()) return absl::InvalidArgumentError(flag + ": missing value");
    const std::string& v = flags[i + 1];
    if (flag == "--rank") {
      VLLM_RETURN_IF_ERROR(ParseInt<int32_t>(flag, v, 0, 1 << 16, &o.rank));
      have_rank = true;
    } else if (flag == "--broadcast-handle") {
      o.broadcast_handle = v;
      have_handle = true;
    } else if (flag == "--ready-address") {
      o.ready_address = v;
      have_ready = true;
    } else if (flag == "--parent-pid") {
      VLLM_RETURN_IF_ERROR(ParseInt<int64_t>(flag, v, 1, int64_t{1} << 40, &o.parent_pid));
      have_parent = true;
    } else if (flag == "--config-fd") {
      VLLM_RETURN_IF_ERROR(ParseInt<int32_t>(flag, v, 0, 1 << 20, &config_fd));
    } else if (flag == "--comm-spec") {
      o.comm_spec = v;
    } else if (flag == "--node-address") {
      if (v.empty() || v.size() > 255) {
        return absl::InvalidArgumentError("--node-address: expected 1 to 255 characters");
      }
      o.node_address = v;
    } else if (flag == "--cluster-key-file") {
      o.cluster_key_file = v;
    } else if (flag == "--startup-timeout-s") {
      int64_t s = 0;
      VLLM_RETURN_IF_ERROR(ParseInt<int64_t>(flag, v, 1, 86400, &s));
      o.startup_timeout = absl::Seconds(s);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", View(flag), "'"));
    }
  }
  if (!have_rank || !have_handle || !have_ready || !have_parent || config_fd < 0) {
    return absl::InvalidArgumentError(
        "worker-proc needs --rank, --broadcast-handle, --ready-address, --parent-pid and "
        "--config-fd");
  }
  VLLM_ASSIGN_OR_RETURN(o.config, config::ReadVllmConfigFd(config_fd));
  if (o.rank >= o.world_size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--rank %d must be below the world size %d (the config's tensor × pipeline parallel size)",
        o.rank, o.world_size()));
  }
  if (o.config.parallel.tensor_parallel_size > 1 && o.comm_spec.empty()) {
    return absl::InvalidArgumentError(
        "--comm-spec is required when the tensor parallel size is above 1");
  }
  return o;
}

int RunWorkerProc(const WorkerProcOptions& options) {
  // stdout belongs to whoever started the engine; logs go to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt(absl::StrCat("worker-", options.rank)));
  // Die with the executor, even by kill -9; then make sure it did not die before this line.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != options.parent_pid) {
    spdlog::error("worker rank {}: parent {} is gone", options.rank, options.parent_pid);
    return 1;
  }
  WorkerProc proc(options);
  return proc.Run();
}

}  // namespace vllm::worker
