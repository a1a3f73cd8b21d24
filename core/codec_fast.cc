// The executor's per-step codec paths (core/codec.h: EncodeTo, Decode...Into): the same wire
// as Encode / Decode..., without the per-call allocations. The common frames (below) are
// written by FastWriter, byte for byte what msgpack-c's packer writes. Decoding reads them
// (a step without new requests or KV-connector metadata; a reply without logprobs or
// KV-connector output) in one pass with MsgpackCursor straight into the caller's object; any
// other frame, well-formed or not, goes to the full decoder, which gives its value or its
// error. A frame the fast path accepts is one the full decoder accepts with the same value
// (codec_test checks this on valid and mutated frames).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "config/speculative_config.h"
#include "core/codec.h"
#include "core/msgpack_cursor.h"

namespace vllm::core {
namespace {

constexpr size_t kMaxIdBytes = kMaxRequestIdBytes;
// The deepest nesting the fast paths accept is 4 (envelope, body, a list, a list in it);
// msgpack-c refuses a container at depth d > max_depth, so 5 leaves a margin.
constexpr size_t kFastPathMinDepth = 5;

bool FastPathApplies(std::string_view bytes, const DecodeLimits& limits) {
  return !bytes.empty() && bytes.size() <= limits.max_message_bytes &&
         limits.max_depth >= kFastPathMinDepth;
}

MsgpackCursor CursorOver(std::string_view bytes, const DecodeLimits& limits) {
  return MsgpackCursor(bytes.data(), bytes.size(), limits.max_array_elements,
                       limits.max_string_bytes);
}

bool Envelope(MsgpackCursor& c, WireTag tag, uint32_t body_fields) {
  uint8_t got_tag = 0;
  uint32_t version = 0;
  return c.ArrayOf(3) && c.Int(&got_tag) && got_tag == static_cast<uint8_t>(tag) &&
         c.Int(&version) && version == kWireVersion && c.ArrayOf(body_fields);
}

// Offsets start at 0, never decrease, and end at the flat list's size (codec.cc's CheckOffsets).
bool OffsetsOk(const std::vector<uint32_t>& offsets, size_t num_reqs, size_t flat_size) {
  return offsets.size() == num_reqs + 1 && offsets.front() == 0 && offsets.back() == flat_size &&
         std::is_sorted(offsets.begin(), offsets.end());
}

bool ReadCachedFast(MsgpackCursor& c, CachedRequestData* d) {
  if (!c.ArrayOf(7) || !c.StrList(kMaxIdBytes, &d->req_ids)) return false;
  const size_t n = d->req_ids.size();
  uint32_t resumed = 0;
  if (!c.Array(&resumed) || resumed != n) return false;
  d->resumed_from_preemption.resize(n);
  for (size_t i = 0; i < n; ++i) {
    bool b = false;
    if (!c.Bool(&b)) return false;
    d->resumed_from_preemption[i] = b ? 1 : 0;
  }
  return c.IntList(&d->new_token_ids) && c.IntList(&d->new_token_ids_offsets) &&
         c.IntList(&d->new_block_ids) && c.IntList(&d->new_block_ids_offsets) &&
         c.IntList(&d->num_computed_tokens) &&
         OffsetsOk(d->new_token_ids_offsets, n, d->new_token_ids.size()) &&
         OffsetsOk(d->new_block_ids_offsets, n, d->new_block_ids.size()) &&
         d->num_computed_tokens.size() == n;
}

// codec.cc's ReadSchedulerOutput checks, as a yes or no.
bool SchedulerOutputConsistent(const SchedulerOutput& o) {
  const size_t reqs = o.num_scheduled_reqs();
  for (int32_t index : o.structured_output_indices) {
    if (index < 0 || static_cast<size_t>(index) >= reqs) return false;
  }
  const size_t rows = o.structured_output_indices.size();
  if ((rows == 0) != o.grammar_bitmask.empty() ||
      (rows > 0 && o.grammar_bitmask.size() % rows != 0)) {
    return false;
  }
  if (o.num_spec_tokens_to_schedule < 0 ||
      o.num_spec_tokens_to_schedule > config::kMaxSpeculativeTokens) {
    return false;
  }
  if (o.num_scheduled_tokens.size() != reqs) return false;
  const bool spec = !o.num_scheduled_spec_tokens.empty();
  if (spec && o.num_scheduled_spec_tokens.size() != reqs) return false;
  int64_t total = 0;
  for (size_t i = 0; i < reqs; ++i) {
    const int32_t n = o.num_scheduled_tokens[i];
    if (n <= 0) return false;
    if (spec && (o.num_scheduled_spec_tokens[i] < 0 || o.num_scheduled_spec_tokens[i] >= n)) {
      return false;
    }
    total += n;
  }
  return total == o.total_num_scheduled_tokens;
}

bool DecodeSchedulerOutputFast(std::string_view bytes, const DecodeLimits& limits,
                               SchedulerOutput* o) {
  if (!FastPathApplies(bytes, limits)) return false;
  MsgpackCursor c = CursorOver(bytes, limits);
  uint32_t new_reqs = 0;
  if (!Envelope(c, WireTag::kSchedulerOutput, 12) || !c.Int(&o->step_id) || !c.Array(&new_reqs) ||
      new_reqs != 0) {
    return false;
  }
  o->scheduled_new_reqs.clear();
  if (!ReadCachedFast(c, &o->scheduled_cached_reqs) || !c.IntList(&o->num_scheduled_tokens) ||
      !c.Int(&o->total_num_scheduled_tokens) || !c.StrList(kMaxIdBytes, &o->finished_req_ids) ||
      !c.StrList(kMaxIdBytes, &o->preempted_req_ids) || !c.IntList(&o->structured_output_indices) ||
      !c.IntList(&o->grammar_bitmask) || !c.IntList(&o->num_scheduled_spec_tokens) ||
      !c.Int(&o->num_spec_tokens_to_schedule) || !c.Nil() || !c.at_end()) {
    return false;
  }
  o->kv_connector_metadata.reset();
  return SchedulerOutputConsistent(*o);
}

// An array of `n` empty arrays (logprobs, prompt_logprobs with no entries) or an empty array.
bool EmptyLists(MsgpackCursor& c, size_t n, std::vector<std::vector<TokenLogprobs>>* out) {
  uint32_t lists = 0;
  if (!c.Array(&lists) || (lists != 0 && lists != n)) return false;
  for (uint32_t i = 0; i < lists; ++i) {
    if (!c.ArrayOf(0)) return false;
  }
  out->assign(lists, {});
  return true;
}

bool DecodeModelRunnerOutputFast(std::string_view bytes, const DecodeLimits& limits,
                                 ModelRunnerOutput* o) {
  if (!FastPathApplies(bytes, limits)) return false;
  MsgpackCursor c = CursorOver(bytes, limits);
  if (!Envelope(c, WireTag::kModelRunnerOutput, 6) || !c.StrList(kMaxIdBytes, &o->req_ids)) {
    return false;
  }
  const size_t n = o->req_ids.size();
  uint32_t sampled = 0;
  if (!c.Array(&sampled) || sampled != n) return false;
  o->sampled_token_ids.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (!c.IntList(&o->sampled_token_ids[i])) return false;
  }
  if (!EmptyLists(c, n, &o->logprobs) || !EmptyLists(c, n, &o->prompt_logprobs)) return false;
  uint32_t drafts = 0;
  if (!c.Array(&drafts) || (drafts != 0 && drafts != n)) return false;
  o->draft_token_ids.resize(drafts);
  for (size_t i = 0; i < drafts; ++i) {
    if (!c.IntList(&o->draft_token_ids[i]) ||
        o->draft_token_ids[i].size() > static_cast<size_t>(config::kMaxSpeculativeTokens)) {
      return false;
    }
  }
  if (!c.Nil() || !c.at_end()) return false;
  o->kv_connector_output.reset();
  return true;
}

// Writes msgpack as msgpack-c's packer does (the smallest form of every integer, string and
// array header), straight into a string sized beforehand for the worst case.
class FastWriter {
 public:
  // `max_bytes`: an upper bound of what will be written.
  FastWriter(std::string* out, size_t max_bytes) : out_(out) {
    out->resize(max_bytes);
    p_ = reinterpret_cast<uint8_t*>(out->data());
  }
  void Finish() { out_->resize(p_ - reinterpret_cast<uint8_t*>(out_->data())); }

