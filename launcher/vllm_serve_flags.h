// vLLM 0.33's `vllm serve` flags as a table (names, aliases, kinds, groups), so that every
// flag vLLM has and vllm-launch does not implement is refused at start-up by its name with
// the reason, never taken for an unknown word or silently ignored.
#ifndef VLLM_LAUNCHER_VLLM_SERVE_FLAGS_H_
#define VLLM_LAUNCHER_VLLM_SERVE_FLAGS_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace vllm::launcher {

// How vLLM's argparse takes the flag.
enum class VllmFlagKind {
  kBool,       // store_true
  kNegatable,  // argparse.BooleanOptionalAction: --X and --no-X
  kOptional,   // nargs='?': bare flag means true, or one value
  kList,       // nargs='+' / '*' / append
  kValue,      // one value
};

struct VllmServeFlag {
  std::string_view name;     // "--tensor-parallel-size"
  std::string_view aliases;  // "-tp" (comma-separated; may be empty)
  VllmFlagKind kind;
  std::string_view group;  // vLLM's argument group ("ParallelConfig", "Frontend", ...)
};

[[nodiscard]] std::span<const VllmServeFlag> VllmServeFlags();
// The flag by its long name ("--x"), or nullptr.
[[nodiscard]] const VllmServeFlag* FindVllmServeFlag(std::string_view name);
// Why vllm-launch does not implement `flag` (for one it refuses).
[[nodiscard]] std::string VllmFlagRefusalReason(const VllmServeFlag& flag);

// vLLM's spellings of argv turned into ours, before the flags are parsed: aliases (`-tp 2`,
// `-tp=2`, our own and vLLM's) to long names; `--no-X` of a boolean flag we have (`known`
// names it, and vLLM has the negation or `--no-X` is not known itself) to `--X=false`.
// InvalidArgument naming the flag and the reason for a vLLM 0.33 flag (or its negation) that
// `known` does not have. `--x_y` is `--x-y`, as vLLM. Arguments after a bare `--` are left
// alone.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> NormalizeVllmSpellings(
    const std::vector<std::string>& argv, const std::function<bool(const std::string&)>& known);

// One of our flags, for FilteredHelp.
struct HelpEntry {
  std::string names;  // "--tensor-parallel-size" (as the parser lists it)
  std::string group;
  std::string description;
};

// vLLM's `--help=KEYWORD` (case-insensitive, `_` as `-`): `all` gives `full_help`; a group's
// name (ModelConfig, CacheConfig, Frontend, ...) its flags; anything else the flags whose names
// contain it. Our flags (`ours`) with their descriptions, then vLLM's flags of the group (or
// match) that are refused here, each with the reason.
[[nodiscard]] std::string FilteredHelp(std::string_view keyword, const std::vector<HelpEntry>& ours,
                                       const std::string& full_help);

// vLLM's human-readable integers (vllm/utils/argparse_utils.py, human_readable_int): "2048",
// "1k" (10^3), "1K" (2^10), "25.6k", "2m", "2M", "1g", "1G", "1t", "1T" (no decimals with
// the binary suffixes); with `allow_auto` also "-1" and "auto" (case-insensitive), which give
// -1. InvalidArgument naming `flag` otherwise.
[[nodiscard]] absl::StatusOr<int64_t> ParseHumanReadableInt(std::string_view flag,
                                                            std::string_view text, bool allow_auto);

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_VLLM_SERVE_FLAGS_H_
