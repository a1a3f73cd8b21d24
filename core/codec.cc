#include "core/codec.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <new>

#include "base/msgpack_fields.h"
#include "base/msgpack_util.h"
#include "base/status_macros.h"
#include "config/speculative_config.h"
#include "core/codec_internal.h"
#include "kv_transfer/codec.h"

namespace vllm::core {
namespace {

using wire::FieldReader;
using wire::Packer;

constexpr size_t kMaxIdBytes = kMaxRequestIdBytes;

// ---- Encoding --------------------------------------------------------------------------

void PackStructuredOutputs(Packer& pk,
                           const std::optional<structured_output::StructuredOutputsParams>& so) {
  if (!so.has_value()) {
    pk.pack_nil();
    return;
  }
  pk.pack_array(10);
  wire::PackOptional(pk, so->json);
  wire::PackOptional(pk, so->regex);
  if (so->choice.has_value()) {
    wire::PackList<std::string>(pk, *so->choice);
  } else {
    pk.pack_nil();
  }
  wire::PackOptional(pk, so->grammar);
  pk.pack(so->json_object);
  wire::PackOptional(pk, so->structural_tag);
  pk.pack(so->disable_any_whitespace);
  pk.pack(so->disable_additional_properties);
  pk.pack(so->disable_fallback);
  wire::PackOptional(pk, so->whitespace_pattern);
}

void PackSamplingParams(Packer& pk, const SamplingParams& p) {
  pk.pack_array(20);
  pk.pack(p.n);
  wire::PackDouble(pk, p.temperature);
  wire::PackDouble(pk, p.top_p);
  pk.pack(p.top_k);
  wire::PackDouble(pk, p.min_p);
  wire::PackDouble(pk, p.presence_penalty);
  wire::PackDouble(pk, p.frequency_penalty);
  wire::PackDouble(pk, p.repetition_penalty);
  wire::PackOptional(pk, p.seed);
  wire::PackOptional(pk, p.max_tokens);
  pk.pack(p.min_tokens);
  wire::PackList<int32_t>(pk, p.stop_token_ids);
  pk.pack(p.ignore_eos);
  wire::PackOptional(pk, p.logprobs);
  wire::PackOptional(pk, p.prompt_logprobs);
  PackStructuredOutputs(pk, p.structured_outputs);
  wire::PackList<int32_t>(pk, p.allowed_token_ids);
  pk.pack_array(static_cast<uint32_t>(p.bad_words_token_ids.size()));
  for (const std::vector<int32_t>& word : p.bad_words_token_ids) wire::PackList<int32_t>(pk, word);
  pk.pack_array(static_cast<uint32_t>(p.logit_bias.size()));
  for (const auto& [id, bias] : p.logit_bias) pk.pack(id);
  pk.pack_array(static_cast<uint32_t>(p.logit_bias.size()));
  for (const auto& [id, bias] : p.logit_bias) wire::PackFloat(pk, bias);
}

void PackRequest(Packer& pk, const EngineCoreRequest& r) {
  pk.pack_array(9);
  pk.pack(r.request_id);
  wire::PackList<int32_t>(pk, r.prompt_token_ids);
  PackSamplingParams(pk, r.sampling_params);
  wire::PackOptional(pk, r.eos_token_id);
  wire::PackDouble(pk, r.arrival_time);
  pk.pack(r.priority);
  wire::PackOptional(pk, r.cache_salt);
  wire::PackOptional(pk, r.data_parallel_rank);
  kv_transfer::PackOptional(pk, r.kv_transfer_params);
}

void PackTokenLogprobs(Packer& pk, const TokenLogprobs& t) {
  pk.pack_array(3);
  wire::PackList<int32_t>(pk, t.token_ids);
  pk.pack_array(static_cast<uint32_t>(t.logprobs.size()));
  for (float v : t.logprobs) wire::PackFloat(pk, v);
  pk.pack(t.sampled_token_rank);
}

void PackLogprobsList(Packer& pk, const std::vector<TokenLogprobs>& list) {
  pk.pack_array(static_cast<uint32_t>(list.size()));
  for (const TokenLogprobs& t : list) PackTokenLogprobs(pk, t);
}

void PackOutput(Packer& pk, const EngineCoreOutput& o) {
  pk.pack_array(10);
  pk.pack(o.request_id);
  wire::PackList<int32_t>(pk,
                          std::span<const int32_t>(o.new_token_ids.data(), o.new_token_ids.size()));
  if (o.finish_reason.has_value()) {
    pk.pack(static_cast<uint8_t>(*o.finish_reason));
  } else {
    pk.pack_nil();
  }
  wire::PackOptional(pk, o.stop_reason);
  pk.pack(o.num_cached_tokens);
  pk.pack(o.num_cache_creation_tokens);
  PackLogprobsList(pk, o.logprobs);
  PackLogprobsList(pk, o.prompt_logprobs);
  kv_transfer::PackOptional(pk, o.kv_transfer_params);
  pk.pack_array(static_cast<uint32_t>(o.events.size()));
  for (const EngineCoreEvent& e : o.events) {
    pk.pack_array(2);
    pk.pack(static_cast<uint8_t>(e.type));
    wire::PackDouble(pk, e.timestamp);
  }
}

void PackStructuredOutputStats(Packer& pk, const structured_output::StructuredOutputStats& s) {
  pk.pack_array(6);
  pk.pack(s.cache_hits);
  pk.pack(s.cache_misses);
  pk.pack(s.compile_failures);
  pk.pack(s.compile_timeouts);
  wire::PackList<int64_t>(pk, s.compile_seconds_counts);
  wire::PackDouble(pk, s.compile_seconds_sum);
}

void PackSpecDecodingStats(Packer& pk, const spec_decode::SpecDecodingStats& s) {
  pk.pack_array(5);
  pk.pack(s.num_spec_tokens);
  pk.pack(s.num_drafts);
  pk.pack(s.num_draft_tokens);
  pk.pack(s.num_accepted_tokens);
  wire::PackList<int64_t>(pk, s.num_accepted_tokens_per_pos);
}

void PackPrefixCacheStats(Packer& pk, const PrefixCacheStats& p) {
  pk.pack_array(4);
  pk.pack(p.reset);
  pk.pack(p.requests);
  pk.pack(p.queries);
  pk.pack(p.hits);
}

void PackStats(Packer& pk, const SchedulerStats& s) {
  pk.pack_array(8);
  pk.pack(s.num_running_reqs);
  pk.pack(s.num_waiting_reqs);
  wire::PackDouble(pk, s.kv_cache_usage);
  PackPrefixCacheStats(pk, s.prefix_cache_stats);
  pk.pack(s.num_preemptions);
  PackStructuredOutputStats(pk, s.structured_output_stats);
  PackSpecDecodingStats(pk, s.spec_decoding_stats);
  PackPrefixCacheStats(pk, s.connector_prefix_cache_stats);
}

void PackOutputs(Packer& pk, const EngineCoreOutputs& o) {
  pk.pack_array(7);
  pk.pack(o.engine_index);
  pk.pack_array(static_cast<uint32_t>(o.outputs.size()));
  for (const EngineCoreOutput& out : o.outputs) PackOutput(pk, out);
  if (o.scheduler_stats.has_value()) {
    PackStats(pk, *o.scheduler_stats);
  } else {
    pk.pack_nil();
  }
  wire::PackDouble(pk, o.timestamp);
  wire::PackList<std::string>(pk, o.finished_requests);
  wire::PackOptional(pk, o.wave_complete);
  wire::PackOptional(pk, o.start_wave);
}

void PackSchedulerOutput(Packer& pk, const SchedulerOutput& o) {
  pk.pack_array(12);
  pk.pack(o.step_id);
  pk.pack_array(static_cast<uint32_t>(o.scheduled_new_reqs.size()));
  for (const NewRequestData& r : o.scheduled_new_reqs) {
    pk.pack_array(5);
    pk.pack(r.req_id);
    wire::PackList<int32_t>(pk, r.prompt_token_ids);
    PackSamplingParams(pk, r.sampling_params);
    wire::PackList<int32_t>(pk, r.block_ids);
    pk.pack(r.num_computed_tokens);
  }
  const CachedRequestData& c = o.scheduled_cached_reqs;
  pk.pack_array(7);
  wire::PackList<std::string>(pk, c.req_ids);
  pk.pack_array(static_cast<uint32_t>(c.resumed_from_preemption.size()));
  for (uint8_t resumed : c.resumed_from_preemption) pk.pack(resumed != 0);
  wire::PackList<int32_t>(pk, c.new_token_ids);
  wire::PackList<uint32_t>(pk, c.new_token_ids_offsets);
  wire::PackList<int32_t>(pk, c.new_block_ids);
  wire::PackList<uint32_t>(pk, c.new_block_ids_offsets);
  wire::PackList<int32_t>(pk, c.num_computed_tokens);
  wire::PackList<int32_t>(pk, o.num_scheduled_tokens);
  pk.pack(o.total_num_scheduled_tokens);
  wire::PackList<std::string>(pk, o.finished_req_ids);
  wire::PackList<std::string>(pk, o.preempted_req_ids);
  wire::PackList<int32_t>(pk, o.structured_output_indices);
  wire::PackList<int32_t>(pk, o.grammar_bitmask);
  wire::PackList<int32_t>(pk, o.num_scheduled_spec_tokens);
  pk.pack(o.num_spec_tokens_to_schedule);
  kv_transfer::PackOptional(pk, o.kv_connector_metadata);
}

void PackModelRunnerOutput(Packer& pk, const ModelRunnerOutput& o) {
  pk.pack_array(6);
  wire::PackList<std::string>(pk, o.req_ids);
  pk.pack_array(static_cast<uint32_t>(o.sampled_token_ids.size()));
  for (const auto& tokens : o.sampled_token_ids) wire::PackList<int32_t>(pk, tokens);
  pk.pack_array(static_cast<uint32_t>(o.logprobs.size()));
  for (const auto& list : o.logprobs) PackLogprobsList(pk, list);
  pk.pack_array(static_cast<uint32_t>(o.prompt_logprobs.size()));
  for (const auto& list : o.prompt_logprobs) PackLogprobsList(pk, list);
  pk.pack_array(static_cast<uint32_t>(o.draft_token_ids.size()));
  for (const auto& tokens : o.draft_token_ids) wire::PackList<int32_t>(pk, tokens);
  kv_transfer::PackOptional(pk, o.kv_connector_output);
}

// Packs into this thread's buffer, kept between calls (no allocation but the result's once it
// has grown; one over 4 MiB is freed after use).
template <typename PackBody>
std::string EncodeEnvelope(WireTag tag, PackBody&& pack_body) {
  thread_local msgpack::sbuffer buffer;
  buffer.clear();
  Packer pk(buffer);
  pk.pack_array(3);
  pk.pack(static_cast<uint8_t>(tag));
  pk.pack(kWireVersion);
  pack_body(pk);
  std::string out(buffer.data(), buffer.size());
  if (buffer.size() > (size_t{4} << 20)) free(buffer.release());
  return out;
}

// ---- Decoding --------------------------------------------------------------------------

absl::Status ReadStructuredOutputs(const msgpack::object& o,
                                   std::optional<structured_output::StructuredOutputsParams>* out) {
  if (o.type == msgpack::type::NIL) {
    out->reset();
    return absl::OkStatus();
  }
  constexpr size_t kMaxSpec = structured_output::kMaxSpecBytes;
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "StructuredOutputsParams", 10));
  structured_output::StructuredOutputsParams& so = out->emplace();
  VLLM_RETURN_IF_ERROR(r.OptionalString("json", kMaxSpec, &so.json));
  VLLM_RETURN_IF_ERROR(r.OptionalString("regex", kMaxSpec, &so.regex));
  const msgpack::object& choice = r.Next();
  if (choice.type != msgpack::type::NIL) {
    VLLM_ASSIGN_OR_RETURN(auto list, r.List("choice", choice));
    if (list.size() > structured_output::kMaxChoices) {
      return r.Error("choice", "too many choices");
    }
    so.choice.emplace(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      VLLM_RETURN_IF_ERROR(
          r.ReadString(list[i], "choice", structured_output::kMaxChoiceBytes, &(*so.choice)[i]));
    }
  }
  VLLM_RETURN_IF_ERROR(r.OptionalString("grammar", kMaxSpec, &so.grammar));
  VLLM_RETURN_IF_ERROR(r.Bool("json_object", &so.json_object));
  VLLM_RETURN_IF_ERROR(r.OptionalString("structural_tag", kMaxSpec, &so.structural_tag));
  VLLM_RETURN_IF_ERROR(r.Bool("disable_any_whitespace", &so.disable_any_whitespace));
  VLLM_RETURN_IF_ERROR(r.Bool("disable_additional_properties", &so.disable_additional_properties));
  VLLM_RETURN_IF_ERROR(r.Bool("disable_fallback", &so.disable_fallback));
  return r.OptionalString("whitespace_pattern", kMaxSpec, &so.whitespace_pattern);
}

