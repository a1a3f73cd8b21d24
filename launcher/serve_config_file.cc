#include "launcher/serve_config_file.h"

#include <optional>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/status_macros.h"
#include "launcher/vllm_serve_flags.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace vllm::launcher {
namespace {

constexpr size_t kMaxDepth = 32;

// A plain (unquoted) YAML 1.1 boolean, as yaml.safe_load reads it.
std::optional<bool> PlainBool(const YAML::Node& node) {
  if (!node.IsScalar() || node.Tag() != "?") return std::nullopt;
  const std::string v = absl::AsciiStrToLower(node.Scalar());
  if (v == "true" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "no" || v == "off") return false;
  return std::nullopt;
}

absl::StatusOr<nlohmann::json> ToJson(const YAML::Node& node, size_t depth) {
  if (depth > kMaxDepth) return absl::InvalidArgumentError("--config: nested too deeply");
  if (node.IsMap()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& kv : node) {
      VLLM_ASSIGN_OR_RETURN(out[kv.first.as<std::string>()], ToJson(kv.second, depth + 1));
    }
    return out;
  }
  if (node.IsSequence()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& item : node) {
      VLLM_ASSIGN_OR_RETURN(nlohmann::json j, ToJson(item, depth + 1));
      out.push_back(std::move(j));
    }
    return out;
  }
  if (node.IsNull()) return nlohmann::json(nullptr);
  if (auto b = PlainBool(node)) return nlohmann::json(*b);
  const std::string& s = node.Scalar();
  if (node.Tag() == "?") {
    int64_t i = 0;
    double d = 0;
    if (absl::SimpleAtoi(s, &i)) return nlohmann::json(i);
    if (absl::SimpleAtod(s, &d)) return nlohmann::json(d);
  }
  return nlohmann::json(s);
}

// The file's flags, one group per key.
absl::StatusOr<std::vector<std::vector<std::string>>> LoadConfigFile(
    const std::string& path, const std::function<bool(const std::string&)>& known) {
  const std::string ext = path.substr(path.rfind('.') + 1);
  if (path.find('.') == std::string::npos || (ext != "yaml" && ext != "yml")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--config: the config file must be .yaml or .yml, got '", path, "'"));
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("--config ", path, ": ", e.what()));
  }
  if (root.IsNull()) return std::vector<std::vector<std::string>>{};
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--config ", path, ": expected a mapping of flag names to values"));
  }
  std::vector<std::vector<std::string>> groups;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) {
      return absl::InvalidArgumentError(absl::StrCat("--config ", path, ": a key is not a name"));
    }
    const std::string flag = absl::StrCat("--", kv.first.Scalar());
    const YAML::Node& v = kv.second;
    if (auto b = PlainBool(v)) {
      const std::string no = absl::StrCat("--no-", kv.first.Scalar());
      const std::string dashed = absl::StrReplaceAll(flag, {{"_", "-"}});
      const VllmServeFlag* f = FindVllmServeFlag(dashed);
      if (*b) {
        groups.push_back({flag});
      } else if ((f != nullptr && f->kind == VllmFlagKind::kNegatable) || known(no)) {
        groups.push_back({no});
      }
    } else if (v.IsSequence()) {
      if (v.size() == 0) continue;
      std::vector<std::string> g = {flag};
      for (const auto& item : v) {
        if (item.IsScalar()) {
          g.push_back(item.Scalar());
        } else {
          VLLM_ASSIGN_OR_RETURN(nlohmann::json j, ToJson(item, 1));
          g.push_back(j.dump());
        }
      }
      groups.push_back(std::move(g));
    } else if (v.IsMap()) {
      VLLM_ASSIGN_OR_RETURN(nlohmann::json j, ToJson(v, 1));
      groups.push_back({flag, j.dump()});
    } else if (v.IsNull()) {
      groups.push_back({flag, "None"});  // Python's str(None), as vLLM passes it
    } else {
      groups.push_back({flag, v.Scalar()});
    }
  }
  return groups;
}

std::string FlagName(const std::string& arg) {
  std::string name = arg.substr(0, arg.find('='));
  if (absl::StartsWith(name, "--no-")) name = absl::StrCat("--", name.substr(5));
  return name;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandServeArgv(
    const std::vector<std::string>& argv, const std::function<bool(const std::string&)>& known) {
  std::optional<std::string> path;
  std::vector<std::string> cli;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--") {
      cli.insert(cli.end(), argv.begin() + static_cast<std::ptrdiff_t>(i), argv.end());
      break;
    }
    if (a != "--config" && !absl::StartsWith(a, "--config=")) {
      cli.push_back(a);
      continue;
    }
    if (path.has_value()) {
      return absl::InvalidArgumentError("--config: more than one config file given");
    }
    if (a == "--config") {
      if (i + 1 == argv.size()) return absl::InvalidArgumentError("--config: needs a file");
      path = argv[++i];
    } else {
      path = a.substr(9);
    }
  }
  VLLM_ASSIGN_OR_RETURN(std::vector<std::string> out, NormalizeVllmSpellings(cli, known));
  if (!path.has_value()) return out;
  VLLM_ASSIGN_OR_RETURN(auto groups, LoadConfigFile(*path, known));
  std::set<std::string> given;  // flags on the command line win over the file's
  for (const std::string& a : out) {
    if (absl::StartsWith(a, "--")) given.insert(FlagName(a));
  }
  std::vector<std::string> from_file;
  for (const std::vector<std::string>& g : groups) {
    VLLM_ASSIGN_OR_RETURN(std::vector<std::string> n, NormalizeVllmSpellings(g, known));
    if (n.empty() || given.count(FlagName(n[0])) > 0) continue;
    from_file.insert(from_file.end(), n.begin(), n.end());
  }
  // As vLLM: a positional MODEL first, then the file's flags, then the command line's.
  const bool positional = !out.empty() && !absl::StartsWith(out[0], "-");
  out.insert(out.begin() + (positional ? 1 : 0), from_file.begin(), from_file.end());
  return out;
}

}  // namespace vllm::launcher
