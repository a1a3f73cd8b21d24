// DpLoadBalancer: which data-parallel engine a new request goes to (vLLM's
// DPLBAsyncMPClient.get_core_engine_for_request), the policy half of the frontend's DP client.
//
// The DP coordinator publishes every engine's waiting and running counts and KV-cache usage
// (about every 100 ms); between two publications each API-server client also counts what it
// sent itself. vLLM 0.33's score for engine e, lowest wins:
//
//   max(clients × own_in_flight[e], waiting[e] + running[e])
//     + waiting[e] × 6 × max(0, kv_usage[e] − 0.5)
//
// where `clients` is the number of API-server clients feeding the engines (each assumed to
// send like this one) and own_in_flight counts this client's picks since the last
// publication. Ties go to the first engine scanned; the scan starts at a per-client index
// (client_index × engines / clients), so clients do not all favour engine 0. Dead engines are
// never picked.
//
// That rule counts this client's own requests only since the last publication, and a
// publication (an engine's figures after a step) misses the requests still in transit to it;
// measured on 4 engines with 16 closed-loop clients (serve_dp_test) one engine then held up to
// 2x the mean. The default policy, kOutstanding, counts instead every request of this client
// that has not finished (the client sees every finish and abort), which is exact for one API
// server:
//
//   max(clients × own_outstanding[e], waiting[e] + running[e])
//     + waiting[e] × 6 × max(0, kv_usage[e] − 0.5)
//
// and breaks ties from the engine after the one it picked last (vLLM: from a fixed index, so
// a client whose requests never overlap sends every one of them to the same engine).
//
// Thread-safety: none; the client's submitting thread owns it.
#ifndef VLLM_FRONTEND_ENGINE_DP_LOAD_BALANCER_H_
#define VLLM_FRONTEND_ENGINE_DP_LOAD_BALANCER_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace vllm::frontend {

// One engine's figures as the coordinator publishes them.
struct EngineLoad {
  int32_t waiting = 0;
  int32_t running = 0;
  double kv_cache_usage = 0.0;  // 0..1
  bool alive = true;
};

enum class DpBalancePolicy {
  kOutstanding,  // this client's unfinished requests (default)
  kVllm,         // vLLM 0.33: this client's picks since the last figures
};

class DpLoadBalancer {
 public:
  // `num_engines` >= 1; 0 <= client_index < client_count.
  DpLoadBalancer(int32_t num_engines, int32_t client_count, int32_t client_index,
                 DpBalancePolicy policy = DpBalancePolicy::kOutstanding);

  // The engine for the next request (counted as this client's in-flight there), or nullopt
  // when every engine is dead.
  std::optional<int32_t> Pick();
  // New published figures (one per engine; a wrong count is ignored): this client's local
  // counts start again from zero, since the figures now include its requests.
  void Publish(std::span<const EngineLoad> loads);
  // One engine's own figures (an engine reports them with its outputs when they change):
  // this client's local count for it starts again from zero. `load.alive` is ignored.
  void Update(int32_t engine, const EngineLoad& load);
  // One of this client's requests on `engine` ended (finished, aborted, or never sent).
  void Finished(int32_t engine);
  // `engine` is a new process (it joined again): nothing of this client is outstanding there.
  void Reset(int32_t engine);
  // An engine died or came back before the next publication.
  void SetAlive(int32_t engine, bool alive);

  // The score Pick compares (exposed for tests and the benchmark).
  double Score(int32_t engine) const;
  int32_t num_engines() const { return static_cast<int32_t>(loads_.size()); }

 private:
  std::vector<EngineLoad> loads_;
  std::vector<int32_t> own_in_flight_;    // picks since the engine's last figures (kVllm)
  std::vector<int32_t> own_outstanding_;  // picks not finished yet (kOutstanding)
  const DpBalancePolicy policy_;
  const int32_t client_count_;
  const int32_t start_index_;
  int32_t next_start_;  // kOutstanding: ties go to the engine after the last one picked
};

}  // namespace vllm::frontend

#endif  // VLLM_FRONTEND_ENGINE_DP_LOAD_BALANCER_H_
