#include "executor/multiproc_executor.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "config/config_codec.h"
#include "core/codec.h"
#include "executor/child_process.h"
#include "ipc/curve.h"
#include "ipc/ipc_address.h"
#include "ipc/zmq_util.h"
#include "kernels/comm/group_spec.h"
#include "worker/worker_proc.h"
#include "worker/worker_protocol.h"
#if VLLM_HAVE_CUDA
#include "kernels/cuda/nccl_communicator.h"
#endif

namespace vllm::executor {
namespace {

// Why process `pid` of this node cannot run, from /proc/<pid>/stat's state letter: stopped
// (SIGSTOP, a debugger), in uninterruptible sleep, or a zombie; nullopt when it can (or is gone).
std::optional<std::string> NotRunning(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  const size_t paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= stat.size()) return std::nullopt;
  switch (stat[paren + 2]) {
    case 'T':
      return "is stopped (by a signal such as SIGSTOP)";
    case 't':
      return "is stopped by a debugger";
    case 'D':
      return "is in uninterruptible sleep (state D)";
    case 'Z':
      return "has exited (a zombie)";
    default:
      return std::nullopt;
  }
}

absl::StatusOr<std::string> DefaultWorkerBinary() {
  VLLM_ASSIGN_OR_RETURN(const std::string self, SelfExecutable());
  return (std::filesystem::path(self).parent_path() / "vllm-launch").string();
}

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

MultiprocExecutor::MultiprocExecutor(const MultiprocExecutorOptions& options)
    : options_(options),
      launcher_(options.launcher != nullptr ? *options.launcher : RealProcessLauncher()) {}

absl::StatusOr<std::unique_ptr<MultiprocExecutor>> MultiprocExecutor::Create(
    const MultiprocExecutorOptions& options) {
  VLLM_RETURN_IF_ERROR(options.config.Validate());
  std::unique_ptr<MultiprocExecutor> executor(new MultiprocExecutor(options));
  if (absl::Status s = executor->Start(); !s.ok()) {
    executor->KillAndReap();
    return s;
  }
  return executor;
}

MultiprocExecutor::~MultiprocExecutor() { Shutdown(); }

absl::StatusOr<std::string> MultiprocExecutor::BindReady(zmq::socket_t& pull,
                                                         ipc::ScopedIpcAddress& file) {
  const config::ParallelConfig& parallel = options_.config.parallel;
  pull.set(zmq::sockopt::linger, 0);
  std::string address;
  if (parallel.nnodes_within_dp() > 1) {
    // Ranks on other nodes report here: a free port of the head's --master-addr.
    pull.set(zmq::sockopt::maxmsgsize, int64_t{1} << 20);
    if (curve_.has_value()) VLLM_RETURN_IF_ERROR(ipc::MakeCurveServer(pull, *curve_));
    const bool v6 = bind_host_.find(':') != std::string::npos;
    if (v6) pull.set(zmq::sockopt::ipv6, 1);
    address =
        v6 ? absl::StrCat("tcp://[", bind_host_, "]:*") : absl::StrCat("tcp://", bind_host_, ":*");
  } else {
    // A private socket file, removed once every worker's ready message (sent over its
    // connection) has arrived, or when Start() returns.
    VLLM_ASSIGN_OR_RETURN(file, ipc::ScopedIpcAddress::Create("ready"));
    address = file.address();
  }
  // ipc::BindEndpoint: the ":*" port follows VLLM_PORT when it is set.
  VLLM_ASSIGN_OR_RETURN(const std::string bound, ipc::BindEndpoint(pull, address));
  if (parallel.nnodes_within_dp() > 1) address = bound;
  return address;
}

absl::StatusOr<std::vector<std::string>> MultiprocExecutor::MakeCommGroups() {
  const config::ParallelConfig& parallel = options_.config.parallel;
  const int32_t tp_size = parallel.tensor_parallel_size;
  std::vector<std::string> comm_specs(parallel.pipeline_parallel_size);
  if (tp_size == 1) return comm_specs;
  using Backend = kernels::comm::CommGroupSpec::Backend;
  const bool gloo = parallel.comm_backend == config::CommBackend::kGloo;
  for (int32_t stage = 0; stage < parallel.pipeline_parallel_size; ++stage) {
    const int32_t first_node = parallel.node_of_rank(stage * tp_size);
    const int32_t last_node = parallel.node_of_rank(stage * tp_size + tp_size - 1);
    kernels::comm::CommGroupOptions group_options;
    Backend backend = gloo ? Backend::kGloo : Backend::kShm;
    if (first_node != last_node) {
      // The group spans nodes: gloo over TCP, its rendezvous on a store of this process.
      backend = Backend::kGloo;
      group_options.store_host = bind_host_;
      group_options.curve = curve_;
    } else if (first_node != 0) {
      continue;  // the group is on one other node: that node makes it
    }
    VLLM_ASSIGN_OR_RETURN(auto group,
                          kernels::comm::CommGroup::Create(backend, tp_size, group_options));
    comm_specs[stage] = group->spec().Encode();
    groups_.push_back(std::move(group));
  }
  return comm_specs;
}

absl::Status MultiprocExecutor::Start() {
  const config::ParallelConfig& parallel = options_.config.parallel;
  const int32_t tp = parallel.world_size();
  const bool multi_node = parallel.nnodes_within_dp() > 1;
  const absl::Time deadline = absl::Now() + options_.startup_timeout;
  if (!options_.cluster_key_file.empty()) {
    VLLM_ASSIGN_OR_RETURN(curve_, ipc::LoadCurveKeyFile(options_.cluster_key_file));
  }
  if (multi_node) {
    if (options_.config.device.device == config::Device::kCuda) {
      return absl::InvalidArgumentError(
          "--nnodes above 1 runs on the CPU backend so far (--device cpu); CUDA across nodes is "
          "not verified yet");
    }
    // ZMQ binds addresses, not names: --master-addr may be this node's host name.
    absl::StatusOr<std::string> numeric = ipc::NumericHost(parallel.master_addr);
    if (!numeric.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--master-addr ", parallel.master_addr, ": ", numeric.status().message()));
    }
    bind_host_ = *numeric;
    NodeServerOptions node_options;
    node_options.config = options_.config;
    node_options.bind_host = bind_host_;
    node_options.curve = curve_;
    node_options.heartbeat_timeout = options_.node_heartbeat_timeout;
    VLLM_ASSIGN_OR_RETURN(nodes_, NodeServer::Bind(node_options));
  }
  zmq::socket_t pull(ipc::ZmqContext(), zmq::socket_type::pull);
  ipc::ScopedIpcAddress ready_endpoint;
  VLLM_ASSIGN_OR_RETURN(const std::string ready_address, BindReady(pull, ready_endpoint));

  ipc::MessageQueueOptions bo;
  bo.n_readers = static_cast<uint32_t>(tp);
  bo.max_chunks = options_.broadcast_chunks;
  bo.max_chunk_bytes = options_.broadcast_chunk_bytes;
  if (multi_node) {
    // This node's ranks read the ring; the others subscribe over TCP at --master-addr.
    std::vector<int32_t> local(parallel.local_world_size());
    for (int32_t r = 0; r < parallel.local_world_size(); ++r) local[r] = r;
    bo.local_reader_ranks = std::move(local);
    bo.remote_host = bind_host_;
    bo.remote_curve = curve_;
  }
  VLLM_ASSIGN_OR_RETURN(broadcast_, ipc::MessageQueueWriter::Create(bo));
  VLLM_ASSIGN_OR_RETURN(const std::vector<std::string> comm_specs, MakeCommGroups());
  // GPUs with TP > 1: the NCCL id, made before any process exists (a failure leaves none).
  std::string nccl_id;
  bool device_init = false;
  if (tp > 1) {
    // The engine factory resolved the device (never kAuto here).
    VLLM_RETURN_IF_ERROR(worker::CheckResolvedDevice(options_.config.device.device));
    device_init = options_.config.device.device == config::Device::kCuda;
  }
  if (device_init) {
#if VLLM_HAVE_CUDA
    if (worker::VisibleCudaDevices() == 0) {
      return absl::InvalidArgumentError(
          "--device cuda: no CUDA device is visible (check the driver and CUDA_VISIBLE_DEVICES, "
          "or choose --device cpu)");
    }
    VLLM_ASSIGN_OR_RETURN(nccl_id, kernels::cuda::NewNcclUniqueId());
#else
    return absl::InvalidArgumentError(
        "--device cuda: this build has no CUDA backend (configure with -DVLLM_CUDA=ON, or choose "
        "--device cpu)");
#endif
  }
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  if (stop_fd_ < 0) return absl::InternalError(absl::StrCat("eventfd: ", strerror(errno)));
  {
    absl::MutexLock lock(&mu_);
    exited_.assign(tp, false);
    responses_.resize(tp);
  }
  stage_handles_.assign(tp, "");
  rank_pids_.assign(tp, 0);
  if (nodes_ != nullptr) {
    NodeConfig node_config;
    node_config.engine_config = config::EncodeVllmConfig(options_.config);
    node_config.broadcast_handle = broadcast_->handle().ToText();
    node_config.ready_address = ready_address;
    node_config.comm_specs = comm_specs;
    node_config.startup_timeout_ms = absl::ToInt64Milliseconds(options_.startup_timeout);
    VLLM_RETURN_IF_ERROR(
        nodes_->AwaitNodes(std::move(node_config), deadline, [] { return absl::OkStatus(); }));
  }
  VLLM_RETURN_IF_ERROR(SpawnWorkers(ready_address, comm_specs));
  monitor_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "vllm-exec-mon");  // reaps workers, reports deaths
    MonitorLoop();
  });
  if (device_init) VLLM_RETURN_IF_ERROR(SendDeviceInit(pull, nccl_id, deadline));
  VLLM_RETURN_IF_ERROR(AwaitReady(pull, deadline));
  ready_endpoint.Release();
  VLLM_RETURN_IF_ERROR(Explain(broadcast_->WaitUntilReady(deadline)));
  for (auto& r : responses_) VLLM_RETURN_IF_ERROR(Explain(r->WaitUntilReady(deadline)));
  if (parallel.pipeline_parallel_size > 1) VLLM_RETURN_IF_ERROR(LinkStages(deadline));
  return absl::OkStatus();
}