absl::Status ReadSamplingParams(const msgpack::object& o, SamplingParams* p) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "SamplingParams", 20));
  VLLM_RETURN_IF_ERROR(r.Int("n", &p->n));
  VLLM_RETURN_IF_ERROR(r.Double("temperature", &p->temperature));
  VLLM_RETURN_IF_ERROR(r.Double("top_p", &p->top_p));
  VLLM_RETURN_IF_ERROR(r.Int("top_k", &p->top_k));
  VLLM_RETURN_IF_ERROR(r.Double("min_p", &p->min_p));
  VLLM_RETURN_IF_ERROR(r.Double("presence_penalty", &p->presence_penalty));
  VLLM_RETURN_IF_ERROR(r.Double("frequency_penalty", &p->frequency_penalty));
  VLLM_RETURN_IF_ERROR(r.Double("repetition_penalty", &p->repetition_penalty));
  VLLM_RETURN_IF_ERROR(r.OptionalInt("seed", &p->seed));
  VLLM_RETURN_IF_ERROR(r.OptionalInt("max_tokens", &p->max_tokens));
  VLLM_RETURN_IF_ERROR(r.Int("min_tokens", &p->min_tokens));
  VLLM_RETURN_IF_ERROR(r.IntList("stop_token_ids", &p->stop_token_ids));
  VLLM_RETURN_IF_ERROR(r.Bool("ignore_eos", &p->ignore_eos));
  VLLM_RETURN_IF_ERROR(r.OptionalInt("logprobs", &p->logprobs));
  VLLM_RETURN_IF_ERROR(r.OptionalInt("prompt_logprobs", &p->prompt_logprobs));
  VLLM_RETURN_IF_ERROR(ReadStructuredOutputs(r.Next(), &p->structured_outputs));
  VLLM_RETURN_IF_ERROR(r.IntList("allowed_token_ids", &p->allowed_token_ids));
  VLLM_ASSIGN_OR_RETURN(auto words, r.List("bad_words_token_ids", r.Next()));
  p->bad_words_token_ids.resize(words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    VLLM_RETURN_IF_ERROR(
        r.ReadIntList(words[i], "bad_words_token_ids", &p->bad_words_token_ids[i]));
  }
  std::vector<int32_t> bias_ids;
  std::vector<float> biases;
  VLLM_RETURN_IF_ERROR(r.IntList("logit_bias_ids", &bias_ids));
  VLLM_RETURN_IF_ERROR(r.FloatList("logit_bias_values", &biases));
  if (bias_ids.size() != biases.size()) {
    return r.Error("logit_bias_values", "must have one value per logit_bias id");
  }
  p->logit_bias.resize(bias_ids.size());
  for (size_t i = 0; i < bias_ids.size(); ++i) p->logit_bias[i] = {bias_ids[i], biases[i]};
  return absl::OkStatus();
}

