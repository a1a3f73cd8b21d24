#include "worker/cuda/cuda_model_backend.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"
#include "worker/cuda/dtype_dispatch.h"

namespace vllm::worker {
namespace {

namespace kc = ::vllm::kernels::cuda;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr float kGreedyTemperature = 1e-5f;

size_t Align16(size_t n) { return (n + 15) / 16 * 16; }

// Whether the device applies the row's grammar bitmask (the runner masks on_host rows).
bool MaskedOnDevice(const RowSampling& r) { return r.bitmask != nullptr && !r.on_host; }

// Words of one grammar bitmask row.
int64_t MaskWords(int64_t vocab_size) { return (vocab_size + 31) / 32; }

const char* DTypeName(kc::GemmDType dtype) {
  switch (dtype) {
    case kc::GemmDType::kFloat16:
      return "float16";
    case kc::GemmDType::kBFloat16:
      return "bfloat16";
    case kc::GemmDType::kFloat32:
      break;
  }
  return "float32";
}

}  // namespace

kc::GemmDType ResolveCudaDType(ModelDType dtype, const HfConfig& config) {
  switch (dtype) {
    case ModelDType::kFloat32:
      return kc::GemmDType::kFloat32;
    case ModelDType::kBFloat16:
      return kc::GemmDType::kBFloat16;
    case ModelDType::kFloat16:
      return kc::GemmDType::kFloat16;
    case ModelDType::kAuto:
      break;
  }
  return config.torch_dtype == "bfloat16" ? kc::GemmDType::kBFloat16 : kc::GemmDType::kFloat16;
}

std::vector<int32_t> CudaGraphBatchSizes(int32_t max_num_seqs, int32_t max_num_batched_tokens) {
  const int32_t limit = std::min({max_num_seqs, max_num_batched_tokens, 512});
  std::vector<int32_t> sizes;
  for (int32_t b : {1, 2, 4}) {
    if (b <= limit) sizes.push_back(b);
  }
  for (int32_t b = 8; b <= limit; b += 8) sizes.push_back(b);
  return sizes;
}

CudaModelBackend::Layout CudaModelBackend::MakeLayout(int64_t num_tokens, int64_t num_seqs,
                                                      int64_t num_logits, int64_t max_blocks,
                                                      int64_t num_prompt_rows, int64_t num_masks,
                                                      int64_t mask_words) {
  Layout l;
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t here = at;
    at += Align16(bytes);
    return here;
  };
  // 8-byte arrays first; every array starts 16-byte aligned.
  l.slots = take(num_tokens * sizeof(int64_t));
  l.u = take(num_logits * sizeof(double));
  l.ids = take(num_tokens * sizeof(int32_t));
  l.positions = take(num_tokens * sizeof(int32_t));
  l.query_start_loc = take((num_seqs + 1) * sizeof(int32_t));
  l.seq_lens = take(num_seqs * sizeof(int32_t));
  l.block_tables = take(num_seqs * max_blocks * sizeof(int32_t));
  l.logits_indices = take(num_logits * sizeof(int32_t));
  l.params = take(num_logits * sizeof(kc::SamplingParams));
  // Last, so a step without prompt rows or bitmasks has the same offsets as before (graphs
  // included).
  l.prompt_rows = take(num_prompt_rows * sizeof(int32_t));
  l.mask_rows = take(num_masks * sizeof(int32_t));
  l.bitmask = take(num_masks * mask_words * sizeof(int32_t));
  l.num_masks = num_masks;
  l.total = at;
  return l;
}

CudaModelBackend::CudaModelBackend(const CudaBackendOptions& options, int32_t device)
    : options_(options), device_(device) {}