absl::Status MultiprocExecutor::LinkStages(absl::Time deadline) {
  const int32_t tp = options_.config.parallel.tensor_parallel_size;
  for (size_t rank = 0; rank < stage_handles_.size(); ++rank) {
    const bool last = static_cast<int32_t>(rank) >= output_rank();
    if (stage_handles_[rank].empty() != last) {
      return absl::InternalError(
          absl::StrFormat("worker rank %d (pipeline stage %d) %s a queue to the next stage", rank,
                          rank / tp, last ? "reported" : "did not report"));
    }
  }
  const std::string payload = worker::EncodeStageHandles(stage_handles_);
  absl::Status s =
      CollectiveRpc(worker::kInitPipelineMethod, payload, deadline - absl::Now()).status();
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("linking the pipeline stages: ", s.message()));
  }
  return s;
}

absl::Status MultiprocExecutor::SpawnWorkers(const std::string& ready_address,
                                             const std::vector<std::string>& comm_specs) {
  std::string binary = options_.worker_binary;
  if (binary.empty()) {
    VLLM_ASSIGN_OR_RETURN(binary, DefaultWorkerBinary());
  }
  if (!launcher_.IsExecutable(binary)) {
    return absl::NotFoundError(absl::StrCat("worker binary ", binary, " is not executable"));
  }
  const config::ParallelConfig& parallel = options_.config.parallel;
  for (int32_t rank = 0; rank < parallel.local_world_size(); ++rank) {
    worker::WorkerProcOptions w;
    w.rank = rank;
    w.broadcast_handle = broadcast_->handle().ToText();
    w.ready_address = ready_address;
    w.comm_spec = comm_specs[rank / options_.config.parallel.tensor_parallel_size];
    w.parent_pid = getpid();
    w.startup_timeout = options_.startup_timeout;
    if (parallel.nnodes_within_dp() > 1) w.node_address = bind_host_;
    w.cluster_key_file = options_.cluster_key_file;
    std::vector<std::string> args = {binary, worker::kWorkerProcSubcommand};
    for (std::string& f : worker::ToWorkerProcFlags(w)) args.push_back(std::move(f));
    // The config travels whole on a pipe the worker inherits as descriptor 3.
    VLLM_ASSIGN_OR_RETURN(const int config_fd, config::MakeConfigPipe(options_.config));
    absl::StatusOr<ProcessLauncher::Child> child = launcher_.Spawn(args, config_fd);
    close(config_fd);
    if (!child.ok()) {
      return absl::Status(child.status().code(), absl::StrCat("cannot start worker rank ", rank,
                                                              ": ", child.status().message()));
    }
    pids_.push_back(child->pid);
    pidfds_.push_back(child->exit_fd);
    rank_pids_[rank] = child->pid;
  }
  return absl::OkStatus();
}

