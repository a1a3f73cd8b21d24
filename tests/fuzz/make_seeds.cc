// Writes the binary seed corpora of the protocol fuzzers — frames made by the real encoders —
// into <out>/engine_protocol/, <out>/worker_protocol/, <out>/vllm_config/,
// <out>/engine_handshake/, <out>/dp_coordinator/, <out>/kv_events/, <out>/api_server_spec/,
// <out>/dp_coordinator_spec/, <out>/node_protocol/ and <out>/kv_transfer/ (normally
// tests/fuzz/corpus).
// Run it again after a wire-format change (e.g. kWireVersion) and commit the new files:
//   build/fuzz/bin/fuzz_make_seeds tests/fuzz/corpus
// Not a fuzz target; built with the fuzz targets so it stays in step with the codecs.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "config/config_codec.h"
#include "core/codec.h"
#include "core/dp_coordinator.h"
#include "core/engine_handshake.h"
#include "executor/node_protocol.h"
#include "ipc/handle.h"
#include "kv_events/kv_events.h"
#include "kv_transfer/file_store.h"
#include "kv_transfer/kv_wire.h"
#include "kv_transfer/types.h"
#include "launcher/spec/api_server_spec.h"
#include "launcher/spec/coordinator_spec.h"
#include "worker/intermediate_tensors.h"
#include "worker/worker_protocol.h"

namespace vllm::fuzz {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", (dir / name).c_str());
    std::exit(1);
  }
}

core::SamplingParams Sampling(bool full) {
  core::SamplingParams p;
  if (!full) return p;
  p.n = 2;
  p.temperature = 0.7;
  p.top_p = 0.9;
  p.top_k = 40;
  p.min_p = 0.05;
  p.presence_penalty = -0.5;
  p.frequency_penalty = 1.25;
  p.repetition_penalty = 1.1;
  p.seed = -12345;
  p.max_tokens = 64;
  p.min_tokens = 2;
  p.stop_token_ids = {2, 128009};
  p.ignore_eos = true;
  p.logprobs = 5;
  structured_output::StructuredOutputsParams& so = p.structured_outputs.emplace();
  so.json = R"({"type":"object","properties":{"a":{"type":"integer"}}})";
  so.disable_any_whitespace = true;
  return p;
}

// A NixlConnector prefill instance's answer (what a decode instance is sent).
kv_transfer::KVTransferParams RemotePrefill() {
  kv_transfer::KVTransferParams p;
  p.do_remote_prefill = true;
  p.remote_engine_id = "prefill-0";
  p.remote_request_id = "cmpl-0123456789abcdef-0";
  p.remote_host = "10.0.0.7";
  p.remote_port = 14579;
  p.remote_block_ids = {0, 1, 2};
  p.tp_size = 1;
  p.remote_num_tokens = 40;
  return p;
}

core::TokenLogprobs Logprobs() {
  core::TokenLogprobs t;
  t.token_ids = {17, 4, 99};
  t.logprobs = {0.0f, -1.5f, -std::numeric_limits<float>::infinity()};
  t.sampled_token_rank = 1;
  return t;
}

