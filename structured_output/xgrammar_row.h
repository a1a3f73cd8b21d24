// One bitmask row as the DLTensor XGrammar's matcher fills (internal to structured_output/).
#ifndef VLLM_STRUCTURED_OUTPUT_XGRAMMAR_ROW_H_
#define VLLM_STRUCTURED_OUTPUT_XGRAMMAR_ROW_H_

#include <cstdint>
#include <span>

#include "xgrammar/xgrammar.h"

namespace vllm::structured_output {

// Writes the tokens `matcher` allows next into `row` (int32 words, bit j of word w: token
// 32w + j).
inline void FillRow(xgrammar::GrammarMatcher& matcher, std::span<int32_t> row) {
  int64_t shape[1] = {static_cast<int64_t>(row.size())};
  DLTensor t{};
  t.data = row.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = DLDataType{kDLInt, 32, 1};
  t.shape = shape;
  matcher.FillNextTokenBitmask(&t);
}

}  // namespace vllm::structured_output

#endif  // VLLM_STRUCTURED_OUTPUT_XGRAMMAR_ROW_H_
