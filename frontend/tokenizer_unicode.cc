#include "frontend/tokenizer_unicode.h"

#include <array>

namespace vllm::frontend {
namespace {

bool InRange(uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; }

// Bytes of the maximal prefix of a (possibly ill-formed) sequence at `pos` that could still
// begin a valid sequence, and whether the whole sequence is complete. Follows Table 3-7 of
// the Unicode standard (well-formed UTF-8 byte sequences).
struct Prefix {
  size_t length;
  bool complete;
};

Prefix ScanSequence(std::string_view s, size_t pos) {
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
    // Only the second byte has the narrowed range; later ones are plain continuations.
    if (!(i == 0 ? InRange(b, lo, hi) : InRange(b, 0x80, 0xBF))) return {len, false};
    ++len;
  }
  return {len, true};
}

struct ByteLevelTables {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 0x180> code_point_to_byte;  // -1 where not in the alphabet
};

std::string EncodeCodePoint(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

const ByteLevelTables& Tables() {
  static const ByteLevelTables* const tables = [] {
    auto* t = new ByteLevelTables;
    t->code_point_to_byte.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable =
          InRange(b, '!', '~') || InRange(b, 0xA1, 0xAC) || InRange(b, 0xAE, 0xFF);
      const uint32_t cp = printable ? b : next++;
      t->byte_to_utf8[b] = EncodeCodePoint(cp);
      t->code_point_to_byte[cp] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return *tables;
}

}  // namespace

size_t ValidUtf8SequenceLength(std::string_view s, size_t pos) {
  const Prefix p = ScanSequence(s, pos);
  return p.complete ? p.length : 0;
}

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Prefix p = ScanSequence(bytes, pos);
    if (p.complete) {
      out.append(bytes.substr(pos, p.length));
    } else {
      out.append(kReplacementChar);
    }
    pos += p.length;
  }
  return out;
}

bool IsValidUtf8(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const Prefix p = ScanSequence(s, pos);
    if (!p.complete) return false;
    pos += p.length;
  }
  return true;
}

size_t CountCodePoints(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

const std::string& ByteToUnicode(uint8_t byte) { return Tables().byte_to_utf8[byte]; }

std::optional<uint8_t> UnicodeToByte(std::string_view s, size_t pos, size_t len) {
  uint32_t cp = 0;
  if (len == 1) {
    cp = static_cast<uint8_t>(s[pos]);
  } else if (len == 2) {
    cp = ((static_cast<uint8_t>(s[pos]) & 0x1Fu) << 6) | (static_cast<uint8_t>(s[pos + 1]) & 0x3Fu);
  } else {
    return std::nullopt;
  }
  if (cp >= Tables().code_point_to_byte.size()) return std::nullopt;
  const int16_t b = Tables().code_point_to_byte[cp];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

}  // namespace vllm::frontend
