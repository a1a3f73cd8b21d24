// Structured outputs on the device: the grammar's packed token bitmask applied to logits rows
// in place (vLLM's apply_grammar_bitmask; kernels::cpu::ApplyTokenBitmask per row).
//
// Grid: x = mask row, y = a chunk of the vocabulary (a multiple of 32 tokens, so each warp
// reads one bitmask word per pass). A row that allows nothing must stay unchanged, which needs
// the whole row: every block first ORs its mask row's words (L2-resident, vocab / 8 bytes)
// and leaves when none is set, then writes -inf over its own chunk. The number of chunks per
// row shrinks as rows grow, so that whole-row check costs about as much as the writes.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace vllm::kernels::cuda {
namespace {

constexpr int kThreads = 256;
// A chunk is at least this many tokens; the grid aims for about kTargetBlocks blocks.
constexpr int64_t kMinChunk = 2048;
constexpr int64_t kTargetBlocks = 1024;
constexpr int64_t kMaxChunksPerRow = 65535;  // gridDim.y

template <typename T>
__global__ void __launch_bounds__(kThreads)
    TokenBitmaskKernel(T* __restrict__ logits, int64_t vocab_size,
                       const int32_t* __restrict__ bitmask, const int32_t* __restrict__ logits_rows,
                       int64_t chunk) {
  const int64_t words = (vocab_size + 31) / 32;
  const auto* mask = reinterpret_cast<const uint32_t*>(bitmask) + blockIdx.x * words;
  // Bits past vocab_size in the last word are not tokens.
  const int tail = static_cast<int>(vocab_size % 32);
  uint32_t any = 0;
  for (int64_t w = threadIdx.x; w < words; w += blockDim.x) {
    const uint32_t valid = (w == words - 1 && tail != 0) ? (1u << tail) - 1 : 0xffffffffu;
    any |= mask[w] & valid;
  }
  if (__syncthreads_or(any != 0) == 0) return;  // allows nothing: the row is left as it is

  T* row = logits + static_cast<int64_t>(logits_rows[blockIdx.x]) * vocab_size;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t end = begin + chunk < vocab_size ? begin + chunk : vocab_size;
  const T masked = detail::FromFloat<T>(-__int_as_float(0x7f800000));
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    if (((mask[i >> 5] >> (i & 31)) & 1u) == 0) row[i] = masked;
  }
}

}  // namespace

template <typename T>
cudaError_t ApplyTokenBitmask(T* logits, int64_t vocab_size, const int32_t* bitmask,
                              const int32_t* logits_rows, int64_t num_masks, cudaStream_t stream) {
  if (num_masks <= 0 || vocab_size <= 0) return cudaSuccess;
  // Few rows: many chunks per row fill the GPU; many rows: few chunks, so the whole-row
  // check each block makes is not repeated needlessly.
  const int64_t max_chunks = (vocab_size + kMinChunk - 1) / kMinChunk;
  int64_t chunks = (kTargetBlocks + num_masks - 1) / num_masks;
  if (chunks > max_chunks) chunks = max_chunks;
  if (chunks > kMaxChunksPerRow) chunks = kMaxChunksPerRow;
  // Rounded up to whole words, so that no word straddles two blocks' chunks.
  int64_t chunk = (vocab_size + chunks - 1) / chunks;
  chunk = (chunk + 31) / 32 * 32;
  chunks = (vocab_size + chunk - 1) / chunk;
  const dim3 grid(static_cast<unsigned>(num_masks), static_cast<unsigned>(chunks));
  TokenBitmaskKernel<T><<<grid, detail::ThreadsFor(chunk, kThreads), 0, stream>>>(
      logits, vocab_size, bitmask, logits_rows, chunk);
  return cudaGetLastError();
}

#define VLLM_INSTANTIATE_TOKEN_BITMASK(T)                                                         \
  template cudaError_t ApplyTokenBitmask<T>(T*, int64_t, const int32_t*, const int32_t*, int64_t, \
                                            cudaStream_t);
VLLM_CUDA_INSTANTIATE_FOR_TYPES(VLLM_INSTANTIATE_TOKEN_BITMASK)

}  // namespace vllm::kernels::cuda
