#include "config/config_codec.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "ipc/msgpack_fields.h"
#include "ipc/msgpack_util.h"

namespace vllm::config {
namespace {

using ipc::wire::FieldReader;
using ipc::wire::Packer;

constexpr std::string_view kTag = "VllmConfig";
// Longest enum spelling and host name accepted on the wire.
constexpr size_t kMaxNameBytes = 255;

void PackString(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

// Reads a string field and parses it with `parse` (an enum's Parse*), naming the field.
template <typename E, typename Parse>
absl::Status ReadEnum(FieldReader& r, std::string_view field, Parse parse, E* out) {
  std::string name;
  VLLM_RETURN_IF_ERROR(r.String(field, kMaxNameBytes, &name));
  absl::StatusOr<E> value = parse(name);
  if (!value.ok()) return r.Error(field, std::string(value.status().message()));
  *out = *value;
  return absl::OkStatus();
}

absl::Status ReadModel(const msgpack::object& o, ModelConfig* m) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "VllmConfig.model", 5));
  std::string path;
  VLLM_RETURN_IF_ERROR(r.String("model", kMaxPathBytes, &path));
  m->model = path;
  VLLM_RETURN_IF_ERROR(r.Int("max_model_len", &m->max_model_len));
  VLLM_RETURN_IF_ERROR(ReadEnum(r, "dtype", ParseModelDType, &m->dtype));
  VLLM_RETURN_IF_ERROR(r.Int("seed", &m->seed));
  return r.Bool("enforce_eager", &m->enforce_eager);
}

absl::Status ReadCache(const msgpack::object& o, CacheConfig* c) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "VllmConfig.cache", 5));
  VLLM_RETURN_IF_ERROR(r.Int("block_size", &c->block_size));
  VLLM_RETURN_IF_ERROR(r.Bool("enable_prefix_caching", &c->enable_prefix_caching));
  VLLM_RETURN_IF_ERROR(r.Int("kv_cache_memory_bytes", &c->kv_cache_memory_bytes));
  VLLM_RETURN_IF_ERROR(r.Double("gpu_memory_utilization", &c->gpu_memory_utilization));
  return r.OptionalInt("num_gpu_blocks_override", &c->num_gpu_blocks_override);
}

absl::Status ReadParallel(const msgpack::object& o, ParallelConfig* p) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "VllmConfig.parallel", 10));
  VLLM_RETURN_IF_ERROR(r.Int("tensor_parallel_size", &p->tensor_parallel_size));
  VLLM_RETURN_IF_ERROR(r.Int("pipeline_parallel_size", &p->pipeline_parallel_size));
  VLLM_RETURN_IF_ERROR(r.Int("data_parallel_size", &p->data_parallel_size));
  VLLM_RETURN_IF_ERROR(r.Int("data_parallel_size_local", &p->data_parallel_size_local));
  VLLM_RETURN_IF_ERROR(r.Int("data_parallel_start_rank", &p->data_parallel_start_rank));
  VLLM_RETURN_IF_ERROR(r.Int("data_parallel_rank", &p->data_parallel_rank));
  VLLM_RETURN_IF_ERROR(r.String("data_parallel_address", kMaxNameBytes, &p->data_parallel_address));
  VLLM_RETURN_IF_ERROR(r.Int("data_parallel_rpc_port", &p->data_parallel_rpc_port));
  VLLM_RETURN_IF_ERROR(ReadEnum(r, "distributed_executor_backend", ParseExecutorBackend,
                                &p->distributed_executor_backend));
  return ReadEnum(r, "comm_backend", ParseCommBackend, &p->comm_backend);
}

absl::Status ReadScheduler(const msgpack::object& o, SchedulerConfig* s) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "VllmConfig.scheduler", 5));
  VLLM_RETURN_IF_ERROR(r.Int("max_num_seqs", &s->max_num_seqs));
  VLLM_RETURN_IF_ERROR(r.Int("max_num_batched_tokens", &s->max_num_batched_tokens));
  VLLM_RETURN_IF_ERROR(r.Bool("enable_chunked_prefill", &s->enable_chunked_prefill));
  VLLM_RETURN_IF_ERROR(r.Int("long_prefill_token_threshold", &s->long_prefill_token_threshold));
  return ReadEnum(r, "scheduling_policy", ParseSchedulingPolicy, &s->policy);
}

absl::Status ReadDevice(const msgpack::object& o, DeviceConfig* d) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "VllmConfig.device", 1));
  return ReadEnum(r, "device", ParseDevice, &d->device);
}

