#include "router/router_state.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace vllm::router {

absl::StatusOr<WorkerAddress> ParseWorkerUrl(absl::string_view url) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker URL '", url, "': expected http://HOST[:PORT]"));
  }
  while (absl::ConsumeSuffix(&rest, "/")) {
  }
  WorkerAddress a;
  absl::string_view host = rest;
  absl::string_view port = "80";
  if (!rest.empty() && rest.front() == '[') {  // [IPv6]:port
    const size_t close = rest.find(']');
    if (close == absl::string_view::npos) return absl::InvalidArgumentError("bad IPv6 address");
    host = rest.substr(1, close - 1);
    absl::string_view after = rest.substr(close + 1);
    if (absl::ConsumePrefix(&after, ":"))
      port = after;
    else if (!after.empty())
      return absl::InvalidArgumentError("bad worker URL");
  } else if (const size_t colon = rest.rfind(':'); colon != absl::string_view::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  int port_number = 0;
  const bool host_chars_ok = std::all_of(host.begin(), host.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
           c == ':';
  });
  if (host.empty() || !host_chars_ok || absl::StrContains(host, "/") ||
      !absl::SimpleAtoi(port, &port_number) || port_number < 1 || port_number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker URL '", url, "': expected http://HOST[:PORT] (no path)"));
  }
  a.host = std::string(host);
  a.port = absl::StrCat(port_number);
  a.url = absl::StrCat(
      "http://", absl::StrContains(host, ":") ? absl::StrCat("[", host, "]") : std::string(host),
      ":", port_number);
  return a;
}

void NoteFailure(Worker& w, int failure_threshold, absl::string_view why) {
  ++w.consecutive_failures;
  if (w.healthy && w.consecutive_failures >= failure_threshold) {
    w.healthy = false;
    std::fprintf(stderr, "vllm-launch router: worker %s ejected (%.*s)\n", w.address.url.c_str(),
                 static_cast<int>(why.size()), why.data());
  }
}

void NoteOutcome(Worker& w, bool ok) {
  const auto now = std::chrono::steady_clock::now();
  if (ok) {
    if (w.breaker.RecordSuccess(now)) {
      std::fprintf(stderr, "vllm-launch router: worker %s: circuit closed\n",
                   w.address.url.c_str());
    }
    return;
  }
  const int64_t opens = w.breaker.opens();
  w.breaker.RecordFailure(now);
  if (w.breaker.opens() != opens) {
    std::fprintf(stderr, "vllm-launch router: worker %s: circuit open for %lld ms\n",
                 w.address.url.c_str(), static_cast<long long>(w.breaker.open_period().count()));
  }
}

std::shared_ptr<Worker> RouterState::FindWorker(absl::string_view url) const {
  for (const auto& w : workers) {
    if (w->address.url == url) return w;
  }
  return nullptr;
}

absl::string_view RoleName(WorkerRole role) {
  switch (role) {
    case WorkerRole::kPrefill:
      return "prefill";
    case WorkerRole::kDecode:
      return "decode";
    case WorkerRole::kRegular:
      break;
  }
  return "regular";
}

int RouterState::HealthyCount() const {
  int n = 0;
  for (const auto& w : workers) n += w->healthy ? 1 : 0;
  return n;
}

int RouterState::HealthyCount(WorkerRole role) const {
  int n = 0;
  for (const auto& w : workers) n += w->healthy && w->role == role ? 1 : 0;
  return n;
}

bool RouterState::Serving() const {
  if (!options.pd_disaggregation) return HealthyCount() > 0;
  return HealthyCount(WorkerRole::kPrefill) > 0 && HealthyCount(WorkerRole::kDecode) > 0;
}

Policy& RouterState::PolicyFor(WorkerRole role) const {
  return role == WorkerRole::kPrefill && prefill_policy != nullptr ? *prefill_policy : *policy;
}

WorkerRole RouterState::ServingRole() const {
  return options.pd_disaggregation ? WorkerRole::kDecode : WorkerRole::kRegular;
}

net::awaitable<Outcome> RouterState::Reply(beast::tcp_stream& stream, const Request& req,
                                           int status, std::string body,
                                           absl::string_view content_type) const {
  const bool ok = co_await WriteSimple(stream, req.version(), req.keep_alive() && !draining, status,
                                       std::move(body), content_type);
  co_return ok ? Outcome::kDone : Outcome::kDoneClose;
}

net::awaitable<Outcome> RouterState::MethodNotAllowed(beast::tcp_stream& stream,
                                                      const Request& req) const {
  co_return co_await Reply(stream, req, 405,
                           ErrorJson(405, "BadRequestError", "method not allowed"));
}

}  // namespace vllm::router