absl::Status MultiprocExecutor::SendDeviceInit(zmq::socket_t& pull, const std::string& nccl_id,
                                               absl::Time deadline) {
  // Workers attach to the queue first thing, so this waits for processes to start, not to load.
  absl::Status s = Explain(broadcast_->WaitUntilReady(deadline));
  if (s.ok()) s = Broadcast(worker::kInitDeviceMethod, Bytes(nccl_id), /*reply_rank=*/-1).status();
  return s.ok() ? s : StartupErrorOr(pull, s);
}

absl::Status MultiprocExecutor::StartupErrorOr(zmq::socket_t& pull, absl::Status status) {
  const absl::Time until = absl::Now() + absl::Seconds(1);
  while (absl::Now() < until) {
    zmq::pollitem_t item = {pull.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(50));
    if ((item.revents & ZMQ_POLLIN) == 0) continue;
    zmq::message_t message;
    if (!pull.recv(message, zmq::recv_flags::dontwait)) continue;
    absl::StatusOr<worker::ReadyMessage> ready =
        worker::DecodeReady({message.data<uint8_t>(), message.size()});
    if (ready.ok() && !ready->status().ok()) {
      return absl::Status(ready->code, absl::StrCat("worker rank ", ready->rank,
                                                    " failed to start: ", ready->message));
    }
  }
  return status;
}