CudaModelBackend::~CudaModelBackend() {
  cudaSetDevice(device_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  DestroyGraphs();
  // The model's GEMM handle and buffers go before the stream they were used on.
  cache_ = CudaKVCache{};
  model_.reset();
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void CudaModelBackend::DestroyGraphs() {
  for (auto& [size, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
}

std::vector<int32_t> CudaModelBackend::captured_sizes() const {
  std::vector<int32_t> sizes;
  for (const auto& [size, exec] : graphs_) sizes.push_back(size);
  return sizes;
}

absl::Status CudaModelBackend::SelectDevice() const {
  return CudaStatus(cudaSetDevice(device_), absl::StrCat("cudaSetDevice(", device_, ")"));
}

absl::StatusOr<std::unique_ptr<CudaModelBackend>> CudaModelBackend::Create(
    const HfConfig& config, WeightSource* weights, kc::DeviceCommunicator* device_comm,
    const CudaBackendOptions& options) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::InvalidArgumentError(
        "--device cuda: no CUDA device is visible (check the driver and CUDA_VISIBLE_DEVICES, "
        "or choose --device cpu)");
  }
  if (options.gpu_memory_utilization <= 0.0 || options.gpu_memory_utilization > 1.0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--gpu-memory-utilization must be in (0, 1], got %g", options.gpu_memory_utilization));
  }
  if (options.device_index < 0 || options.device_index >= count) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "this rank needs GPU %d but only %d %s visible (data-parallel engines on a node take "
        "consecutive blocks of --tensor-parallel-size GPUs)",
        options.device_index, count, count == 1 ? "is" : "are"));
  }
  const int32_t device = options.device_index;
  std::unique_ptr<CudaModelBackend> b(new CudaModelBackend(options, device));
  VLLM_RETURN_IF_ERROR(b->SelectDevice());
  VLLM_RETURN_IF_ERROR(CudaStatus(cudaFree(nullptr), "CUDA context creation"));
  VLLM_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&b->stream_, cudaStreamNonBlocking),
                                  "cudaStreamCreate"));
  b->max_model_len_ = options.max_model_len > 0
                          ? options.max_model_len
                          : static_cast<int32_t>(config.max_position_embeddings);
  b->max_tokens_ = options.max_num_batched_tokens > 0 ? options.max_num_batched_tokens : 2048;
  b->max_seqs_ = options.max_num_seqs > 0 ? options.max_num_seqs : 256;

  CudaModelOptions mo;
  mo.dtype = ResolveCudaDType(options.dtype, config);
  mo.max_num_tokens = b->max_tokens_;
  mo.max_num_logits = b->max_seqs_;
  mo.max_model_len = b->max_model_len_;
  mo.dummy_weights = options.dummy_weights;
  mo.seed = options.seed;
  kc::DeviceCommunicator* comm = device_comm != nullptr ? device_comm : &b->single_rank_;
  const absl::Time start = absl::Now();
  VLLM_ASSIGN_OR_RETURN(b->model_, CudaLlamaModel::Load(config, weights, comm, mo, b->stream_));
  spdlog::info("Model loading took {:.4f} GiB and {:.3f} s (GPU {}, dtype {}, {} weights)",
               b->model_->weight_bytes() / kGiB, absl::ToDoubleSeconds(absl::Now() - start), device,
               DTypeName(mo.dtype), options.dummy_weights ? "dummy" : "checkpoint");
  VLLM_ASSIGN_OR_RETURN(b->tokens_dev_,
                        DeviceBuffer::Allocate(b->max_seqs_ * sizeof(int32_t), "sampled tokens"));
  VLLM_ASSIGN_OR_RETURN(b->tokens_host_,
                        PinnedBuffer::Allocate(b->max_seqs_ * sizeof(int32_t), "sampled tokens"));
  VLLM_RETURN_IF_ERROR(b->AllocateInputs(b->block_size_));
  return b;
}

absl::StatusOr<std::unique_ptr<ModelBackend>> CreateCudaModelBackend(
    const HfConfig& config, WeightSource* weights, kc::DeviceCommunicator* device_comm,
    const CudaBackendOptions& options) {
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<CudaModelBackend> b,
                        CudaModelBackend::Create(config, weights, device_comm, options));
  return std::unique_ptr<ModelBackend>(std::move(b));
}

