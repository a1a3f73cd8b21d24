#include "frontend/jinja/builtins.h"

#include <algorithm>
#include <cctype>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/utf8.h"

namespace vllm::frontend::jinja {
namespace {

absl::Status TypeError(const std::string& what, const Value& v) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": unsupported type ", v.TypeName()));
}

bool IsStripChar(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string Strip(const std::string& s, bool left, bool right) {
  size_t b = 0;
  size_t e = s.size();
  if (left) {
    while (b < e && IsStripChar(s[b])) ++b;
  }
  if (right) {
    while (e > b && IsStripChar(s[e - 1])) --e;
  }
  return s.substr(b, e - b);
}

// Python's str.strip(chars): drops from the chosen ends every code point found in `chars`.
std::string StripChars(const std::string& s, const std::string& chars, bool left, bool right) {
  std::vector<std::string_view> set;
  for (size_t pos = 0; pos < chars.size();) {
    const size_t len = std::max<size_t>(base::ValidUtf8SequenceLength(chars, pos), 1);
    set.push_back(std::string_view(chars).substr(pos, len));
    pos += len;
  }
  auto in_set = [&](std::string_view cp) {
    return std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t b = 0;
  size_t e = s.size();
  while (left && b < e) {
    const size_t len = std::max<size_t>(base::ValidUtf8SequenceLength(s, b), 1);
    if (!in_set(std::string_view(s).substr(b, len))) break;
    b += len;
  }
  while (right && e > b) {
    size_t start = e - 1;
    while (start > b && e - start < 4 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) {
      --start;
    }
    if (base::ValidUtf8SequenceLength(s, start) != e - start) start = e - 1;
    if (!in_set(std::string_view(s).substr(start, e - start))) break;
    e = start;
  }
  return s.substr(b, e - b);
}

std::string MapCase(std::string s, bool upper) {
  // ASCII only: Python's str.upper() also maps non-ASCII letters; documented limitation.
  for (char& c : s)
    c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c))
                                : std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A string becomes a list of one-character strings (~50 bytes each) only up to this many
// code points; beyond, the conversion is refused rather than allocating gigabytes.
constexpr size_t kMaxChars = size_t{1} << 20;

absl::Status TooLarge(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": result larger than 64 MiB"));
}

// UTF-8 code points of a string as one-character strings (Python iterates str by char).
absl::StatusOr<List> Chars(const std::string& s) {
  if (base::CountCodePoints(s) > kMaxChars) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot split a string of more than ", kMaxChars, " characters into a list"));
  }
  List out;
  for (size_t pos = 0; pos < s.size();) {
    size_t len = base::ValidUtf8SequenceLength(s, pos);
    if (len == 0) len = 1;
    out.emplace_back(s.substr(pos, len));
    pos += len;
  }
  return out;
}

absl::StatusOr<List> Items(const Value& v) {
  if (v.is_list()) return v.as_list();
  if (v.is_string()) return Chars(v.as_string());
  if (v.is_map()) {
    List keys;
    for (const auto& [k, unused] : v.as_map()) keys.emplace_back(k);
    return keys;
  }
  return TypeError("iterate", v);
}

absl::StatusOr<Value> Length(const Value& v) {
  if (v.is_string()) return Value(static_cast<int64_t>(base::CountCodePoints(v.as_string())));
  if (v.is_list()) return Value(static_cast<int64_t>(v.as_list().size()));
  if (v.is_map()) return Value(static_cast<int64_t>(v.as_map().size()));
  return TypeError("length", v);
}

// value | select('test', args...): the items for which the test holds (reject: fails).
absl::StatusOr<Value> SelectOrReject(const std::string& name, const Value& value,
                                     const std::vector<Value>& args) {
  absl::StatusOr<List> items = Items(value);
  if (!items.ok()) return items.status();
  if (args.empty() || !args[0].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " needs the name of a test"));
  }
  const std::vector<Value> test_args(args.begin() + 1, args.end());
  List out;
  for (const Value& item : *items) {
    absl::StatusOr<bool> holds = ApplyTest(args[0].as_string(), item, test_args);
    if (!holds.ok()) return holds.status();
    if (*holds == (name == "select")) out.push_back(item);
  }
  return Value(std::move(out));
}

}  // namespace

absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& value,
                                  const std::vector<Value>& args, const Kwargs& kwargs) {
  if (name == "trim") {
    if (!value.is_string()) return TypeError("trim", value);
    return Value(Strip(value.as_string(), true, true));
  }
  if (name == "length" || name == "count") return Length(value);
  if (name == "tojson") {
    int indent = -1;
    for (const auto& [k, v] : kwargs) {
      if (k == "indent" && v.is_int())
        indent = static_cast<int>(std::clamp<int64_t>(v.as_int(), 0, 64));
    }
    if (!args.empty() && args[0].is_int())
      indent = static_cast<int>(std::clamp<int64_t>(args[0].as_int(), 0, 64));
    return Value(value.ToJson(indent));
  }
  if (name == "upper" || name == "lower") {
    if (!value.is_string()) return TypeError(name, value);
    return Value(MapCase(value.as_string(), name == "upper"));
  }
  if (name == "capitalize") {
    if (!value.is_string()) return TypeError(name, value);
    std::string s = MapCase(value.as_string(), false);
    if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    return Value(std::move(s));
  }
  if ((name == "first" || name == "last") && value.is_string()) {
    const std::string& s = value.as_string();
    if (s.empty()) return Value();
    size_t at = 0;
    if (name == "last") {
      at = s.size() - 1;
      while (at > 0 && (static_cast<uint8_t>(s[at]) & 0xC0) == 0x80) --at;
    }
    size_t len = base::ValidUtf8SequenceLength(s, at);
    if (len == 0) len = 1;
    return Value(s.substr(at, len));
  }
  if (name == "first" || name == "last") {
    absl::StatusOr<List> items = Items(value);
    if (!items.ok()) return items.status();
    if (items->empty()) return Value();
    return name == "first" ? items->front() : items->back();
  }
  if (name == "string") return Value(value.ToString());
  if (name == "default" || name == "d") {
    const bool boolean = (args.size() > 1 && args[1].Truthy());
    if (value.is_undefined() || (boolean && !value.Truthy()))
      return args.empty() ? Value("") : args[0];
    return value;
  }
  if (name == "join") {
    absl::StatusOr<List> items = Items(value);
    if (!items.ok()) return items.status();
    const std::string sep = args.empty() ? "" : args[0].ToString();
    std::string out;
    for (size_t i = 0; i < items->size(); ++i) {
      const std::string item = (*items)[i].ToString();
      if (out.size() + (i ? sep.size() : 0) + item.size() > kMaxValueBytes) {
        return TooLarge("join");
      }
      absl::StrAppend(&out, i ? sep : "", item);
    }
    return Value(std::move(out));
  }
  if (name == "list") {
    absl::StatusOr<List> items = Items(value);
    if (!items.ok()) return items.status();
    return Value(*std::move(items));
  }
  if (name == "reverse") {
    if (value.is_string()) {
      // Code point by code point from the end (a stray byte counts as one).
      const std::string& s = value.as_string();
      std::string out;
      out.reserve(s.size());
      for (size_t end = s.size(); end > 0;) {
        size_t start = end - 1;
        while (start > 0 && end - start < 4 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) {
          --start;
        }
        if (base::ValidUtf8SequenceLength(s, start) != end - start) start = end - 1;
        out.append(s, start, end - start);
        end = start;
      }
      return Value(std::move(out));
    }
    absl::StatusOr<List> items = Items(value);
    if (!items.ok()) return items.status();
    std::reverse(items->begin(), items->end());
    return Value(*std::move(items));
  }
  if (name == "int") {
    if (value.is_int()) return value;
    if (value.is_double() || value.is_bool()) return Value(static_cast<int64_t>(value.as_double()));
    if (value.is_string())
      return Value(static_cast<int64_t>(std::strtoll(value.as_string().c_str(), nullptr, 10)));
    return Value(int64_t{0});
  }
  if (name == "select" || name == "reject") return SelectOrReject(name, value, args);
  if (name == "items") {
    if (!value.is_map()) return TypeError(name, value);
    List out;
    for (const auto& [k, v] : value.as_map()) out.emplace_back(List{Value(k), v});
    return Value(std::move(out));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown filter '", name, "'"));
}

absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& v,
                               const std::vector<Value>& args) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_double();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_map();
  if (name == "iterable") return v.is_list() || v.is_map() || v.is_string();
  if (name == "sequence") return v.is_list() || v.is_map() || v.is_string();
  if (name == "odd" || name == "even") {
    if (!v.is_int()) return TypeError(name, v);
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    if (!v.is_int() || args.empty() || !args[0].is_int() || args[0].as_int() == 0)
      return TypeError(name, v);
    return v.as_int() % args[0].as_int() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "sameas") {
    if (args.empty())
      return absl::InvalidArgumentError(absl::StrCat("test '", name, "' needs an argument"));
    return v.Equals(args[0]);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown test '", name, "'"));
}

