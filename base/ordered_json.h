// ParseOrderedJson: ParseJson's bounds and errors, into an nlohmann::ordered_json that keeps
// every object's keys in the order the text has them (as Python's json.loads does). Request
// bodies are read this way because the order is meaning: a JSON schema's properties are
// generated in it, a chat template's `tools | tojson` renders it.
//
// nlohmann's own ordered parse finds each key by a linear search of its object (O(n²) for an
// object of n keys: a 1 MB body of 100,000 keys takes seconds); this builder indexes each open
// object's keys in a hash map, so a parse is linear. A key given twice keeps its first place
// and its last value (Python's dict; nlohmann::json keeps the last value too). Never throws,
// never recurses on the input.
#ifndef VLLM_BASE_ORDERED_JSON_H_
#define VLLM_BASE_ORDERED_JSON_H_

#include <cstddef>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/json_util.h"
#include "base/status_param.h"
#include "nlohmann/json.hpp"

namespace vllm::base {

namespace ordered_json_internal {

// nlohmann's SAX interface, building the value with one frame per open array or object.
class Builder {
 public:
  using Json = nlohmann::ordered_json;

  bool null() { return Add(Json()); }
  bool boolean(bool v) { return Add(Json(v)); }
  bool number_integer(Json::number_integer_t v) { return Add(Json(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return Add(Json(v)); }
  bool number_float(Json::number_float_t v, const std::string&) { return Add(Json(v)); }
  bool string(Json::string_t& v) { return Add(Json(std::move(v))); }
  bool binary(Json::binary_t& v) { return Add(Json::binary(std::move(v))); }
  bool start_object(std::size_t) {
    frames_.push_back(Frame{Json::object(), {}, {}});
    return true;
  }
  bool key(Json::string_t& k) {
    frames_.back().key = std::move(k);
    return true;
  }
  bool end_object() { return Close(); }
  bool start_array(std::size_t) {
    frames_.push_back(Frame{Json::array(), {}, {}});
    return true;
  }
  bool end_array() { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error_ = e.what();
    return false;
  }

  Json& root() { return root_; }
  const std::string& error() const { return error_; }

 private:
  struct Frame {
    Json value;
    std::string key;                                 // the key of the next value (objects)
    absl::flat_hash_map<std::string, size_t> index;  // key -> its place (objects)
  };

  bool Add(Json v) {
    if (frames_.empty()) {
      root_ = std::move(v);
      return true;
    }
    Frame& f = frames_.back();
    if (f.value.is_array()) {
      f.value.get_ref<Json::array_t&>().push_back(std::move(v));
      return true;
    }
    auto& items = static_cast<Json::object_t::Container&>(f.value.get_ref<Json::object_t&>());
    const auto [it, inserted] = f.index.try_emplace(f.key, items.size());
    if (inserted) {
      items.emplace_back(std::move(f.key), std::move(v));
    } else {
      items[it->second].second = std::move(v);
    }
    return true;
  }
  bool Close() {
    Json v = std::move(frames_.back().value);
    frames_.pop_back();
    return Add(std::move(v));
  }

  std::vector<Frame> frames_;
  Json root_;
  std::string error_;
};

}  // namespace ordered_json_internal

[[nodiscard]] inline absl::StatusOr<nlohmann::ordered_json> ParseOrderedJson(
    std::string_view text, absl::string_view what, int max_depth = kMaxJsonDepth) {
  if (JsonNestingDepth(text, max_depth) > max_depth) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": arrays and objects nest deeper than the limit of ", max_depth, " levels"));
  }
  try {
    ordered_json_internal::Builder builder;
    if (!nlohmann::ordered_json::sax_parse(text.begin(), text.end(), &builder)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", builder.error()));
    }
    return std::move(builder.root());
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": out of memory while parsing"));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", e.what()));
  }
}

// A request field: `object`'s member `name`, or null when it is absent or JSON null (OpenAI's
// "unset").
inline const nlohmann::ordered_json* FindField(const nlohmann::ordered_json& object,
                                               const char* name) {
  const auto it = object.find(name);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

// InvalidParam naming `field`: "<field> must be <expected>, got <the value's JSON type>".
[[nodiscard]] inline absl::Status WrongTypeParam(const std::string& field, const char* expected,
                                                 const nlohmann::ordered_json& value) {
  return InvalidParam(field,
                      absl::StrCat(field, " must be ", expected, ", got ", value.type_name()));
}

}  // namespace vllm::base

#endif  // VLLM_BASE_ORDERED_JSON_H_
