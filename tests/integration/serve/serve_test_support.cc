#include "tests/integration/serve/serve_test_support.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace vllm::testing {
namespace {

int MillisLeft(absl::Time deadline) {
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return static_cast<int>(std::clamp<int64_t>(ms, 0, INT_MAX));
}

absl::StatusOr<int> Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect to port ", port, ": ", std::strerror(err)));
  }
  return fd;
}

absl::Status WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Reads what is available by `deadline` into `out`; false on EOF (or reset).
absl::StatusOr<bool> ReadSome(int fd, std::string* out, absl::Time deadline) {
  while (true) {
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, MillisLeft(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return absl::DeadlineExceededError("no reply in time");
    char buf[16384];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    out->append(buf, static_cast<size_t>(n));
    return true;
  }
}

std::string RequestHead(const std::string& method, const std::string& path,
                        const std::string& content_type, size_t body_size, bool close) {
  return absl::StrCat(
      method, " ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n",
      content_type.empty() ? "" : absl::StrCat("Content-Type: ", content_type, "\r\n"),
      "Content-Length: ", body_size, "\r\n", close ? "Connection: close\r\n" : "", "\r\n");
}

// Parses "HTTP/1.1 200 OK\r\n...headers...\r\n\r\n" at the start of `raw`.
struct Head {
  int status = 0;
  std::string content_type;
  std::string server;
  bool chunked = false;
  size_t size = 0;  // bytes of the head, separator included
};
std::optional<Head> ParseHead(const std::string& raw) {
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return std::nullopt;
  Head head;
  head.size = end + 4;
  std::vector<std::string> lines = absl::StrSplit(raw.substr(0, end), "\r\n");
  const size_t sp = lines[0].find(' ');
  if (sp == std::string::npos || !absl::SimpleAtoi(lines[0].substr(sp + 1, 3), &head.status)) {
    return std::nullopt;
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    const std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
    const std::string value(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    if (name == "content-type") head.content_type = value;
    if (name == "server") head.server = value;
    if (name == "transfer-encoding" && absl::StrContains(absl::AsciiStrToLower(value), "chunked")) {
      head.chunked = true;
    }
  }
  return head;
}

// Decodes complete chunks from the front of `raw` into `out`; true once the last chunk
// was decoded. Leaves an incomplete chunk in `raw`.
absl::StatusOr<bool> DecodeChunks(std::string* raw, std::string* out) {
  while (true) {
    const size_t eol = raw->find("\r\n");
    if (eol == std::string::npos) return false;
    size_t size = 0;
    const std::string hex = raw->substr(0, raw->find_first_of(";\r"));
    if (!absl::SimpleHexAtoi(hex, &size)) {
      return absl::DataLossError(absl::StrCat("bad chunk size line '", raw->substr(0, eol), "'"));
    }
    if (size == 0) {
      raw->clear();
      return true;
    }
    if (raw->size() < eol + 2 + size + 2) return false;
    out->append(*raw, eol + 2, size);
    raw->erase(0, eol + 2 + size + 2);
  }
}

absl::StatusOr<HttpResponse> Exchange(int port, const std::string& request,
                                      absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  auto fd = Connect(port);
  if (!fd.ok()) return fd.status();
  std::string raw;
  absl::Status status = WriteAll(*fd, request);
  while (status.ok()) {
    absl::StatusOr<bool> more = ReadSome(*fd, &raw, deadline);
    if (!more.ok()) status = more.status();
    if (!more.ok() || !*more) break;
  }
  close(*fd);
  // A server that answers before reading all of a bad request may reset the connection
  // after replying; what arrived still counts.
  std::optional<Head> head = ParseHead(raw);
  if (!head.has_value()) {
    if (!status.ok()) return status;
    return absl::DataLossError(absl::StrCat("no HTTP response head in '", raw.substr(0, 200), "'"));
  }
  HttpResponse r;
  r.status = head->status;
  r.content_type = head->content_type;
  r.server = head->server;
  r.head = raw.substr(0, head->size);
  std::string body = raw.substr(head->size);
  if (head->chunked) {
    absl::StatusOr<bool> last = DecodeChunks(&body, &r.body);
    if (!last.ok()) return last.status();
  } else {
    r.body = std::move(body);
  }
  return r;
}

}  // namespace

nlohmann::json HttpResponse::Json() const {
  return nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
}

absl::StatusOr<HttpResponse> Http(int port, const std::string& method, const std::string& path,
                                  const std::string& body, const std::string& content_type,
                                  absl::Duration timeout) {
  return Exchange(port, RequestHead(method, path, content_type, body.size(), true) + body, timeout);
}

absl::StatusOr<HttpResponse> HttpRaw(int port, const std::string& request, absl::Duration timeout) {
  return Exchange(port, request, timeout);
}

absl::StatusOr<int> SendAndKeepOpen(int port, const std::string& path, const std::string& body) {
  auto fd = Connect(port);
  if (!fd.ok()) return fd.status();
  if (absl::Status s =
          WriteAll(*fd, RequestHead("POST", path, "application/json", body.size(), true) + body);
      !s.ok()) {
    close(*fd);
    return s;
  }
  return *fd;
}

// ---- SseStream ----

absl::StatusOr<SseStream> SseStream::Open(int port, const std::string& path,
                                          const nlohmann::json& body, absl::Time deadline) {
  auto fd = Connect(port);
  if (!fd.ok()) return fd.status();
  SseStream stream(*fd);
  const std::string text = body.dump();
  if (absl::Status s = WriteAll(*fd, RequestHead("POST", path, "application/json", text.size(),
                                                 /*close=*/true) +
                                         text);
      !s.ok()) {
    return s;
  }
  std::optional<Head> head;
  while (!(head = ParseHead(stream.raw_)).has_value()) {
    absl::StatusOr<bool> more = ReadSome(*fd, &stream.raw_, deadline);
    if (!more.ok()) return more.status();
    if (!*more) return absl::DataLossError("connection closed before the response head");
  }
  stream.status_ = head->status;
  stream.raw_.erase(0, head->size);
  if (head->status != 200 || !head->chunked) {
    while (true) {
      absl::StatusOr<bool> more = ReadSome(*fd, &stream.raw_, deadline);
      if (!more.ok()) return more.status();
      if (!*more) break;
    }
    stream.error_body_ = std::move(stream.raw_);
    stream.raw_.clear();
    stream.ended_ = true;
    return stream;
  }
  // Body bytes that came with the head (all of a short stream can, and the server may then
  // close at once: Next would see EOF before decoding them).
  if (absl::Status s = stream.Dechunk(); !s.ok()) return s;
  return stream;
}

SseStream::SseStream(SseStream&& o) noexcept
    : fd_(o.fd_),
      status_(o.status_),
      error_body_(std::move(o.error_body_)),
      raw_(std::move(o.raw_)),
      events_(std::move(o.events_)),
      ended_(o.ended_) {
  o.fd_ = -1;
}

SseStream::~SseStream() { Close(); }

void SseStream::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

absl::Status SseStream::Dechunk() {
  if (ended_) return absl::OkStatus();
  absl::StatusOr<bool> last = DecodeChunks(&raw_, &events_);
  if (!last.ok()) return last.status();
  ended_ = *last;
  return absl::OkStatus();
}

absl::StatusOr<bool> SseStream::Fill(absl::Time deadline) {
  if (fd_ < 0) return false;
  return ReadSome(fd_, &raw_, deadline);
}

absl::StatusOr<std::optional<std::string>> SseStream::Next(absl::Time deadline) {
  while (true) {
    if (const size_t end = events_.find("\n\n"); end != std::string::npos) {
      const std::string event = events_.substr(0, end);
      events_.erase(0, end + 2);
      std::string data;
      for (absl::string_view line : absl::StrSplit(event, '\n')) {
        if (absl::ConsumePrefix(&line, "data:")) {
          absl::ConsumePrefix(&line, " ");
          if (!data.empty()) data += '\n';
          data.append(line.data(), line.size());
        }
      }
      return std::optional<std::string>(std::move(data));
    }
    if (ended_) return std::optional<std::string>();
    absl::StatusOr<bool> more = Fill(deadline);
    if (!more.ok()) return more.status();
    if (!*more) {
      ended_ = true;  // EOF mid-stream: whatever is incomplete is dropped
      continue;
    }
    if (absl::Status s = Dechunk(); !s.ok()) return s;
  }
}

StreamResult RunStream(int port, const std::string& path, const nlohmann::json& body,
                       absl::Time deadline) {
  StreamResult result;
  absl::StatusOr<SseStream> stream = SseStream::Open(port, path, body, deadline);
  if (!stream.ok()) {
    result.error = stream.status().ToString();
    return result;
  }
  result.status = stream->status();
  if (result.status != 200) {
    result.error = stream->error_body();
    return result;
  }
  while (true) {
    absl::StatusOr<std::optional<std::string>> data = stream->Next(deadline);
    if (!data.ok()) {
      result.error = data.status().ToString();
      return result;
    }
    if (!data->has_value()) return result;
    if (**data == "[DONE]") {
      result.done = true;
      return result;
    }
    nlohmann::json event = nlohmann::json::parse(**data, nullptr, /*allow_exceptions=*/false);
    if (event.is_discarded()) {
      result.error = absl::StrCat("event is not JSON: ", **data);
      return result;
    }
    result.events.push_back(std::move(event));
  }
}

// ---- metrics ----

MetricSamples ParseMetrics(const std::string& text) {
  MetricSamples out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line.front() == '#') continue;
    const size_t sp = line.rfind(' ');
    if (sp == absl::string_view::npos) continue;
    double value = 0;
    if (!absl::SimpleAtod(line.substr(sp + 1), &value)) continue;
    out[std::string(line.substr(0, sp))] = value;
  }
  return out;
}