absl::Status CudaModelBackend::AllocateInputs(int32_t block_size) {
  block_size_ = block_size;
  max_blocks_ = (max_model_len_ + block_size - 1) / block_size;
  // Up to a step's every token may be a prompt-logprobs row, every sampled row constrained.
  const Layout l = MakeLayout(max_tokens_, max_seqs_, max_seqs_, max_blocks_, max_tokens_,
                              max_seqs_, MaskWords(model_->vocab_size()));
  if (staging_.bytes() >= l.total) return absl::OkStatus();
  DestroyGraphs();  // they point into the old buffer
  staging_.Reset();
  inputs_.Reset();
  VLLM_ASSIGN_OR_RETURN(staging_, PinnedBuffer::Allocate(l.total, "the input staging buffer"));
  VLLM_ASSIGN_OR_RETURN(inputs_, DeviceBuffer::Allocate(l.total, "the step inputs"));
  return absl::OkStatus();
}

absl::Status CudaModelBackend::Upload(const StepInputs& in, int32_t graph_size,
                                      std::span<const int32_t> prompt_rows, CudaForwardInputs* out,
                                      Layout* layout) {
  const int64_t t = static_cast<int64_t>(in.token_ids.size());
  const int64_t s = static_cast<int64_t>(in.seq_lens.size());
  const int64_t n = static_cast<int64_t>(in.logits_indices.size());
  const bool graph = graph_size > 0;
  const int64_t tp = graph ? graph_size : t;
  const int64_t sp = graph ? graph_size : s;
  const int64_t np = graph ? graph_size : n;
  const int64_t width = graph ? max_blocks_ : in.max_blocks_per_seq;
  const int64_t num_masks = std::count_if(in.sampling.begin(), in.sampling.end(), MaskedOnDevice);
  const Layout l =
      MakeLayout(tp, sp, np, width, graph ? 0 : static_cast<int64_t>(prompt_rows.size()), num_masks,
                 MaskWords(model_->vocab_size()));
  *layout = l;
  char* h = staging_.as<char>();
  auto* slots = reinterpret_cast<int64_t*>(h + l.slots);
  auto* u = reinterpret_cast<double*>(h + l.u);
  auto* ids = reinterpret_cast<int32_t*>(h + l.ids);
  auto* positions = reinterpret_cast<int32_t*>(h + l.positions);
  auto* qsl = reinterpret_cast<int32_t*>(h + l.query_start_loc);
  auto* seq_lens = reinterpret_cast<int32_t*>(h + l.seq_lens);
  auto* tables = reinterpret_cast<int32_t*>(h + l.block_tables);
  auto* logits_indices = reinterpret_cast<int32_t*>(h + l.logits_indices);
  auto* params = reinterpret_cast<kc::SamplingParams*>(h + l.params);

  std::copy(in.slot_mapping.begin(), in.slot_mapping.end(), slots);
  std::fill(slots + t, slots + tp, int64_t{-1});
  std::copy(in.token_ids.begin(), in.token_ids.end(), ids);
  std::fill(ids + t, ids + tp, 0);
  std::copy(in.positions.begin(), in.positions.end(), positions);
  std::fill(positions + t, positions + tp, 0);
  std::copy(in.query_start_loc.begin(), in.query_start_loc.end(), qsl);
  // Padding sequences hold one padding token each.
  for (int64_t i = s + 1; i <= sp; ++i) qsl[i] = qsl[i - 1] + 1;
  std::copy(in.seq_lens.begin(), in.seq_lens.end(), seq_lens);
  std::fill(seq_lens + s, seq_lens + sp, 0);
  if (width == in.max_blocks_per_seq) {
    std::copy(in.block_tables.begin(), in.block_tables.end(), tables);
  } else {
    for (int64_t r = 0; r < s; ++r) {
      std::copy_n(in.block_tables.begin() + r * in.max_blocks_per_seq, in.max_blocks_per_seq,
                  tables + r * width);
      std::fill(tables + r * width + in.max_blocks_per_seq, tables + (r + 1) * width, 0);
    }
  }
  std::fill(tables + s * width, tables + sp * width, 0);
  std::copy(in.logits_indices.begin(), in.logits_indices.end(), logits_indices);
  for (int64_t i = n; i < np; ++i) logits_indices[i] = static_cast<int32_t>(i);
  for (int64_t i = 0; i < np; ++i) {
    kc::SamplingParams p;
    if (i < n) {
      const RowSampling& r = in.sampling[i];
      p.temperature = r.temperature;
      p.top_k = r.top_k;
      p.top_p = r.top_p;
      p.min_p = r.min_p;
      u[i] = r.u;
    } else {
      p.temperature = 0.0f;
      u[i] = 0.5;
    }
    params[i] = p;
  }
  if (!graph) {
    std::copy(prompt_rows.begin(), prompt_rows.end(),
              reinterpret_cast<int32_t*>(h + l.prompt_rows));
  }
  PackBitmasks(in, l);
  VLLM_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(inputs_.get(), staging_.get(), l.total, cudaMemcpyHostToDevice, stream_),
      "input upload"));

  char* d = inputs_.as<char>();
  out->num_tokens = tp;
  out->token_ids = reinterpret_cast<const int32_t*>(d + l.ids);
  out->positions = reinterpret_cast<const int32_t*>(d + l.positions);
  out->slot_mapping = reinterpret_cast<const int64_t*>(d + l.slots);
  out->num_logits = static_cast<int32_t>(np);
  out->logits_indices = reinterpret_cast<const int32_t*>(d + l.logits_indices);
  kc::DeviceAttentionMetadata& m = out->attention;
  m.num_seqs = static_cast<int32_t>(sp);
  m.num_tokens = tp;
  m.query_start_loc = reinterpret_cast<const int32_t*>(d + l.query_start_loc);
  m.seq_lens = reinterpret_cast<const int32_t*>(d + l.seq_lens);
  m.block_tables = reinterpret_cast<const int32_t*>(d + l.block_tables);
  m.max_blocks_per_seq = static_cast<int32_t>(width);
  m.block_size = block_size_;
  m.max_query_len = graph ? 1 : in.max_query_len;
  m.max_seq_len = graph ? max_model_len_ : in.max_seq_len;
  return absl::OkStatus();
}

