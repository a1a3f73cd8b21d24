// `vllm-launch serve --headless`: this node's engines join the head and serve it; no API
// server here. One that ends is reported (the head takes it as dead; its requests fail) and,
// with --restart-dead-engines, started again (it joins again); the others go on. One that took
// the head as gone (silent for VLLM_ENGINE_HEARTBEAT_TIMEOUT_S: a partition, a restarted head)
// is started again to re-join it, with a bounded back-off, unless --no-rejoin-head
// (EngineProcessManager::set_rejoin).
#ifndef VLLM_LAUNCHER_HEADLESS_H_
#define VLLM_LAUNCHER_HEADLESS_H_

#include "absl/status/status.h"
#include "launcher/serve_args.h"

namespace vllm::launcher {

// Returns when a signal stops the node (OK) or every engine has ended without restarts or
// re-joins (an error).
[[nodiscard]] absl::Status ServeHeadless(const ServeArgs& args);

}  // namespace vllm::launcher

#endif  // VLLM_LAUNCHER_HEADLESS_H_