absl::Status ReadRequest(const msgpack::object& o, EngineCoreRequest* q) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "EngineCoreRequest", 9));
  VLLM_RETURN_IF_ERROR(r.String("request_id", kMaxIdBytes, &q->request_id));
  VLLM_RETURN_IF_ERROR(r.IntList("prompt_token_ids", &q->prompt_token_ids));
  VLLM_RETURN_IF_ERROR(ReadSamplingParams(r.Next(), &q->sampling_params));
  VLLM_RETURN_IF_ERROR(r.OptionalInt("eos_token_id", &q->eos_token_id));
  VLLM_RETURN_IF_ERROR(r.Double("arrival_time", &q->arrival_time));
  VLLM_RETURN_IF_ERROR(r.Int("priority", &q->priority));
  VLLM_RETURN_IF_ERROR(r.OptionalString("cache_salt", kMaxCacheSaltBytes, &q->cache_salt));
  VLLM_RETURN_IF_ERROR(r.OptionalInt("data_parallel_rank", &q->data_parallel_rank));
  return kv_transfer::ReadOptional(r.Next(), &q->kv_transfer_params);
}

absl::Status ReadTokenLogprobs(const msgpack::object& o, TokenLogprobs* t) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "TokenLogprobs", 3));
  VLLM_RETURN_IF_ERROR(r.IntList("token_ids", &t->token_ids));
  VLLM_RETURN_IF_ERROR(r.FloatList("logprobs", &t->logprobs));
  VLLM_RETURN_IF_ERROR(r.Int("sampled_token_rank", &t->sampled_token_rank));
  if (t->token_ids.size() != t->logprobs.size()) {
    return r.Error("logprobs", "must have as many entries as token_ids");
  }
  // The sampled (or prompt) token and at most kMaxLogprobs alternatives.
  if (t->token_ids.size() > static_cast<size_t>(kMaxLogprobs) + 1) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "TokenLogprobs: %d entries exceed the limit of %d", t->token_ids.size(), kMaxLogprobs + 1));
  }
  return absl::OkStatus();
}