void CudaModelBackend::PackBitmasks(const StepInputs& in, const Layout& l) {
  if (l.num_masks == 0) return;
  const int64_t words = MaskWords(model_->vocab_size());
  char* h = staging_.as<char>();
  auto* rows = reinterpret_cast<int32_t*>(h + l.mask_rows);
  auto* bits = reinterpret_cast<int32_t*>(h + l.bitmask);
  int64_t k = 0;
  for (size_t j = 0; j < in.sampling.size(); ++j) {
    if (!MaskedOnDevice(in.sampling[j])) continue;
    rows[k] = static_cast<int32_t>(j);  // the row's place among the forward's logits rows
    std::memcpy(bits + k * words, in.sampling[j].bitmask, words * sizeof(int32_t));
    ++k;
  }
}

absl::Status CudaModelBackend::Sample(const Layout& l, int64_t num_rows, bool all_greedy) {
  const int64_t vocab = model_->vocab_size();
  const char* d = inputs_.as<char>();
  const auto* params = reinterpret_cast<const kc::SamplingParams*>(d + l.params);
  const auto* u = reinterpret_cast<const double*>(d + l.u);
  const auto* mask_rows = reinterpret_cast<const int32_t*>(d + l.mask_rows);
  const auto* bitmask = reinterpret_cast<const int32_t*>(d + l.bitmask);
  int32_t* tokens = tokens_dev_.as<int32_t>();
  return CudaStatus(
      WithDType(model_->dtype(),
                [&](auto tag) {
                  using T = decltype(tag);
                  T* logits = static_cast<T*>(model_->mutable_logits());
                  // Launches nothing without constrained rows.
                  const cudaError_t masked = kc::ApplyTokenBitmask<T>(
                      logits, vocab, bitmask, mask_rows, l.num_masks, stream_);
                  if (masked != cudaSuccess) return masked;
                  if (all_greedy) {
                    return kc::ArgmaxRows<T>(logits, num_rows, vocab, tokens, stream_);
                  }
                  return kc::SampleRows<T>(logits, num_rows, vocab, params, u, tokens, stream_);
                }),
      "sampler");
}

