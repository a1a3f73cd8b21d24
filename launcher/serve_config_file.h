// vLLM's `--config FILE.yaml` (vllm/utils/argparse_utils.py, FlexibleArgumentParser): the
// file's keys are flag names without the dashes (`tensor-parallel-size: 2` or
// `tensor_parallel_size: 2`); true gives `--key`, false `--no-key` where the flag has a
// negation (else nothing), a list `--key item ...`, a mapping `--key '<JSON>'`, anything else
// `--key value`. Flags on the command line override the file's.
#ifndef VLLM_LAUNCHER_SERVE_CONFIG_FILE_H_
#define VLLM_LAUNCHER_SERVE_CONFIG_FILE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace vllm::launcher {

// argv with `--config FILE` (or `--config=FILE`) replaced by the file's flags, then vLLM's
// spellings normalized (NormalizeVllmSpellings; `known` names our flags). InvalidArgument
// naming --config for a missing or unreadable file, a file that is not .yaml/.yml, YAML that
// is not a mapping, or --config given twice.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> ExpandServeArgv(
    const std::vector<std::string>& argv, const std::function<bool(const std::string&)>& known);

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_SERVE_CONFIG_FILE_H_
