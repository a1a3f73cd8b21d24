// Bounded JSON parsing for every input that comes from outside the process (HTTP request
// bodies, config.json, tokenizer.json, tokenizer_config.json).
//
// nlohmann::json parses iteratively, but several of its operations on the parsed value
// recurse once per nesting level (dump(), copies, comparisons), so a 200 KB body of 100,000
// '[' would overflow the stack in whatever code touches the value next (an error message that
// renders it, say). ParseJson therefore measures the nesting depth with a linear scan before
// parsing and refuses anything deeper than the limit; and it turns every exception the parser
// can throw (syntax errors, a number out of double range such as 1e309, allocation failure)
// into a Status.
#ifndef VLLM_BASE_JSON_UTIL_H_
#define VLLM_BASE_JSON_UTIL_H_

#include <cstddef>
#include <exception>
#include <new>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace vllm::base {

// Deepest nesting of arrays and objects accepted from outside. vLLM-compatible servers answer
// 400 well before Python's recursion limit (1000); real requests and model files need < 20.
inline constexpr int kMaxJsonDepth = 128;

// The nesting depth of arrays and objects in `text` (0 for a scalar), ignoring brackets inside
// strings; the scan stops once the depth exceeds `stop_above` and returns stop_above + 1. It
// does not validate `text` (the parser does): unbalanced brackets give a meaningless but
// bounded answer. O(n), no allocation, no recursion.
inline int JsonNestingDepth(std::string_view text, int stop_above) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > deepest) {
          deepest = depth;
          if (deepest > stop_above) return stop_above + 1;
        }
        break;
      case ']':
      case '}':
        --depth;
        break;
      default:
        break;
    }
  }
  return deepest;
}

// Parses `text` as one JSON value. InvalidArgument, starting with `what` (e.g. "Invalid JSON
// in request body", "config.json"), when the text is not JSON, holds a number outside the
// range of a double, or nests arrays/objects deeper than `max_depth`; ResourceExhausted when
// memory runs out. Never throws, never recurses on the input.
[[nodiscard]] inline absl::StatusOr<nlohmann::json> ParseJson(std::string_view text,
                                                              absl::string_view what,
                                                              int max_depth = kMaxJsonDepth) {
  if (JsonNestingDepth(text, max_depth) > max_depth) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": arrays and objects nest deeper than the limit of ", max_depth, " levels"));
  }
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", e.what()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": out of memory while parsing"));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", e.what()));
  }
}

}  // namespace vllm::base

#endif  // VLLM_BASE_JSON_UTIL_H_