absl::StatusOr<Value> CallMethod(const Value& object, const std::string& name,
                                 const std::vector<Value>& args) {
  auto str_arg = [&](size_t i) -> std::string {
    return i < args.size() && args[i].is_string() ? args[i].as_string() : "";
  };
  if (object.is_string()) {
    const std::string& s = object.as_string();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const bool left = name != "rstrip";
      const bool right = name != "lstrip";
      if (args.empty() || args[0].is_none()) return Value(Strip(s, left, right));
      if (!args[0].is_string()) return TypeError(name + " argument", args[0]);
      return Value(StripChars(s, args[0].as_string(), left, right));
    }
    if (name == "upper" || name == "lower") return Value(MapCase(s, name == "upper"));
    if (name == "startswith") return Value(s.starts_with(str_arg(0)));
    if (name == "endswith") return Value(s.ends_with(str_arg(0)));
    if (name == "replace" && args.size() == 2) {
      const std::string from = str_arg(0), to = str_arg(1);
      if (from.empty()) return object;
      size_t count = 0;
      for (size_t at = 0; (at = FindSubstring(s, from, at)) != std::string::npos;
           at += from.size()) {
        ++count;
      }
      // The result has s.size() + count * (to.size() - from.size()) bytes.
      const size_t room = kMaxValueBytes - std::min(kMaxValueBytes, s.size());
      if (to.size() > from.size() && count > room / (to.size() - from.size())) {
        return TooLarge("replace");
      }
      std::string out;
      size_t pos = 0;
      for (size_t at; (at = FindSubstring(s, from, pos)) != std::string::npos;
           pos = at + from.size()) {
        out.append(s, pos, at - pos);
        out += to;
      }
      out.append(s, pos);
      return Value(std::move(out));
    }
    if (name == "split") {
      List out;
      const std::string sep = str_arg(0);
      if (sep.empty()) {
        std::string cur;
        for (char c : s) {
          if (IsStripChar(c)) {
            if (!cur.empty()) out.emplace_back(cur);
            cur.clear();
          } else {
            cur.push_back(c);
          }
        }
        if (!cur.empty()) out.emplace_back(cur);
      } else {
        size_t pos = 0;
        for (size_t at; (at = FindSubstring(s, sep, pos)) != std::string::npos;
             pos = at + sep.size()) {
          out.emplace_back(s.substr(pos, at - pos));
        }
        out.emplace_back(s.substr(pos));
      }
      return Value(std::move(out));
    }
  }
  if (object.is_map()) {
    if (name == "items") return ApplyFilter("items", object, {}, {});
    if (name == "keys" || name == "values") {
      List out;
      for (const auto& [k, v] : object.as_map()) out.push_back(name == "keys" ? Value(k) : v);
      return Value(std::move(out));
    }
    if (name == "get" && !args.empty()) {
      Value v = object.Get(args[0].ToString());
      if (v.is_undefined()) return args.size() > 1 ? args[1] : Value(None{});
      return v;
    }
  }
  return absl::NotFoundError(absl::StrCat("no method '", name, "' on ", object.TypeName()));
}

}  // namespace vllm::frontend::jinja
