#include "bench/sweep/sweep_params.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/ordered_json.h"
#include "base/python_repr.h"

namespace vllm::bench_sweep {
namespace {

constexpr size_t kMaxParamFileBytes = 16 << 20;

absl::StatusOr<Json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxParamFileBytes) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": larger than 16 MiB"));
    }
  }
  return base::ParseOrderedJson(text, path);
}

std::string PythonStringRepr(const std::string& s) {
  const bool use_double = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char quote = use_double ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    if (c == '\\' || c == quote) {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  out += quote;
  return out;
}

// vLLM's _iter_param_key_candidates: a dotted key keeps its tail; the head as given, with
// '-' -> '_', with '_' -> '-'.
std::vector<std::string> ParamKeyCandidates(const std::string& key) {
  const size_t dot = key.find('.');
  if (dot != std::string::npos) {
    std::vector<std::string> out;
    for (const std::string& head : ParamKeyCandidates(key.substr(0, dot))) {
      out.push_back(absl::StrCat(head, key.substr(dot)));
    }
    return out;
  }
  return {key, absl::StrReplaceAll(key, {{"-", "_"}}), absl::StrReplaceAll(key, {{"_", "-"}})};
}

// vLLM's _iter_cmd_key_candidates: the candidates reversed, as flags ("-" spelling first).
std::vector<std::string> CmdKeyCandidates(const std::string& key) {
  std::vector<std::string> keys = ParamKeyCandidates(key);
  std::reverse(keys.begin(), keys.end());
  for (std::string& k : keys) k = absl::StrCat("--", k);
  return keys;
}

std::vector<std::string> NormalizeKv(const std::string& key, const Json& value) {
  if (value.is_boolean()) {
    const bool v = value.get<bool>();
    if (key.find('.') != std::string::npos) {
      return {absl::StrCat(CmdKeyCandidates(key)[0], "=", v ? "true" : "false")};
    }
    return {CmdKeyCandidates(v ? key : absl::StrCat("no-", key))[0]};
  }
  // Objects are passed as JSON text (vLLM's json.dumps: ", " and ": " separators).
  if (value.is_object()) return {CmdKeyCandidates(key)[0], PythonJsonDumps(value)};
  return {CmdKeyCandidates(key)[0], PythonStr(value)};
}

}  // namespace

std::string PythonJsonDumps(const Json& value) {
  if (value.is_object()) {
    std::vector<std::string> parts;
    for (const auto& [k, v] : value.items()) {
      parts.push_back(absl::StrCat(Json(k).dump(), ": ", PythonJsonDumps(v)));
    }
    return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
  }
  if (value.is_array()) {
    std::vector<std::string> parts;
    for (const Json& v : value) parts.push_back(PythonJsonDumps(v));
    return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
  }
  if (value.is_number_float()) {
    const double d = value.get<double>();
    if (std::isnan(d)) return "NaN";
    if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
    return base::PythonFloatRepr(d);
  }
  return value.dump(-1, ' ', true);
}

absl::StatusOr<std::vector<std::string>> ShlexSplit(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (in_word) words.push_back(std::exchange(word, {}));
      in_word = false;
      ++i;
      continue;
    }
    in_word = true;
    if (c == '\\') {
      if (i + 1 >= text.size()) return absl::InvalidArgumentError("No escaped character");
      word += text[i + 1];
      i += 2;
    } else if (c == '\'') {
      const size_t end = text.find('\'', i + 1);
      if (end == std::string_view::npos) return absl::InvalidArgumentError("No closing quotation");
      word.append(text.substr(i + 1, end - i - 1));
      i = end + 1;
    } else if (c == '"') {
      ++i;
      while (true) {
        if (i >= text.size()) return absl::InvalidArgumentError("No closing quotation");
        const char d = text[i];
        if (d == '"') break;
        if (d == '\\' && i + 1 < text.size() &&
            std::string_view("\"\\$`\n").find(text[i + 1]) != std::string_view::npos) {
          word += text[i + 1];
          i += 2;
          continue;
        }
        word += d;
        ++i;
      }
      ++i;
    } else {
      word += c;
      ++i;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

std::string PythonStr(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  return PythonRepr(value);
}

std::string PythonRepr(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "None";
    case Json::value_t::boolean:
      return value.get<bool>() ? "True" : "False";
    case Json::value_t::string:
      return PythonStringRepr(value.get<std::string>());
    case Json::value_t::number_float:
      return base::PythonFloatRepr(value.get<double>());
    case Json::value_t::array: {
      std::vector<std::string> parts;
      for (const Json& v : value) parts.push_back(PythonRepr(v));
      return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
    }
    case Json::value_t::object: {
      std::vector<std::string> parts;
      for (const auto& [k, v] : value.items()) {
        parts.push_back(absl::StrCat(PythonStringRepr(k), ": ", PythonRepr(v)));
      }
      return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
    }
    default:
      return value.dump();
  }
}

