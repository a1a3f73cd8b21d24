// The values of `vllm-launch bench sweep` (vLLM 0.33's vllm/benchmarks/sweep/param_sweep.py and
// the SLA constraints of its former serve_sla mode): command lines split as shlex does, the
// parameter combinations read from --serve-params / --bench-params and applied to a command
// line, SLA criteria read from --sla-params, the search for the largest load that meets them,
// and pandas' CSV of the collected runs. No I/O but reading the JSON files; thread-compatible.
#ifndef VLLM_BENCH_SWEEP_SWEEP_PARAMS_H_
#define VLLM_BENCH_SWEEP_SWEEP_PARAMS_H_

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace vllm::bench_sweep {

using Json = nlohmann::ordered_json;

// Python's shlex.split (POSIX mode, no comments): words split at unquoted whitespace; single
// quotes keep everything, double quotes keep all but \" \\ \$ \` escapes, a backslash outside
// quotes escapes the next character. Fails on an unclosed quote or a trailing backslash.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> ShlexSplit(std::string_view text);

// Python's str(value) of a JSON value: strings as they are, True/False/None, floats as repr.
std::string PythonStr(const Json& value);
// Python's repr(value): strings quoted, lists and dicts as Python prints them.
std::string PythonRepr(const Json& value);
// Python's json.dumps(value) (", " and ": " separators, non-ASCII escaped).
std::string PythonJsonDumps(const Json& value);
// repr of a list of strings: "['vllm-launch', 'serve']".
std::string PythonListRepr(const std::vector<std::string>& words);

// vLLM's sanitize_filename: '/' -> '_', '..' -> '__', surrounding quotes stripped.
std::string SanitizeFilename(std::string name);

// One parameter combination (vLLM's ParameterSweepItem): a JSON object whose keys are flag
// names ("max_num_seqs" or "max-num-seqs"; "_benchmark_name" names the combination).
class ParamItem {
 public:
  ParamItem() : params_(Json::object()) {}
  explicit ParamItem(Json params) : params_(std::move(params)) {}

  const Json& params() const { return params_; }
  bool empty() const { return params_.empty(); }
  // "_benchmark_name" when given, else AsText("-").
  std::string Name() const;
  // "k=v" pairs (Python str of v) joined by `sep`, "_benchmark_name" left out.
  std::string AsText(const std::string& sep = ", ") const;
  // True if the item sets `key` under any spelling ('-' or '_').
  bool HasParam(const std::string& key) const;
  // This item with `other`'s keys set over it (Python's dict `|`).
  ParamItem Merge(const Json& other) const;
  // vLLM's apply_to_cmd: each parameter replaces the flag already in `cmd` (matched as
  // --k with '_' -> '-', then '-' -> '_', then as given) or is appended: booleans as --k /
  // --no-k (dotted keys: --k=true/false), objects as JSON text, the rest as Python's str.
  std::vector<std::string> ApplyToCmd(std::vector<std::string> cmd) const;
  // Python's repr of the dict ("{'max_num_seqs': 32}").
  std::string Repr() const { return PythonRepr(params_); }

 private:
  Json params_;
};

// vLLM's ParameterSweep.read_json: a list of objects, or an object of named objects (each
// name becomes "_benchmark_name", which must then be unique).
[[nodiscard]] absl::StatusOr<std::vector<ParamItem>> ParamSweepFromJson(const Json& data);
[[nodiscard]] absl::StatusOr<std::vector<ParamItem>> ReadParamSweep(const std::string& path);

// One SLA constraint: `metric` (a key of the bench result JSON, e.g. "p99_ttft_ms") compared
// with `target` by `op` ("<=", ">=", "<", ">").
struct SlaCriterion {
  std::string metric;
  std::string op;
  double target = 0;
  bool Validate(double actual) const;
  // "lhs<=200.00", as vLLM's format_cond.
  std::string FormatCond(const std::string& lhs) const;
};

// One SLA combination: every criterion must hold.
struct SlaItem {
  std::vector<SlaCriterion> criteria;
  std::string AsText(const std::string& sep = ", ") const;
};

// vLLM's SLASweep.read_json: a list of objects {"<metric>": "<op><value>"}.
[[nodiscard]] absl::StatusOr<std::vector<SlaItem>> SlaSweepFromJson(const Json& data);
[[nodiscard]] absl::StatusOr<std::vector<SlaItem>> ReadSlaSweep(const std::string& path);

// The SLA search over an integer load (request rate or concurrency) in [min_value,
// max_value], the load assumed to worsen the metrics as it grows: the first probe is
// max_value (vLLM's "infinite" 65536), the second min_value, then the midpoint between the
// largest passing and the smallest failing value, until they are adjacent. `history` maps
// each probed value to whether it passed; `max_passing` is the answer (min_value when none
// passed, `any_passing` then false).
struct SlaSearchResult {
  std::map<int, bool> history;
  int max_passing = 0;
  bool any_passing = false;
};
// `probe(value)` runs the benchmark at `value` and says whether every criterion held; its
// error ends the search.
[[nodiscard]] absl::StatusOr<SlaSearchResult> SearchSla(
    int min_value, int max_value, const std::function<absl::StatusOr<bool>(int)>& probe);

// pandas' DataFrame.from_records(records).to_csv(): an unnamed index column, the columns in
// the order keys first appear, missing values empty, an integer column with gaps as floats,
// strings quoted when they hold ',', '"' or a line break.
std::string RecordsToCsv(const std::vector<Json>& records);

}  // namespace vllm::bench_sweep

#endif  // VLLM_BENCH_SWEEP_SWEEP_PARAMS_H_