absl::StatusOr<int64_t> CudaModelBackend::DetermineAvailableMemory() {
  VLLM_RETURN_IF_ERROR(SelectDevice());
  // A dummy batch at the limits (DummyStep): max_tokens tokens over min(max_seqs, max_tokens)
  // sequences, every sequence sampled, nothing cached or attended to, every buffer and launch
  // at its largest shape.
  const int32_t t = max_tokens_;
  const int32_t s = std::min(max_seqs_, max_tokens_);
  const DummyStep dummy(t, s, max_model_len_);
  {
    VLLM_ASSIGN_OR_RETURN(CudaKVCache profile_cache, model_->AllocateKVCache(1, block_size_));
    CudaForwardInputs fi;
    Layout l;
    VLLM_RETURN_IF_ERROR(Upload(dummy.inputs(), 0, {}, &fi, &l));
    VLLM_RETURN_IF_ERROR(model_->Forward(fi, &profile_cache, stream_));
    VLLM_RETURN_IF_ERROR(Sample(l, s, /*all_greedy=*/false));
    VLLM_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "profile run"));
  }
  size_t free_bytes = 0, total_bytes = 0;
  VLLM_RETURN_IF_ERROR(CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
  const double requested = static_cast<double>(total_bytes) * options_.gpu_memory_utilization;
  const int64_t used = static_cast<int64_t>(total_bytes - free_bytes);
  const int64_t weights = model_->weight_bytes();
  const int64_t activations = model_->activation_bytes() + static_cast<int64_t>(inputs_.bytes()) +
                              static_cast<int64_t>(tokens_dev_.bytes());
  const int64_t other = used - weights - activations;
  const int64_t budget = static_cast<int64_t>(requested) - used;
  spdlog::info(
      "Memory profiling (GPU {}): total {:.2f} GiB × gpu_memory_utilization {:.2f} = {:.2f} GiB; "
      "weights {:.2f} GiB, peak activations {:.2f} GiB, non-torch and other {:.2f} GiB; "
      "KV cache {:.2f} GiB",
      device_, total_bytes / kGiB, options_.gpu_memory_utilization, requested / kGiB,
      weights / kGiB, activations / kGiB, other / kGiB, std::max<int64_t>(budget, 0) / kGiB);
  if (budget <= 0) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "No available memory for the cache blocks: %.2f GiB in use on GPU %d (weights %.2f GiB) "
        "exceeds %.2f GiB (total × --gpu-memory-utilization %.2f). Try increasing "
        "--gpu-memory-utilization or lowering --max-num-batched-tokens / --max-num-seqs.",
        used / kGiB, device_, weights / kGiB, requested / kGiB, options_.gpu_memory_utilization));
  }
  return budget;
}

absl::Status CudaModelBackend::InitializeKVCache(int32_t num_blocks, int32_t block_size) {
  VLLM_RETURN_IF_ERROR(SelectDevice());
  DestroyGraphs();
  cache_ = CudaKVCache{};
  VLLM_ASSIGN_OR_RETURN(cache_, model_->AllocateKVCache(num_blocks, block_size));
  VLLM_RETURN_IF_ERROR(AllocateInputs(block_size));
  spdlog::info("GPU KV cache: {} blocks of {} tokens ({:.2f} GiB) on GPU {}", num_blocks,
               block_size, cache_.storage.bytes() / kGiB, device_);
  if (options_.enforce_eager) return absl::OkStatus();
  return CaptureGraphs();
}

absl::Status CudaModelBackend::ReleaseMemory(bool kv_cache, bool weights) {
  VLLM_RETURN_IF_ERROR(SelectDevice());
  VLLM_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "sleep"));
  DestroyGraphs();
  if (kv_cache && cache_.num_blocks > 0) {
    released_blocks_ = cache_.num_blocks;
    released_block_size_ = cache_.block_size;
    cache_ = CudaKVCache{};
  }
  if (weights && !weights_released_) {
    model_->ReleaseWeights();
    weights_released_ = true;
  }
  return absl::OkStatus();
}