void EngineSeeds(const fs::path& dir) {
  Write(dir, "sampling_params_default", core::Encode(Sampling(false)));
  Write(dir, "sampling_params_full", core::Encode(Sampling(true)));

  core::EngineCoreRequest request;
  request.request_id = "cmpl-0123456789abcdef-0";
  request.prompt_token_ids = {0, 791, 1917, 315, 279, 11, 13};
  request.sampling_params = Sampling(false);
  request.arrival_time = 1700000000.25;
  Write(dir, "engine_core_request_plain", core::Encode(request));
  request.sampling_params = Sampling(true);
  request.eos_token_id = 1;
  request.priority = -3;
  request.cache_salt = "salt";
  request.data_parallel_rank = 1;
  request.kv_transfer_params = RemotePrefill();
  Write(dir, "engine_core_request_full", core::Encode(request));

  core::SchedulerStats stats;
  stats.num_running_reqs = 3;
  stats.num_waiting_reqs = 1;
  stats.kv_cache_usage = 0.375;
  stats.prefix_cache_stats = {true, 10, 320, 64};
  stats.num_preemptions = 2;
  stats.structured_output_stats.cache_hits = 4;
  stats.structured_output_stats.cache_misses = 1;
  stats.structured_output_stats.compile_timeouts = 1;
  stats.structured_output_stats.ObserveCompileSeconds(0.04);
  stats.spec_decoding_stats.num_spec_tokens = 3;
  stats.spec_decoding_stats.Observe(3, 2);
  stats.spec_decoding_stats.Observe(3, 0);
  stats.connector_prefix_cache_stats = {false, 2, 64, 48};
  Write(dir, "scheduler_stats", core::Encode(stats));

  core::EngineCoreOutputs outputs;
  outputs.engine_index = 0;
  outputs.timestamp = 1700000001.5;
  core::EngineCoreOutput o;
  o.request_id = "cmpl-a-0";
  o.new_token_ids = {42};
  outputs.outputs.push_back(o);
  Write(dir, "engine_core_outputs_step", core::Encode(outputs));
  o.request_id = "chatcmpl-b-1";
  o.new_token_ids = {7, 8};
  o.finish_reason = core::FinishReason::kStop;
  o.stop_reason = 128009;
  o.num_cached_tokens = 16;
  o.num_cache_creation_tokens = 32;
  o.logprobs = {Logprobs(), Logprobs()};
  o.kv_transfer_params = RemotePrefill();
  outputs.outputs.push_back(o);
  outputs.scheduler_stats = stats;
  outputs.finished_requests = {"cmpl-a-0", "cmpl-z-3"};
  outputs.wave_complete = 4;
  outputs.start_wave = 5;
  Write(dir, "engine_core_outputs_full", core::Encode(outputs));

  core::SchedulerOutput so;
  so.step_id = 7;
  core::NewRequestData nr;
  nr.req_id = "cmpl-a-0";
  nr.prompt_token_ids = {0, 791, 1917};
  nr.sampling_params = Sampling(true);
  nr.block_ids = {0, 1};
  nr.num_computed_tokens = 0;
  so.scheduled_new_reqs.push_back(nr);
  core::CachedRequestData& cached = so.scheduled_cached_reqs;
  cached.req_ids = {"cmpl-b-0", "cmpl-c-0"};
  cached.resumed_from_preemption = {0, 1};
  cached.new_token_ids = {5, 6, 7};
  cached.new_token_ids_offsets = {0, 1, 3};
  cached.new_block_ids = {9};
  cached.new_block_ids_offsets = {0, 0, 1};
  cached.num_computed_tokens = {20, 33};
  so.num_scheduled_tokens = {3, 1, 2};
  so.total_num_scheduled_tokens = 6;
  so.finished_req_ids = {"cmpl-d-0"};
  so.preempted_req_ids = {"cmpl-e-0"};
  so.structured_output_indices = {0, 2};
  so.grammar_bitmask = {-1, 0x0f, 0, 1};     // two rows of a 64-token vocabulary
  so.num_scheduled_spec_tokens = {0, 0, 1};  // cmpl-c-0's last token is a draft
  kv_transfer::KVConnectorMetadata& kv = so.kv_connector_metadata.emplace();
  kv_transfer::LoadSpec load;
  load.req_id = "cmpl-f-0";
  load.local_block_ids = {12, 13};
  load.num_tokens = 32;
  load.remote_block_ids = {0, 1};
  load.remote_engine_id = "prefill-0";
  load.remote_request_id = "cmpl-0123456789abcdef-0";
  load.remote_host = "10.0.0.7";
  load.remote_port = 14579;
  load.remote_tp_size = 1;
  kv.loads = {load};
  kv.saves = {kv_transfer::SaveSpec{"cmpl-a-0", {0, 1}, 3, "3f2a"}};
  kv.sends = {kv_transfer::SendSpec{"cmpl-d-0", {4, 5}}};
  kv.sends_released = {"cmpl-g-0"};
  Write(dir, "scheduler_output_full", core::Encode(so));
  Write(dir, "scheduler_output_empty", core::Encode(core::SchedulerOutput{}));
  // A decode step as the executor sends most of them (the per-step fast path of codec_fast.cc):
  // cached requests only, no KV-connector metadata.
  core::SchedulerOutput step;
  step.step_id = 8;
  step.scheduled_cached_reqs = cached;
  step.scheduled_cached_reqs.resumed_from_preemption = {0, 0};
  step.num_scheduled_tokens = {1, 2};
  step.total_num_scheduled_tokens = 3;
  step.finished_req_ids = {"cmpl-d-0"};
  Write(dir, "scheduler_output_step", core::Encode(step));

  core::ModelRunnerOutput mro;
  mro.req_ids = {"cmpl-a-0", "cmpl-b-0"};
  mro.sampled_token_ids = {{42}, {}};
  mro.logprobs = {{Logprobs()}, {}};
  Write(dir, "model_runner_output", core::Encode(mro));
  // The common reply (the per-step fast path): sampled tokens, no logprobs or KV output.
  core::ModelRunnerOutput plain;
  plain.req_ids = {"cmpl-b-0", "cmpl-c-0"};
  plain.sampled_token_ids = {{42}, {43, 44}};
  Write(dir, "model_runner_output_step", core::Encode(plain));
  mro.kv_connector_output.emplace();
  mro.kv_connector_output->finished_sending = {"cmpl-d-0"};
  mro.kv_connector_output->finished_recving = {"cmpl-f-0"};
  mro.kv_connector_output->failed_recving = {"cmpl-h-0"};
  Write(dir, "model_runner_output_kv", core::Encode(mro));

  Write(dir, "start_dp_wave", core::Encode(core::StartDpWave{3, 1}));
  const std::vector<std::string> aborts = {"cmpl-a-0", "chatcmpl-b-1"};
  Write(dir, "abort_requests", core::EncodeAbortRequests(aborts));
}