absl::Status ReadLogprobsList(const FieldReader& r, std::string_view field,
                              const msgpack::object& o, std::vector<TokenLogprobs>* out) {
  VLLM_ASSIGN_OR_RETURN(auto list, r.List(field, o));
  out->resize(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    VLLM_RETURN_IF_ERROR(ReadTokenLogprobs(list[i], &(*out)[i]));
  }
  return absl::OkStatus();
}

// EngineCoreOutput.events: [[type, timestamp]], at most kMaxEvents entries.
absl::Status ReadEvents(const FieldReader& r, const msgpack::object& o,
                        std::vector<EngineCoreEvent>* out) {
  constexpr size_t kMaxEvents = 1024;
  VLLM_ASSIGN_OR_RETURN(auto list, r.List("events", o));
  if (list.size() > kMaxEvents) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "EngineCoreOutput.events: %d entries exceed the limit of %d", list.size(), kMaxEvents));
  }
  out->resize(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    VLLM_ASSIGN_OR_RETURN(FieldReader e, FieldReader::Open(list[i], "EngineCoreEvent", 2));
    uint8_t type = 0;
    VLLM_RETURN_IF_ERROR(e.Int("type", &type));
    if (type < static_cast<uint8_t>(EngineCoreEventType::kQueued) ||
        type > static_cast<uint8_t>(EngineCoreEventType::kPreempted)) {
      return e.Error("type", absl::StrFormat("unknown value %d", type));
    }
    (*out)[i].type = static_cast<EngineCoreEventType>(type);
    VLLM_RETURN_IF_ERROR(e.Double("timestamp", &(*out)[i].timestamp));
  }
  return absl::OkStatus();
}

absl::Status ReadOutput(const msgpack::object& o, EngineCoreOutput* out) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "EngineCoreOutput", 10));
  VLLM_RETURN_IF_ERROR(r.String("request_id", kMaxIdBytes, &out->request_id));
  VLLM_RETURN_IF_ERROR(r.IntList("new_token_ids", &out->new_token_ids));
  std::optional<uint8_t> reason;
  VLLM_RETURN_IF_ERROR(r.OptionalInt("finish_reason", &reason));
  if (reason.has_value()) {
    if (*reason > static_cast<uint8_t>(FinishReason::kError)) {
      return r.Error("finish_reason", absl::StrFormat("unknown value %d", *reason));
    }
    out->finish_reason = static_cast<FinishReason>(*reason);
  } else {
    out->finish_reason.reset();
  }
  VLLM_RETURN_IF_ERROR(r.OptionalInt("stop_reason", &out->stop_reason));
  VLLM_RETURN_IF_ERROR(r.Int("num_cached_tokens", &out->num_cached_tokens));
  VLLM_RETURN_IF_ERROR(r.Int("num_cache_creation_tokens", &out->num_cache_creation_tokens));
  if (out->num_cache_creation_tokens < 0) {
    return r.Error("num_cache_creation_tokens", "must be >= 0");
  }
  VLLM_RETURN_IF_ERROR(ReadLogprobsList(r, "logprobs", r.Next(), &out->logprobs));
  VLLM_RETURN_IF_ERROR(ReadLogprobsList(r, "prompt_logprobs", r.Next(), &out->prompt_logprobs));
  VLLM_RETURN_IF_ERROR(kv_transfer::ReadOptional(r.Next(), &out->kv_transfer_params));
  return ReadEvents(r, r.Next(), &out->events);
}

absl::Status ReadStructuredOutputStats(const msgpack::object& o,
                                       structured_output::StructuredOutputStats* s) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "StructuredOutputStats", 6));
  VLLM_RETURN_IF_ERROR(r.Int("cache_hits", &s->cache_hits));
  VLLM_RETURN_IF_ERROR(r.Int("cache_misses", &s->cache_misses));
  VLLM_RETURN_IF_ERROR(r.Int("compile_failures", &s->compile_failures));
  VLLM_RETURN_IF_ERROR(r.Int("compile_timeouts", &s->compile_timeouts));
  // A fixed number of buckets: the reader opens exactly that many, never a longer list.
  VLLM_ASSIGN_OR_RETURN(FieldReader counts,
                        FieldReader::Open(r.Next(), "StructuredOutputStats.compile_seconds_counts",
                                          static_cast<uint32_t>(s->compile_seconds_counts.size())));
  for (int64_t& count : s->compile_seconds_counts) {
    VLLM_RETURN_IF_ERROR(counts.Int("count", &count));
  }
  return r.Double("compile_seconds_sum", &s->compile_seconds_sum);
}

