// One rank of a communicator group, started by comm_process_test:
//
//   comm_test_helper <mode> <spec> <rank> [counts] [iterations] [timeout_ms] [key_file]
//
// `key_file` (a cluster key file, ipc/curve.h) gives the rank the CURVE key for a tcp:// gloo
// store.
// `counts` is a comma-separated list of "<count>" or "<count>x<iterations>" items (the latter
// overrides `iterations` for that count). Prints "joined" once JoinGroup returned, then, per
// mode:
//   sum   all-reduces each count its number of times, in list order (values differ per rank,
//         iteration and element, integer-valued so sums are exact), checks every element,
//         prints "ok <all-reduces>";
//   loop  all-reduces `count` floats up to `iterations` times, printing "looping" after the
//         first; prints "done" (peers outlived the loop) or the error;
//   idle  does nothing until killed;
//   stall all-reduces once (a peer in idle never arrives) and prints the error.
// On an error prints "error <StatusCode name> <message>" and exits 1.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ipc/curve.h"
#include "kernels/comm/group_spec.h"

namespace {

using vllm::kernels::Communicator;

// Element i of rank r's input in all-reduce `it`: an integer in [-500, 500].
float Value(int32_t r, uint64_t it, size_t i) {
  return static_cast<float>(
      static_cast<int64_t>((i * 7 + it * 13 + static_cast<uint64_t>(r) * 31) % 1001) - 500);
}

int Fail(const absl::Status& st) {
  std::printf("error %s %s\n", absl::StatusCodeToString(st.code()).c_str(),
              std::string(st.message()).c_str());
  std::fflush(stdout);
  return 1;
}

struct Item {
  size_t count = 1;
  int iterations = 0;  // 0: the command line's default
};

int RunSum(Communicator& comm, const std::vector<Item>& items, int default_iterations) {
  uint64_t it = 0;
  int done = 0;
  for (const Item& item : items) {
    const size_t count = item.count;
    const int iterations = item.iterations > 0 ? item.iterations : default_iterations;
    std::vector<float> data(count);
    for (int k = 0; k < iterations; ++k, ++it) {
      for (size_t i = 0; i < count; ++i) data[i] = Value(comm.rank(), it, i);
      if (absl::Status st = comm.AllReduceSum(data.data(), count); !st.ok()) return Fail(st);
      for (size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int32_t r = 0; r < comm.world_size(); ++r) want += Value(r, it, i);
        if (data[i] != want) {
          return Fail(
              absl::DataLossError(absl::StrCat("count ", count, " iteration ", k, " element ", i,
                                               ": got ", data[i], ", want ", want)));
        }
      }
      ++done;
    }
  }
  std::printf("ok %d\n", done);
  return 0;
}

int RunLoop(Communicator& comm, size_t count, int iterations) {
  std::vector<float> data(count, 1.0f);
  for (int k = 0; k < iterations; ++k) {
    if (absl::Status st = comm.AllReduceSum(data.data(), count); !st.ok()) return Fail(st);
    std::fill(data.begin(), data.end(), 1.0f);
    if (k == 0) {
      std::printf("looping\n");
      std::fflush(stdout);
    }
  }
  std::printf("done\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: %s <sum|loop|idle|stall> <spec> <rank> [count] [iters] [ms] [key]\n",
                 argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  int32_t rank = 0;
  std::vector<Item> counts;
  int iterations = 1;
  int64_t timeout_ms = 10'000;
  if (!absl::SimpleAtoi(argv[3], &rank)) return 2;
  if (argc > 4) {
    for (absl::string_view c : absl::StrSplit(argv[4], ',')) {
      std::vector<absl::string_view> parts = absl::StrSplit(c, 'x');
      Item item;
      if (!absl::SimpleAtoi(parts[0], &item.count)) return 2;
      if (parts.size() > 1 && !absl::SimpleAtoi(parts[1], &item.iterations)) return 2;
      counts.push_back(item);
    }
  }
  if (argc > 5 && !absl::SimpleAtoi(argv[5], &iterations)) return 2;
  if (argc > 6 && !absl::SimpleAtoi(argv[6], &timeout_ms)) return 2;

  auto spec = vllm::kernels::comm::CommGroupSpec::Decode(argv[2]);
  if (!spec.ok()) return Fail(spec.status());
  vllm::kernels::comm::CommOptions options;
  options.collective_timeout = absl::Milliseconds(timeout_ms);
  if (argc > 7) {
    auto keys = vllm::ipc::LoadCurveKeyFile(argv[7]);
    if (!keys.ok()) return Fail(keys.status());
    options.curve = *keys;
  }
  auto comm = vllm::kernels::comm::JoinGroup(*spec, rank, absl::Seconds(10), options);
  if (!comm.ok()) return Fail(comm.status());
  std::printf("joined\n");
  std::fflush(stdout);

  int rc = 0;
  if (mode == "sum") {
    rc = RunSum(**comm, counts, iterations);
  } else if (mode == "loop") {
    rc = RunLoop(**comm, counts.empty() ? 1 : counts[0].count, iterations);
  } else if (mode == "idle") {
    while (true) pause();  // until the test kills us
  } else if (mode == "stall") {
    std::vector<float> data(counts.empty() ? 1 : counts[0].count, 1.0f);
    absl::Status st = (*comm)->AllReduceSum(data.data(), data.size());
    rc = st.ok() ? 0 : Fail(st);
    if (st.ok()) std::printf("ok 1\n");
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    rc = 2;
  }
  std::fflush(stdout);
  return rc;
}
