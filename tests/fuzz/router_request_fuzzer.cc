// Fuzzes what the router (router/) reads from clients before it picks a worker: a
// request body → ExtractRoutingKeys (routing text and `user`), a worker URL (POST /workers,
// as the body's "url" or the query) → ParseWorkerUrl, and the routing text through a small
// PrefixTree and the cache_aware and consistent_hash policies over 3 fake workers.
//
// Input: BODY [NUL URL [NUL PARAMS]]. Without a NUL the whole input is both the body and the
// URL, so a seed is a plain JSON body or a plain URL. PARAMS bytes (defaults when absent):
// [0] prefix tree bound, [1..3] the workers' outstanding counts, [4] virtual nodes per
// worker, [5] cache threshold.
//
// Invariants beyond "no crash, throw, leak, timeout or unbounded allocation":
// - ExtractRoutingKeys: false leaves text and user empty; text and user are valid UTF-8 (they
//   are made of JSON strings, roles, decimal integers, ',' and '\n'); text is at most twice
//   the body. Differential: whenever base::ParseJson accepts the body, the scanner gives what
//   a walk of nlohmann's document gives (ReferenceKeys: the implementation it replaced).
// - ParseWorkerUrl: errors are InvalidArgument; an accepted URL is "http://HOST:PORT" with a
//   port in [1, 65535] equal to `port`, a non-empty host, and parsing `url` again gives the
//   same address (the normal form is a fixed point).
// - PrefixTree: MatchLength never exceeds the text's length and every prefix of a match
//   matches in full; Size() <= max_size() after every Insert; a text within 90% of the bound
//   (the eviction target) matches in full right after its own Insert.
// - Policies: every pick is an index of the candidates; cache_aware: each worker's tree stays
//   within max_tree_size, the same text with the same balanced loads goes to the same worker
//   twice (when it fits in the tree), RemoveWorker drops the tree; consistent_hash: with a
//   session key the pick is stable, and leaving out a worker other than the picked one
//   keeps the same worker (only the ejected worker's sessions move).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "base/json_util.h"
#include "nlohmann/json.hpp"
#include "router/policy.h"
#include "router/prefix_tree.h"
#include "router/router.h"
#include "tests/fuzz/fuzz_util.h"