absl::Status CudaModelBackend::RestoreMemory(bool kv_cache, bool restore_weights,
                                             WeightSource* weights) {
  VLLM_RETURN_IF_ERROR(SelectDevice());
  if (restore_weights && weights_released_) {
    VLLM_RETURN_IF_ERROR(model_->ReloadWeights(weights, stream_));
    weights_released_ = false;
  }
  if (kv_cache && released_blocks_ > 0) {
    VLLM_ASSIGN_OR_RETURN(cache_, model_->AllocateKVCache(released_blocks_, released_block_size_));
    released_blocks_ = 0;
  }
  // Graphs read both the weights and the cache: captured again once both are back.
  if (weights_released_ || released_blocks_ > 0 || options_.enforce_eager) {
    return absl::OkStatus();
  }
  return CaptureGraphs();
}

absl::Status CudaModelBackend::CaptureGraphs() {
  const absl::Time start = absl::Now();
  size_t free_before = 0, free_after = 0, total = 0;
  cudaMemGetInfo(&free_before, &total);
  std::vector<int32_t> sizes = CudaGraphBatchSizes(max_seqs_, max_tokens_);
  // Largest first (vLLM's order).
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    const int32_t b = *it;
    const DummyStep dummy(/*num_tokens=*/b, /*num_seqs=*/b, /*max_seq_len=*/1);
    CudaForwardInputs fi;
    Layout l;
    VLLM_RETURN_IF_ERROR(Upload(dummy.inputs(), b, {}, &fi, &l));
    // Eager warm-up: makes this shape's cuBLASLt plans before the capture.
    VLLM_RETURN_IF_ERROR(model_->Forward(fi, &cache_, stream_));
    VLLM_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "graph warm-up"));
    VLLM_RETURN_IF_ERROR(CudaStatus(
        cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "graph capture"));
    const absl::Status forward = model_->Forward(fi, &cache_, stream_);
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
    if (!forward.ok() || ended != cudaSuccess) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      cudaGetLastError();
      VLLM_RETURN_IF_ERROR(forward);
      return CudaStatus(ended, absl::StrCat("CUDA graph capture of batch size ", b));
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    VLLM_RETURN_IF_ERROR(
        CudaStatus(made, absl::StrCat("CUDA graph instantiation of batch size ", b)));
    graphs_[b] = exec;
  }
  cudaMemGetInfo(&free_after, &total);
  spdlog::info("Graph capturing finished in {:.2f} s, took {:.2f} GiB ({} batch sizes, up to {})",
               absl::ToDoubleSeconds(absl::Now() - start),
               (static_cast<double>(free_before) - static_cast<double>(free_after)) / kGiB,
               sizes.size(), sizes.empty() ? 0 : sizes.back());
  return absl::OkStatus();
}

int64_t CudaModelBackend::SplitPromptRows(const StepInputs& step, StepInputs* split) {
  int64_t num_prompt = 0;
  for (const RowSampling& r : step.sampling) num_prompt += r.logits_only ? 1 : 0;
  if (num_prompt > 0) {
    *split = step;
    sampled_indices_.clear();
    sampled_rows_.clear();
    prompt_rows_.clear();
    for (size_t i = 0; i < step.sampling.size(); ++i) {
      if (step.sampling[i].logits_only) {
        prompt_rows_.push_back(step.logits_indices[i]);
      } else {
        sampled_indices_.push_back(step.logits_indices[i]);
        sampled_rows_.push_back(step.sampling[i]);
      }
    }
    split->logits_indices = sampled_indices_;
    split->sampling = sampled_rows_;
  }
  return num_prompt;
}

void CudaModelBackend::HostLogitsToFloat(int64_t host_row, float* out) const {
  const int64_t vocab = model_->vocab_size();
  WithDType(model_->dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* row = logits_host_.as<T>() + host_row * vocab;
    for (int64_t j = 0; j < vocab; ++j) out[j] = HostToFloat(row[j]);
    return 0;
  });
}