double SumOf(const MetricSamples& samples, const std::string& name) {
  double sum = 0;
  for (const auto& [series, value] : samples) {
    if (series == name || absl::StartsWith(series, name + "{")) sum += value;
  }
  return sum;
}

MetricSamples ScrapeMetrics(int port) {
  absl::StatusOr<HttpResponse> r = Http(port, "GET", "/metrics", "", "", absl::Seconds(10));
  if (!r.ok() || r->status != 200) return {};
  return ParseMetrics(r->body);
}

namespace {

// argv[1] of `pid` ("" when it is gone or has none).
std::string SubcommandOf(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/cmdline"));
  std::string argv0, argv1;
  std::getline(in, argv0, '\0');
  std::getline(in, argv1, '\0');
  return argv1;
}

}  // namespace

std::vector<pid_t> ChildrenRunning(pid_t parent, const std::string& subcommand) {
  std::vector<pid_t> out;
  for (pid_t c : ChildrenOf(parent)) {
    if (SubcommandOf(c) == subcommand) out.push_back(c);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<pid_t> ChildrenNotRunning(pid_t parent, const std::string& subcommand) {
  std::vector<pid_t> out;
  for (pid_t c : ChildrenOf(parent)) {
    if (SubcommandOf(c) != subcommand) out.push_back(c);
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::Duration CpuTimeOf(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(in, line);
  // "pid (comm) state ppid ...": utime and stime are fields 14 and 15, counted from the
  // state (field 3) after the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return absl::ZeroDuration();
  std::istringstream fields(line.substr(close + 2));
  std::string f;
  int64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) (void)absl::SimpleAtoi(f, &utime);
    if (i == 15) (void)absl::SimpleAtoi(f, &stime);
  }
  return absl::Seconds(static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK));
}

// ---- fixture ----

void ServeTest::SetUp() {
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);  // orphans come to us: we can count them
  shm_before_ = ShmEntries();
  ipc_dirs_before_ = OrphanedIpcDirs();
}

