// Weight sources: where a model's tensors come from — a Hugging Face safetensors checkpoint
// (one file, or shards listed in model.safetensors.index.json), memory-mapped, or random
// "dummy" weights of the requested shape (vLLM's --load-format dummy).
//
// safetensors format (https://huggingface.co/docs/safetensors): 8-byte little-endian header
// length N, then N bytes of JSON {"name": {"dtype": "F32"|"F16"|"BF16"|..., "shape": [...],
// "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data buffer; offsets are
// relative to the buffer. The header is validated before any tensor is read: N within the
// file and at most 100 MB, valid JSON, every entry with a known dtype, non-negative shape,
// begin <= end within the buffer, end - begin == product(shape) × dtype size, and no two
// tensors overlapping.
//
// Thread-safety: a WeightSource is used by one thread at a time (the loading worker).
#ifndef VLLM_WORKER_WEIGHTS_H_
#define VLLM_WORKER_WEIGHTS_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace vllm::worker {

// Tensor-parallel slice of a weight: the tensor is split into `world_size` equal parts
// along `dim` and this rank takes part `rank`. dim = -1: the whole tensor.
// Column-parallel layers (q/k/v, gate/up, lm_head rows) split dim 0 of the [out, in] weight;
// row-parallel layers (o_proj, down_proj) split dim 1.
// `range_begin` / `range_size` (range_size >= 0, dim >= 0 only) first narrow `dim` to
// [range_begin, range_begin + range_size), and that range is split instead: one part of a
// fused checkpoint tensor (Phi-3's qkv_proj: the k rows of a rank are part `rank` of the k
// range). A KV head replicated over r ranks is loaded with world_size / r parts and part
// rank / r (vLLM's num_kv_head_replicas).
struct Shard {
  int32_t dim = -1;
  int32_t rank = 0;
  int32_t world_size = 1;
  int64_t range_begin = 0;
  int64_t range_size = -1;  // -1: the whole of `dim`
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;

  // Loads tensor `name` as float32 (converted from F16/BF16/F32, or from I32/I64 when every
  // value is exact in float32, |v| <= 2^24: EAGLE-3's d2t), checking that its full shape
  // equals `full_shape`, and returns this rank's `shard` of it (row-major).
  // NotFound naming the tensor when absent; InvalidArgument naming the tensor, the expected
  // and the actual shape on a mismatch, when the sharded dimension (or range) does not divide
  // by world_size, or when the range leaves the dimension; InvalidArgument for another dtype
  // or an integer beyond float32's exact range.
  [[nodiscard]] virtual absl::StatusOr<std::vector<float>> Load(std::string_view name,
                                                                std::span<const int64_t> full_shape,
                                                                const Shard& shard = {}) = 0;
  // Whether the source has a tensor with this name (dummy sources have every name).
  virtual bool Has(std::string_view name) const = 0;
  // Every tensor name (empty for a dummy source), sorted.
  virtual std::vector<std::string> Names() const = 0;
};

// Opens model_dir/model.safetensors, or every shard named by model_dir/
// model.safetensors.index.json ({"weight_map": {"tensor": "file", ...}}). Headers are
// validated at open. NotFound when neither file exists; InvalidArgument naming the file
// (and the tensor, where one is to blame) for a corrupt header, an index pointing at a
// missing file or at a file that lacks the tensor.
[[nodiscard]] absl::StatusOr<std::unique_ptr<WeightSource>> OpenSafetensors(
    const std::filesystem::path& model_dir);

// Random weights: values uniform in [-scale, scale) from a generator seeded by (seed, name),
// so every rank's shard is a slice of the same full tensor. Tensors whose name ends in
// "norm.weight" are all ones (so activations stay in range, as vLLM's dummy loader leaves
// norms at their init).
std::unique_ptr<WeightSource> MakeDummyWeights(uint64_t seed, float scale = 1e-2f);

}  // namespace vllm::worker

#endif  // VLLM_WORKER_WEIGHTS_H_
