// (c) and (d) of cuda_decode_bench: the CUDA model (worker/cuda/cuda_llama_model.h) with dummy
// bf16 weights initialised on the device, driven without the scheduler: each measured step is
// one CudaLlamaModel::Forward over inputs prepared once on the device (so the figures are the
// model's, without the runner's input preparation or sampling).
#include "bench/kernels/cuda_decode_bench_model.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/device_communicator.h"
#include "worker/cuda/cuda_llama_model.h"
#include "worker/cuda/device_buffer.h"
#include "worker/hf_config.h"

namespace vllm::bench {
namespace {

namespace kc = kernels::cuda;
using worker::CudaForwardInputs;
using worker::CudaKVCache;
using worker::CudaLlamaModel;
using worker::DeviceBuffer;

constexpr int32_t kBlockSize = 16;
constexpr int32_t kDecodeContext = 512;  // tokens already in the cache per decode sequence
constexpr int32_t kMaxTokens = 2048;     // the largest prefill below
constexpr int32_t kDecodeBatches[] = {1, 8, 64, 256};

worker::HfConfig Llama8BConfig(const Llama8BShape& s) {
  worker::HfConfig c;
  c.architecture = "LlamaForCausalLM";
  c.vocab_size = static_cast<int32_t>(s.vocab);
  c.hidden_size = static_cast<int32_t>(s.hidden);
  c.intermediate_size = static_cast<int32_t>(s.intermediate);
  c.num_hidden_layers = static_cast<int32_t>(s.layers);
  c.num_attention_heads = static_cast<int32_t>(s.heads);
  c.num_key_value_heads = static_cast<int32_t>(s.kv_heads);
  c.head_dim = static_cast<int32_t>(s.head_dim);
  c.max_position_embeddings = 8192;
  c.rope_theta = 500000.0;
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = false;
  c.torch_dtype = "bfloat16";
  return c;
}

int32_t BlocksFor(int32_t tokens) { return (tokens + kBlockSize - 1) / kBlockSize; }

// One batch's inputs on the device: `seqs` sequences, each with `context` tokens already in
// the cache and `q_len` new ones. Sequence s owns cache blocks [s·bps, (s+1)·bps).
class StepInputs {
 public:
  static absl::StatusOr<StepInputs> Make(int32_t seqs, int32_t q_len, int32_t context,
                                         int32_t vocab) {
    StepInputs in;
    const int32_t seq_len = context + q_len;
    const int32_t bps = BlocksFor(seq_len);
    const int64_t tokens = int64_t{seqs} * q_len;
    std::vector<int32_t> ids(tokens), positions(tokens), qsl(seqs + 1), seq_lens(seqs, seq_len),
        tables(int64_t{seqs} * bps), logits_idx(seqs);
    std::vector<int64_t> slots(tokens);
    for (int32_t s = 0; s < seqs; ++s) {
      qsl[s] = s * q_len;
      for (int32_t b = 0; b < bps; ++b) tables[int64_t{s} * bps + b] = s * bps + b;
      for (int32_t j = 0; j < q_len; ++j) {
        const int64_t t = int64_t{s} * q_len + j;
        const int32_t pos = context + j;
        ids[t] = static_cast<int32_t>((t * 7919 + 13) % vocab);
        positions[t] = pos;
        slots[t] =
            int64_t{tables[int64_t{s} * bps + pos / kBlockSize]} * kBlockSize + pos % kBlockSize;
      }
      logits_idx[s] = (s + 1) * q_len - 1;
    }
    qsl[seqs] = static_cast<int32_t>(tokens);
    auto upload = [](DeviceBuffer& dst, const auto& host, const char* what) -> absl::Status {
      const size_t bytes = host.size() * sizeof(host[0]);
      absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(bytes, what);
      if (!b.ok()) return b.status();
      dst = std::move(*b);
      return worker::CudaStatus(cudaMemcpy(dst.get(), host.data(), bytes, cudaMemcpyHostToDevice),
                                what);
    };
    for (absl::Status s :
         {upload(in.ids_, ids, "token ids"), upload(in.positions_, positions, "positions"),
          upload(in.slots_, slots, "slot mapping"), upload(in.qsl_, qsl, "query_start_loc"),
          upload(in.seq_lens_, seq_lens, "seq_lens"), upload(in.tables_, tables, "block tables"),
          upload(in.logits_idx_, logits_idx, "logits indices")}) {
      if (!s.ok()) return s;
    }
    // The uploads ran on the legacy stream, whose pageable copies may still be in flight; the
    // model runs on a non-blocking stream that would not wait for them.
    VLLM_RETURN_IF_ERROR(worker::CudaStatus(cudaDeviceSynchronize(), "input upload"));
    CudaForwardInputs& f = in.forward_;
    f.num_tokens = tokens;
    f.token_ids = in.ids_.as<int32_t>();
    f.positions = in.positions_.as<int32_t>();
    f.slot_mapping = in.slots_.as<int64_t>();
    f.attention.num_seqs = seqs;
    f.attention.num_tokens = tokens;
    f.attention.query_start_loc = in.qsl_.as<int32_t>();
    f.attention.seq_lens = in.seq_lens_.as<int32_t>();
    f.attention.block_tables = in.tables_.as<int32_t>();
    f.attention.max_blocks_per_seq = bps;
    f.attention.block_size = kBlockSize;
    f.attention.max_query_len = q_len;
    f.attention.max_seq_len = seq_len;
    f.num_logits = seqs;
    f.logits_indices = in.logits_idx_.as<int32_t>();
    return in;
  }