absl::Status CudaModelBackend::ComputePromptLogits(const StepInputs& in, int64_t num_prompt,
                                                   StepResult* result) {
  const int64_t t = static_cast<int64_t>(in.token_ids.size());
  const int64_t s = static_cast<int64_t>(in.seq_lens.size());
  const int64_t n = static_cast<int64_t>(in.logits_indices.size());
  const size_t es = static_cast<size_t>(model_->dtype_bytes());
  const int64_t vocab = model_->vocab_size();
  // Prompt rows, max_num_seqs at a time through the logits buffer and logits_host_ (one
  // synchronisation per chunk; only in steps that have such rows).
  const auto* rows_dev = reinterpret_cast<const int32_t*>(
      inputs_.as<char>() + MakeLayout(t, s, n, in.max_blocks_per_seq, num_prompt).prompt_rows);
  for (int64_t off = 0; off < num_prompt; off += max_seqs_) {
    const auto count = static_cast<int32_t>(std::min<int64_t>(max_seqs_, num_prompt - off));
    absl::Status chunk = model_->ComputeLogits(rows_dev + off, count, stream_);
    if (chunk.ok()) {
      chunk = CudaStatus(
          cudaMemcpyAsync(logits_host_.get(), model_->logits(),
                          static_cast<size_t>(count) * vocab * es, cudaMemcpyDeviceToHost, stream_),
          "prompt logits download");
    }
    const absl::Status synced =
        CudaStatus(cudaStreamSynchronize(stream_), "prompt logits of a CUDA step");
    VLLM_RETURN_IF_ERROR(chunk);
    VLLM_RETURN_IF_ERROR(synced);
    for (int32_t k = 0; k < count; ++k) {
      HostLogitsToFloat(k, result->host_logits.data() + prompt_slots_[off + k] * vocab);
    }
  }
  return absl::OkStatus();
}

absl::Status CudaModelBackend::Execute(const StepInputs& step, StepResult* result) {
  if (step.sampling.size() != step.logits_indices.size()) {
    return absl::InvalidArgumentError("CUDA step: sampling and logits rows differ in number");
  }
  if (step.want_hidden) {
    // Worker::Create refuses the draft methods that read them on CUDA first.
    return absl::UnimplementedError("CUDA step: hidden states for a draft are not returned yet");
  }
  // Prompt positions' rows (logits_only) leave the sampled batch: the forward's logits cover
  // the sampled rows only, and the prompt rows are computed afterwards, in chunks of the
  // logits buffer, from the hidden states the forward leaves (ComputeLogits). A step
  // without them uses the runner's arrays as they are.
  StepInputs split;
  const int64_t num_prompt = SplitPromptRows(step, &split);
  const StepInputs& in = num_prompt > 0 ? split : step;
  const int64_t t = static_cast<int64_t>(in.token_ids.size());
  const int64_t s = static_cast<int64_t>(in.seq_lens.size());
  const int64_t n = static_cast<int64_t>(in.logits_indices.size());
  if (t < 1 || t > max_tokens_ || s > max_seqs_ || n > max_seqs_ || num_prompt > t ||
      in.max_blocks_per_seq > max_blocks_ || in.max_seq_len > max_model_len_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CUDA step of %d tokens, %d sequences, %d logits rows (and %d prompt rows), %d blocks "
        "per sequence is beyond the worker's limits (max_num_batched_tokens %d, max_num_seqs "
        "%d, max_model_len %d)",
        t, s, n, num_prompt, in.max_blocks_per_seq, max_tokens_, max_seqs_, max_model_len_));
  }
  if (num_prompt > 0) {
    for (int32_t row : prompt_rows_) {
      if (row < 0 || row >= t) {
        return absl::InvalidArgumentError(
            absl::StrFormat("CUDA step: prompt logits row %d outside the %d tokens", row, t));
      }
    }
  }
  if (cache_.num_blocks == 0) return absl::FailedPreconditionError("no KV cache");
  VLLM_RETURN_IF_ERROR(SelectDevice());
  bool any_host = false, all_greedy = true;
  for (const RowSampling& r : in.sampling) {
    any_host |= r.on_host;
    all_greedy &= r.temperature < kGreedyTemperature;
  }
  const size_t es = static_cast<size_t>(model_->dtype_bytes());
  const int64_t vocab = model_->vocab_size();
  if ((any_host || num_prompt > 0) && logits_host_.bytes() == 0) {
    VLLM_ASSIGN_OR_RETURN(
        logits_host_,
        PinnedBuffer::Allocate(static_cast<size_t>(max_seqs_) * vocab * es, "host logits"));
  }
  // A decode step (every query one token, every row sampled) replays the graph of the next
  // captured size.
  int32_t graph_size = 0;
  if (!graphs_.empty() && num_prompt == 0 && in.max_query_len == 1 && t == s && n == s) {
    auto it = graphs_.lower_bound(static_cast<int32_t>(s));
    if (it != graphs_.end()) graph_size = it->first;
  }
  const std::span<const int32_t> prompt_rows =
      num_prompt > 0 ? std::span<const int32_t>(prompt_rows_) : std::span<const int32_t>();
  // From the upload on, an error still waits for the stream: the next step's Upload rewrites
  // the pinned staging buffer, which the async copy of this one may still be reading.
  if (absl::Status enqueued = EnqueueStep(in, graph_size, all_greedy, any_host, prompt_rows);
      !enqueued.ok()) {
    cudaStreamSynchronize(stream_);
    return enqueued;
  }
  // The step's only host synchronisation (without prompt rows).
  VLLM_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "CUDA step"));

  // Host logits rows are in the runner's row order: sampled on_host rows and prompt rows
  // interleaved. A prompt row's slot is noted here and filled by its chunk below.
  const int64_t all_rows = static_cast<int64_t>(step.logits_indices.size());
  int64_t num_host = num_prompt;
  for (const RowSampling& r : in.sampling) num_host += r.on_host ? 1 : 0;
  result->tokens.assign(all_rows, -1);
  result->host_logits.resize(static_cast<size_t>(num_host * vocab));
  prompt_slots_.clear();
  const int32_t* sampled = tokens_host_.as<int32_t>();
  int64_t slot = 0;
  for (int64_t i = 0, j = 0; i < all_rows; ++i) {
    if (step.sampling[i].logits_only) {
      prompt_slots_.push_back(slot++);
      continue;
    }
    if (!in.sampling[j].on_host) {
      result->tokens[i] = sampled[j];
    } else {
      HostLogitsToFloat(j, result->host_logits.data() + slot * vocab);
      ++slot;
    }
    ++j;
  }
  if (num_prompt == 0) return absl::OkStatus();
  return ComputePromptLogits(in, num_prompt, result);
}