void ServeTest::StartServer(const std::vector<std::string>& args,
                            const std::vector<std::string>& prefix) {
  std::vector<std::string> argv = prefix;
  argv.push_back(BinDir() + "/vllm-launch");
  if (std::find(args.begin(), args.end(), "--port") == args.end()) {
    argv.insert(argv.end(), {"--port", "0"});
  }
  if (std::find(args.begin(), args.end(), "--kv-cache-memory") == args.end()) {
    argv.insert(argv.end(), {"--kv-cache-memory", "64MiB"});
  }
  argv.insert(argv.end(), args.begin(), args.end());
  auto p = Subprocess::Spawn(argv);
  ASSERT_TRUE(p.ok()) << p.status();
  server_.emplace(std::move(*p));
  // "vllm-launch: ready at http://127.0.0.1:PORT/v1"
  auto line = server_->ReadLine(absl::Seconds(60));
  ASSERT_TRUE(line.ok()) << line.status();
  const size_t colon = line->rfind(':');
  const size_t slash = line->rfind("/v1");
  ASSERT_NE(colon, std::string::npos) << *line;
  ASSERT_TRUE(absl::SimpleAtoi(line->substr(colon + 1, slash - colon - 1), &port_)) << *line;
}

void ServeTest::TearDown() {
  if (server_.has_value() && server_->running()) {
    server_->Kill(SIGKILL);
    (void)server_->Wait(absl::Seconds(5));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while ((!Descendants().empty() || ShmEntries() != shm_before_) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));  // polling a condition with a deadline
  }
  EXPECT_TRUE(Descendants().empty()) << "processes left behind";
  EXPECT_EQ(ShmEntries(), shm_before_) << "shared memory left behind";
  for (const std::string& dir : OrphanedIpcDirs()) {
    EXPECT_TRUE(ipc_dirs_before_.count(dir) > 0) << "ipc endpoint directory left behind: " << dir;
  }
  // Whatever is left is killed, so one failing test does not break the next.
  for (pid_t pid : Descendants()) kill(pid, SIGKILL);
}

std::vector<pid_t> ServeTest::Descendants() {
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  std::vector<pid_t> out;
  std::vector<pid_t> frontier = {getpid()};
  while (!frontier.empty()) {
    const pid_t parent = frontier.back();
    frontier.pop_back();
    for (pid_t child : ChildrenOf(parent)) {
      out.push_back(child);
      frontier.push_back(child);
    }
  }
  return out;
}

bool ServeTest::WaitNoChildren(pid_t pid, absl::Time deadline) {
  while (!ChildrenOf(pid).empty()) {
    if (absl::Now() >= deadline) return false;
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    absl::SleepFor(absl::Milliseconds(5));  // polling a condition with a deadline
  }
  return true;
}

}  // namespace vllm::testing
