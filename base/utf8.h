// UTF-8 validation and lossy repair, shared by the tokenizer, the detokenizer and the chat
// templates (header-only, no dependencies).
#ifndef VLLM_BASE_UTF8_H_
#define VLLM_BASE_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vllm::base {

// The replacement character U+FFFD in UTF-8.
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

namespace utf8_internal {

constexpr bool InRange(uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; }

struct Prefix {
  size_t length;
  bool complete;
};

// Bytes of the maximal prefix of a (possibly ill-formed) sequence at `pos` that could still
// begin a valid sequence, and whether the whole sequence is complete. Follows Table 3-7 of
// the Unicode standard (well-formed UTF-8 byte sequences).
inline Prefix ScanSequence(std::string_view s, size_t pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) return {1, true};
  size_t need = 0;
  uint8_t lo = 0x80;
  uint8_t hi = 0xBF;
  if (InRange(b0, 0xC2, 0xDF)) {
    need = 1;
  } else if (b0 == 0xE0) {
    need = 2, lo = 0xA0;
  } else if (InRange(b0, 0xE1, 0xEC) || InRange(b0, 0xEE, 0xEF)) {
    need = 2;
  } else if (b0 == 0xED) {
    need = 2, hi = 0x9F;
  } else if (b0 == 0xF0) {
    need = 3, lo = 0x90;
  } else if (InRange(b0, 0xF1, 0xF3)) {
    need = 3;
  } else if (b0 == 0xF4) {
    need = 3, hi = 0x8F;
  } else {
    return {1, false};
  }
  size_t len = 1;
  for (size_t i = 0; i < need; ++i) {
    if (pos + len >= s.size()) return {len, false};
    const auto b = static_cast<uint8_t>(s[pos + len]);
    if (!(i == 0 ? InRange(b, lo, hi) : InRange(b, 0x80, 0xBF))) return {len, false};
    ++len;
  }
  return {len, true};
}

}  // namespace utf8_internal

// Length of the valid UTF-8 sequence starting at `s[pos]`, or 0 when the bytes there are not
// a complete, well-formed sequence (overlong, surrogate, > U+10FFFF, truncated).
[[nodiscard]] inline size_t ValidUtf8SequenceLength(std::string_view s, size_t pos) {
  const utf8_internal::Prefix p = utf8_internal::ScanSequence(s, pos);
  return p.complete ? p.length : 0;
}

// Returns `bytes` with every ill-formed subsequence replaced by U+FFFD, one replacement per
// maximal subpart as the Unicode standard recommends; Rust's String::from_utf8_lossy (used
// by HF tokenizers' decoders) and Python's bytes.decode(errors="replace") do the same, so
// decoded text matches them byte for byte. Valid input is returned unchanged.
[[nodiscard]] inline std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const utf8_internal::Prefix p = utf8_internal::ScanSequence(bytes, pos);
    if (p.complete) {
      out.append(bytes.substr(pos, p.length));
    } else {
      out.append(kReplacementChar);
    }
    pos += p.length;
  }
  return out;
}

// True when `s` is entirely well-formed UTF-8.
[[nodiscard]] inline bool IsValidUtf8(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const utf8_internal::Prefix p = utf8_internal::ScanSequence(s, pos);
    if (!p.complete) return false;
    pos += p.length;
  }
  return true;
}

// Number of code points in a well-formed UTF-8 string (continuation bytes are not counted).
[[nodiscard]] inline size_t CountCodePoints(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

// Appends `cp` (< 0x110000, not a surrogate) as UTF-8.
inline void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace vllm::base

#endif  // VLLM_BASE_UTF8_H_