std::string PythonListRepr(const std::vector<std::string>& words) {
  Json list = Json::array();
  for (const std::string& w : words) list.push_back(w);
  return PythonRepr(list);
}

std::string SanitizeFilename(std::string name) {
  name = absl::StrReplaceAll(name, {{"/", "_"}});
  name = absl::StrReplaceAll(name, {{"..", "__"}});
  // Python's .strip("'").strip('"').
  for (char q : {'\'', '"'}) {
    const size_t b = name.find_first_not_of(q);
    if (b == std::string::npos) {
      name.clear();
      continue;
    }
    name = name.substr(b, name.find_last_not_of(q) - b + 1);
  }
  return name;
}

std::string ParamItem::Name() const {
  if (params_.contains("_benchmark_name")) return PythonStr(params_["_benchmark_name"]);
  return AsText("-");
}

std::string ParamItem::AsText(const std::string& sep) const {
  std::vector<std::string> parts;
  for (const auto& [k, v] : params_.items()) {
    if (k != "_benchmark_name") parts.push_back(absl::StrCat(k, "=", PythonStr(v)));
  }
  return absl::StrJoin(parts, sep);
}

bool ParamItem::HasParam(const std::string& key) const {
  for (const std::string& k : ParamKeyCandidates(key)) {
    if (params_.contains(k)) return true;
  }
  return false;
}

ParamItem ParamItem::Merge(const Json& other) const {
  Json merged = params_;
  for (const auto& [k, v] : other.items()) merged[k] = v;
  return ParamItem(std::move(merged));
}

std::vector<std::string> ParamItem::ApplyToCmd(std::vector<std::string> cmd) const {
  for (const auto& [k, v] : params_.items()) {
    if (k == "_benchmark_name") continue;
    const std::vector<std::string> kv = NormalizeKv(k, v);
    bool replaced = false;
    for (const std::string& flag : CmdKeyCandidates(k)) {
      auto it = std::find(cmd.begin(), cmd.end(), flag);
      if (it == cmd.end()) continue;
      const size_t idx = static_cast<size_t>(it - cmd.begin());
      cmd[idx] = kv[0];
      // vLLM writes cmd[k_idx + 1]; past the end that is an IndexError there, an append here.
      if (kv.size() == 2) {
        if (idx + 1 < cmd.size()) {
          cmd[idx + 1] = kv[1];
        } else {
          cmd.push_back(kv[1]);
        }
      }
      replaced = true;
      break;
    }
    if (!replaced) cmd.insert(cmd.end(), kv.begin(), kv.end());
  }
  return cmd;
}

absl::StatusOr<std::vector<ParamItem>> ParamSweepFromJson(const Json& data) {
  Json records = data;
  if (data.is_object()) {
    records = Json::array();
    for (const auto& [name, params] : data.items()) {
      if (!params.is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Each item in the parameter sweep should be a dictionary, but found type: ",
            params.type_name()));
      }
      Json record = Json::object();
      record["_benchmark_name"] = name;
      for (const auto& [k, v] : params.items()) record[k] = v;
      records.push_back(std::move(record));
    }
  }
  if (!records.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("The parameter sweep should be a list of dictionaries, but found type: ",
                     data.type_name()));
  }
  std::vector<ParamItem> items;
  std::set<std::string> names;
  for (const Json& record : records) {
    if (!record.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Each item in the parameter sweep should be a dictionary, but found type: ",
                       record.type_name()));
    }
    if (record.contains("_benchmark_name") &&
        !names.insert(PythonStr(record["_benchmark_name"])).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Duplicate _benchmark_name values found: ", PythonStr(record["_benchmark_name"]),
          ". All _benchmark_name values must be unique."));
    }
    items.emplace_back(record);
  }
  return items;
}