void WorkerSeeds(const fs::path& dir) {
  ipc::Handle h;
  h.n_readers = 4;
  h.local_reader_ranks = {0, 1, 3};
  h.shm_name = "vllm-mq-1-2-3";
  h.max_chunks = 10;
  h.max_chunk_bytes = 1 << 20;
  h.local_address = "ipc://@vllm-mq-x";
  h.remote_address = "tcp://127.0.0.1:5555";
  Write(dir, "handle", h.Encode());
  Write(dir, "handle_text", h.ToText());
  ipc::Handle remote;  // readers on other nodes only, CURVE-authenticated
  remote.n_readers = 2;
  remote.max_chunks = 4;
  remote.max_chunk_bytes = 4096;
  remote.remote_address = "tcp://10.0.0.2:29500";
  remote.remote_curve = true;
  Write(dir, "handle_remote_curve", remote.Encode());

  worker::ReadyMessage ready;
  ready.rank = 1;
  ready.pid = 4242;
  ready.response_handle = h.ToText();
  Write(dir, "ready_ok", worker::EncodeReady(ready));
  ready.code = absl::StatusCode::kResourceExhausted;
  ready.message = "not enough memory for the KV cache";
  ready.response_handle.clear();
  Write(dir, "ready_error", worker::EncodeReady(ready));

  core::SchedulerOutput so;
  so.step_id = 1;
  so.num_scheduled_tokens = {1};
  so.total_num_scheduled_tokens = 1;
  so.scheduled_cached_reqs.req_ids = {"cmpl-a-0"};
  so.scheduled_cached_reqs.resumed_from_preemption = {0};
  so.scheduled_cached_reqs.new_token_ids = {42};
  so.scheduled_cached_reqs.new_token_ids_offsets = {0, 1};
  so.scheduled_cached_reqs.new_block_ids_offsets = {0, 0};
  so.scheduled_cached_reqs.num_computed_tokens = {12};
  Write(dir, "call_execute_model",
        worker::EncodeCallPrefix({9, "execute_model", -1}) + core::Encode(so));
  Write(dir, "call_shutdown", worker::EncodeCallPrefix({10, "shutdown", 0}));
  Write(dir, "call_echo", worker::EncodeCallPrefix({11, "echo", 1}) + "payload bytes");
  core::ModelRunnerOutput mro;
  mro.req_ids = {"cmpl-a-0"};
  mro.sampled_token_ids = {{7}};
  mro.logprobs = {{}};
  Write(dir, "reply_execute_model",
        worker::EncodeReplyPrefix({9, 0, absl::StatusCode::kOk, ""}) + core::Encode(mro));
  Write(dir, "payload_kv_cache_spec", worker::EncodeKVCacheSpec({22, 4, 64, 2}));
  Write(dir, "payload_available_memory", worker::EncodeAvailableMemory(int64_t{3} << 30));
  Write(dir, "payload_available_memory_negative", worker::EncodeAvailableMemory(-4096));
  Write(dir, "payload_initialize_kv_cache", worker::EncodeInitializeKVCacheArgs({2730, 16}));
  Write(dir, "reply_error",
        worker::EncodeReplyPrefix({9, 1, absl::StatusCode::kInternal, "worker 1: out of memory"}));
  ready.code = absl::StatusCode::kOk;
  ready.message.clear();
  ready.response_handle = h.ToText();
  ready.stage_handle = remote.ToText();
  Write(dir, "ready_pipeline_stage", worker::EncodeReady(ready));
  Write(dir, "payload_stage_handles",
        worker::EncodeStageHandles({h.ToText(), remote.ToText(), ""}));
  // Pipeline stage frames (worker/intermediate_tensors.h), in the limits the fuzzer decodes
  // them with: hidden 4, up to 8 tokens, 6 layers.
  worker::IntermediateTensors t;
  t.next_layer = 3;
  t.num_tokens = 2;
  t.hidden_size = 4;
  t.residual = {1, 2, 3, 4, 5, 6, 7, 8};
  t.hidden = {-1, -2, -3, -4, -5, -6, -7, -8};
  auto frame = [](uint64_t step, const worker::IntermediateTensors& x) {
    std::string out = worker::EncodeStageTensorsHeader(step, x);
    out.append(reinterpret_cast<const char*>(x.residual.data()), x.residual.size() * 4);
    out.append(reinterpret_cast<const char*>(x.hidden.data()), x.hidden.size() * 4);
    return out;
  };
  Write(dir, "stage_tensors", frame(17, t));
  t.next_layer = 0;
  t.hidden.clear();
  Write(dir, "stage_tensors_embedding", frame(18, t));
  Write(dir, "stage_error",
        worker::EncodeStageError(19, absl::InvalidArgumentError("pipeline stage 0: bad request")));
}