absl::Status ReadSpecDecodingStats(const msgpack::object& o, spec_decode::SpecDecodingStats* s) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "SpecDecodingStats", 5));
  VLLM_RETURN_IF_ERROR(r.Int("num_spec_tokens", &s->num_spec_tokens));
  if (s->num_spec_tokens < 0 || s->num_spec_tokens > config::kMaxSpeculativeTokens) {
    return r.Error("num_spec_tokens", absl::StrFormat("%d is not in [0, %d]", s->num_spec_tokens,
                                                      config::kMaxSpeculativeTokens));
  }
  VLLM_RETURN_IF_ERROR(r.Int("num_drafts", &s->num_drafts));
  VLLM_RETURN_IF_ERROR(r.Int("num_draft_tokens", &s->num_draft_tokens));
  VLLM_RETURN_IF_ERROR(r.Int("num_accepted_tokens", &s->num_accepted_tokens));
  // One entry per draft position: checked before anything is read into the vector.
  VLLM_ASSIGN_OR_RETURN(auto per_pos, r.List("num_accepted_tokens_per_pos", r.Next()));
  if (per_pos.size() > static_cast<size_t>(config::kMaxSpeculativeTokens)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "SpecDecodingStats.num_accepted_tokens_per_pos: %d entries exceed the limit of %d",
        per_pos.size(), config::kMaxSpeculativeTokens));
  }
  s->num_accepted_tokens_per_pos.resize(per_pos.size());
  for (size_t i = 0; i < per_pos.size(); ++i) {
    VLLM_RETURN_IF_ERROR(
        r.ReadInt(per_pos[i], "num_accepted_tokens_per_pos", &s->num_accepted_tokens_per_pos[i]));
  }
  return absl::OkStatus();
}

absl::Status ReadPrefixCacheStats(const msgpack::object& o, std::string_view what,
                                  PrefixCacheStats* s) {
  VLLM_ASSIGN_OR_RETURN(FieldReader p, FieldReader::Open(o, what, 4));
  VLLM_RETURN_IF_ERROR(p.Bool("reset", &s->reset));
  VLLM_RETURN_IF_ERROR(p.Int("requests", &s->requests));
  VLLM_RETURN_IF_ERROR(p.Int("queries", &s->queries));
  return p.Int("hits", &s->hits);
}

absl::Status ReadStats(const msgpack::object& o, SchedulerStats* s) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "SchedulerStats", 8));
  VLLM_RETURN_IF_ERROR(r.Int("num_running_reqs", &s->num_running_reqs));
  VLLM_RETURN_IF_ERROR(r.Int("num_waiting_reqs", &s->num_waiting_reqs));
  VLLM_RETURN_IF_ERROR(r.Double("kv_cache_usage", &s->kv_cache_usage));
  VLLM_RETURN_IF_ERROR(ReadPrefixCacheStats(r.Next(), "PrefixCacheStats", &s->prefix_cache_stats));
  VLLM_RETURN_IF_ERROR(r.Int("num_preemptions", &s->num_preemptions));
  VLLM_RETURN_IF_ERROR(ReadStructuredOutputStats(r.Next(), &s->structured_output_stats));
  VLLM_RETURN_IF_ERROR(ReadSpecDecodingStats(r.Next(), &s->spec_decoding_stats));
  return ReadPrefixCacheStats(r.Next(), "SchedulerStats.connector_prefix_cache_stats",
                              &s->connector_prefix_cache_stats);
}

absl::Status ReadOutputs(const msgpack::object& o, EngineCoreOutputs* out) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "EngineCoreOutputs", 7));
  VLLM_RETURN_IF_ERROR(r.Int("engine_index", &out->engine_index));
  VLLM_ASSIGN_OR_RETURN(auto list, r.List("outputs", r.Next()));
  out->outputs.resize(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    VLLM_RETURN_IF_ERROR(ReadOutput(list[i], &out->outputs[i]));
  }
  const msgpack::object& stats = r.Next();
  if (stats.type == msgpack::type::NIL) {
    out->scheduler_stats.reset();
  } else {
    out->scheduler_stats.emplace();
    VLLM_RETURN_IF_ERROR(ReadStats(stats, &*out->scheduler_stats));
  }
  VLLM_RETURN_IF_ERROR(r.Double("timestamp", &out->timestamp));
  VLLM_RETURN_IF_ERROR(r.StringList("finished_requests", kMaxIdBytes, &out->finished_requests));
  VLLM_RETURN_IF_ERROR(r.OptionalInt("wave_complete", &out->wave_complete));
  return r.OptionalInt("start_wave", &out->start_wave);
}

// Offsets must start at 0, never decrease, and end at the flat list's size.
absl::Status CheckOffsets(const FieldReader& r, std::string_view field,
                          const std::vector<uint32_t>& offsets, size_t num_reqs, size_t flat_size) {
  if (offsets.size() != num_reqs + 1 || offsets.front() != 0 || offsets.back() != flat_size ||
      !std::is_sorted(offsets.begin(), offsets.end())) {
    return r.Error(field,
                   "offsets must be non-decreasing, one per request plus one, from 0 "
                   "to the size of the flattened list");
  }
  return absl::OkStatus();
}