  void Nil() { *p_++ = 0xc0; }
  void Bool(bool b) { *p_++ = b ? 0xc3 : 0xc2; }
  void Array(size_t n) { Header(0x90, 16, 0xdc, n); }
  void Str(std::string_view s) {
    if (s.size() < 32) {
      *p_++ = static_cast<uint8_t>(0xa0 | s.size());
    } else if (s.size() < 256) {
      *p_++ = 0xd9;
      *p_++ = static_cast<uint8_t>(s.size());
    } else {
      Header(0, 0, 0xda, s.size());
    }
    std::memcpy(p_, s.data(), s.size());
    p_ += s.size();
  }
  void Uint(uint64_t v) {
    if (v < 128) {
      *p_++ = static_cast<uint8_t>(v);
    } else if (v < 256) {
      Big(0xcc, v, 1);
    } else if (v < 65536) {
      Big(0xcd, v, 2);
    } else if (v <= UINT32_MAX) {
      Big(0xce, v, 4);
    } else {
      Big(0xcf, v, 8);
    }
  }
  void Int(int64_t v) {
    if (v >= 0) {
      Uint(static_cast<uint64_t>(v));
    } else if (v >= -32) {
      *p_++ = static_cast<uint8_t>(v);
    } else if (v >= INT8_MIN) {
      Big(0xd0, static_cast<uint64_t>(v), 1);
    } else if (v >= INT16_MIN) {
      Big(0xd1, static_cast<uint64_t>(v), 2);
    } else if (v >= INT32_MIN) {
      Big(0xd2, static_cast<uint64_t>(v), 4);
    } else {
      Big(0xd3, static_cast<uint64_t>(v), 8);
    }
  }
  template <typename T>
  void IntList(const std::vector<T>& values) {
    Array(values.size());
    for (T v : values) Int(static_cast<int64_t>(v));
  }
  void StrList(const std::vector<std::string>& values) {
    Array(values.size());
    for (const std::string& v : values) Str(v);
  }