absl::Status ReadLoad(const msgpack::object& o, LoadConfig* l) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "VllmConfig.load", 1));
  return ReadEnum(r, "load_format", ParseLoadFormat, &l->load_format);
}

absl::Status ReadKvEvents(const msgpack::object& o, ipc::KvEventsConfig* k) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "VllmConfig.kv_events", 8));
  VLLM_RETURN_IF_ERROR(r.Bool("enable_kv_cache_events", &k->enable));
  VLLM_RETURN_IF_ERROR(r.String("publisher", kMaxNameBytes, &k->publisher));
  if (k->publisher != "null" && k->publisher != "zmq") {
    return r.Error("publisher", "expected \"null\" or \"zmq\"");
  }
  VLLM_RETURN_IF_ERROR(r.String("endpoint", ipc::kMaxKvEventsEndpointBytes, &k->endpoint));
  VLLM_RETURN_IF_ERROR(
      r.OptionalString("replay_endpoint", ipc::kMaxKvEventsEndpointBytes, &k->replay_endpoint));
  const auto bounded = [&r](std::string_view field, int64_t lo, int64_t hi,
                            int64_t* out) -> absl::Status {
    VLLM_RETURN_IF_ERROR(r.Int(field, out));
    if (*out < lo || *out > hi) {
      return r.Error(field, absl::StrFormat("%d outside [%d, %d]", *out, lo, hi));
    }
    return absl::OkStatus();
  };
  VLLM_RETURN_IF_ERROR(bounded("buffer_steps", 0, ipc::kMaxKvEventsBufferSteps, &k->buffer_steps));
  VLLM_RETURN_IF_ERROR(bounded("hwm", 0, std::numeric_limits<int32_t>::max(), &k->hwm));
  VLLM_RETURN_IF_ERROR(
      bounded("max_queue_size", 1, ipc::kMaxKvEventsQueueSize, &k->max_queue_size));
  return r.String("topic", ipc::kMaxKvEventsTopicBytes, &k->topic);
}

}  // namespace

std::string EncodeVllmConfig(const VllmConfig& c) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(9);
  PackString(pk, kTag);
  pk.pack(kVllmConfigVersion);
  pk.pack_array(5);
  PackString(pk, c.model.model.native());
  pk.pack(c.model.max_model_len);
  PackString(pk, ModelDTypeName(c.model.dtype));
  pk.pack(c.model.seed);
  pk.pack(c.model.enforce_eager);
  pk.pack_array(5);
  pk.pack(c.cache.block_size);
  pk.pack(c.cache.enable_prefix_caching);
  pk.pack(c.cache.kv_cache_memory_bytes);
  ipc::wire::PackDouble(pk, c.cache.gpu_memory_utilization);
  ipc::wire::PackOptional(pk, c.cache.num_gpu_blocks_override);
  const ParallelConfig& p = c.parallel;
  pk.pack_array(10);
  pk.pack(p.tensor_parallel_size);
  pk.pack(p.pipeline_parallel_size);
  pk.pack(p.data_parallel_size);
  pk.pack(p.data_parallel_size_local);
  pk.pack(p.data_parallel_start_rank);
  pk.pack(p.data_parallel_rank);
  PackString(pk, p.data_parallel_address);
  pk.pack(p.data_parallel_rpc_port);
  PackString(pk, ExecutorBackendName(p.distributed_executor_backend));
  PackString(pk, CommBackendName(p.comm_backend));
  const SchedulerConfig& s = c.scheduler;
  pk.pack_array(5);
  pk.pack(s.max_num_seqs);
  pk.pack(s.max_num_batched_tokens);
  pk.pack(s.enable_chunked_prefill);
  pk.pack(s.long_prefill_token_threshold);
  PackString(pk, SchedulingPolicyName(s.policy));
  pk.pack_array(1);
  PackString(pk, DeviceName(c.device.device));
  pk.pack_array(1);
  PackString(pk, LoadFormatName(c.load.load_format));
  const ipc::KvEventsConfig& k = c.kv_events;
  pk.pack_array(8);
  pk.pack(k.enable);
  PackString(pk, k.publisher);
  PackString(pk, k.endpoint);
  if (k.replay_endpoint.has_value()) {
    PackString(pk, *k.replay_endpoint);
  } else {
    pk.pack_nil();
  }
  pk.pack(k.buffer_steps);
  pk.pack(k.hwm);
  pk.pack(k.max_queue_size);
  PackString(pk, k.topic);
  return std::string(buf.data(), buf.size());
}