absl::Status ReadCached(const msgpack::object& o, CachedRequestData* c) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "CachedRequestData", 7));
  VLLM_RETURN_IF_ERROR(r.StringList("req_ids", kMaxIdBytes, &c->req_ids));
  const size_t n = c->req_ids.size();
  VLLM_ASSIGN_OR_RETURN(auto resumed, r.List("resumed_from_preemption", r.Next()));
  if (resumed.size() != n) return r.Error("resumed_from_preemption", "one entry per request");
  c->resumed_from_preemption.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (resumed[i].type != msgpack::type::BOOLEAN) {
      return r.Error("resumed_from_preemption", "expected booleans");
    }
    c->resumed_from_preemption[i] = resumed[i].via.boolean ? 1 : 0;
  }
  VLLM_RETURN_IF_ERROR(r.IntList("new_token_ids", &c->new_token_ids));
  VLLM_RETURN_IF_ERROR(r.IntList("new_token_ids_offsets", &c->new_token_ids_offsets));
  VLLM_RETURN_IF_ERROR(r.IntList("new_block_ids", &c->new_block_ids));
  VLLM_RETURN_IF_ERROR(r.IntList("new_block_ids_offsets", &c->new_block_ids_offsets));
  VLLM_RETURN_IF_ERROR(r.IntList("num_computed_tokens", &c->num_computed_tokens));
  VLLM_RETURN_IF_ERROR(CheckOffsets(r, "new_token_ids_offsets", c->new_token_ids_offsets, n,
                                    c->new_token_ids.size()));
  VLLM_RETURN_IF_ERROR(CheckOffsets(r, "new_block_ids_offsets", c->new_block_ids_offsets, n,
                                    c->new_block_ids.size()));
  if (c->num_computed_tokens.size() != n) {
    return r.Error("num_computed_tokens", "one entry per request");
  }
  return absl::OkStatus();
}

absl::Status ReadSchedulerOutput(const msgpack::object& o, SchedulerOutput* out) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "SchedulerOutput", 12));
  VLLM_RETURN_IF_ERROR(r.Int("step_id", &out->step_id));
  VLLM_ASSIGN_OR_RETURN(auto list, r.List("scheduled_new_reqs", r.Next()));
  out->scheduled_new_reqs.resize(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    NewRequestData& d = out->scheduled_new_reqs[i];
    VLLM_ASSIGN_OR_RETURN(FieldReader nr, FieldReader::Open(list[i], "NewRequestData", 5));
    VLLM_RETURN_IF_ERROR(nr.String("req_id", kMaxIdBytes, &d.req_id));
    VLLM_RETURN_IF_ERROR(nr.IntList("prompt_token_ids", &d.prompt_token_ids));
    VLLM_RETURN_IF_ERROR(ReadSamplingParams(nr.Next(), &d.sampling_params));
    VLLM_RETURN_IF_ERROR(nr.IntList("block_ids", &d.block_ids));
    VLLM_RETURN_IF_ERROR(nr.Int("num_computed_tokens", &d.num_computed_tokens));
  }
  VLLM_RETURN_IF_ERROR(ReadCached(r.Next(), &out->scheduled_cached_reqs));
  VLLM_RETURN_IF_ERROR(r.IntList("num_scheduled_tokens", &out->num_scheduled_tokens));
  VLLM_RETURN_IF_ERROR(r.Int("total_num_scheduled_tokens", &out->total_num_scheduled_tokens));
  VLLM_RETURN_IF_ERROR(r.StringList("finished_req_ids", kMaxIdBytes, &out->finished_req_ids));
  VLLM_RETURN_IF_ERROR(r.StringList("preempted_req_ids", kMaxIdBytes, &out->preempted_req_ids));
  VLLM_RETURN_IF_ERROR(r.IntList("structured_output_indices", &out->structured_output_indices));
  VLLM_RETURN_IF_ERROR(r.IntList("grammar_bitmask", &out->grammar_bitmask));
  for (int32_t index : out->structured_output_indices) {
    if (index < 0 || static_cast<size_t>(index) >= out->num_scheduled_reqs()) {
      return r.Error("structured_output_indices", "must index the scheduled requests");
    }
  }
  const size_t rows = out->structured_output_indices.size();
  if ((rows == 0) != out->grammar_bitmask.empty() ||
      (rows > 0 && out->grammar_bitmask.size() % rows != 0)) {
    return r.Error("grammar_bitmask", "must hold one equal row per structured_output_indices");
  }
  VLLM_RETURN_IF_ERROR(r.IntList("num_scheduled_spec_tokens", &out->num_scheduled_spec_tokens));
  VLLM_RETURN_IF_ERROR(r.Int("num_spec_tokens_to_schedule", &out->num_spec_tokens_to_schedule));
  if (out->num_spec_tokens_to_schedule < 0 ||
      out->num_spec_tokens_to_schedule > config::kMaxSpeculativeTokens) {
    return r.Error("num_spec_tokens_to_schedule", "must be 0 to kMaxSpeculativeTokens");
  }
  VLLM_RETURN_IF_ERROR(kv_transfer::ReadOptional(r.Next(), &out->kv_connector_metadata));
  if (out->num_scheduled_tokens.size() != out->num_scheduled_reqs()) {
    return r.Error("num_scheduled_tokens", "one entry per scheduled request");
  }
  if (!out->num_scheduled_spec_tokens.empty() &&
      out->num_scheduled_spec_tokens.size() != out->num_scheduled_reqs()) {
    return r.Error("num_scheduled_spec_tokens", "empty or one entry per scheduled request");
  }
  int64_t total = 0;
  for (size_t i = 0; i < out->num_scheduled_tokens.size(); ++i) {
    const int32_t n = out->num_scheduled_tokens[i];
    if (n <= 0) return r.Error("num_scheduled_tokens", "entries must be positive");
    if (!out->num_scheduled_spec_tokens.empty() &&
        (out->num_scheduled_spec_tokens[i] < 0 || out->num_scheduled_spec_tokens[i] >= n)) {
      return r.Error("num_scheduled_spec_tokens",
                     "entries must be at least 0 and below the request's scheduled tokens");
    }
    total += n;
  }
  if (total != out->total_num_scheduled_tokens) {
    return r.Error("total_num_scheduled_tokens", "must equal the sum of num_scheduled_tokens");
  }
  return absl::OkStatus();
}