absl::Status MultiprocExecutor::AwaitReady(zmq::socket_t& pull, absl::Time deadline) {
  const int32_t tp = options_.config.parallel.world_size();
  const int64_t deadline_ns = ipc::MonoNowNs() + absl::ToInt64Nanoseconds(deadline - absl::Now());
  int32_t ready = 0;
  std::vector<zmq::message_t> parts;
  auto check = [this] { return failure(); };
  while (ready < tp) {
    absl::Status s = ipc::RecvMultipart(pull, parts, 1, deadline_ns, absl::Milliseconds(20), check,
                                        "worker readiness");
    if (absl::IsDeadlineExceeded(s)) {
      std::vector<std::string> missing;
      for (int32_t r = 0; r < tp; ++r) {
        if (!attached(r))
          missing.push_back(nodes_ ? absl::StrCat(r, " (", nodes_->DescribeNodeOf(r), ")")
                                   : absl::StrCat(r));
      }
      return absl::DeadlineExceededError(
          absl::StrCat("worker rank(s) ", absl::StrJoin(missing, ", "), " not ready within ",
                       absl::FormatDuration(options_.startup_timeout)));
    }
    VLLM_RETURN_IF_ERROR(s);
    VLLM_ASSIGN_OR_RETURN(worker::ReadyMessage msg,
                          worker::DecodeReady({parts[0].data<uint8_t>(), parts[0].size()}));
    if (msg.rank < 0 || msg.rank >= tp || attached(msg.rank)) {
      return absl::InvalidArgumentError(absl::StrCat("bad ready message for rank ", msg.rank));
    }
    if (!msg.status().ok()) {
      return absl::Status(
          msg.code,
          absl::StrCat("worker rank ", msg.rank,
                       nodes_ ? absl::StrCat(" on ", nodes_->DescribeNodeOf(msg.rank)) : "",
                       " failed to start: ", msg.message));
    }
    VLLM_ASSIGN_OR_RETURN(ipc::Handle handle, ipc::Handle::FromText(msg.response_handle));
    // A rank on another node answers over TCP (CURVE when its queue requires it).
    const bool remote = handle.LocalIndex(0) < 0 && handle.remote_curve;
    VLLM_ASSIGN_OR_RETURN(auto reader, ipc::MessageQueueReader::Attach(
                                           handle, 0, {}, remote ? curve_ : std::nullopt));
    stage_handles_[msg.rank] = msg.stage_handle;
    rank_pids_[msg.rank] = static_cast<pid_t>(msg.pid);
    absl::MutexLock lock(&mu_);  // the monitor may be cancelling readers
    responses_[msg.rank] = std::move(reader);
    ++ready;
  }
  return absl::OkStatus();
}