namespace vllm::fuzz {
namespace {

using router::Candidate;

void ReferencePrompt(const nlohmann::json& prompt, std::string* text) {
  if (prompt.is_string()) {
    *text += prompt.get_ref<const std::string&>();
  } else if (prompt.is_number_integer()) {
    absl::StrAppend(text, prompt.get<int64_t>(), ",");
  } else if (prompt.is_array() && !prompt.empty()) {
    if (prompt.front().is_array() || prompt.front().is_string()) {
      ReferencePrompt(prompt.front(), text);
    } else {
      for (const nlohmann::json& t : prompt) ReferencePrompt(t, text);
    }
  }
}

// The routing keys of a body the DOM parser accepts, by walking its document; false when it
// does not accept it (or it is not an object).
bool ReferenceKeys(const std::string& body, std::string* text, std::string* user) {
  auto parsed = base::ParseJson(body, "body");
  if (!parsed.ok() || !parsed->is_object()) return false;
  const nlohmann::json& j = *parsed;
  if (auto it = j.find("user"); it != j.end() && it->is_string()) *user = it->get<std::string>();
  if (auto it = j.find("prompt"); it != j.end()) ReferencePrompt(*it, text);
  if (auto it = j.find("messages"); it != j.end() && it->is_array()) {
    for (const nlohmann::json& m : *it) {
      if (!m.is_object()) continue;
      if (auto role = m.find("role"); role != m.end() && role->is_string()) {
        absl::StrAppend(text, role->get_ref<const std::string&>(), "\n");
      }
      auto content = m.find("content");
      if (content == m.end()) continue;
      if (content->is_string()) {
        absl::StrAppend(text, content->get_ref<const std::string&>(), "\n");
      } else if (content->is_array()) {
        for (const nlohmann::json& part : *content) {
          if (!part.is_object()) continue;
          if (auto t = part.find("text"); t != part.end() && t->is_string()) {
            absl::StrAppend(text, t->get_ref<const std::string&>(), "\n");
          }
        }
      }
    }
  }
  return true;
}
using router::PrefixTree;
using router::RouteKeys;

// ParseWorkerUrl's contract on one URL; returns the normal form when it is accepted.
std::string CheckWorkerUrl(absl::string_view url) {
  auto a = router::ParseWorkerUrl(url);
  if (!a.ok()) {
    FUZZ_CHECK(a.status().code() == absl::StatusCode::kInvalidArgument,
               "ParseWorkerUrl failed with " + a.status().ToString());
    return "";
  }
  FUZZ_CHECK(absl::StartsWith(a->url, "http://"), "url " + a->url);
  FUZZ_CHECK(!a->host.empty(), "empty host from " + std::string(url));
  int port = 0;
  FUZZ_CHECK(absl::SimpleAtoi(a->port, &port) && port >= 1 && port <= 65535 &&
                 a->port == absl::StrCat(port),
             "port '" + a->port + "'");
  FUZZ_CHECK(absl::EndsWith(a->url, absl::StrCat(":", a->port)), a->url + " / " + a->port);
  auto again = router::ParseWorkerUrl(a->url);
  FUZZ_CHECK(again.ok(), "normal form " + a->url + " rejected: " + again.status().ToString());
  FUZZ_CHECK(again->url == a->url && again->host == a->host && again->port == a->port,
             "normal form " + a->url + " reparses as " + again->url);
  return a->url;
}

// MatchLength's contract on `text`; returns the match.
size_t CheckMatch(PrefixTree& tree, absl::string_view text) {
  const size_t m = tree.MatchLength(text);
  FUZZ_CHECK(m <= text.size(), absl::StrCat("match ", m, " > text ", text.size()));
  if (m > 0) {
    const size_t half = m / 2;
    FUZZ_CHECK(tree.MatchLength(text.substr(0, half)) == half,
               absl::StrCat("a prefix of a match of ", m, " does not match in full"));
  }
  return m;
}

void CheckInsert(PrefixTree& tree, absl::string_view text) {
  tree.Insert(text);
  FUZZ_CHECK(tree.Size() <= tree.max_size(),
             absl::StrCat("size ", tree.Size(), " > bound ", tree.max_size()));
  const size_t m = CheckMatch(tree, text);
  const size_t target = tree.max_size() - tree.max_size() / 10;
  if (text.size() <= target) {
    FUZZ_CHECK(m == text.size(),
               absl::StrCat("a text of ", text.size(), " (bound ", tree.max_size(), ") matches ", m,
                            " right after its Insert"));
  }
}

void CheckTree(absl::string_view text, absl::string_view user, absl::string_view url,
               size_t max_size) {
  PrefixTree tree(max_size);
  FUZZ_CHECK(tree.Size() == 0 && CheckMatch(tree, text) == 0, "a new tree matches");
  CheckInsert(tree, text);
  // Lines (chat messages) share prefixes with each other and with the text: splits, matches
  // that end inside an edge, and eviction of older leaves.
  int lines = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (++lines > 64) break;
    CheckMatch(tree, line);
    CheckInsert(tree, line);
  }
  CheckInsert(tree, user);
  CheckInsert(tree, url);
  CheckMatch(tree, text);
  CheckInsert(tree, text.substr(0, text.size() / 2));
  CheckInsert(tree, text);
}

void CheckPolicies(absl::string_view text, absl::string_view session_key,
                   absl::string_view worker_url, absl::string_view params) {
  auto param = [&](size_t i, int fallback) {
    return i < params.size() ? static_cast<int>(static_cast<uint8_t>(params[i])) : fallback;
  };
  std::vector<Candidate> workers = {
      {"http://127.0.0.1:8001", param(1, 0) % 64},
      {"http://127.0.0.1:8002", param(2, 0) % 64},
      {worker_url.empty() ? "http://worker-3:80" : std::string(worker_url), param(3, 0) % 64}};
  router::PolicyOptions options;
  options.max_tree_size = 1 + static_cast<size_t>(param(0, 32)) * 2;
  options.virtual_nodes = 1 + param(4, 15) % 32;
  options.cache_threshold = param(5, 128) / 255.0;
  options.seed = 1;  // deterministic, and no random_device per input
  const RouteKeys keys{text, session_key};

  router::CacheAwarePolicy cache(options);
  const size_t first = cache.Pick(workers, keys);
  FUZZ_CHECK(first < workers.size(), absl::StrCat("cache_aware picked ", first));
  const size_t second = cache.Pick(workers, keys);
  FUZZ_CHECK(second < workers.size(), absl::StrCat("cache_aware picked ", second));
  int64_t lo = workers[0].outstanding, hi = workers[0].outstanding;
  for (const Candidate& w : workers) {
    lo = std::min(lo, w.outstanding);
    hi = std::max(hi, w.outstanding);
  }
  const size_t target = options.max_tree_size - options.max_tree_size / 10;
  const bool duplicate_url = workers[2].url == workers[0].url || workers[2].url == workers[1].url;
  if (hi - lo <= options.balance_abs_threshold && !text.empty() && text.size() <= target &&
      !duplicate_url) {
    FUZZ_CHECK(first == second,
               absl::StrCat("cache_aware: the same text went to ", first, " then ", second));
  }
  for (const Candidate& w : workers) {
    const PrefixTree* tree = cache.TreeOf(w.url);
    if (tree != nullptr) {
      FUZZ_CHECK(tree->Size() <= options.max_tree_size,
                 absl::StrCat("tree of ", w.url, " holds ", tree->Size()));
    }
  }
  // A retry: the first pick left out.
  std::vector<Candidate> rest = workers;
  rest.erase(rest.begin() + static_cast<ptrdiff_t>(first));
  FUZZ_CHECK(cache.Pick(rest, keys) < rest.size(), "cache_aware retry pick out of range");
  cache.RemoveWorker(workers[first].url);
  FUZZ_CHECK(cache.TreeOf(workers[first].url) == nullptr, "RemoveWorker kept the tree");
  FUZZ_CHECK(cache.Pick(workers, keys) < workers.size(), "cache_aware pick out of range");

  router::ConsistentHashPolicy hash(options);
  const size_t h1 = hash.Pick(workers, keys);
  FUZZ_CHECK(h1 < workers.size(), absl::StrCat("consistent_hash picked ", h1));
  const size_t h2 = hash.Pick(workers, keys);
  FUZZ_CHECK(h2 < workers.size(), absl::StrCat("consistent_hash picked ", h2));
  if (!session_key.empty()) {
    FUZZ_CHECK(workers[h1].url == workers[h2].url, "consistent_hash: the same key moved");
    for (size_t gone = 0; gone < workers.size(); ++gone) {
      if (workers[gone].url == workers[h1].url) continue;
      std::vector<Candidate> fewer = workers;
      fewer.erase(fewer.begin() + static_cast<ptrdiff_t>(gone));
      const size_t h3 = hash.Pick(fewer, keys);
      FUZZ_CHECK(h3 < fewer.size(), absl::StrCat("consistent_hash picked ", h3));
      FUZZ_CHECK(fewer[h3].url == workers[h1].url,
                 "consistent_hash: ejecting " + workers[gone].url + " moved a session from " +
                     workers[h1].url + " to " + fewer[h3].url);
    }
  }
  const size_t one = hash.Pick(absl::MakeConstSpan(workers).subspan(0, 1), keys);
  FUZZ_CHECK(one == 0, absl::StrCat("consistent_hash picked ", one, " of 1"));
}

}  // namespace
}  // namespace vllm::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vllm::fuzz;
  // fuzz_util.h speaks std::string_view; the router absl::string_view (not the same type in
  // the system's Abseil).
  auto sv = [](std::string_view s) { return absl::string_view(s.data(), s.size()); };
  const std::string_view input = AsText(data, size);
  absl::string_view body = sv(input), url = sv(input), params;
  if (input.find('\0') != std::string_view::npos) {
    const auto [before, after] = SplitAtNul(input);
    const auto [url_part, params_part] = SplitAtNul(after);
    body = sv(before);
    url = sv(url_part);
    params = sv(params_part);
  }

  std::string text = "stale", user = "stale";
  const std::string body_copy(body);
  const bool is_object = vllm::router::ExtractRoutingKeys(body_copy, &text, &user);
  if (!is_object) {
    FUZZ_CHECK(text.empty() && user.empty(), "rejected body left routing keys");
  }
  FUZZ_CHECK(IsWellFormedUtf8(text), "routing text is not UTF-8");
  FUZZ_CHECK(IsWellFormedUtf8(user), "user is not UTF-8");
  FUZZ_CHECK(text.size() <= 2 * body.size(),
             absl::StrCat("routing text of ", text.size(), " from a body of ", body.size()));
  {
    std::string ref_text, ref_user;
    if (ReferenceKeys(body_copy, &ref_text, &ref_user)) {
      FUZZ_CHECK(is_object, "the scanner rejected a body the DOM parser accepts");
      FUZZ_CHECK(text == ref_text,
                 "routing text differs from the DOM walk's: '" + text + "' vs '" + ref_text + "'");
      FUZZ_CHECK(user == ref_user, "user differs from the DOM walk's");
    }
  }

  std::string worker_url = CheckWorkerUrl(url);
  // POST /workers with a JSON body {"url": "..."}.
  if (is_object && absl::StrContains(body, "url")) {
    const nlohmann::json j = nlohmann::json::parse(body_copy, nullptr, false);
    if (j.is_object() && j.contains("url") && j["url"].is_string()) {
      const std::string from_body = CheckWorkerUrl(j["url"].get<std::string>());
      if (worker_url.empty()) worker_url = from_body;
    }
  }

  const size_t max_size =
      params.empty() ? 64 : 1 + static_cast<size_t>(static_cast<uint8_t>(params[0])) * 2;
  CheckTree(text, user, worker_url, max_size);
  CheckPolicies(text, user, worker_url, params);
  return 0;
}
