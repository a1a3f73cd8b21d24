#include "frontend/tokenizer/bpe.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "base/utf8.h"
#include "nlohmann/json.hpp"

namespace vllm::frontend {
namespace {

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: model.", field, ": ", why));
}

// A merge as its two halves: "a b" (older files) or ["a", "b"] (tokenizers >= 0.20).
absl::StatusOr<std::pair<std::string, std::string>> ParseMerge(const nlohmann::json& m,
                                                               size_t index) {
  const std::string where = absl::StrCat("merges[", index, "]");
  if (m.is_string()) {
    const std::string& s = m.get_ref<const std::string&>();
    const size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
      return Bad(where, absl::StrCat("expected \"left right\", got \"", s, "\""));
    }
    return std::make_pair(s.substr(0, space), s.substr(space + 1));
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    return std::make_pair(m[0].get<std::string>(), m[1].get<std::string>());
  }
  return Bad(where, "expected a string or a pair of strings");
}

}  // namespace

absl::StatusOr<BpeModel> BpeModel::FromJson(const nlohmann::json& model) {
  BpeModel bpe;
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return Bad("vocab", "missing or not an object");
  }
  // Ids index a dense table; a few gaps are fine, but an id far past the number of tokens
  // (a 100-byte file naming id 2^24) would make it allocate gigabytes.
  const int64_t max_id =
      std::min<int64_t>(1 << 24, 2 * static_cast<int64_t>(model["vocab"].size()) + 1024);
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > max_id) {
      return Bad("vocab", absl::StrCat("id of \"", token, "\" is not an integer in [0, ", max_id,
                                       "] (ids must be about dense: the vocab has ",
                                       model["vocab"].size(), " tokens)"));
    }
    const auto i = id.get<int32_t>();
    bpe.vocab_[token] = i;
    if (static_cast<size_t>(i) >= bpe.id_to_token_.size()) bpe.id_to_token_.resize(i + 1);
    bpe.id_to_token_[i] = token;
  }
  for (const char* unsupported : {"continuing_subword_prefix", "end_of_word_suffix", "dropout"}) {
    if (model.contains(unsupported) && !model[unsupported].is_null()) {
      return Bad(unsupported, "not supported (only null)");
    }
  }
  auto flag = [&](const char* name) {
    return model.contains(name) && model[name].is_boolean() && model[name].get<bool>();
  };
  bpe.fuse_unk_ = flag("fuse_unk");
  bpe.byte_fallback_ = flag("byte_fallback");
  bpe.ignore_merges_ = flag("ignore_merges");
  if (model.contains("unk_token") && !model["unk_token"].is_null()) {
    if (!model["unk_token"].is_string()) return Bad("unk_token", "not a string");
    auto it = bpe.vocab_.find(model["unk_token"].get<std::string>());
    if (it == bpe.vocab_.end()) return Bad("unk_token", "not in the vocab");
    bpe.unk_id_ = it->second;
  }
  bpe.byte_ids_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    auto it = bpe.vocab_.find(absl::StrFormat("<0x%02X>", b));
    if (it != bpe.vocab_.end()) bpe.byte_ids_[b] = it->second;
  }
  if (!model.contains("merges") || !model["merges"].is_array()) {
    return Bad("merges", "missing or not an array");
  }
  const nlohmann::json& merges = model["merges"];
  for (size_t i = 0; i < merges.size(); ++i) {
    absl::StatusOr<std::pair<std::string, std::string>> m = ParseMerge(merges[i], i);
    if (!m.ok()) return m.status();
    auto a = bpe.vocab_.find(m->first);
    auto b = bpe.vocab_.find(m->second);
    auto merged = bpe.vocab_.find(m->first + m->second);
    if (a == bpe.vocab_.end() || b == bpe.vocab_.end() || merged == bpe.vocab_.end()) {
      return Bad(absl::StrCat("merges[", i, "]"), absl::StrCat("\"", m->first, "\" + \"", m->second,
                                                               "\" uses a token not in the vocab"));
    }
    // A repeated pair keeps its first (best) rank, as HF's HashMap insert order does not
    // matter there: later duplicates never win.
    bpe.merges_.try_emplace(PairKey(a->second, b->second),
                            MergeTarget{static_cast<int32_t>(i), merged->second});
  }
  return bpe;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(absl::string_view(token.data(), token.size()));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::InitialSymbols(std::string_view word, std::vector<int32_t>* ids) const {
  bool last_was_unk = false;
  for (size_t pos = 0; pos < word.size();) {
    size_t len = base::ValidUtf8SequenceLength(word, pos);
    if (len == 0) len = 1;  // callers pass valid UTF-8; stay in bounds regardless
    auto it = vocab_.find(absl::string_view(word.data() + pos, len));
    if (it != vocab_.end()) {
      ids->push_back(it->second);
      last_was_unk = false;
    } else if (byte_fallback_ && [&] {
                 for (size_t i = 0; i < len; ++i) {
                   if (byte_ids_[static_cast<uint8_t>(word[pos + i])] < 0) return false;
                 }
                 return true;
               }()) {
      for (size_t i = 0; i < len; ++i)
        ids->push_back(byte_ids_[static_cast<uint8_t>(word[pos + i])]);
      last_was_unk = false;
    } else if (unk_id_.has_value()) {
      if (!(fuse_unk_ && last_was_unk)) ids->push_back(*unk_id_);
      last_was_unk = true;
    }
    pos += len;
  }
}

void BpeModel::Merge(std::vector<int32_t>* ids) const {
  const int n = static_cast<int>(ids->size());
  if (n < 2) return;
  // Doubly linked symbols; a merged-away symbol has id -1.
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  std::vector<int32_t>& sym = *ids;
  auto push = [&](int left) {
    if (left < 0 || next[left] < 0) return;
    auto it = merges_.find(PairKey(sym[left], sym[next[left]]));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.new_id});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    // Stale entries: the left symbol was merged away or its right neighbour changed.
    if (sym[c.pos] < 0 || next[c.pos] < 0) continue;
    auto it = merges_.find(PairKey(sym[c.pos], sym[next[c.pos]]));
    if (it == merges_.end() || it->second.new_id != c.new_id || it->second.rank != c.rank) {
      continue;
    }
    const int right = next[c.pos];
    sym[c.pos] = c.new_id;
    sym[right] = -1;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  size_t out = 0;
  for (int i = 0; i < n; ++i) {
    if (sym[i] >= 0) sym[out++] = sym[i];
  }
  sym.resize(out);
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    auto it = vocab_.find(absl::string_view(word.data(), word.size()));
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(word.size());
  InitialSymbols(word, &ids);
  Merge(&ids);
  out->insert(out->end(), ids.begin(), ids.end());
}

}  // namespace vllm::frontend
