// `vllm-launch bench latency`: vLLM 0.33's `vllm bench latency` (vllm/benchmarks/latency.py).
// Times one batch of --batch-size random prompts of --input-len token ids, each generating
// --output-len tokens (--n sequences; temperature 1, ignore_eos) on the in-process engine,
// --num-iters-warmup times untimed, then --num-iters times; prints vLLM's lines ("Avg
// latency: X seconds", "P% percentile latency: X seconds") and writes vLLM's --output-json.
// Every other flag is an engine flag of `vllm-launch serve`. See bench/offline/README.md.
#ifndef VLLM_BENCH_OFFLINE_LATENCY_H_
#define VLLM_BENCH_OFFLINE_LATENCY_H_

#include <string>
#include <vector>

namespace vllm::bench_offline {

// The arguments after `bench latency`. Returns the exit code: 0 done (or --help), 1 the engine
// failed or the result could not be written, 2 bad flags.
int RunBenchLatency(const std::vector<std::string>& args);

}  // namespace vllm::bench_offline

#endif  // VLLM_BENCH_OFFLINE_LATENCY_H_
