// UTF-8 and GPT-2 byte-level helpers shared by the tokenizer and the detokenizer.
#ifndef VLLM_FRONTEND_TOKENIZER_UNICODE_H_
#define VLLM_FRONTEND_TOKENIZER_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vllm::frontend {

// The replacement character U+FFFD in UTF-8.
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// Length of the valid UTF-8 sequence starting at `s[pos]`, or 0 when the bytes there are not
// a complete, well-formed sequence (overlong, surrogate, > U+10FFFF, truncated).
[[nodiscard]] size_t ValidUtf8SequenceLength(std::string_view s, size_t pos);

// Returns `bytes` with every ill-formed subsequence replaced by U+FFFD, one replacement per
// maximal subpart as the Unicode standard recommends; Rust's String::from_utf8_lossy (used
// by HF tokenizers' decoders) and Python's bytes.decode(errors="replace") do the same, so
// decoded text matches them byte for byte. Valid input is returned unchanged.
[[nodiscard]] std::string Utf8Lossy(std::string_view bytes);

// True when `s` is entirely well-formed UTF-8.
[[nodiscard]] bool IsValidUtf8(std::string_view s);

// Number of code points in a well-formed UTF-8 string (continuation bytes are not counted).
[[nodiscard]] size_t CountCodePoints(std::string_view s);

// GPT-2's byte-level alphabet: each of the 256 byte values is shown as a printable code
// point (printable Latin-1 maps to itself, the rest to U+0100 + n). Returns its UTF-8.
[[nodiscard]] const std::string& ByteToUnicode(uint8_t byte);

// Inverse of ByteToUnicode for the code point encoded at `s[pos..pos+len)`; nullopt when the
// code point is not in the byte-level alphabet.
[[nodiscard]] std::optional<uint8_t> UnicodeToByte(std::string_view s, size_t pos, size_t len);

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_TOKENIZER_UNICODE_H_