void MultiprocExecutor::MonitorLoop() {
  const size_t n = pidfds_.size();
  std::vector<bool> done(n, false);
  size_t remaining = n;
  std::vector<zmq::pollitem_t> items;
  std::vector<size_t> index;  // items[k] watches pidfds_[index[k]]
  while (remaining > 0 || nodes_ != nullptr) {
    items.clear();
    index.clear();
    for (size_t i = 0; i < n; ++i) {
      if (done[i]) continue;
      items.push_back({nullptr, pidfds_[i], ZMQ_POLLIN, 0});
      index.push_back(i);
    }
    items.push_back({nullptr, stop_fd_, ZMQ_POLLIN, 0});
    if (nodes_ != nullptr) items.push_back({nodes_->socket().handle(), 0, ZMQ_POLLIN, 0});
    const std::chrono::milliseconds timeout(
        nodes_ != nullptr ? absl::ToInt64Milliseconds(nodes_->poll_interval()) : -1);
    try {
      zmq::poll(items.data(), items.size(), timeout);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      Fail(absl::InternalError(absl::StrCat("executor monitor: poll: ", e.what())));
      return;
    }
    if (items[index.size()].revents != 0) return;  // shutting down; KillAndReap reaps the rest
    for (size_t k = 0; k < index.size(); ++k) {
      if (items[k].revents == 0) continue;
      const size_t i = index[k];
      // Readable exit_fd: the process has ended. A failed reap still counts as an end (never
      // poll the same readable descriptor again).
      absl::StatusOr<int> reaped = launcher_.Reap(pids_[i]);
      done[i] = true;
      --remaining;
      bool expected;
      {
        absl::MutexLock lock(&mu_);
        exited_[i] = true;
        expected = stopping_;
      }
      if (!expected) {
        Fail(absl::UnavailableError(absl::StrFormat(
            "%s %s", DescribeRank(static_cast<int32_t>(i)),
            reaped.ok() ? DescribeExit(*reaped)
                        : absl::StrCat("ended (", reaped.status().message(), ")"))));
      }
    }
    if (nodes_ == nullptr) continue;
    for (NodeServer::Event& event : nodes_->Service()) {
      bool expected;
      {
        absl::MutexLock lock(&mu_);
        if (event.rank >= 0) exited_[event.rank] = true;
        expected = stopping_;
      }
      if (!expected) Fail(event.status);
    }
  }
}

std::string MultiprocExecutor::DescribeRank(int32_t rank) const {
  std::string s = absl::StrCat("worker rank ", rank);
  if (rank >= 0 && rank < static_cast<int32_t>(rank_pids_.size()) && rank_pids_[rank] > 0) {
    absl::StrAppend(&s, " (pid ", rank_pids_[rank], ")");
  }
  if (nodes_ != nullptr) absl::StrAppend(&s, " on ", nodes_->DescribeNodeOf(rank));
  return s;
}

