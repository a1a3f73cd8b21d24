// What the serve integration tests share: a loopback HTTP/1.1 client (one connection per
// request), an SSE stream reader that can hang up mid-stream, a Prometheus text parser, and a
// fixture that starts `vllm-launch` (the test process is the subreaper of what it starts) and
// checks on tear-down that no descendant, no new /dev/shm entry and no ipc:// endpoint directory
// of a dead process (OrphanedIpcDirs) is left behind.
//
// Every call that waits takes a deadline; nothing here sleeps to synchronise. Not thread-safe
// per object; distinct objects may be used from distinct threads.
#ifndef VLLM_TESTS_INTEGRATION_SERVE_SERVE_TEST_SUPPORT_H_
#define VLLM_TESTS_INTEGRATION_SERVE_SERVE_TEST_SUPPORT_H_

#include <sys/types.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/process.h"

namespace vllm::testing {

struct HttpResponse {
  int status = 0;
  std::string content_type;
  std::string server;  // the Server header
  std::string head;    // the status line and headers as received
  std::string body;    // de-chunked
  // The body as JSON, or a discarded value when it is not JSON.
  nlohmann::json Json() const;
};

// One request over a fresh connection (Connection: close), read to EOF by `timeout`.
// `content_type` empty: no Content-Type header. Fails on a connection error or timeout.
absl::StatusOr<HttpResponse> Http(int port, const std::string& method, const std::string& path,
                                  const std::string& body = "",
                                  const std::string& content_type = "application/json",
                                  absl::Duration timeout = absl::Seconds(30));

// Sends raw bytes as a whole request and reads the reply (for malformed HTTP).
absl::StatusOr<HttpResponse> HttpRaw(int port, const std::string& request,
                                     absl::Duration timeout = absl::Seconds(30));

// Sends a POST with a JSON body and returns the open connection without reading the reply
// (the caller closes it: a client that leaves while the server works on the request).
absl::StatusOr<int> SendAndKeepOpen(int port, const std::string& path, const std::string& body);

// A streaming (SSE) POST: headers read at Open, then one `data:` payload per Next().
// The destructor closes the connection (which, mid-stream, is a client disconnect).
class SseStream {
 public:
  static absl::StatusOr<SseStream> Open(int port, const std::string& path,
                                        const nlohmann::json& body, absl::Time deadline);
  SseStream(SseStream&& other) noexcept;
  SseStream& operator=(SseStream&&) = delete;
  ~SseStream();

  // The HTTP status; on a non-200 the whole (non-SSE) body is in error_body().
  int status() const { return status_; }
  const std::string& error_body() const { return error_body_; }

  // The next event's data ("[DONE]" included); nullopt when the stream ended without more
  // events; DeadlineExceeded when none arrived by `deadline`.
  absl::StatusOr<std::optional<std::string>> Next(absl::Time deadline);
  // Closes the connection now (a client leaving mid-stream). Idempotent.
  void Close();

 private:
  explicit SseStream(int fd) : fd_(fd) {}
  // Reads more bytes into raw_ by `deadline`; false on EOF.
  absl::StatusOr<bool> Fill(absl::Time deadline);
  // Moves complete chunks from raw_ to events_; sets ended_ at the last chunk.
  absl::Status Dechunk();

  int fd_ = -1;
  int status_ = 0;
  std::string error_body_;
  std::string raw_;     // received, not yet de-chunked
  std::string events_;  // de-chunked SSE text, not yet consumed
  bool ended_ = false;  // the terminating chunk (or EOF) was seen
};

// A whole streamed generation, read until [DONE] or end of stream.
struct StreamResult {
  int status = 0;
  std::vector<nlohmann::json> events;  // every data payload but [DONE], parsed
  bool done = false;                   // [DONE] arrived
  std::string error;                   // connection/timeout problem, or the non-200 body
};
StreamResult RunStream(int port, const std::string& path, const nlohmann::json& body,
                       absl::Time deadline);

// Prometheus text: "name{labels}" (exactly as rendered) → value; comments skipped.
using MetricSamples = std::map<std::string, double>;
MetricSamples ParseMetrics(const std::string& text);
// The sum of every series of `name` (any labels); 0 when absent.
double SumOf(const MetricSamples& samples, const std::string& name);
// GET /metrics, parsed; an empty map on failure.
MetricSamples ScrapeMetrics(int port);

// The children of `parent` whose argv[1] is (or, `except`, is not) `subcommand` — e.g.
// "engine-core", "api-server", "dp-coordinator" — in pid order (spawn order).
std::vector<pid_t> ChildrenRunning(pid_t parent, const std::string& subcommand);
std::vector<pid_t> ChildrenNotRunning(pid_t parent, const std::string& subcommand);
// User + system CPU time a process has used so far (/proc/<pid>/stat); 0 once it is gone.
absl::Duration CpuTimeOf(pid_t pid);

// Starts `vllm-launch` (with the bundled model unless args say otherwise) and checks on
// tear-down that every descendant has exited, /dev/shm is as it was and no ipc:// endpoint
// directory of a dead process was added. Makes the test
// process a child subreaper so orphans can be counted and reaped.
class ServeTest : public ::testing::Test {
 public:
  // Every living descendant of this test process (orphans re-parented to it included);
  // reaps our zombies first.
  static std::vector<pid_t> Descendants();
  // Waits until `pid` has no living children, by `deadline`.
  static bool WaitNoChildren(pid_t pid, absl::Time deadline);

 protected:
  void SetUp() override;
  void TearDown() override;

  // Spawns the server with `args` (plus `--port 0` and `--kv-cache-memory 64MiB` unless
  // they set them), waits for its ready line; sets port_. `prefix` runs before the binary and
  // must exec it in place (e.g. {"/usr/bin/prlimit", "--nofile=256:256"}), so server_->pid()
  // is the server's. Use with ASSERT_NO_FATAL_FAILURE.
  void StartServer(const std::vector<std::string>& args = {},
                   const std::vector<std::string>& prefix = {});

  std::set<std::string> shm_before_;
  std::set<std::string> ipc_dirs_before_;  // OrphanedIpcDirs() at SetUp
  std::optional<Subprocess> server_;
  int port_ = 0;
};

}  // namespace vllm::testing

#endif  // VLLM_TESTS_INTEGRATION_SERVE_SERVE_TEST_SUPPORT_H_