  // Worst cases: an integer, a header, a string list's.
  static constexpr size_t kInt = 9, kHeader = 5;
  static size_t StrListBytes(const std::vector<std::string>& values) {
    size_t n = kHeader;
    for (const std::string& v : values) n += kHeader + v.size();
    return n;
  }
  template <typename T>
  static size_t IntListBytes(const std::vector<T>& values) {
    return kHeader + kInt * values.size();
  }

 private:
  // A fix form (`fix | n` when n < fix_limit) or `wide` with a 16- or 32-bit big-endian size.
  void Header(uint8_t fix, size_t fix_limit, uint8_t wide, size_t n) {
    if (n < fix_limit) {
      *p_++ = static_cast<uint8_t>(fix | n);
    } else if (n < 65536) {
      Big(wide, n, 2);
    } else {
      Big(wide + 1, n, 4);
    }
  }
  void Big(uint8_t marker, uint64_t v, int bytes) {
    *p_++ = marker;
    for (int i = bytes - 1; i >= 0; --i) *p_++ = static_cast<uint8_t>(v >> (8 * i));
  }

  std::string* out_;
  uint8_t* p_;
};

void EnvelopeHeader(FastWriter& w, WireTag tag, size_t body_fields) {
  w.Array(3);
  w.Uint(static_cast<uint8_t>(tag));
  w.Uint(kWireVersion);
  w.Array(body_fields);
}

// The fast path's shape: no new requests, no KV-connector metadata.
void EncodeSchedulerOutputFast(const SchedulerOutput& o, std::string* out) {
  const CachedRequestData& c = o.scheduled_cached_reqs;
  using W = FastWriter;
  const size_t max_bytes =
      4 * W::kHeader + 4 * W::kInt + W::StrListBytes(c.req_ids) + W::kHeader +
      c.resumed_from_preemption.size() + W::IntListBytes(c.new_token_ids) +
      W::IntListBytes(c.new_token_ids_offsets) + W::IntListBytes(c.new_block_ids) +
      W::IntListBytes(c.new_block_ids_offsets) + W::IntListBytes(c.num_computed_tokens) +
      W::IntListBytes(o.num_scheduled_tokens) + W::StrListBytes(o.finished_req_ids) +
      W::StrListBytes(o.preempted_req_ids) + W::IntListBytes(o.structured_output_indices) +
      W::IntListBytes(o.grammar_bitmask) + W::IntListBytes(o.num_scheduled_spec_tokens) + 8;
  W w(out, max_bytes);
  EnvelopeHeader(w, WireTag::kSchedulerOutput, 12);
  w.Uint(o.step_id);
  w.Array(0);
  w.Array(7);
  w.StrList(c.req_ids);
  w.Array(c.resumed_from_preemption.size());
  for (uint8_t resumed : c.resumed_from_preemption) w.Bool(resumed != 0);
  w.IntList(c.new_token_ids);
  w.IntList(c.new_token_ids_offsets);
  w.IntList(c.new_block_ids);
  w.IntList(c.new_block_ids_offsets);
  w.IntList(c.num_computed_tokens);
  w.IntList(o.num_scheduled_tokens);
  w.Int(o.total_num_scheduled_tokens);
  w.StrList(o.finished_req_ids);
  w.StrList(o.preempted_req_ids);
  w.IntList(o.structured_output_indices);
  w.IntList(o.grammar_bitmask);
  w.IntList(o.num_scheduled_spec_tokens);
  w.Int(o.num_spec_tokens_to_schedule);
  w.Nil();
  w.Finish();
}

bool AllEmpty(const std::vector<std::vector<TokenLogprobs>>& lists) {
  return std::all_of(lists.begin(), lists.end(), [](const auto& l) { return l.empty(); });
}

// The fast path's shape: no logprobs (empty lists at most), no KV-connector output.
void EncodeModelRunnerOutputFast(const ModelRunnerOutput& o, std::string* out) {
  using W = FastWriter;
  size_t max_bytes = 8 * W::kHeader + W::kInt + W::StrListBytes(o.req_ids) +
                     W::kHeader * (o.logprobs.size() + o.prompt_logprobs.size()) + 8;
  for (const auto& t : o.sampled_token_ids) max_bytes += W::IntListBytes(t);
  for (const auto& t : o.draft_token_ids) max_bytes += W::IntListBytes(t);
  W w(out, max_bytes);
  EnvelopeHeader(w, WireTag::kModelRunnerOutput, 6);
  w.StrList(o.req_ids);
  w.Array(o.sampled_token_ids.size());
  for (const auto& tokens : o.sampled_token_ids) w.IntList(tokens);
  for (const auto* lists : {&o.logprobs, &o.prompt_logprobs}) {
    w.Array(lists->size());
    for (size_t i = 0; i < lists->size(); ++i) w.Array(0);
  }
  w.Array(o.draft_token_ids.size());
  for (const auto& tokens : o.draft_token_ids) w.IntList(tokens);
  w.Nil();
  w.Finish();
}

}  // namespace