std::string MultiprocExecutor::DescribeTimeout(const std::string& method, int32_t waited_rank,
                                               absl::string_view detail) const {
  std::string s =
      absl::StrCat(method, " timed out after ", absl::FormatDuration(options_.execute_timeout),
                   " (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS): ");
  // A rank of this node that cannot run holds every rank of its group up (they wait for it in
  // the all-reduce), so it is named rather than the rank that was waited on.
  const int32_t local = nodes_ != nullptr ? options_.config.parallel.local_world_size()
                                          : static_cast<int32_t>(rank_pids_.size());
  for (int32_t r = 0; r < std::min<int32_t>(local, rank_pids_.size()); ++r) {
    if (std::optional<std::string> why = NotRunning(rank_pids_[r]); why.has_value()) {
      absl::StrAppend(&s, DescribeRank(r), " ", *why);
      if (r != waited_rank && waited_rank >= 0) {
        absl::StrAppend(&s, ", so worker rank ", waited_rank, " did not answer");
      }
      return s;
    }
  }
  if (waited_rank >= 0) {
    absl::StrAppend(&s, DescribeRank(waited_rank), " did not answer; it may be hung");
  } else {
    absl::StrAppend(&s, "the workers did not take it: ", detail);
  }
  return s;
}

void MultiprocExecutor::Fail(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (!failure_.ok()) return;
  failure_ = status;
  // Wake every wait in progress; they report the failure (Explain).
  if (broadcast_) broadcast_->Cancel();
  for (auto& r : responses_) {
    if (r) r->Cancel();
  }
}

bool MultiprocExecutor::attached(int32_t rank) const {
  absl::MutexLock lock(&mu_);
  return responses_[rank] != nullptr;
}

absl::Status MultiprocExecutor::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

absl::Status MultiprocExecutor::Explain(const absl::Status& status) const {
  if (status.ok()) return status;
  absl::Status f = failure();
  return f.ok() ? status : f;
}

absl::StatusOr<uint64_t> MultiprocExecutor::Broadcast(const std::string& method,
                                                      absl::Span<const uint8_t> payload,
                                                      int32_t reply_rank) {
  if (shut_down_) return absl::FailedPreconditionError("executor is shut down");
  VLLM_RETURN_IF_ERROR(failure());
  const uint64_t id = next_call_id_++;
  worker::EncodeCallPrefixTo({id, method, reply_rank}, &call_prefix_);
  const ipc::ByteSpan parts[2] = {Bytes(call_prefix_), payload};
  absl::Status s = broadcast_->EnqueueParts(parts, absl::Now() + options_.execute_timeout);
  if (absl::IsDeadlineExceeded(s)) {
    Fail(absl::DeadlineExceededError(DescribeTimeout(method, -1, s.message())));
  } else if (!s.ok()) {
    Fail(s);
  }
  VLLM_RETURN_IF_ERROR(Explain(s));
  return id;
}

absl::Status MultiprocExecutor::AwaitReply(int32_t rank, uint64_t call_id,
                                           const std::string& method, absl::Time deadline,
                                           absl::FunctionRef<absl::Status(ipc::ByteSpan)> take) {
  while (true) {
    worker::ReplyHeader header;
    absl::Status taken;
    absl::Status s = responses_[rank]->Dequeue(
        [&](ipc::ByteSpan bytes) -> absl::Status {
          VLLM_ASSIGN_OR_RETURN(auto framed, worker::DecodeReply(bytes));
          header = std::move(framed.header);
          // The answer is read in place: the bytes are the ring's only during Dequeue.
          if (header.call_id == call_id && header.code == absl::StatusCode::kOk) {
            taken = take(framed.payload);
          }
          return absl::OkStatus();
        },
        deadline);
    if (absl::IsDeadlineExceeded(s)) {
      Fail(absl::DeadlineExceededError(DescribeTimeout(method, rank, "")));
    } else if (!s.ok()) {
      Fail(absl::Status(s.code(), absl::StrCat("worker rank ", rank, ": ", s.message())));
    }
    VLLM_RETURN_IF_ERROR(Explain(s));
    // A reply to an older call (left behind when that call failed on another rank).
    if (header.call_id != 0 && header.call_id < call_id) continue;
    if (!header.status().ok()) {
      return absl::Status(header.code,
                          absl::StrCat("worker rank ", rank, ": ", method, ": ", header.message));
    }
    if (header.call_id != call_id) {
      const absl::Status bad = absl::InternalError(absl::StrFormat(
          "worker rank %d answered call %d while %d was expected", rank, header.call_id, call_id));
      Fail(bad);
      return bad;
    }
    return taken;
  }
}