void ConfigSeeds(const fs::path& dir) {
  config::VllmConfig c;
  c.model.model = "/models/kjv-llama-tiny";
  Write(dir, "default", config::EncodeVllmConfig(c));
  c.model.max_model_len = 4096;
  c.model.dtype = config::ModelDType::kBFloat16;
  c.model.seed = 7;
  c.model.enforce_eager = true;
  c.cache.block_size = 32;
  c.cache.enable_prefix_caching = false;
  c.cache.gpu_memory_utilization = 0.5;
  c.cache.num_gpu_blocks_override = 64;
  c.parallel.tensor_parallel_size = 2;
  c.parallel.data_parallel_size = 4;
  c.parallel.data_parallel_size_local = 2;
  c.parallel.data_parallel_start_rank = 2;
  c.parallel.data_parallel_rank = 3;
  c.parallel.distributed_executor_backend = config::ExecutorBackend::kMp;
  c.parallel.comm_backend = config::CommBackend::kGloo;
  c.scheduler.max_num_batched_tokens = 8192;
  c.scheduler.enable_chunked_prefill = false;
  c.scheduler.long_prefill_token_threshold = 64;
  c.scheduler.policy = config::SchedulingPolicy::kPriority;
  c.device.device = config::Device::kCuda;
  c.load.load_format = config::LoadFormat::kDummy;
  Write(dir, "full", config::EncodeVllmConfig(c));
}

void CoordinatorSeeds(const fs::path& dir) {
  Write(dir, "report", core::EncodeLoadReport({3, 12, 40, 0.75, 1795712674.25}));
  // Sealed with the fuzzer's fixed key (dp_coordinator_fuzzer.cc), so it opens there.
  Write(dir, "report_datagram",
        core::SealReportDatagram(core::EncodeLoadReport({3, 12, 40, 0.75, 1795712674.25}),
                                 1795712674250000000u, std::string(core::kReportKeyBytes, 'k')));
  core::LoadPublication p;
  p.sequence = 42;
  p.publish_time_ns = 1'000'000'000;
  p.engines = {{12, 40, 0.75, true, 1795712674.5}, {0, 0, 0.0, false}, {3, 64, 0.5, true}};
  p.current_wave = 3;
  p.engines_running = true;
  Write(dir, "publication", core::EncodeLoadPublication(p));
  Write(dir, "wave_start", core::EncodeDpWave({3, true, 1}));
  Write(dir, "wave_complete", core::EncodeDpWave({3, false, -1}));
}

