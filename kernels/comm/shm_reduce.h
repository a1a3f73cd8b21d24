// The arithmetic of ShmCommunicator: element-wise sums of float arrays in a fixed order.
#ifndef VLLM_KERNELS_COMM_SHM_REDUCE_H_
#define VLLM_KERNELS_COMM_SHM_REDUCE_H_

#include <cstddef>
#include <cstdint>

namespace vllm::kernels::comm {

// out[i] = ((src[0][offset + i] + src[1][offset + i]) + src[2][offset + i]) + ... for
// i in [0, count), summing the n >= 1 sources in index order, so every caller gets
// bit-identical results. `out` may be one of the sources (shifted by `offset`); the sources
// must not otherwise overlap `out`. Pointers need only float alignment. Thread-safe.
void SumInRankOrder(const float* const* src, int32_t n, size_t offset, size_t count, float* out);

}  // namespace vllm::kernels::comm

#endif  // VLLM_KERNELS_COMM_SHM_REDUCE_H_
