// `vllm-launch bench throughput`: vLLM 0.33's `vllm bench throughput`
// (vllm/benchmarks/throughput.py) with its default backend `vllm` (the offline engine in this
// process). Draws --num-prompts prompts of vLLM's random, sharegpt or prefix_repetition
// dataset (bench/serve/dataset.h, dataset_files.h), tokenizes them as the engine's frontend does,
// runs them all as one batch (temperature 1, ignore_eos, --n sequences each) and prints vLLM's
// "Throughput: X requests/s, Y total tokens/s, Z output tokens/s" and token totals; writes vLLM's
// --output-json. Every other flag is an engine flag of `vllm-launch serve`. See
// bench/offline/README.md.
#ifndef VLLM_BENCH_OFFLINE_THROUGHPUT_H_
#define VLLM_BENCH_OFFLINE_THROUGHPUT_H_

#include <string>
#include <vector>

namespace vllm::bench_offline {

// The arguments after `bench throughput`. Returns the exit code: 0 done (or --help), 1 the
// engine failed or the result could not be written, 2 bad flags or dataset.
int RunBenchThroughput(const std::vector<std::string>& args);

}  // namespace vllm::bench_offline

#endif  // VLLM_BENCH_OFFLINE_THROUGHPUT_H_
