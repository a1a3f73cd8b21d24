// KV blocks moved per second through BlockServer → BlockReader over 127.0.0.1 TCP (one
// connection, every READ of up to 16 MiB checked by XXH3-64 and copied into the reader's
// cache), against the peer that sets the limit: a plain memcpy of the same bytes from one
// cache to the other (every layer's K and V span of every block).
//
// Layouts (float32, block size 16):
//   tiny  — the bundled model (models/kjv-llama-tiny: 6 layers, 4 KV heads, head_dim 32):
//           96 KiB per block, 256 blocks (24 MiB) per request;
//   large — 32 layers, 8 KV heads, head_dim 128 (a Llama-3-8B-shaped rank): 4 MiB per block,
//           32 blocks (128 MiB) per request.
// One iteration moves one request's blocks (Hold, Submit, wait for the result, DONE seen by
// the server). Counters: us_per_block (wall time per block), blocks_per_s, bytes_per_second.
//
//   build/release/bin/kv_transfer_bench [--benchmark_min_time=0.5]
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "kv_transfer/block_reader.h"
#include "kv_transfer/block_server.h"
#include "kv_transfer/kv_cache_view.h"

namespace vllm::kv_transfer {
namespace {

struct Shape {
  KvLayout layout;
  int32_t blocks;  // per request
};

Shape ShapeOf(int64_t index) {
  if (index == 0) return {KvLayout{6, 4, 32, 16, 4, 1, 0}, 256};
  return {KvLayout{32, 8, 128, 16, 4, 1, 0}, 32};
}

// A KV cache on the heap: one K and one V buffer per layer.
class Cache {
 public:
  Cache(const KvLayout& layout, int32_t num_blocks, uint8_t fill) {
    const size_t bytes = static_cast<size_t>(layout.layer_block_bytes()) * num_blocks;
    view_.layout = layout;
    view_.num_blocks = num_blocks;
    for (int32_t l = 0; l < 2 * layout.num_layers; ++l) {
      buffers_.emplace_back(bytes, static_cast<uint8_t>(fill + l));
    }
    for (int32_t l = 0; l < layout.num_layers; ++l) {
      view_.k.push_back(buffers_[2 * l].data());
      view_.v.push_back(buffers_[2 * l + 1].data());
    }
  }
  const KvCacheView& view() const { return view_; }

 private:
  std::vector<std::vector<uint8_t>> buffers_;
  KvCacheView view_;
};

// `elapsed`: the wall time of the timed loop.
void SetCounters(benchmark::State& state, const Shape& shape, absl::Duration elapsed) {
  const int64_t blocks = state.iterations() * shape.blocks;
  state.SetBytesProcessed(blocks * shape.layout.block_bytes());
  state.counters["blocks_per_s"] =
      benchmark::Counter(static_cast<double>(blocks), benchmark::Counter::kIsRate);
  state.counters["us_per_block"] =
      blocks > 0 ? absl::ToDoubleMicroseconds(elapsed) / static_cast<double>(blocks) : 0.0;
  state.SetLabel(absl::StrCat(shape.layout.block_bytes() >> 10, " KiB/block, ", shape.blocks,
                              " blocks/request"));
}

void BM_Memcpy(benchmark::State& state, int64_t shape_index) {
  const Shape shape = ShapeOf(shape_index);
  Cache source(shape.layout, shape.blocks, 1), dest(shape.layout, shape.blocks, 0);
  const size_t bytes = static_cast<size_t>(shape.layout.layer_block_bytes());
  const absl::Time start = absl::Now();
  for (auto _ : state) {
    for (int32_t b = 0; b < shape.blocks; ++b) {
      for (int32_t l = 0; l < shape.layout.num_layers; ++l) {
        std::memcpy(dest.view().k[l] + b * bytes, source.view().k[l] + b * bytes, bytes);
        std::memcpy(dest.view().v[l] + b * bytes, source.view().v[l] + b * bytes, bytes);
      }
    }
    benchmark::DoNotOptimize(dest.view().k[0][0]);
    benchmark::ClobberMemory();
  }
  SetCounters(state, shape, absl::Now() - start);
}

void BM_TcpTransfer(benchmark::State& state, int64_t shape_index) {
  const Shape shape = ShapeOf(shape_index);
  Cache source(shape.layout, shape.blocks, 1), dest(shape.layout, shape.blocks, 0);
  BlockServerOptions so;
  so.engine_id = "prefill";
  so.view = source.view();
  auto server = BlockServer::Start(so);
  BlockReaderOptions ro;
  ro.engine_id = "decode";
  ro.view = dest.view();
  auto reader = BlockReader::Start(ro);
  if (!server.ok() || !reader.ok()) {
    state.SkipWithError("cannot start the server or the reader");
    return;
  }
  std::vector<int32_t> ids(shape.blocks);
  for (int32_t i = 0; i < shape.blocks; ++i) ids[i] = i;
  int64_t n = 0;
  const absl::Time start = absl::Now();
  for (auto _ : state) {
    const std::string id = absl::StrCat("r", n++);
    if (!(*server)->Hold(id, ids).ok()) state.SkipWithError("Hold failed");
    LoadSpec spec;
    spec.req_id = id;
    spec.remote_request_id = id;
    spec.remote_engine_id = "prefill";
    spec.remote_host = "127.0.0.1";
    spec.remote_port = (*server)->port();
    spec.remote_block_ids = ids;
    spec.local_block_ids = ids;
    if (!(*reader)->Submit(spec).ok()) state.SkipWithError("Submit failed");
    // Poll with short sleeps: a spinning waiter would take a core from the two threads measured.
    BlockReader::Results results;
    while (results.finished.empty() && results.failed.empty()) {
      absl::SleepFor(absl::Microseconds(20));
      results = (*reader)->TakeResults();
    }
    if (!results.failed.empty()) {
      state.SkipWithError("a transfer failed");
      break;
    }
    while ((*server)->TakeFinished().empty()) absl::SleepFor(absl::Microseconds(20));
  }
  const absl::Duration elapsed = absl::Now() - start;
  if (std::memcmp(dest.view().k[0], source.view().k[0],
                  static_cast<size_t>(shape.layout.layer_block_bytes())) != 0) {
    state.SkipWithError("the blocks differ after the transfer");
  }
  SetCounters(state, shape, elapsed);
}

BENCHMARK_CAPTURE(BM_Memcpy, tiny, 0)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TcpTransfer, tiny, 0)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Memcpy, large, 1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TcpTransfer, large, 1)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace vllm::kv_transfer

BENCHMARK_MAIN();