void EncodeTo(const SchedulerOutput& output, std::string* out) {
  if (output.scheduled_new_reqs.empty() && !output.kv_connector_metadata.has_value()) {
    EncodeSchedulerOutputFast(output, out);
  } else {
    *out = Encode(output);
  }
}

void EncodeTo(const ModelRunnerOutput& output, std::string* out) {
  if (AllEmpty(output.logprobs) && AllEmpty(output.prompt_logprobs) &&
      !output.kv_connector_output.has_value()) {
    EncodeModelRunnerOutputFast(output, out);
  } else {
    *out = Encode(output);
  }
}

void CachedRequestData::Clear() {
  req_ids.clear();
  resumed_from_preemption.clear();
  new_token_ids.clear();
  new_token_ids_offsets.assign(1, 0);
  new_block_ids.clear();
  new_block_ids_offsets.assign(1, 0);
  num_computed_tokens.clear();
}

absl::Status DecodeSchedulerOutputInto(std::string_view bytes, SchedulerOutput* out,
                                       const DecodeLimits& limits) {
  if (DecodeSchedulerOutputFast(bytes, limits, out)) return absl::OkStatus();
  absl::StatusOr<SchedulerOutput> full = DecodeSchedulerOutput(bytes, limits);
  if (!full.ok()) return full.status();
  *out = std::move(*full);
  return absl::OkStatus();
}

absl::Status DecodeModelRunnerOutputInto(std::string_view bytes, ModelRunnerOutput* out,
                                         const DecodeLimits& limits) {
  if (DecodeModelRunnerOutputFast(bytes, limits, out)) return absl::OkStatus();
  absl::StatusOr<ModelRunnerOutput> full = DecodeModelRunnerOutput(bytes, limits);
  if (!full.ok()) return full.status();
  *out = std::move(*full);
  return absl::OkStatus();
}

}  // namespace vllm::core