absl::Status CudaModelBackend::EnqueueStep(const StepInputs& in, int32_t graph_size,
                                           bool all_greedy, bool any_host,
                                           std::span<const int32_t> prompt_rows) {
  const int64_t n = static_cast<int64_t>(in.logits_indices.size());
  const size_t es = static_cast<size_t>(model_->dtype_bytes());
  const int64_t vocab = model_->vocab_size();
  CudaForwardInputs fi;
  Layout l;
  VLLM_RETURN_IF_ERROR(Upload(in, graph_size, prompt_rows, &fi, &l));
  if (graph_size > 0) {
    VLLM_RETURN_IF_ERROR(
        CudaStatus(cudaGraphLaunch(graphs_.at(graph_size), stream_), "cudaGraphLaunch"));
    ++num_graph_steps_;
  } else {
    VLLM_RETURN_IF_ERROR(model_->Forward(fi, &cache_, stream_));
  }
  if (n > 0) {
    // The grammar bitmask and the sampler run after the graph, never inside it.
    VLLM_RETURN_IF_ERROR(Sample(l, n, all_greedy));
    VLLM_RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(tokens_host_.get(), tokens_dev_.get(), n * sizeof(int32_t),
                                   cudaMemcpyDeviceToHost, stream_),
                   "token download"));
    // Also the device-masked rows' logits; only the on_host rows' (never masked here) are read.
    if (any_host) {
      VLLM_RETURN_IF_ERROR(
          CudaStatus(cudaMemcpyAsync(logits_host_.get(), model_->logits(), n * vocab * es,
                                     cudaMemcpyDeviceToHost, stream_),
                     "logits download"));
    }
  }
  return absl::OkStatus();
}

}  // namespace vllm::worker