  const CudaForwardInputs& forward() const { return forward_; }

 private:
  DeviceBuffer ids_, positions_, slots_, qsl_, seq_lens_, tables_, logits_idx_;
  CudaForwardInputs forward_;
};

// Median milliseconds of `enqueue` over `reps` CUDA-event-timed runs after 3 warm-ups; an
// error of `enqueue` ends the measurement (returned).
absl::StatusOr<double> MedianMs(const std::function<absl::Status()>& enqueue, cudaStream_t stream,
                                int reps) {
  cudaEvent_t start, stop;
  VLLM_RETURN_IF_ERROR(worker::CudaStatus(cudaEventCreate(&start), "cudaEventCreate"));
  if (cudaError_t e = cudaEventCreate(&stop); e != cudaSuccess) {
    cudaEventDestroy(start);
    return worker::CudaStatus(e, "cudaEventCreate");
  }
  absl::Status status;
  for (int i = 0; i < 3 && status.ok(); ++i) status = enqueue();
  if (status.ok()) status = worker::CudaStatus(cudaStreamSynchronize(stream), "warm-up");
  std::vector<double> ms;
  for (int i = 0; i < reps && status.ok(); ++i) {
    cudaEventRecord(start, stream);
    status = enqueue();
    cudaEventRecord(stop, stream);
    if (status.ok()) status = worker::CudaStatus(cudaEventSynchronize(stop), "timed step");
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!status.ok()) return status;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Captures one Forward over `in` into a graph (after it ran eagerly, so every GEMM plan
// exists); the caller destroys the returned executable graph.
absl::StatusOr<cudaGraphExec_t> Capture(CudaLlamaModel& model, const CudaForwardInputs& in,
                                        CudaKVCache& cache, cudaStream_t stream) {
  VLLM_RETURN_IF_ERROR(worker::CudaStatus(
      cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture"));
  const absl::Status forward = model.Forward(in, &cache, stream);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (!forward.ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return forward;
  }
  VLLM_RETURN_IF_ERROR(worker::CudaStatus(end, "cudaStreamEndCapture"));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  VLLM_RETURN_IF_ERROR(worker::CudaStatus(inst, "cudaGraphInstantiate"));
  return exec;
}

absl::Status RunDecode(CudaLlamaModel& model, CudaKVCache& cache, const Llama8BShape& shape,
                       double bandwidth_gbs, cudaStream_t stream) {
  const double weight_bytes = static_cast<double>(shape.DecodeWeightBytes());
  const double roofline_ms = weight_bytes / bandwidth_gbs / 1e6;
  std::printf(
      "(c) decode step, Llama-3-8B shape, bf16, %d tokens of context per sequence\n"
      "    roofline = %.2f GB of weights read per step (linear layers, norms, lm_head; the\n"
      "    model holds %.2f GB with the embedding table) / %.0f GB/s = %.3f ms;\n"
      "    w+kv also counts the KV cache read (%lld B per token); graphs are captured as the\n"
      "    worker's (attention planned for max_seq_len = max_model_len = %d)\n",
      kDecodeContext, weight_bytes / 1e9, model.weight_bytes() / 1e9, bandwidth_gbs, roofline_ms,
      static_cast<long long>(shape.KvBytesPerToken()), model.options().max_model_len);
  std::printf("    %6s %11s %8s %11s %8s %12s %10s\n", "batch", "eager ms", "/roof", "graph ms",
              "/roof", "w+kv roof ms", "tokens/s");
  for (int32_t batch : kDecodeBatches) {
    VLLM_ASSIGN_OR_RETURN(StepInputs in,
                          StepInputs::Make(batch, 1, kDecodeContext, model.vocab_size()));
    auto step = [&] { return model.Forward(in.forward(), &cache, stream); };
    VLLM_ASSIGN_OR_RETURN(const double eager_ms, MedianMs(step, stream, 20));
    // Captured as CudaModelBackend captures its decode graphs: attention sized for
    // max_seq_len = max_model_len (rows still attend to their own 513 keys), so the figure is
    // the served one, split-K partition count included.
    CudaForwardInputs graph_in = in.forward();
    graph_in.attention.max_seq_len = model.options().max_model_len;
    auto graph_step = [&] { return model.Forward(graph_in, &cache, stream); };
    VLLM_RETURN_IF_ERROR(graph_step());  // eager once at this shape before the capture
    VLLM_RETURN_IF_ERROR(worker::CudaStatus(cudaStreamSynchronize(stream), "graph warm-up"));
    VLLM_ASSIGN_OR_RETURN(cudaGraphExec_t exec, Capture(model, graph_in, cache, stream));
    absl::StatusOr<double> graph_ms = MedianMs(
        [&] { return worker::CudaStatus(cudaGraphLaunch(exec, stream), "cudaGraphLaunch"); },
        stream, 20);
    cudaGraphExecDestroy(exec);
    VLLM_RETURN_IF_ERROR(graph_ms.status());
    const double kv_bytes = static_cast<double>(batch) * (kDecodeContext + 1) *
                            static_cast<double>(shape.KvBytesPerToken());
    const double kv_roof_ms = (weight_bytes + kv_bytes) / bandwidth_gbs / 1e6;
    std::printf("    %6d %11.3f %7.2fx %11.3f %7.2fx %12.3f %10.0f\n", batch, eager_ms,
                eager_ms / roofline_ms, *graph_ms, *graph_ms / roofline_ms, kv_roof_ms,
                batch / *graph_ms * 1e3);
  }
  std::printf("\n");
  return absl::OkStatus();
}

absl::Status RunPrefill(CudaLlamaModel& model, CudaKVCache& cache, const Llama8BShape& shape,
                        double gemm_peak_tflops, cudaStream_t stream) {
  std::printf(
      "(d) prefill, Llama-3-8B shape, bf16 (FLOPs: linear layers + causal attention + lm_head\n"
      "    on the last token of each sequence), against the GEMM peak of (b) = %.1f TFLOP/s\n",
      gemm_peak_tflops);
  std::printf("    %-10s %10s %12s %10s %9s\n", "batch", "median ms", "tokens/s", "TFLOP/s",
              "of peak");
  struct Case {
    int32_t seqs, len;
  };
  for (const Case c : {Case{1, 2048}, Case{4, 512}, Case{16, 128}}) {
    VLLM_ASSIGN_OR_RETURN(StepInputs in, StepInputs::Make(c.seqs, c.len, 0, model.vocab_size()));
    VLLM_ASSIGN_OR_RETURN(
        const double ms,
        MedianMs([&] { return model.Forward(in.forward(), &cache, stream); }, stream, 10));
    const double tflops = shape.PrefillFlops(c.seqs, c.len) / ms / 1e9;
    const std::string name = absl::StrCat(c.seqs, "x", c.len);
    std::printf("    %-10s %10.3f %12.0f %10.1f %8.0f%%\n", name.c_str(), ms,
                c.seqs * c.len / ms * 1e3, tflops, 100.0 * tflops / gemm_peak_tflops);
  }
  std::printf("\n");
  return absl::OkStatus();
}

absl::Status Run(double bandwidth_gbs, double gemm_peak_tflops, cudaStream_t stream) {
  const Llama8BShape shape;
  kc::SingleRankDeviceCommunicator comm;
  worker::CudaModelOptions o;
  o.dtype = kc::GemmDType::kBFloat16;
  o.dummy_weights = true;
  o.seed = 1;
  o.max_num_tokens = kMaxTokens;
  o.max_num_logits = 256;
  o.max_model_len = 4096;
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<CudaLlamaModel> model,
                        CudaLlamaModel::Load(Llama8BConfig(shape), nullptr, &comm, o, stream));
  // Enough blocks for the largest decode batch (prefill needs fewer).
  const int32_t num_blocks = 256 * BlocksFor(kDecodeContext + 1);
  VLLM_ASSIGN_OR_RETURN(CudaKVCache cache, model->AllocateKVCache(num_blocks, kBlockSize));
  // Zeros instead of whatever the memory held: the decode context was never written.
  VLLM_RETURN_IF_ERROR(worker::CudaStatus(
      cudaMemsetAsync(cache.storage.get(), 0, cache.storage.bytes(), stream), "KV cache zeroing"));
  VLLM_RETURN_IF_ERROR(RunDecode(*model, cache, shape, bandwidth_gbs, stream));
  VLLM_RETURN_IF_ERROR(RunPrefill(*model, cache, shape, gemm_peak_tflops, stream));
  return worker::CudaStatus(cudaStreamSynchronize(stream), "final synchronisation");
}

}  // namespace

int RunModelBench(double bandwidth_gbs, double gemm_peak_tflops, cudaStream_t stream) {
  if (absl::Status s = Run(bandwidth_gbs, gemm_peak_tflops, stream); !s.ok()) {
    std::fprintf(stderr, "cuda_decode_bench: model: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace vllm::bench