absl::Status ReadModelRunnerOutput(const msgpack::object& o, ModelRunnerOutput* out) {
  VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "ModelRunnerOutput", 6));
  VLLM_RETURN_IF_ERROR(r.StringList("req_ids", kMaxIdBytes, &out->req_ids));
  VLLM_ASSIGN_OR_RETURN(auto sampled, r.List("sampled_token_ids", r.Next()));
  if (sampled.size() != out->req_ids.size()) {
    return r.Error("sampled_token_ids", "one list per request");
  }
  out->sampled_token_ids.resize(sampled.size());
  for (size_t i = 0; i < sampled.size(); ++i) {
    VLLM_RETURN_IF_ERROR(
        r.ReadIntList(sampled[i], "sampled_token_ids", &out->sampled_token_ids[i]));
  }
  VLLM_ASSIGN_OR_RETURN(auto logprobs, r.List("logprobs", r.Next()));
  if (!logprobs.empty() && logprobs.size() != out->req_ids.size()) {
    return r.Error("logprobs", "must be empty or hold one list per request");
  }
  out->logprobs.resize(logprobs.size());
  for (size_t i = 0; i < logprobs.size(); ++i) {
    VLLM_RETURN_IF_ERROR(ReadLogprobsList(r, "logprobs", logprobs[i], &out->logprobs[i]));
  }
  VLLM_ASSIGN_OR_RETURN(auto prompt_logprobs, r.List("prompt_logprobs", r.Next()));
  if (!prompt_logprobs.empty() && prompt_logprobs.size() != out->req_ids.size()) {
    return r.Error("prompt_logprobs", "must be empty or hold one list per request");
  }
  out->prompt_logprobs.resize(prompt_logprobs.size());
  for (size_t i = 0; i < prompt_logprobs.size(); ++i) {
    VLLM_RETURN_IF_ERROR(
        ReadLogprobsList(r, "prompt_logprobs", prompt_logprobs[i], &out->prompt_logprobs[i]));
  }
  VLLM_ASSIGN_OR_RETURN(auto drafts, r.List("draft_token_ids", r.Next()));
  if (!drafts.empty() && drafts.size() != out->req_ids.size()) {
    return r.Error("draft_token_ids", "must be empty or hold one list per request");
  }
  out->draft_token_ids.resize(drafts.size());
  for (size_t i = 0; i < drafts.size(); ++i) {
    VLLM_RETURN_IF_ERROR(r.ReadIntList(drafts[i], "draft_token_ids", &out->draft_token_ids[i]));
    if (out->draft_token_ids[i].size() > static_cast<size_t>(config::kMaxSpeculativeTokens)) {
      return r.Error("draft_token_ids", "more than kMaxSpeculativeTokens drafts for a request");
    }
  }
  return kv_transfer::ReadOptional(r.Next(), &out->kv_connector_output);
}

// Unpacks `bytes` under `limits`, checks the envelope, and hands the body to `read_body`.
// Every msgpack-c exception from reading fields is caught here.
template <typename T, typename ReadBody>
absl::StatusOr<T> DecodeEnvelope(std::string_view bytes, const DecodeLimits& limits, WireTag tag,
                                 std::string_view what, ReadBody&& read_body) {
  if (bytes.size() > limits.max_message_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: message of %d bytes exceeds the limit of %d", what, bytes.size(),
                        limits.max_message_bytes));
  }
  if (bytes.empty()) {
    return absl::DataLossError(absl::StrFormat("%s: empty message", what));
  }
  // The handle references `bytes`, which outlives it; every field is copied out into T.
  auto handle = UnpackFrame(bytes, limits);
  if (!handle.ok()) {
    return absl::Status(handle.status().code(),
                        absl::StrFormat("%s: %s", what, handle.status().message()));
  }
  try {
    VLLM_ASSIGN_OR_RETURN(FieldReader envelope, FieldReader::Open(handle->get(), "envelope", 3));
    uint8_t got_tag = 0;
    uint32_t version = 0;
    VLLM_RETURN_IF_ERROR(envelope.Int("tag", &got_tag));
    if (got_tag != static_cast<uint8_t>(tag)) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: wrong message tag %d (expected %d)",
                                                        what, got_tag, static_cast<int>(tag)));
    }
    VLLM_RETURN_IF_ERROR(envelope.Int("version", &version));
    if (version != kWireVersion) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: unsupported wire version %d (this build speaks %d)", what, version, kWireVersion));
    }
    T value{};
    VLLM_RETURN_IF_ERROR(read_body(envelope.Next(), &value));
    return value;
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrFormat("%s: out of memory decoding", what));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: malformed message (%s)", what, e.what()));
  }
}

}  // namespace

// wire::UnpackBounded under `limits` (no maps, no bin: no message of ours has them).
absl::StatusOr<msgpack::object_handle> UnpackFrame(std::string_view bytes,
                                                   const DecodeLimits& limits) {
  wire::UnpackLimits unpack_limits;
  unpack_limits.max_array = limits.max_array_elements;
  unpack_limits.max_map = 0;
  unpack_limits.max_str = limits.max_string_bytes;
  unpack_limits.max_bin = 0;
  unpack_limits.max_depth = limits.max_depth;
  return wire::UnpackBounded(
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
      unpack_limits);
}

