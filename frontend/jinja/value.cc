#include "frontend/jinja/value.h"

#include <string.h>  // memmem (GNU)

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/python_repr.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend::jinja {
namespace {

// Per element of a list or map in weight(): about what one takes in memory, so a container
// within kMaxValueBytes has at most ~1M elements.
constexpr size_t kElementWeight = 64;

void JsonString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    if (out->size() > kMaxValueBytes) return;  // the caller rejects the result anyway
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (static_cast<uint8_t>(c) < 0x20) {
          constexpr char kHex[] = "0123456789abcdef";
          *out += "\\u00";
          out->push_back(kHex[static_cast<uint8_t>(c) >> 4]);
          out->push_back(kHex[static_cast<uint8_t>(c) & 0xF]);
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

std::string StringRepr(const std::string& s) {
  // Python prefers single quotes unless the string has ' and no ".
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out.push_back(c);
    }
  }
  out.push_back(q);
  return out;
}

}  // namespace

size_t FindSubstring(std::string_view haystack, std::string_view needle, size_t pos) {
  if (pos > haystack.size()) return std::string_view::npos;
  if (needle.empty()) return pos;
  const void* at =
      memmem(haystack.data() + pos, haystack.size() - pos, needle.data(), needle.size());
  return at == nullptr ? std::string_view::npos
                       : static_cast<size_t>(static_cast<const char*>(at) - haystack.data());
}

void Value::AddAsElement(size_t* weight, int* depth) const {
  *weight += kElementWeight;
  if (const auto* s = std::get_if<std::string>(&v_)) {
    *weight += s->size();
  } else if (const auto* list = std::get_if<std::shared_ptr<ListBox>>(&v_)) {
    *weight += (*list)->weight;
    *depth = std::max(*depth, (*list)->depth + 1);
  } else if (const auto* map = std::get_if<std::shared_ptr<MapBox>>(&v_)) {
    size_t w = (*map)->weight;
    int d = (*map)->depth;
    if ((*map)->is_namespace) Measure((*map)->map, &w, &d);
    *weight += w;
    *depth = std::max(*depth, d + 1);
  } else {
    *weight += 1;
  }
}

void Value::Measure(const List& list, size_t* weight, int* depth) {
  *weight = 1;
  *depth = 1;
  for (const Value& v : list) v.AddAsElement(weight, depth);
}

void Value::Measure(const Map& map, size_t* weight, int* depth) {
  *weight = 1;
  *depth = 1;
  for (const auto& [k, v] : map) {
    *weight += k.size();
    v.AddAsElement(weight, depth);
  }
}

Value::Value(List l) {
  auto box = std::make_shared<ListBox>();
  box->list = std::move(l);
  Measure(box->list, &box->weight, &box->depth);
  v_ = std::move(box);
}

Value Value::MakeMap(Map m, bool is_namespace) {
  Value v;
  auto box = std::make_shared<MapBox>();
  box->map = std::move(m);
  box->is_namespace = is_namespace;
  Measure(box->map, &box->weight, &box->depth);
  v.v_ = std::move(box);
  return v;
}

size_t Value::weight() const {
  size_t weight = 0;
  int depth = 0;
  AddAsElement(&weight, &depth);
  return weight - kElementWeight;
}

int Value::depth() const {
  size_t weight = 0;
  int depth = 0;
  AddAsElement(&weight, &depth);
  return depth == 0 ? 0 : depth - 1;
}

double Value::as_double() const {
  if (is_int()) return static_cast<double>(as_int());
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  return std::get<double>(v_);
}

bool Value::Truthy() const {
  if (is_undefined() || is_none()) return false;
  if (is_bool()) return as_bool();
  if (is_int()) return as_int() != 0;
  if (is_double()) return as_double() != 0.0;
  if (is_string()) return !as_string().empty();
  if (is_list()) return !as_list().empty();
  return !as_map().empty();
}

std::string Value::ToString() const {
  if (is_undefined()) return "";
  if (is_string()) return as_string();
  return Repr();
}

std::string Value::Repr() const {
  std::string out;
  AppendRepr(&out);
  return out;
}

void Value::AppendRepr(std::string* out) const {
  if (out->size() > kMaxValueBytes) return;  // the caller rejects the result anyway
  if (is_undefined()) return;
  if (is_none()) {
    *out += "None";
  } else if (is_bool()) {
    *out += as_bool() ? "True" : "False";
  } else if (is_int()) {
    absl::StrAppend(out, as_int());
  } else if (is_double()) {
    *out += base::PythonFloatRepr(as_double());
  } else if (is_string()) {
    *out += StringRepr(as_string());
  } else if (is_list()) {
    out->push_back('[');
    for (size_t i = 0; i < as_list().size() && out->size() <= kMaxValueBytes; ++i) {
      if (i) *out += ", ";
      as_list()[i].AppendRepr(out);
    }
    out->push_back(']');
  } else {
    if (is_namespace()) *out += "<Namespace ";
    out->push_back('{');
    for (size_t i = 0; i < as_map().size() && out->size() <= kMaxValueBytes; ++i) {
      if (i) *out += ", ";
      *out += StringRepr(as_map()[i].first);
      *out += ": ";
      as_map()[i].second.AppendRepr(out);
    }
    out->push_back('}');
    if (is_namespace()) out->push_back('>');
  }
}

