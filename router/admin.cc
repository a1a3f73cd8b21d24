#include "router/admin.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/json_util.h"
#include "nlohmann/json.hpp"

namespace vllm::router {
namespace {

using nlohmann::json;

std::string PercentDecode(absl::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    int hi = 0;
    int lo = 0;
    auto hex = [](char c, int* v) {
      if (c >= '0' && c <= '9')
        *v = c - '0';
      else if (c >= 'a' && c <= 'f')
        *v = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        *v = c - 'A' + 10;
      else
        return false;
      return true;
    };
    if (in[i] == '%' && i + 2 < in.size() && hex(in[i + 1], &hi) && hex(in[i + 2], &lo)) {
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (in[i] == '+') {
      out.push_back(' ');
    } else {
      out.push_back(in[i]);
    }
  }
  return out;
}

// The value of query parameter `name` in `target` ("/path?a=b&c=d"), decoded; empty if absent.
std::string QueryParam(absl::string_view target, absl::string_view name) {
  const size_t q = target.find('?');
  if (q == absl::string_view::npos) return "";
  for (absl::string_view pair : absl::StrSplit(target.substr(q + 1), '&')) {
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name && eq != absl::string_view::npos) {
      return PercentDecode(pair.substr(eq + 1));
    }
  }
  return "";
}

json WorkersJson(const RouterState& state) {
  json list = json::array();
  for (const auto& w : state.workers) {
    json entry = {
        {"url", w->address.url},
        {"role", std::string(RoleName(w->role))},
        {"healthy", w->healthy},
        {"circuit",
         std::string(CircuitStateName(w->breaker.state(std::chrono::steady_clock::now())))},
        {"outstanding", w->outstanding},
        {"requests_total", w->requests_total}};
    if (w->bootstrap_port.has_value()) entry["bootstrap_port"] = *w->bootstrap_port;
    list.push_back(std::move(entry));
  }
  json j = {{"workers", list}, {"policy", state.policy->name()}};
  if (state.options.pd_disaggregation) {
    j["pd_disaggregation"] = true;
    j["prefill_policy"] = state.PolicyFor(WorkerRole::kPrefill).name();
    j["decode_policy"] = state.PolicyFor(WorkerRole::kDecode).name();
  }
  return j;
}

// The role a POST /workers asks for: "role" in the body or ?role=...; with P/D "prefill" or
// "decode" (required), otherwise "regular" or nothing.
absl::StatusOr<WorkerRole> RequestedRole(const RouterState& state, const json& body,
                                         absl::string_view target) {
  std::string role = QueryParam(target, "role");
  if (body.is_object() && body.contains("role") && body["role"].is_string()) {
    role = body["role"].get<std::string>();
  }
  if (state.options.pd_disaggregation) {
    if (role == "prefill") return WorkerRole::kPrefill;
    if (role == "decode") return WorkerRole::kDecode;
    return absl::InvalidArgumentError(
        "with --pd-disaggregation a worker's role is \"prefill\" or \"decode\" (\"role\" in the "
        "body or ?role=)");
  }
  if (role.empty() || role == "regular") return WorkerRole::kRegular;
  return absl::InvalidArgumentError(
      absl::StrCat("role '", role, "' needs the router to run with --pd-disaggregation"));
}

}  // namespace

net::awaitable<void> WorkerAdmin::HealthLoop() {
  net::steady_timer timer(state_.ioc);
  while (true) {
    timer.expires_after(Millis(state_.options.health_check_interval_secs));
    beast::error_code ec;
    co_await timer.async_wait(net::redirect_error(kUse, ec));
    for (const auto& w : state_.workers) {
      if (!w->checking) Spawn(state_.ioc, CheckWorker(w));
    }
  }
}

net::awaitable<void> WorkerAdmin::CheckWorker(std::shared_ptr<Worker> w) {
  w->checking = true;
  const bool ok = co_await Probe(w->address);
  w->checking = false;
  if (w->removed) co_return;
  if (ok) {
    w->consecutive_failures = 0;
    if (!w->healthy) {
      w->healthy = true;
      std::fprintf(stderr, "vllm-launch router: worker %s is healthy\n", w->address.url.c_str());
    }
  } else {
    NoteFailure(*w, state_.options.health_failure_threshold, "health check failed");
  }
}

