// A worker's KV cache as the KV transports see it: per layer one K and one V buffer of
// `num_blocks` blocks each, block b of layer l's K at k[l] + b * layout.layer_block_bytes()
// (same for V). This is our CPU cache layout: each block of each layer is contiguous, so a
// block moves as 2 * num_layers spans.
//
// The "wire order" of a block (what kv_wire's DATA frames and file_store's files hold): every
// layer's K then V, layers in order, i.e. K[0] V[0] K[1] V[1] ... — layout.block_bytes() bytes.
//
// A view borrows the buffers; whoever made it keeps them alive (and unmoved) for as long as any
// BlockServer / BlockReader / file_store call uses the view. Functions here are thread-safe
// for distinct blocks; callers serialise writers of one block themselves.
#ifndef VLLM_KV_TRANSFER_KV_CACHE_VIEW_H_
#define VLLM_KV_TRANSFER_KV_CACHE_VIEW_H_

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "kv_transfer/types.h"

namespace vllm::kv_transfer {

// Bounds on a KvLayout from a peer or a file (ValidateKvLayout).
inline constexpr int32_t kMaxLayoutLayers = 4096;
inline constexpr int32_t kMaxLayoutHeads = 4096;
inline constexpr int32_t kMaxLayoutHeadDim = 65536;
inline constexpr int32_t kMaxLayoutBlockSize = 65536;
inline constexpr int32_t kMaxLayoutTpSize = 1024;
// The largest block (over all layers, K and V) the transports move: one block must fit one
// DATA message (kv_wire.h's kMaxDataBytes).
inline constexpr int64_t kMaxBlockBytes = int64_t{16} << 20;

// OK when every field of `layout` is in range: num_layers, num_kv_heads, head_dim and
// block_size positive and bounded, dtype_bytes 1, 2, 4 or 8, 1 <= tp_size <= kMaxLayoutTpSize,
// 0 <= tp_rank < tp_size, and block_bytes() <= kMaxBlockBytes. InvalidArgument naming the
// field otherwise (no product overflows: each factor is bounded first).
[[nodiscard]] inline absl::Status ValidateKvLayout(const KvLayout& l) {
  auto range = [](const char* field, int64_t v, int64_t lo, int64_t hi) {
    if (v >= lo && v <= hi) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrFormat("KvLayout.%s: %d is not in [%d, %d]", field, v, lo, hi));
  };
  for (absl::Status s : {range("num_layers", l.num_layers, 1, kMaxLayoutLayers),
                         range("num_kv_heads", l.num_kv_heads, 1, kMaxLayoutHeads),
                         range("head_dim", l.head_dim, 1, kMaxLayoutHeadDim),
                         range("block_size", l.block_size, 1, kMaxLayoutBlockSize),
                         range("tp_size", l.tp_size, 1, kMaxLayoutTpSize),
                         range("tp_rank", l.tp_rank, 0, int64_t{l.tp_size} - 1)}) {
    if (!s.ok()) return s;
  }
  if (l.dtype_bytes != 1 && l.dtype_bytes != 2 && l.dtype_bytes != 4 && l.dtype_bytes != 8) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KvLayout.dtype_bytes: %d is not 1, 2, 4 or 8", l.dtype_bytes));
  }
  if (l.block_bytes() > kMaxBlockBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KvLayout: a block of %d bytes (all layers, K and V) exceeds the %d "
                        "bytes the KV transports move in one message",
                        l.block_bytes(), kMaxBlockBytes));
  }
  return absl::OkStatus();
}

// Names the first field in which `theirs` differs from `ours` ("block_size 16 != 32", theirs
// first), or returns "" when they are equal.
inline std::string KvLayoutDifference(const KvLayout& theirs, const KvLayout& ours) {
  const struct {
    const char* name;
    int32_t a, b;
  } fields[] = {{"num_layers", theirs.num_layers, ours.num_layers},
                {"num_kv_heads", theirs.num_kv_heads, ours.num_kv_heads},
                {"head_dim", theirs.head_dim, ours.head_dim},
                {"block_size", theirs.block_size, ours.block_size},
                {"dtype_bytes", theirs.dtype_bytes, ours.dtype_bytes},
                {"tp_size", theirs.tp_size, ours.tp_size},
                {"tp_rank", theirs.tp_rank, ours.tp_rank}};
  for (const auto& f : fields) {
    if (f.a != f.b) return absl::StrFormat("%s %d != %d", f.name, f.a, f.b);
  }
  return "";
}