absl::StatusOr<VllmConfig> DecodeVllmConfig(std::string_view bytes) {
  if (bytes.size() > kMaxEncodedConfigBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "VllmConfig: %d bytes exceeds the limit of %d", bytes.size(), kMaxEncodedConfigBytes));
  }
  ipc::UnpackLimits limits;
  limits.max_array = 16;
  limits.max_map = 0;
  limits.max_str = kMaxPathBytes;
  limits.max_bin = 0;
  limits.max_depth = 2;
  absl::StatusOr<msgpack::object_handle> handle = ipc::UnpackBounded(
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
      limits);
  if (!handle.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("VllmConfig: ", handle.status().message()));
  }
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(handle->get(), "VllmConfig", 9));
  std::string tag;
  VLLM_RETURN_IF_ERROR(r.String("tag", kMaxNameBytes, &tag));
  if (tag != kTag) return r.Error("tag", absl::StrCat("expected 'VllmConfig', got '", tag, "'"));
  uint8_t version = 0;
  VLLM_RETURN_IF_ERROR(r.Int("version", &version));
  if (version != kVllmConfigVersion) {
    return r.Error("version",
                   absl::StrFormat("%d, this build reads %d", version, kVllmConfigVersion));
  }
  VllmConfig c;
  VLLM_RETURN_IF_ERROR(ReadModel(r.Next(), &c.model));
  VLLM_RETURN_IF_ERROR(ReadCache(r.Next(), &c.cache));
  VLLM_RETURN_IF_ERROR(ReadParallel(r.Next(), &c.parallel));
  VLLM_RETURN_IF_ERROR(ReadScheduler(r.Next(), &c.scheduler));
  VLLM_RETURN_IF_ERROR(ReadDevice(r.Next(), &c.device));
  VLLM_RETURN_IF_ERROR(ReadLoad(r.Next(), &c.load));
  VLLM_RETURN_IF_ERROR(ReadKvEvents(r.Next(), &c.kv_events));
  if (absl::Status s = c.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("VllmConfig: ", s.message()));
  }
  return c;
}

absl::StatusOr<int> MakeConfigPipe(const VllmConfig& config) {
  const std::string bytes = EncodeVllmConfig(config);
  if (bytes.size() > kMaxEncodedConfigBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the engine config encodes to %d bytes, over the limit of %d", bytes.size(),
                        kMaxEncodedConfigBytes));
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", strerror(errno)));
  }
  // The whole config must fit the pipe now: nobody reads it until the child runs. A pipe
  // holds 64 KiB by default; ask for that much in case a pipe quota left it at one page.
  (void)fcntl(fds[1], F_SETPIPE_SZ, 64 * 1024);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fds[1], bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EAGAIN;
      close(fds[0]);
      close(fds[1]);
      return absl::InternalError(
          absl::StrCat("cannot write the engine config to a pipe: ", strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  close(fds[1]);
  return fds[0];
}

absl::StatusOr<VllmConfig> ReadVllmConfigFd(int fd, absl::Duration timeout) {
  const std::string what = absl::StrCat("--config-fd ", fd);
  std::string bytes;
  char buf[4096];
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status status;
  // Never block past the deadline, whatever the parent made the descriptor.
  if (const int flags = fcntl(fd, F_GETFL); flags >= 0)
    (void)fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      bytes.append(buf, static_cast<size_t>(n));
      if (bytes.size() > kMaxEncodedConfigBytes) {
        status = absl::InvalidArgumentError(absl::StrFormat(
            "%s: more than %d bytes (not an engine config)", what, kMaxEncodedConfigBytes));
        break;
      }
      continue;
    }
    if (n == 0) break;  // end of file: the whole config
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      status = absl::InvalidArgumentError(absl::StrCat(what, ": ", strerror(errno)));
      break;
    }
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      status = absl::DeadlineExceededError(absl::StrCat(
          what, ": the engine config did not arrive within ", absl::FormatDuration(timeout)));
      break;
    }
    pollfd p = {fd, POLLIN, 0};
    (void)poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000)));
  }
  close(fd);
  VLLM_RETURN_IF_ERROR(status);
  absl::StatusOr<VllmConfig> config = DecodeVllmConfig(bytes);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(what, ": ", config.status().message()));
  }
  return config;
}

}  // namespace vllm::config