void KvEventSeeds(const fs::path& dir) {
  kv_events::KvEventBatch b;
  b.ts = 1789095808.5;
  kv_events::KvBlockStored stored;
  stored.block_hashes = {15760518052499183552ULL, 7};
  stored.token_ids = {1, 200, 70000, 128000};
  stored.block_size = 2;
  stored.medium = "GPU";
  stored.group_idx = 0;
  stored.kv_cache_spec_kind = "full_attention";
  kv_events::KvBlockRemoved removed;
  removed.block_hashes = {7};
  removed.medium = "GPU";
  b.events = {stored, removed, kv_events::KvAllBlocksCleared{}};
  b.data_parallel_rank = 1;
  Write(dir, "batch", kv_events::EncodeKvEventBatch(b));
  Write(dir, "config",
        R"({"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557",)"
        R"( "replay_endpoint": null, "buffer_steps": 10000, "hwm": 100000,)"
        R"( "max_queue_size": 100000, "topic": "kv"})");
}

void HandshakeSeeds(const fs::path& dir) {
  Write(dir, "hello", core::EncodeHello({2, 4, "node-b"}));
  Write(dir, "ready", core::EncodeReady({2, 682, 1024}));
  Write(dir, "config",
        core::EncodeAddresses({"tcp://10.0.0.1:41000", "tcp://10.0.0.1:41001", {}, "", "", ""}));
  Write(dir, "config_peers",
        core::EncodeAddresses(
            {"ipc:///tmp/x/in", "ipc:///tmp/x/out", {"tcp://10.0.0.1:13346"}, "", "", ""}));
  Write(dir, "config_coordinator",
        core::EncodeAddresses({"tcp://10.0.0.1:41000",
                               "tcp://10.0.0.1:41001",
                               {},
                               "udp://10.0.0.1:41002",
                               "tcp://10.0.0.1:41003",
                               std::string(core::kReportKeyBytes, 'k')}));
  Write(dir, "reject", core::EncodeHandshakeMessage("--data-parallel-size 2 on node b but 4"));
  Write(dir, "heartbeat", core::EncodeHeartbeat(3));
}

void ApiServerSpecSeeds(const fs::path& dir) {
  launcher::ApiServerSpec s;
  s.index = 1;
  s.count = 2;
  s.config.model.model = "models/kjv-llama-tiny";
  s.frontend.served_model_names = {"kjv-llama-tiny"};
  Write(dir, "spec", launcher::EncodeApiServerSpec(s).value());
  s.config.parallel.data_parallel_size = 4;
  s.config.parallel.data_parallel_size_local = 2;
  s.frontend.host = "::";
  s.frontend.port = 8000;
  s.frontend.http.api_keys = {"key"};
  s.frontend.http.allowed_origins = {"*"};
  s.frontend.max_connections = 1000;
  s.frontend.shutdown_timeout_s = 2.5;
  s.frontend.served_model_names = {"a", "b"};
  s.frontend.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}";
  s.frontend.multi_node = true;
  s.frontend.dp_load_balancing = launcher::DpLoadBalancing::kHybrid;
  s.frontend.cluster_key_file = "/etc/vllm/cluster.key";
  s.coordinator = {"udp://10.0.0.1:41002", "tcp://10.0.0.1:41001", "tcp://10.0.0.1:41003",
                   std::string(core::kReportKeyBytes, 'k')};
  Write(dir, "spec_full", launcher::EncodeApiServerSpec(s).value());
  using Kind = launcher::ApiServerMessage::Kind;
  Write(dir, "handshake", launcher::EncodeApiServerMessage({Kind::kHandshake, "ipc:///tmp/h", 0}));
  Write(dir, "ready", launcher::EncodeApiServerMessage({Kind::kReady, "", 8000}));
  Write(dir, "engine_dead",
        launcher::EncodeApiServerMessage({Kind::kEngineDead, "killed by signal 9", 3}));
}

void CoordinatorSpecSeeds(const fs::path& dir) {
  Write(dir, "spec", launcher::EncodeDpCoordinatorSpec({2, 1, "", false, ""}));
  Write(dir, "spec_tcp",
        launcher::EncodeDpCoordinatorSpec({64, 4, "10.0.0.1", true, "/etc/vllm/cluster.key"}));
  Write(dir, "addresses",
        launcher::EncodeDpCoordinatorAddresses({"ipc:///tmp/s", "ipc:///tmp/p", "", ""}));
  Write(dir, "addresses_udp",
        launcher::EncodeDpCoordinatorAddresses({"udp://10.0.0.1:41002", "tcp://10.0.0.1:41001",
                                                "tcp://10.0.0.1:41003",
                                                std::string(core::kReportKeyBytes, 'k')}));
}

