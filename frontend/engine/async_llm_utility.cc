// AsyncLLM's utility calls to every engine (vLLM's AsyncLLM.reset_prefix_cache, sleep,
// wake_up, is_sleeping over EngineCoreClient.call_utility); the engine side is in
// core/engine_core_proc.cc.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/msgpack_util.h"
#include "base/status_macros.h"
#include "frontend/engine/async_llm.h"
#include "msgpack.hpp"

namespace vllm::frontend {
namespace {

constexpr absl::Duration kUtilityTimeout = absl::Seconds(30);
// A sleep with mode=wait answers once the engine's requests finished; a wake_up at level 2
// reads the weights again.
constexpr absl::Duration kSleepTimeout = absl::Minutes(10);

absl::StatusOr<bool> DecodeBool(const std::string& result, const char* method) {
  VLLM_ASSIGN_OR_RETURN(
      auto oh,
      wire::UnpackBounded({reinterpret_cast<const uint8_t*>(result.data()), result.size()}));
  // The engine packs results as an array (core/engine_core_proc.cc's Pack): [value].
  const msgpack::object& o = oh.get();
  if (o.type == msgpack::type::ARRAY && o.via.array.size == 1) {
    return wire::ConvertAs<bool>(o.via.array.ptr[0], method);
  }
  return wire::ConvertAs<bool>(o, method);
}

}  // namespace

// Calls `method` on every live engine and ANDs their boolean answers (a dead engine is
// skipped: /health reports it).
absl::StatusOr<bool> AsyncLLM::CallEveryEngine(const char* method, const std::string& args,
                                               absl::Duration timeout) {
  bool all = true;
  int32_t live = 0;
  for (int32_t e = 0; e < client_->num_engines(); ++e) {
    if (!client_->EngineFailure(e).ok()) continue;
    ++live;
    VLLM_ASSIGN_OR_RETURN(std::string result, client_->CallUtility(method, timeout, e, args));
    VLLM_ASSIGN_OR_RETURN(bool answer, DecodeBool(result, method));
    all = all && answer;
  }
  if (live == 0) return absl::UnavailableError("no engine is alive");
  return all;
}

absl::StatusOr<bool> AsyncLLM::ResetPrefixCache() {
  return CallEveryEngine("reset_prefix_cache", "");
}

absl::Status AsyncLLM::Sleep(int32_t level, const std::string& mode) {
  // The engine's "sleep" arguments: msgpack [level, mode] (core/engine_core_proc.h).
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> pk(b);
  pk.pack_array(2);
  pk.pack(level);
  pk.pack(mode);
  return CallEveryEngine("sleep", std::string(b.data(), b.size()), kSleepTimeout).status();
}

absl::StatusOr<bool> AsyncLLM::WakeUp(const std::vector<std::string>& tags) {
  // "wake_up": msgpack [tag, ...], empty for every tag (vLLM's tags=None).
  msgpack::sbuffer b;
  msgpack::pack(b, tags);
  return CallEveryEngine("wake_up", std::string(b.data(), b.size()), kSleepTimeout);
}

absl::StatusOr<bool> AsyncLLM::IsSleeping() {
  // Sleeping when any engine is (vLLM's is_sleeping asks the one engine it has).
  bool any = false;
  for (int32_t e = 0; e < client_->num_engines(); ++e) {
    if (!client_->EngineFailure(e).ok()) continue;
    VLLM_ASSIGN_OR_RETURN(std::string result,
                          client_->CallUtility("is_sleeping", kUtilityTimeout, e));
    VLLM_ASSIGN_OR_RETURN(bool answer, DecodeBool(result, "is_sleeping"));
    any = any || answer;
  }
  return any;
}

std::vector<std::pair<std::string, std::string>> AsyncLLM::CacheConfigInfo() const {
  const config::CacheConfig& c = config_.vllm.cache;
  auto py_bool = [](bool b) { return std::string(b ? "True" : "False"); };
  const std::vector<EngineCoreClient::EngineInfo> engines = client_->engines();
  const int32_t num_gpu_blocks = engines.empty() ? 0 : engines[0].num_gpu_blocks;
  return {
      {"block_size", std::to_string(c.block_size)},
      {"cache_dtype", "auto"},
      {"enable_prefix_caching", py_bool(c.enable_prefix_caching)},
      {"gpu_memory_utilization", absl::StrCat(c.gpu_memory_utilization)},
      {"kv_cache_memory_bytes", std::to_string(c.kv_cache_memory_bytes)},
      {"kv_offloading_backend", c.kv_offloading_backend},
      {"kv_offloading_size",
       c.kv_offloading_size > 0 ? absl::StrCat(c.kv_offloading_size) : std::string("None")},
      {"num_gpu_blocks", std::to_string(num_gpu_blocks)},
      {"num_gpu_blocks_override", c.num_gpu_blocks_override.has_value()
                                      ? std::to_string(*c.num_gpu_blocks_override)
                                      : std::string("None")},
  };
}

}  // namespace vllm::frontend
