// Values of the chat-template interpreter (frontend/jinja/chat_template.h): a small dynamic type
// with Python/Jinja semantics for truthiness, printing, equality and JSON.
// Internal to frontend/jinja/ (its API is chat_template.h): tools/lint/check_layering.py
// refuses an include of it from elsewhere.
#ifndef VLLM_FRONTEND_JINJA_VALUE_H_
#define VLLM_FRONTEND_JINJA_VALUE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace vllm::frontend::jinja {

// Resource bounds of one render. No string (and no container, measured by weight() below) may
// exceed kMaxValueBytes, nor nest deeper than kMaxValueDepth; so printing, comparing or
// destroying any value is bounded in time, memory and recursion.
inline constexpr size_t kMaxValueBytes = size_t{64} << 20;
inline constexpr int kMaxValueDepth = 128;

// Offset of the first `needle` in `haystack` at or after `pos` (npos when absent), in time
// linear in the sizes (memmem; std::string::find is O(size * needle size) at worst).
size_t FindSubstring(std::string_view haystack, std::string_view needle, size_t pos = 0);

class Value;
using List = std::vector<Value>;
// Insertion-ordered like a Python dict (tojson and iteration keep the order).
using Map = std::vector<std::pair<std::string, Value>>;

// Jinja's Undefined: a missing variable, key or attribute. Prints as "", is falsy.
struct Undefined {};
struct None {};

// A value. Lists and maps are shared (copying a Value is cheap); a namespace() object is a
// map that `{% set ns.attr = ... %}` mutates in place, so every copy sees the change.
class Value {
 public:
  Value() : v_(Undefined{}) {}
  Value(None) : v_(None{}) {}                    // NOLINT: implicit by design
  Value(bool b) : v_(b) {}                       // NOLINT
  Value(int64_t i) : v_(i) {}                    // NOLINT
  Value(int i) : v_(static_cast<int64_t>(i)) {}  // NOLINT
  Value(double d) : v_(d) {}                     // NOLINT
  Value(std::string s) : v_(std::move(s)) {}     // NOLINT
  Value(const char* s) : v_(std::string(s)) {}   // NOLINT
  Value(List l);                                 // NOLINT
  static Value MakeMap(Map m, bool is_namespace = false);

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_double() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_int() || is_double(); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<ListBox>>(v_); }
  bool is_map() const { return std::holds_alternative<std::shared_ptr<MapBox>>(v_); }
  bool is_namespace() const {
    return is_map() && std::get<std::shared_ptr<MapBox>>(v_)->is_namespace;
  }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  // Numeric value of an int, double or bool.
  double as_double() const;
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const List& as_list() const { return std::get<std::shared_ptr<ListBox>>(v_)->list; }
  const Map& as_map() const { return std::get<std::shared_ptr<MapBox>>(v_)->map; }
  // The shared map itself, for namespace attribute assignment.
  Map& mutable_map() const { return std::get<std::shared_ptr<MapBox>>(v_)->map; }

  // The size of the value written out in full: a string's bytes; for a list or map, 64 per
  // element plus its elements' (and keys') weights, counting a shared element each time it
  // appears; 1 for anything else. O(1) (cached), except a namespace's (O(attributes)).
  size_t weight() const;
  // Nesting depth: 0 for a scalar or string, 1 + the deepest element for a list or map.
  int depth() const;

  // Python truthiness (Undefined and None are false).
  bool Truthy() const;
  // str(value) as Jinja prints it: None, True/False, Python float repr, lists as repr.
  // Printing stops soon after the text passes kMaxValueBytes (callers reject such a result).
  std::string ToString() const;
  // repr(value) (strings quoted), used inside printed lists and maps. Stops as ToString.
  std::string Repr() const;
  // json.dumps(value, ensure_ascii=False) with Python's default separators; `indent` >= 0
  // pretty-prints like json.dumps(indent=...). Undefined prints as null. Stops as ToString.
  std::string ToJson(int indent = -1) const;
  // Python ==.
  bool Equals(const Value& other) const;
  // A key's value in a map, or Undefined.
  Value Get(const std::string& key) const;
  // Python type name for error messages.
  std::string TypeName() const;

 private:
  struct ListBox {
    List list;
    size_t weight = 0;
    int depth = 1;
  };
  // A namespace's map changes after creation: its weight and depth are computed when asked.
  struct MapBox {
    Map map;
    bool is_namespace = false;
    size_t weight = 0;
    int depth = 1;
  };
  // Adds this value's weight as an element of a container (kElementWeight more) to *weight
  // and raises *depth to its depth + 1.
  void AddAsElement(size_t* weight, int* depth) const;
  static void Measure(const List& list, size_t* weight, int* depth);
  static void Measure(const Map& map, size_t* weight, int* depth);
  void AppendRepr(std::string* out) const;
  void AppendJson(std::string* out, int indent, int depth) const;
  std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<ListBox>,
               std::shared_ptr<MapBox>>
      v_;
};

// A JSON input (ChatTemplate::RenderJson) as a value: null is None, objects are maps in their
// key order, integers beyond int64 doubles. InvalidArgument when it nests deeper than
// kMaxValueDepth (checked before recursing) or weighs over kMaxValueBytes.
absl::StatusOr<Value> ValueFromJson(const nlohmann::ordered_json& j);

}  // namespace vllm::frontend::jinja

#endif  // VLLM_FRONTEND_JINJA_VALUE_H_
