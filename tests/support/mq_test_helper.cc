// A small program the MessageQueue integration tests start as real processes.
//
//   mq_test_helper writer --readers N [--remote R] --count C --seed S --chunk B --chunks K
//       Creates a queue (the last R ranks remote), prints "HANDLE <text>", waits until ready,
//       prints "READY", writes C pattern messages (C = 0: forever), prints "DONE", closes;
//       with --hold it then waits to be killed (so TCP readers get the messages in flight).
//   mq_test_helper reader --handle TEXT --rank R --count C --seed S --chunk B [--stall]
//       Attaches, prints "READY" once the writer is ready, reads and checks C messages
//       (C = 0: until an error), prints "OK <n>" and exits 0; on a wrong message prints
//       "FAIL <what>" and exits 1; on a queue error prints "ERROR <code>: <message>", exits 3.
//       --stall: after READY never reads (blocks in pause()).
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "ipc/message_queue.h"
#include "tests/support/mq_pattern.h"

namespace {

using vllm::ipc::ByteSpan;

std::map<std::string, std::string> ParseFlags(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 2; i < argc; ++i) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0) continue;
    if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
      flags[k.substr(2)] = argv[++i];
    } else {
      flags[k.substr(2)] = "1";
    }
  }
  return flags;
}

uint64_t Num(const std::map<std::string, std::string>& f, const std::string& k, uint64_t dflt) {
  auto it = f.find(k);
  return it == f.end() ? dflt : std::strtoull(it->second.c_str(), nullptr, 10);
}

int Fail(const absl::Status& st) {
  std::printf("ERROR %s\n", st.ToString().c_str());
  std::fflush(stdout);
  return 3;
}

int RunWriter(const std::map<std::string, std::string>& f) {
  vllm::ipc::MessageQueueOptions opt;
  opt.n_readers = static_cast<uint32_t>(Num(f, "readers", 1));
  const uint32_t remote = static_cast<uint32_t>(Num(f, "remote", 0));
  std::vector<int32_t> local;
  for (uint32_t r = 0; r + remote < opt.n_readers; ++r) local.push_back(static_cast<int32_t>(r));
  opt.local_reader_ranks = local;
  opt.max_chunk_bytes = Num(f, "chunk", 4096);
  opt.max_chunks = Num(f, "chunks", 10);
  auto w = vllm::ipc::MessageQueueWriter::Create(opt);
  if (!w.ok()) return Fail(w.status());
  std::printf("HANDLE %s\n", (*w)->handle().ToText().c_str());
  std::fflush(stdout);
  if (auto st = (*w)->WaitUntilReady(absl::Now() + absl::Seconds(60)); !st.ok()) return Fail(st);
  std::printf("READY\n");
  std::fflush(stdout);
  const uint64_t count = Num(f, "count", 0), seed = Num(f, "seed", 1);
  for (uint64_t i = 0; count == 0 || i < count; ++i) {
    auto msg = vllm::testing::PatternMessage(seed, i, opt.max_chunk_bytes);
    if (auto st = (*w)->Enqueue(msg, absl::Now() + absl::Seconds(60)); !st.ok()) return Fail(st);
  }
  std::printf("DONE\n");
  std::fflush(stdout);
  // Messages to TCP readers may still be in flight: ZMQ drops them if the process exits now.
  if (f.count("hold")) {
    while (true) pause();
  }
  return 0;
}

int RunReader(const std::map<std::string, std::string>& f) {
  auto handle = vllm::ipc::Handle::FromText(f.count("handle") ? f.at("handle") : "");
  if (!handle.ok()) return Fail(handle.status());
  auto r = vllm::ipc::MessageQueueReader::Attach(*handle, static_cast<int32_t>(Num(f, "rank", 0)));
  if (!r.ok()) return Fail(r.status());
  if (auto st = (*r)->WaitUntilReady(absl::Now() + absl::Seconds(60)); !st.ok()) return Fail(st);
  std::printf("READY\n");
  std::fflush(stdout);
  if (f.count("stall")) {
    while (true) pause();
  }
  const uint64_t count = Num(f, "count", 0), seed = Num(f, "seed", 1);
  const size_t chunk = Num(f, "chunk", 4096);
  for (uint64_t i = 0; count == 0 || i < count; ++i) {
    std::string problem;
    absl::Status st = (*r)->Dequeue(
        [&](ByteSpan bytes) {
          problem = vllm::testing::PatternCheck(seed, i, chunk, bytes.data(), bytes.size());
          return absl::OkStatus();
        },
        absl::Now() + absl::Seconds(60));
    if (!st.ok()) return Fail(st);
    if (!problem.empty()) {
      std::printf("FAIL %s\n", problem.c_str());
      std::fflush(stdout);
      return 1;
    }
  }
  std::printf("OK %llu\n", static_cast<unsigned long long>(count));
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Never outlive the test that started us.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 4;
  if (argc < 2) {
    std::fprintf(stderr, "usage: mq_test_helper writer|reader [flags]\n");
    return 2;
  }
  const auto flags = ParseFlags(argc, argv);
  const std::string cmd = argv[1];
  if (cmd == "writer") return RunWriter(flags);
  if (cmd == "reader") return RunReader(flags);
  std::fprintf(stderr, "unknown command '%s'\n", cmd.c_str());
  return 2;
}