std::string Encode(const SamplingParams& params) {
  return EncodeEnvelope(WireTag::kSamplingParams,
                        [&](Packer& pk) { PackSamplingParams(pk, params); });
}
std::string Encode(const EngineCoreRequest& request) {
  return EncodeEnvelope(WireTag::kEngineCoreRequest, [&](Packer& pk) { PackRequest(pk, request); });
}
std::string Encode(const EngineCoreOutputs& outputs) {
  return EncodeEnvelope(WireTag::kEngineCoreOutputs, [&](Packer& pk) { PackOutputs(pk, outputs); });
}
std::string Encode(const SchedulerStats& stats) {
  return EncodeEnvelope(WireTag::kSchedulerStats, [&](Packer& pk) { PackStats(pk, stats); });
}
std::string Encode(const SchedulerOutput& output) {
  return EncodeEnvelope(WireTag::kSchedulerOutput,
                        [&](Packer& pk) { PackSchedulerOutput(pk, output); });
}
std::string Encode(const ModelRunnerOutput& output) {
  return EncodeEnvelope(WireTag::kModelRunnerOutput,
                        [&](Packer& pk) { PackModelRunnerOutput(pk, output); });
}
std::string Encode(const StartDpWave& wave) {
  return EncodeEnvelope(WireTag::kStartDpWave, [&](Packer& pk) {
    pk.pack_array(2);
    pk.pack(wave.wave);
    pk.pack(wave.exclude_engine_index);
  });
}
std::string EncodeAbortRequests(std::span<const std::string> request_ids) {
  return EncodeEnvelope(WireTag::kAbortRequests,
                        [&](Packer& pk) { wire::PackList<std::string>(pk, request_ids); });
}

absl::StatusOr<SamplingParams> DecodeSamplingParams(std::string_view bytes,
                                                    const DecodeLimits& limits) {
  return DecodeEnvelope<SamplingParams>(bytes, limits, WireTag::kSamplingParams, "SamplingParams",
                                        ReadSamplingParams);
}
absl::StatusOr<EngineCoreRequest> DecodeEngineCoreRequest(std::string_view bytes,
                                                          const DecodeLimits& limits) {
  return DecodeEnvelope<EngineCoreRequest>(bytes, limits, WireTag::kEngineCoreRequest,
                                           "EngineCoreRequest", ReadRequest);
}
absl::StatusOr<EngineCoreOutputs> DecodeEngineCoreOutputs(std::string_view bytes,
                                                          const DecodeLimits& limits) {
  return DecodeEnvelope<EngineCoreOutputs>(bytes, limits, WireTag::kEngineCoreOutputs,
                                           "EngineCoreOutputs", ReadOutputs);
}
absl::StatusOr<SchedulerStats> DecodeSchedulerStats(std::string_view bytes,
                                                    const DecodeLimits& limits) {
  return DecodeEnvelope<SchedulerStats>(bytes, limits, WireTag::kSchedulerStats, "SchedulerStats",
                                        ReadStats);
}
absl::StatusOr<SchedulerOutput> DecodeSchedulerOutput(std::string_view bytes,
                                                      const DecodeLimits& limits) {
  return DecodeEnvelope<SchedulerOutput>(bytes, limits, WireTag::kSchedulerOutput,
                                         "SchedulerOutput", ReadSchedulerOutput);
}
absl::StatusOr<ModelRunnerOutput> DecodeModelRunnerOutput(std::string_view bytes,
                                                          const DecodeLimits& limits) {
  return DecodeEnvelope<ModelRunnerOutput>(bytes, limits, WireTag::kModelRunnerOutput,
                                           "ModelRunnerOutput", ReadModelRunnerOutput);
}
absl::StatusOr<StartDpWave> DecodeStartDpWave(std::string_view bytes, const DecodeLimits& limits) {
  return DecodeEnvelope<StartDpWave>(
      bytes, limits, WireTag::kStartDpWave, "StartDpWave",
      [](const msgpack::object& o, StartDpWave* w) -> absl::Status {
        VLLM_ASSIGN_OR_RETURN(FieldReader r, FieldReader::Open(o, "StartDpWave", 2));
        VLLM_RETURN_IF_ERROR(r.Int("wave", &w->wave));
        return r.Int("exclude_engine_index", &w->exclude_engine_index);
      });
}
absl::StatusOr<std::vector<std::string>> DecodeAbortRequests(std::string_view bytes,
                                                             const DecodeLimits& limits) {
  return DecodeEnvelope<std::vector<std::string>>(
      bytes, limits, WireTag::kAbortRequests, "AbortRequests",
      [](const msgpack::object& o, std::vector<std::string>* ids) -> absl::Status {
        if (o.type != msgpack::type::ARRAY) {
          return absl::InvalidArgumentError("AbortRequests: expected an array of request ids");
        }
        ids->resize(o.via.array.size);
        for (uint32_t i = 0; i < o.via.array.size; ++i) {
          const msgpack::object& id = o.via.array.ptr[i];
          if (id.type != msgpack::type::STR || id.via.str.size > kMaxIdBytes) {
            return absl::InvalidArgumentError(
                "AbortRequests: request ids must be strings of at most 256 bytes");
          }
          (*ids)[i].assign(id.via.str.ptr, id.via.str.size);
        }
        return absl::OkStatus();
      });
}

}  // namespace vllm::core
