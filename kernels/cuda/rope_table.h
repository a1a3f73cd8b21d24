// The rotary cos/sin table for the CUDA backend, taken from the CPU reference so both
// backends rotate with the same numbers (host code; no device calls).
#ifndef VLLM_KERNELS_CUDA_ROPE_TABLE_H_
#define VLLM_KERNELS_CUDA_ROPE_TABLE_H_

#include <vector>

#include "kernels/cpu/ops.h"

namespace vllm::kernels::cuda {

// kernels::cpu::RotaryEmbedding's table, [max_position, head_dim] float: per position
// head_dim / 2 cosines then head_dim / 2 sines. Read off `rope` itself (rotating the unit
// vector (1, 0) of every pair gives (cos, sin) exactly), so the formula, HF's float32
// rounding and the llama3 / linear scaling live in one place. The caller copies it to the
// device for cuda::RotaryEmbedding. Cost: one rotation per table entry. Thread-safe.
std::vector<float> RopeCosSinTable(const cpu::RotaryEmbedding& rope);

}  // namespace vllm::kernels::cuda

#endif  // VLLM_KERNELS_CUDA_ROPE_TABLE_H_