void Value::AppendJson(std::string* out, int indent, int depth) const {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(indent * d), ' ');
  };
  if (is_undefined() || is_none()) {
    *out += "null";
  } else if (is_bool()) {
    *out += as_bool() ? "true" : "false";
  } else if (is_int()) {
    absl::StrAppend(out, as_int());
  } else if (is_double()) {
    const double d = as_double();
    *out += std::isnan(d)   ? "NaN"
            : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                            : base::PythonFloatRepr(d);
  } else if (is_string()) {
    JsonString(as_string(), out);
  } else if (is_list()) {
    if (as_list().empty()) {
      *out += "[]";
      return;
    }
    out->push_back('[');
    for (size_t i = 0; i < as_list().size() && out->size() <= kMaxValueBytes; ++i) {
      if (i) *out += indent < 0 ? ", " : ",";
      newline(depth + 1);
      as_list()[i].AppendJson(out, indent, depth + 1);
    }
    newline(depth);
    out->push_back(']');
  } else {
    if (as_map().empty()) {
      *out += "{}";
      return;
    }
    out->push_back('{');
    for (size_t i = 0; i < as_map().size() && out->size() <= kMaxValueBytes; ++i) {
      if (i) *out += indent < 0 ? ", " : ",";
      newline(depth + 1);
      JsonString(as_map()[i].first, out);
      *out += ": ";
      as_map()[i].second.AppendJson(out, indent, depth + 1);
    }
    newline(depth);
    out->push_back('}');
  }
}

std::string Value::ToJson(int indent) const {
  std::string out;
  AppendJson(&out, indent, 0);
  return out;
}

bool Value::Equals(const Value& o) const {
  if ((is_number() || is_bool()) && (o.is_number() || o.is_bool())) {
    if (is_double() || o.is_double()) return as_double() == o.as_double();
    const int64_t a = is_bool() ? as_bool() : as_int();
    const int64_t b = o.is_bool() ? o.as_bool() : o.as_int();
    return a == b;
  }
  if (v_.index() != o.v_.index()) return false;
  if (is_undefined() || is_none()) return true;
  if (is_string()) return as_string() == o.as_string();
  if (is_list()) {
    if (as_list().size() != o.as_list().size()) return false;
    for (size_t i = 0; i < as_list().size(); ++i) {
      if (!as_list()[i].Equals(o.as_list()[i])) return false;
    }
    return true;
  }
  if (as_map().size() != o.as_map().size()) return false;
  for (const auto& [k, v] : as_map()) {
    if (!v.Equals(o.Get(k))) return false;
  }
  return true;
}

Value Value::Get(const std::string& key) const {
  if (!is_map()) return Value();
  for (const auto& [k, v] : as_map()) {
    if (k == key) return v;
  }
  return Value();
}

std::string Value::TypeName() const {
  if (is_undefined()) return "Undefined";
  if (is_none()) return "NoneType";
  if (is_bool()) return "bool";
  if (is_int()) return "int";
  if (is_double()) return "float";
  if (is_string()) return "str";
  if (is_list()) return "list";
  return is_namespace() ? "Namespace" : "dict";
}

namespace {

// A JSON input as a template value: null is None, objects are dicts in their key order,
// integers beyond int64 floats. Bounded: depth (recursion) and weight as every value.
absl::StatusOr<Value> ValueFromJsonAt(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template: an input nests deeper than ", kMaxValueDepth, " levels"));
  }
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& x : j) {
        absl::StatusOr<Value> v = ValueFromJsonAt(x, depth + 1);
        if (!v.ok()) return v;
        items.push_back(*std::move(v));
      }
      return Value(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Map m;
      m.reserve(j.size());
      for (const auto& [k, x] : j.items()) {
        absl::StatusOr<Value> v = ValueFromJsonAt(x, depth + 1);
        if (!v.ok()) return v;
        m.emplace_back(k, *std::move(v));
      }
      return Value::MakeMap(std::move(m));
    }
    default:
      return Value(None{});
  }
}

}  // namespace

absl::StatusOr<Value> ValueFromJson(const nlohmann::ordered_json& j) {
  absl::StatusOr<Value> v = ValueFromJsonAt(j, 0);
  if (v.ok() && v->weight() > kMaxValueBytes) {
    return absl::InvalidArgumentError("chat template: an input is larger than 64 MiB");
  }
  return v;
}

}  // namespace vllm::frontend::jinja