struct KvCacheView {
  KvLayout layout;
  int32_t num_blocks = 0;
  // One pointer per layer, each to num_blocks * layout.layer_block_bytes() bytes.
  std::vector<uint8_t*> k, v;
};

// OK when `view` is usable: a valid layout, num_blocks >= 0, one non-null K and V pointer per
// layer. InvalidArgument naming the problem otherwise.
[[nodiscard]] inline absl::Status ValidateKvCacheView(const KvCacheView& view) {
  if (absl::Status s = ValidateKvLayout(view.layout); !s.ok()) return s;
  if (view.num_blocks < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KvCacheView: num_blocks %d is negative", view.num_blocks));
  }
  const size_t layers = static_cast<size_t>(view.layout.num_layers);
  if (view.k.size() != layers || view.v.size() != layers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KvCacheView: %d K and %d V pointers for %d layers", view.k.size(), view.v.size(), layers));
  }
  for (size_t l = 0; l < layers; ++l) {
    if (view.k[l] == nullptr || view.v[l] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("KvCacheView: layer %d has a null K or V pointer", l));
    }
  }
  return absl::OkStatus();
}

// OK when 0 <= block_id < view.num_blocks; OutOfRange naming the id otherwise.
[[nodiscard]] inline absl::Status CheckBlockId(const KvCacheView& view, int32_t block_id) {
  if (block_id >= 0 && block_id < view.num_blocks) return absl::OkStatus();
  return absl::OutOfRangeError(
      absl::StrFormat("block id %d is not in [0, %d)", block_id, view.num_blocks));
}

// Layer `layer`'s K (or V) bytes of block `block_id`. OutOfRange for a bad block id or layer.
[[nodiscard]] inline absl::StatusOr<std::span<uint8_t>> LayerBlock(const KvCacheView& view,
                                                                   int32_t layer, int32_t block_id,
                                                                   bool value) {
  if (absl::Status s = CheckBlockId(view, block_id); !s.ok()) return s;
  if (layer < 0 || layer >= view.layout.num_layers) {
    return absl::OutOfRangeError(
        absl::StrFormat("layer %d is not in [0, %d)", layer, view.layout.num_layers));
  }
  const int64_t bytes = view.layout.layer_block_bytes();
  uint8_t* base = value ? view.v[layer] : view.k[layer];
  return std::span<uint8_t>(base + block_id * bytes, static_cast<size_t>(bytes));
}
[[nodiscard]] inline absl::StatusOr<std::span<uint8_t>> KBlock(const KvCacheView& view,
                                                               int32_t layer, int32_t block_id) {
  return LayerBlock(view, layer, block_id, /*value=*/false);
}
[[nodiscard]] inline absl::StatusOr<std::span<uint8_t>> VBlock(const KvCacheView& view,
                                                               int32_t layer, int32_t block_id) {
  return LayerBlock(view, layer, block_id, /*value=*/true);
}

// Copies block `block_id` into `out` in wire order (layout.block_bytes() bytes). The caller
// has checked the id (CheckBlockId) and sized `out`; a bad id here is a bug.
inline void CopyBlockOut(const KvCacheView& view, int32_t block_id, uint8_t* out) {
  const int64_t bytes = view.layout.layer_block_bytes();
  const int64_t offset = block_id * bytes;
  for (int32_t l = 0; l < view.layout.num_layers; ++l) {
    std::memcpy(out, view.k[l] + offset, static_cast<size_t>(bytes));
    out += bytes;
    std::memcpy(out, view.v[l] + offset, static_cast<size_t>(bytes));
    out += bytes;
  }
}

// Copies one block in wire order (layout.block_bytes() bytes at `in`) into block `block_id`.
// Same preconditions as CopyBlockOut.
inline void CopyBlockIn(const KvCacheView& view, int32_t block_id, const uint8_t* in) {
  const int64_t bytes = view.layout.layer_block_bytes();
  const int64_t offset = block_id * bytes;
  for (int32_t l = 0; l < view.layout.num_layers; ++l) {
    std::memcpy(view.k[l] + offset, in, static_cast<size_t>(bytes));
    in += bytes;
    std::memcpy(view.v[l] + offset, in, static_cast<size_t>(bytes));
    in += bytes;
  }
}

}  // namespace vllm::kv_transfer

#endif  // VLLM_KV_TRANSFER_KV_CACHE_VIEW_H_