absl::StatusOr<std::string> MultiprocExecutor::AwaitReply(int32_t rank, uint64_t call_id,
                                                          const std::string& method,
                                                          absl::Time deadline) {
  std::string payload;
  VLLM_RETURN_IF_ERROR(AwaitReply(rank, call_id, method, deadline, [&](ipc::ByteSpan bytes) {
    payload.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return absl::OkStatus();
  }));
  return payload;
}

absl::StatusOr<std::vector<std::string>> MultiprocExecutor::CollectiveRpc(
    const std::string& method, const std::string& payload, absl::Duration timeout,
    std::optional<int32_t> unique_reply_rank) {
  const int32_t tp = options_.config.parallel.world_size();
  if (unique_reply_rank.has_value() && (*unique_reply_rank < 0 || *unique_reply_rank >= tp)) {
    return absl::InvalidArgumentError(absl::StrCat("no worker rank ", *unique_reply_rank));
  }
  VLLM_ASSIGN_OR_RETURN(uint64_t id,
                        Broadcast(method, Bytes(payload), unique_reply_rank.value_or(-1)));
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::string> replies;
  absl::Status first_error;
  for (int32_t rank = 0; rank < tp; ++rank) {
    if (unique_reply_rank.has_value() && rank != *unique_reply_rank) continue;
    absl::StatusOr<std::string> reply = AwaitReply(rank, id, method, deadline);
    if (!reply.ok()) {
      // A worker's error: still read the other ranks' replies so none is left queued.
      if (first_error.ok()) first_error = reply.status();
      if (!failure().ok()) return failure();
      continue;
    }
    replies.push_back(std::move(*reply));
  }
  VLLM_RETURN_IF_ERROR(first_error);
  return replies;
}

absl::StatusOr<core::KVCacheSpec> MultiprocExecutor::GetKVCacheSpec() {
  VLLM_ASSIGN_OR_RETURN(auto replies,
                        CollectiveRpc(worker::kGetKVCacheSpecMethod, "", options_.execute_timeout));
  core::KVCacheSpec spec;
  for (const std::string& r : replies) {
    VLLM_ASSIGN_OR_RETURN(const core::KVCacheSpec s, worker::DecodeKVCacheSpec(Bytes(r)));
    if (s.BytesPerToken() > spec.BytesPerToken()) spec = s;  // the most loaded rank
  }
  return spec;
}

absl::StatusOr<int64_t> MultiprocExecutor::DetermineAvailableMemory() {
  VLLM_ASSIGN_OR_RETURN(auto replies, CollectiveRpc(worker::kDetermineAvailableMemoryMethod, "",
                                                    options_.execute_timeout));
  int64_t available = std::numeric_limits<int64_t>::max();
  for (const std::string& r : replies) {
    VLLM_ASSIGN_OR_RETURN(const int64_t v, worker::DecodeAvailableMemory(Bytes(r)));
    available = std::min(available, v);
  }
  return available;
}

absl::Status MultiprocExecutor::InitializeKVCache(int32_t num_blocks, int32_t block_size) {
  return CollectiveRpc(worker::kInitializeKVCacheMethod,
                       worker::EncodeInitializeKVCacheArgs({num_blocks, block_size}),
                       options_.execute_timeout)
      .status();
}

absl::StatusOr<uint64_t> MultiprocExecutor::BroadcastStep(const core::SchedulerOutput& so) {
  core::EncodeTo(so, &step_bytes_);
  absl::StatusOr<uint64_t> id =
      Broadcast(worker::kExecuteModelMethod, Bytes(step_bytes_), output_rank());
  if (step_bytes_.capacity() > kMaxKeptStepBytes) std::string().swap(step_bytes_);
  return id;
}

absl::StatusOr<core::ModelRunnerOutput> MultiprocExecutor::AwaitStepOutput(uint64_t call_id) {
  core::ModelRunnerOutput out;
  absl::Status decoded;
  absl::Status s = AwaitReply(
      output_rank(), call_id, worker::kExecuteModelMethod, absl::Now() + options_.execute_timeout,
      [&](ipc::ByteSpan bytes) {
        decoded = core::DecodeModelRunnerOutputInto(
            std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), &out);
        return decoded;
      });
  if (!decoded.ok()) Fail(decoded);  // a reply this build cannot read: the worker is broken
  VLLM_RETURN_IF_ERROR(s);
  return out;
}

