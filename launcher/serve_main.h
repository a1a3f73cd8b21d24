// `vllm-launch [serve] [MODEL] [flags]`: the OpenAI-compatible server. Starts one engine-core
// process (which starts its workers), waits for it, loads the tokenizer and chat template,
// and serves HTTP until Ctrl-C or SIGTERM, then stops everything within 5 s. If the engine
// dies, in-flight requests get an error and /health answers 503. Flags: serve_args.h.
#ifndef VLLM_LAUNCHER_SERVE_MAIN_H_
#define VLLM_LAUNCHER_SERVE_MAIN_H_

#include <string>
#include <vector>

namespace vllm::launcher {

// Returns the process exit code: 0 after an orderly stop (or --help), 1 when serving failed,
// 2 for bad flags.
int RunServe(const std::vector<std::string>& argv);

// `vllm-launch api-server` (internal): one of the API server processes that
// `--api-server-count N` starts; it talks to its launcher on descriptor 3.
inline constexpr char kApiServerSubcommand[] = "api-server";
int RunApiServer(const std::vector<std::string>& argv);

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_SERVE_MAIN_H_