// One frame of each kind of executor/node_protocol.h; CONFIG carries a real encoded config.
void NodeSeeds(const fs::path& dir) {
  Write(dir, "hello",
        executor::EncodeNodeMessage(
            executor::NodeHello{1, 2, 4, 2, 1, "/models/kjv-llama-tiny", "10.0.0.2", 4242}));
  config::VllmConfig c;
  c.model.model = "/models/kjv-llama-tiny";
  c.parallel.tensor_parallel_size = 4;
  c.parallel.pipeline_parallel_size = 2;
  ipc::Handle h;
  h.n_readers = 8;
  h.local_reader_ranks = {0, 1, 2, 3};
  h.shm_name = "vllm-mq-1-2-3";
  h.max_chunks = 10;
  h.max_chunk_bytes = 1 << 20;
  h.local_address = "ipc://@vllm-mq-x";
  h.remote_address = "tcp://10.0.0.1:29500";
  h.remote_curve = true;
  Write(dir, "config",
        executor::EncodeNodeMessage(executor::NodeConfig{config::EncodeVllmConfig(c),
                                                         h.ToText(),
                                                         "tcp://10.0.0.1:41005",
                                                         {"", ""},
                                                         600'000,
                                                         1'000,
                                                         10'000}));
  Write(dir, "reject",
        executor::EncodeNodeMessage(
            executor::NodeReject{"--nnodes", "--nnodes 3 on node 1 but 2 on the head"}));
  Write(dir, "heartbeat", executor::EncodeNodeMessage(executor::NodeHeartbeat{}));
  Write(dir, "worker_exited",
        executor::EncodeNodeMessage(executor::NodeWorkerExited{5, "killed by signal 9"}));
  Write(dir, "stop", executor::EncodeNodeMessage(executor::NodeStop{"engine core failed"}));
}

// One header frame of each kind of kv_transfer/kv_wire.h, a DATA message (framed as the fuzzer
// reads one), and a stored file's header (file_store.h).
void KvTransferSeeds(const fs::path& dir) {
  using namespace kv_transfer;
  const KvLayout layout{6, 4, 32, 16, 4, 2, 1};
  Write(dir, "hello", EncodeKvMessage(KvHello{"decode-0", layout}));
  Write(dir, "welcome", EncodeKvMessage(KvWelcome{"prefill-0", layout, 4}));
  Write(dir, "refuse", EncodeKvMessage(KvRefuse{"block_size 32 != 16"}));
  Write(dir, "read", EncodeKvMessage(KvRead{7, "cmpl-0123-0", 170, {3, 1, 4, 1, 5}}));
  Write(dir, "error", EncodeKvMessage(KvError{7, "request cmpl-0123-0 is not held"}));
  Write(dir, "done", EncodeKvMessage(KvDone{"cmpl-0123-0"}));
  Write(dir, "ack", EncodeKvMessage(KvAck{"cmpl-0123-0"}));
  // A DATA message framed as the fuzzer reads one: [header length][header][two 2-byte blocks].
  const std::string blocks = "\x01\x02\x03\x04";
  const uint8_t* b = reinterpret_cast<const uint8_t*>(blocks.data());
  const std::string header = EncodeKvMessage(
      KvDataHeader{9, "cmpl-0123-0", 0, 2, {KvChecksum({b, 2}), KvChecksum({b + 2, 2})}});
  Write(dir, "data_message", std::string(1, static_cast<char>(header.size())) + header + blocks);
  Write(dir, "data_header", header);
  Write(dir, "file_header", file_store::EncodeKvFileHeader({layout, 3, 40, 0x1234567890abcdef}));
}

}  // namespace
}  // namespace vllm::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (normally tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const std::filesystem::path root = argv[1];
  vllm::fuzz::EngineSeeds(root / "engine_protocol");
  vllm::fuzz::WorkerSeeds(root / "worker_protocol");
  vllm::fuzz::ConfigSeeds(root / "vllm_config");
  vllm::fuzz::HandshakeSeeds(root / "engine_handshake");
  vllm::fuzz::CoordinatorSeeds(root / "dp_coordinator");
  vllm::fuzz::KvEventSeeds(root / "kv_events");
  vllm::fuzz::ApiServerSpecSeeds(root / "api_server_spec");
  vllm::fuzz::CoordinatorSpecSeeds(root / "dp_coordinator_spec");
  vllm::fuzz::NodeSeeds(root / "node_protocol");
  vllm::fuzz::KvTransferSeeds(root / "kv_transfer");
  return 0;
}
