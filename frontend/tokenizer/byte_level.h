// GPT-2's byte-level alphabet, shared by the tokenizer and the detokenizer. (UTF-8 validation
// and repair are base/utf8.h.)
#ifndef VLLM_FRONTEND_TOKENIZER_BYTE_LEVEL_H_
#define VLLM_FRONTEND_TOKENIZER_BYTE_LEVEL_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vllm::frontend {

// Each of the 256 byte values shown as a printable code point (printable Latin-1 maps to
// itself, the rest to U+0100 + n). Returns its UTF-8.
[[nodiscard]] const std::string& ByteToUnicode(uint8_t byte);

// Inverse of ByteToUnicode for the code point encoded at `s[pos..pos+len)`; nullopt when the
// code point is not in the byte-level alphabet.
[[nodiscard]] std::optional<uint8_t> UnicodeToByte(std::string_view s, size_t pos, size_t len);

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_TOKENIZER_BYTE_LEVEL_H_
