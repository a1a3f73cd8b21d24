// The executor's fixed cost per step, piece by piece: the msgpack encode and decode of an
// execute_model call (the call header and the SchedulerOutput) and of its reply (the reply
// header and the ModelRunnerOutput), for an empty step and a 256-request decode step.
//
//   build/release/bin/codec_bench [--benchmark_filter=...]
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "core/codec.h"
#include "worker/worker_protocol.h"

namespace vllm::bench {
namespace {

// A decode step of `n` running requests: one new token and (every 16th) one new block each.
core::SchedulerOutput DecodeStep(int n) {
  core::SchedulerOutput so;
  so.step_id = 42;
  core::CachedRequestData& c = so.scheduled_cached_reqs;
  for (int i = 0; i < n; ++i) {
    c.req_ids.push_back(absl::StrCat("cmpl-", 1000 + i));
    c.resumed_from_preemption.push_back(0);
    c.new_token_ids.push_back(100 + i);
    c.new_token_ids_offsets.push_back(static_cast<uint32_t>(c.new_token_ids.size()));
    if (i % 16 == 0) c.new_block_ids.push_back(i);
    c.new_block_ids_offsets.push_back(static_cast<uint32_t>(c.new_block_ids.size()));
    c.num_computed_tokens.push_back(200 + i);
    so.num_scheduled_tokens.push_back(1);
  }
  so.total_num_scheduled_tokens = n;
  return so;
}

core::ModelRunnerOutput DecodeReply(int n) {
  core::ModelRunnerOutput out;
  for (int i = 0; i < n; ++i) {
    out.req_ids.push_back(absl::StrCat("cmpl-", 1000 + i));
    out.sampled_token_ids.push_back({7 + i});
  }
  return out;
}

void BM_EncodeSchedulerOutput(benchmark::State& state) {
  const core::SchedulerOutput so = DecodeStep(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(core::Encode(so));
}
BENCHMARK(BM_EncodeSchedulerOutput)->Arg(0)->Arg(256);

void BM_DecodeSchedulerOutput(benchmark::State& state) {
  const std::string bytes = core::Encode(DecodeStep(static_cast<int>(state.range(0))));
  for (auto _ : state) {
    auto so = core::DecodeSchedulerOutput(bytes);
    if (!so.ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(so);
  }
}
BENCHMARK(BM_DecodeSchedulerOutput)->Arg(0)->Arg(256);

void BM_EncodeModelRunnerOutput(benchmark::State& state) {
  const core::ModelRunnerOutput out = DecodeReply(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(core::Encode(out));
}
BENCHMARK(BM_EncodeModelRunnerOutput)->Arg(0)->Arg(256);

void BM_DecodeModelRunnerOutput(benchmark::State& state) {
  const std::string bytes = core::Encode(DecodeReply(static_cast<int>(state.range(0))));
  for (auto _ : state) {
    auto out = core::DecodeModelRunnerOutput(bytes);
    if (!out.ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK(BM_DecodeModelRunnerOutput)->Arg(0)->Arg(256);

// The executor's per-step paths: into buffers kept between steps.
void BM_EncodeSchedulerOutputTo(benchmark::State& state) {
  const core::SchedulerOutput so = DecodeStep(static_cast<int>(state.range(0)));
  std::string out;
  for (auto _ : state) {
    core::EncodeTo(so, &out);
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_EncodeSchedulerOutputTo)->Arg(0)->Arg(256);

void BM_DecodeSchedulerOutputInto(benchmark::State& state) {
  const std::string bytes = core::Encode(DecodeStep(static_cast<int>(state.range(0))));
  core::SchedulerOutput so;
  for (auto _ : state) {
    if (!core::DecodeSchedulerOutputInto(bytes, &so).ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(so.step_id);
  }
}
BENCHMARK(BM_DecodeSchedulerOutputInto)->Arg(0)->Arg(256);

void BM_EncodeModelRunnerOutputTo(benchmark::State& state) {
  const core::ModelRunnerOutput out = DecodeReply(static_cast<int>(state.range(0)));
  std::string bytes;
  for (auto _ : state) {
    core::EncodeTo(out, &bytes);
    benchmark::DoNotOptimize(bytes.data());
  }
}
BENCHMARK(BM_EncodeModelRunnerOutputTo)->Arg(0)->Arg(256);

// A fresh output per step, as the executor returns it.
void BM_DecodeModelRunnerOutputInto(benchmark::State& state) {
  const std::string bytes = core::Encode(DecodeReply(static_cast<int>(state.range(0))));
  for (auto _ : state) {
    core::ModelRunnerOutput out;
    if (!core::DecodeModelRunnerOutputInto(bytes, &out).ok()) {
      state.SkipWithError("decode failed");
    }
    benchmark::DoNotOptimize(out.req_ids.data());
  }
}
BENCHMARK(BM_DecodeModelRunnerOutputInto)->Arg(0)->Arg(256);

void BM_EncodeCallPrefixTo(benchmark::State& state) {
  uint64_t id = 1;
  std::string out;
  for (auto _ : state) {
    worker::EncodeCallPrefixTo({id++, worker::kExecuteModelMethod, 0}, &out);
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_EncodeCallPrefixTo);

void BM_EncodeCallPrefix(benchmark::State& state) {
  uint64_t id = 1;
  for (auto _ : state) {
    benchmark::DoNotOptimize(worker::EncodeCallPrefix({id++, worker::kExecuteModelMethod, 0}));
  }
}
BENCHMARK(BM_EncodeCallPrefix);

void BM_DecodeCall(benchmark::State& state) {
  const std::string bytes = worker::EncodeCallPrefix({12345, worker::kExecuteModelMethod, 0}) +
                            core::Encode(core::SchedulerOutput{});
  const absl::Span<const uint8_t> span(reinterpret_cast<const uint8_t*>(bytes.data()),
                                       bytes.size());
  for (auto _ : state) {
    auto call = worker::DecodeCall(span);
    if (!call.ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(call);
  }
}
BENCHMARK(BM_DecodeCall);

void BM_EncodeReplyPrefix(benchmark::State& state) {
  uint64_t id = 1;
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        worker::EncodeReplyPrefix({id++, 0, absl::StatusCode::kOk, std::string()}));
  }
}
BENCHMARK(BM_EncodeReplyPrefix);

void BM_DecodeReply(benchmark::State& state) {
  const std::string bytes =
      worker::EncodeReplyPrefix({12345, 0, absl::StatusCode::kOk, std::string()}) +
      core::Encode(core::ModelRunnerOutput{});
  const absl::Span<const uint8_t> span(reinterpret_cast<const uint8_t*>(bytes.data()),
                                       bytes.size());
  for (auto _ : state) {
    auto reply = worker::DecodeReply(span);
    if (!reply.ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(reply);
  }
}
BENCHMARK(BM_DecodeReply);

}  // namespace
}  // namespace vllm::bench

BENCHMARK_MAIN();
