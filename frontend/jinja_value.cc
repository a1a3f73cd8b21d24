#include "frontend/jinja_value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace vllm::frontend::jinja {
namespace {

// Python's repr of a float: shortest round-trip digits, always with '.0' or an exponent.
std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d);
  std::string s(buf, res.ptr);
  const size_t e = s.find('e');
  if (e != std::string::npos) {
    // Python writes 1e+20 as "1e+20" and 1e-07 with two exponent digits.
    std::string mant = s.substr(0, e);
    std::string exp = s.substr(e + 1);
    const char sign = exp[0] == '-' ? '-' : '+';
    if (exp[0] == '-' || exp[0] == '+') exp = exp.substr(1);
    if (exp.size() < 2) exp = "0" + exp;
    return absl::StrCat(mant, "e", std::string(1, sign), exp);
  }
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

void JsonString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
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
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          *out += buf;
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

Value Value::MakeMap(Map m, bool is_namespace) {
  Value v;
  auto box = std::make_shared<MapBox>();
  box->map = std::move(m);
  box->is_namespace = is_namespace;
  v.v_ = std::move(box);
  return v;
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
  if (is_undefined()) return "";
  if (is_none()) return "None";
  if (is_bool()) return as_bool() ? "True" : "False";
  if (is_int()) return absl::StrCat(as_int());
  if (is_double()) return FloatRepr(as_double());
  if (is_string()) return StringRepr(as_string());
  std::string out;
  if (is_list()) {
    out = "[";
    for (size_t i = 0; i < as_list().size(); ++i) {
      absl::StrAppend(&out, i ? ", " : "", as_list()[i].Repr());
    }
    return out + "]";
  }
  if (is_namespace()) out = "<Namespace ";
  out += "{";
  for (size_t i = 0; i < as_map().size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", StringRepr(as_map()[i].first), ": ",
                    as_map()[i].second.Repr());
  }
  out += "}";
  if (is_namespace()) out += ">";
  return out;
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
                            : FloatRepr(d);
  } else if (is_string()) {
    JsonString(as_string(), out);
  } else if (is_list()) {
    if (as_list().empty()) {
      *out += "[]";
      return;
    }
    out->push_back('[');
    for (size_t i = 0; i < as_list().size(); ++i) {
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
    for (size_t i = 0; i < as_map().size(); ++i) {
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

}  // namespace vllm::frontend::jinja