core::ModelOutputFuture MultiprocExecutor::ExecuteModelAsync(const core::SchedulerOutput& so) {
  absl::StatusOr<uint64_t> id = BroadcastStep(so);
  // The reply is read when the future is waited on; futures are waited on in order.
  return std::async(std::launch::deferred, [this, id]() -> absl::StatusOr<core::ModelRunnerOutput> {
    VLLM_RETURN_IF_ERROR(id.status());
    return AwaitStepOutput(*id);
  });
}

absl::Status MultiprocExecutor::ExecuteDummyBatch() {
  return CollectiveRpc(worker::kExecuteDummyBatchMethod, "", options_.execute_timeout,
                       output_rank())
      .status();
}

absl::Status MultiprocExecutor::Sleep(int32_t level) {
  return CollectiveRpc(worker::kSleepMethod, worker::EncodeSleepLevel(level),
                       options_.execute_timeout)
      .status();
}

absl::Status MultiprocExecutor::WakeUp(bool weights, bool kv_cache) {
  return CollectiveRpc(worker::kWakeUpMethod,
                       worker::EncodeWakeUpArgs({.weights = weights, .kv_cache = kv_cache}),
                       options_.startup_timeout)
      .status();
}

absl::StatusOr<core::ModelRunnerOutput> MultiprocExecutor::ExecuteModel(
    const core::SchedulerOutput& so) {
  // No future: the step's fixed cost is the encode, two ring hops and the decode.
  VLLM_ASSIGN_OR_RETURN(const uint64_t id, BroadcastStep(so));
  return AwaitStepOutput(id);
}

std::vector<pid_t> MultiprocExecutor::worker_pids() const { return pids_; }

void MultiprocExecutor::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  // Closing the queue ends every worker's loop once it has read what was sent.
  if (broadcast_) broadcast_->Close();
  auto all_exited = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    for (bool e : exited_) {
      if (!e) return false;
    }
    return true;
  };
  {
    absl::MutexLock lock(&mu_);
    // After a step timed out, a rank is stopped or hung and the others wait for it inside a
    // collective: none would drain the queue, so they are killed without the grace.
    const bool hung = absl::IsDeadlineExceeded(failure_);
    mu_.AwaitWithTimeout(absl::Condition(&all_exited),
                         hung ? absl::ZeroDuration() : options_.shutdown_timeout);
  }
  KillAndReap();
}

void MultiprocExecutor::KillAndReap() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (stop_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(stop_fd_, &one, sizeof(one));
  }
  if (monitor_.joinable()) monitor_.join();
  if (nodes_ != nullptr) {
    // The other nodes stop their ranks (those still running after the queue closed).
    const absl::Status f = failure();
    nodes_->StopAll(f.ok() ? "the engine shut down" : std::string(f.message()));
    nodes_.reset();
  }
  // Whatever the monitor did not reap is still running (or a zombie): kill and reap it.
  for (size_t i = 0; i < pids_.size(); ++i) {
    bool exited;
    {
      absl::MutexLock lock(&mu_);
      exited = i < exited_.size() && exited_[i];
    }
    if (exited) continue;
    launcher_.Kill(pids_[i], SIGKILL);
    (void)launcher_.Reap(pids_[i]);
    absl::MutexLock lock(&mu_);
    if (i < exited_.size()) exited_[i] = true;
  }
  for (int fd : pidfds_) close(fd);
  pidfds_.clear();
  if (stop_fd_ >= 0) close(stop_fd_);
  stop_fd_ = -1;
  groups_.clear();  // the workers are gone: remove what the collectives left behind
  // A worker killed before it was attached leaves its response ring's name behind.
  ipc::MessageQueueWriter::RemoveSegmentsOfDeadWriters();
  absl::MutexLock lock(&mu_);
  exited_.assign(exited_.size(), true);  // including ranks never spawned
  responses_.clear();
  broadcast_.reset();
}

}  // namespace vllm::executor
