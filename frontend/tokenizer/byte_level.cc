#include "frontend/tokenizer/byte_level.h"

#include <array>

namespace vllm::frontend {
namespace {

bool InRange(uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; }

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
  static const ByteLevelTables* const kTables = [] {
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
  return *kTables;
}

}  // namespace

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
