// Extracts the CPU RotaryEmbedding's cos/sin table by rotating unit vectors.
#include "kernels/cuda/rope_table.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace vllm::kernels::cuda {

std::vector<float> RopeCosSinTable(const cpu::RotaryEmbedding& rope) {
  const int32_t head_dim = rope.head_dim();
  const int32_t half = head_dim / 2;
  const int64_t max_position = rope.max_position();
  // One query head per position holding (1, 0) in every pair: after the rotation, element i
  // is 1·cos - 0·sin = cos and element i + half is 0·cos + 1·sin = sin, both exact.
  std::vector<float> table(static_cast<size_t>(max_position) * head_dim);
  for (int64_t pos = 0; pos < max_position; ++pos) {
    float* row = table.data() + pos * head_dim;
    std::fill(row, row + half, 1.0f);
    std::fill(row + half, row + head_dim, 0.0f);
  }
  std::vector<int32_t> positions(static_cast<size_t>(max_position));
  std::iota(positions.begin(), positions.end(), 0);
  float unused_k = 0.0f;
  rope.Apply(positions.data(), max_position, table.data(), 1, &unused_k, 0);
  return table;
}

}  // namespace vllm::kernels::cuda