net::awaitable<bool> WorkerAdmin::Probe(WorkerAddress address) {
  beast::tcp_stream up(state_.ioc);
  beast::error_code ec;
  tcp::resolver resolver(state_.ioc);
  auto endpoints =
      co_await resolver.async_resolve(address.host, address.port, net::redirect_error(kUse, ec));
  if (ec) co_return false;
  up.expires_after(Millis(state_.options.health_check_timeout_secs));
  co_await up.async_connect(endpoints, net::redirect_error(kUse, ec));
  if (ec) co_return false;
  Request req{http::verb::get, "/health", 11};
  req.set(http::field::host, address.host);
  req.set(http::field::connection, "close");
  co_await http::async_write(up, req, net::redirect_error(kUse, ec));
  if (ec) co_return false;
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(1 << 20);
  co_await http::async_read(up, buf, parser, net::redirect_error(kUse, ec));
  co_return !ec && parser.get().result_int() == 200;
}

net::awaitable<Outcome> WorkerAdmin::HandleWorkers(beast::tcp_stream& stream, const Request& req,
                                                   absl::string_view target) {
  if (req.method() == http::verb::get) {
    co_return co_await state_.Reply(stream, req, 200, WorkersJson(state_).dump());
  }
  if (req.method() == http::verb::post) co_return co_await AddWorker(stream, req, target);
  if (req.method() == http::verb::delete_) co_return co_await RemoveWorker(stream, req, target);
  co_return co_await state_.MethodNotAllowed(stream, req);
}

net::awaitable<Outcome> WorkerAdmin::AddWorker(beast::tcp_stream& stream, const Request& req,
                                               absl::string_view target) {
  absl::StatusOr<json> parsed = base::ParseJson(req.body(), "request body");
  const json body = parsed.ok() ? std::move(*parsed) : json(json::value_t::discarded);
  std::string url = QueryParam(target, "url");
  if (body.is_object() && body.contains("url") && body["url"].is_string()) {
    url = body["url"].get<std::string>();
  }
  auto address = ParseWorkerUrl(url);
  if (!address.ok()) {
    co_return co_await state_.Reply(
        stream, req, 400,
        ErrorJson(400, "BadRequestError", std::string(address.status().message())));
  }
  absl::StatusOr<WorkerRole> role = RequestedRole(state_, body, target);
  if (!role.ok()) {
    co_return co_await state_.Reply(
        stream, req, 400, ErrorJson(400, "BadRequestError", std::string(role.status().message())));
  }
  if (state_.FindWorker(address->url) != nullptr) {
    co_return co_await state_.Reply(
        stream, req, 409,
        ErrorJson(409, "BadRequestError", absl::StrCat(address->url, " is already a worker")));
  }
  auto w = std::make_shared<Worker>(state_.options.circuit_breaker);
  w->address = *address;
  w->role = *role;
  state_.workers.push_back(w);
  std::fprintf(stderr, "vllm-launch router: %s worker %s added\n",
               std::string(RoleName(w->role)).c_str(), w->address.url.c_str());
  co_await CheckWorker(w);  // so the reply says whether it is serving
  const json j = {
      {"url", w->address.url}, {"role", std::string(RoleName(w->role))}, {"healthy", w->healthy}};
  co_return co_await state_.Reply(stream, req, 200, j.dump());
}

net::awaitable<Outcome> WorkerAdmin::RemoveWorker(beast::tcp_stream& stream, const Request& req,
                                                  absl::string_view target) {
  auto address = ParseWorkerUrl(QueryParam(target, "url"));
  std::shared_ptr<Worker> w = address.ok() ? state_.FindWorker(address->url) : nullptr;
  if (w == nullptr) {
    co_return co_await state_.Reply(stream, req, 404,
                                    ErrorJson(404, "NotFoundError", "no such worker (?url=...)"));
  }
  // Requests in flight hold their own reference and finish; new ones no longer see it.
  w->removed = true;
  w->healthy = false;
  w->idle.clear();
  state_.workers.erase(std::find(state_.workers.begin(), state_.workers.end(), w));
  state_.PolicyFor(w->role).RemoveWorker(w->address.url);
  std::fprintf(stderr, "vllm-launch router: worker %s removed\n", w->address.url.c_str());
  const json j = {{"url", w->address.url}, {"removed", true}};
  co_return co_await state_.Reply(stream, req, 200, j.dump());
}

}  // namespace vllm::router
