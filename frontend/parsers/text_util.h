// Small text helpers of the parsers: finding tags in a stream whose pieces may split them.
// Internal to frontend/parsers/.
#ifndef VLLM_FRONTEND_PARSERS_TEXT_UTIL_H_
#define VLLM_FRONTEND_PARSERS_TEXT_UTIL_H_

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace vllm::frontend::parsers {

// The length of the longest suffix of `text` that is a proper prefix of `tag`: how much of
// the text's end must be held back because the next piece may complete the tag. 0 when
// none. O(tag size²), tags are a few bytes.
inline size_t PartialTagOverlap(std::string_view text, std::string_view tag) {
  const size_t longest = std::min(text.size(), tag.size() - 1);
  for (size_t n = longest; n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

// JSON's (and Python's, between tokens) whitespace.
inline bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Python's str.isspace() for ASCII, as str.strip() uses it.
inline bool IsAsciiSpace(char c) { return IsJsonSpace(c) || c == '\v' || c == '\f'; }

// `text` without leading and trailing ASCII whitespace (Python's str.strip() on ASCII).
inline std::string_view StripAscii(std::string_view text) {
  while (!text.empty() && IsAsciiSpace(text.front())) text.remove_prefix(1);
  while (!text.empty() && IsAsciiSpace(text.back())) text.remove_suffix(1);
  return text;
}

}  // namespace vllm::frontend::parsers

#endif  // VLLM_FRONTEND_PARSERS_TEXT_UTIL_H_