absl::StatusOr<std::vector<ParamItem>> ReadParamSweep(const std::string& path) {
  absl::StatusOr<Json> data = ReadJsonFile(path);
  if (!data.ok()) return data.status();
  absl::StatusOr<std::vector<ParamItem>> items = ParamSweepFromJson(*data);
  if (!items.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", items.status().message()));
  return items;
}

bool SlaCriterion::Validate(double actual) const {
  if (op == "<=") return actual <= target;
  if (op == ">=") return actual >= target;
  if (op == "<") return actual < target;
  return actual > target;
}

std::string SlaCriterion::FormatCond(const std::string& lhs) const {
  return absl::StrFormat("%s%s%.2f", lhs, op, target);
}

std::string SlaItem::AsText(const std::string& sep) const {
  std::vector<std::string> parts;
  for (const SlaCriterion& c : criteria) parts.push_back(c.FormatCond(c.metric));
  return absl::StrJoin(parts, sep);
}

absl::StatusOr<std::vector<SlaItem>> SlaSweepFromJson(const Json& data) {
  if (!data.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "The SLA sweep should be a list of dictionaries, but found type: ", data.type_name()));
  }
  std::vector<SlaItem> items;
  for (const Json& record : data) {
    if (!record.is_object()) {
      return absl::InvalidArgumentError("Each SLA constraint should be a dictionary");
    }
    SlaItem item;
    for (const auto& [metric, value] : record.items()) {
      const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
      SlaCriterion c{metric, "", 0};
      // Longer operators first, as vLLM's SLA_CRITERIA.
      for (const char* op : {"<=", ">=", "<", ">"}) {
        if (text.rfind(op, 0) == 0) {
          c.op = op;
          break;
        }
      }
      size_t used = 0;
      bool number = false;
      if (!c.op.empty()) {
        const std::string rest = text.substr(c.op.size());
        try {
          c.target = std::stod(rest, &used);
          number = used == rest.size();
        } catch (const std::exception&) {
          number = false;
        }
      }
      if (c.op.empty() || !number) {
        return absl::InvalidArgumentError(
            absl::StrCat("Invalid operator for SLA constraint '", metric, "=", text,
                         "'. Valid operators are: {'<=', '>=', '<', '>'} followed by a number"));
      }
      item.criteria.push_back(std::move(c));
    }
    items.push_back(std::move(item));
  }
  return items;
}

absl::StatusOr<std::vector<SlaItem>> ReadSlaSweep(const std::string& path) {
  absl::StatusOr<Json> data = ReadJsonFile(path);
  if (!data.ok()) return data.status();
  absl::StatusOr<std::vector<SlaItem>> items = SlaSweepFromJson(*data);
  if (!items.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", items.status().message()));
  return items;
}

absl::StatusOr<SlaSearchResult> SearchSla(int min_value, int max_value,
                                          const std::function<absl::StatusOr<bool>(int)>& probe) {
  SlaSearchResult result;
  auto max_passing = [&] {
    int best = min_value;
    bool any = false;
    for (const auto& [v, ok] : result.history) {
      if (ok && (!any || v > best)) best = v, any = true;
    }
    return best;
  };
  auto min_failing = [&] {
    int best = max_value;
    for (const auto& [v, ok] : result.history) {
      if (!ok && v < best) best = v;
    }
    return best;
  };
  while (min_failing() - max_passing() > 1) {
    int value = max_value;
    if (result.history.size() == 1) {
      value = min_value;
    } else if (result.history.size() > 1) {
      value = max_passing() + (min_failing() - max_passing()) / 2;
    }
    absl::StatusOr<bool> passed = probe(value);
    if (!passed.ok()) return passed.status();
    result.history[value] = *passed;
  }
  result.max_passing = max_passing();
  result.any_passing = false;
  for (const auto& [v, ok] : result.history) result.any_passing |= ok;
  return result;
}

namespace {

std::string CsvCell(const Json& v, bool int_as_float) {
  if (v.is_null()) return "";
  if (int_as_float && (v.is_number_integer() || v.is_number_unsigned())) {
    return base::PythonFloatRepr(v.get<double>());
  }
  const std::string text = PythonStr(v);
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  return absl::StrCat("\"", absl::StrReplaceAll(text, {{"\"", "\"\""}}), "\"");
}

}  // namespace

std::string RecordsToCsv(const std::vector<Json>& records) {
  std::vector<std::string> columns;
  std::set<std::string> seen;
  for (const Json& r : records) {
    for (const auto& [k, v] : r.items()) {
      if (seen.insert(k).second) columns.push_back(k);
    }
  }
  // pandas stores an integer column with a missing value as float64.
  std::vector<bool> int_as_float(columns.size(), false);
  for (size_t c = 0; c < columns.size(); ++c) {
    bool gap = false, all_int = true;
    for (const Json& r : records) {
      const auto it = r.find(columns[c]);
      if (it == r.end() || it->is_null()) {
        gap = true;
      } else if (!it->is_number_integer() && !it->is_number_unsigned()) {
        all_int = false;
      }
    }
    int_as_float[c] = gap && all_int;
  }
  std::vector<std::string> header = {""};
  for (const std::string& c : columns) header.push_back(CsvCell(Json(c), false));
  std::string out = absl::StrCat(absl::StrJoin(header, ","), "\n");
  for (size_t i = 0; i < records.size(); ++i) {
    std::vector<std::string> row = {std::to_string(i)};
    for (size_t c = 0; c < columns.size(); ++c) {
      const auto it = records[i].find(columns[c]);
      row.push_back(it == records[i].end() ? "" : CsvCell(*it, int_as_float[c]));
    }
    absl::StrAppend(&out, absl::StrJoin(row, ","), "\n");
  }
  return out;
}

}  // namespace vllm::bench_sweep
