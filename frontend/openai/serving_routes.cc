// Session's OpenAI side (vLLM's vllm/entrypoints/openai/api_server.py routes): routing, the
// API key, /v1/models, /health, /metrics, /version, /tokenize and /detokenize, and generation
// requests from the preprocessing pool to the last engine output. See http_session.h.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "frontend/openai/beam_search.h"
#include "frontend/openai/http_session.h"

namespace vllm::frontend::api_server_internal {
namespace {

// Path, the methods it takes (", "-separated, as the Allow header lists them), whether only
// dev mode serves it (VLLM_SERVER_DEV_MODE=1, as vLLM's dev routers).
struct RouteEntry {
  const char* path;
  const char* methods;
  bool dev_only;
};
const RouteEntry kRoutes[] = {
    {"/v1/completions", "POST", false},
    {"/v1/chat/completions", "POST", false},
    {"/v1/messages", "POST", false},
    {"/v1/models", "GET", false},
    {"/health", "GET", false},
    {"/ping", "GET, POST", false},
    {"/load", "GET", false},
    {"/invocations", "POST", false},
    {"/version", "GET", false},
    {"/metrics", "GET", false},
    {"/tokenize", "POST", false},
    {"/detokenize", "POST", false},
    {"/reset_prefix_cache", "POST", true},
    {"/sleep", "POST", true},
    {"/wake_up", "POST", true},
    {"/is_sleeping", "GET", true},
};

// vLLM's envs.VLLM_SERVER_DEV_MODE: bool(int(value)), read once.
bool DevMode() {
  static const bool kDev = [] {
    const char* v = std::getenv("VLLM_SERVER_DEV_MODE");
    int n = 0;
    return v != nullptr && absl::SimpleAtoi(v, &n) && n != 0;
  }();
  return kDev;
}

bool MethodAllowed(std::string_view methods, std::string_view method) {
  for (absl::string_view m :
       absl::StrSplit(absl::string_view(methods.data(), methods.size()), ", ")) {
    if (m == absl::string_view(method.data(), method.size())) return true;
  }
  return false;
}

}  // namespace

OutputCallback Session::MakeCallback(PostTarget target, uint64_t serial, int32_t index) {
  return [target = std::move(target), serial, index](absl::StatusOr<GenerateOutput> out) {
    absl::ReaderMutexLock lock(&target.ctx->post_mu);
    if (target.ctx->stopped) return;
    net::post(target.strand,
              [session = target.session, serial, index, out = std::move(out)]() mutable {
                if (auto self = session.lock()) {
                  self->OnEngineOutput(serial, index, std::move(out));
                }
              });
  };
}

void Session::Route() {
  std::string target(request_.target());
  const std::string raw_path = target.substr(0, target.find('?'));
  cors_headers_ = ctx_->cors.SimpleHeaders(Header(http::field::origin));
  if (request_.version() >= 11 && request_.find(http::field::host) == request_.end()) {
    // RFC 9112 section 3.2: a server MUST answer 400 to an HTTP/1.1 request without Host.
    keep_alive_ = false;
    return SendError(absl::InvalidArgumentError("An HTTP/1.1 request needs a Host header"));
  }
  if (AnswerCorsPreflight()) return;
  // --root-path: a path under it is routed without it (FastAPI's root_path).
  const std::string path = RoutePath(raw_path, ctx_->options.http.root_path);
  const char* allowed = nullptr;
  for (const RouteEntry& route : kRoutes) {
    if (path == route.path && (!route.dev_only || DevMode())) allowed = route.methods;
  }
  if (allowed == nullptr) {
    return SendError(absl::NotFoundError(absl::StrCat("Not Found: ", raw_path)));
  }
  const std::string_view method(request_.method_string().data(), request_.method_string().size());
  if (!MethodAllowed(allowed, method)) {
    return SendJson(http::status::method_not_allowed,
                    ErrorJson(405, "MethodNotAllowed",
                              absl::StrCat("Method ", std::string(request_.method_string()),
                                           " is not allowed on ", path, "; use ", allowed)),
                    allowed);
  }
  if (overflow_ && path != "/health" && path != "/ping") {
    return SendError(absl::UnavailableError(
        absl::StrCat("The server is at its connection limit (--max-connections ",
                     ctx_->max_connections, "); retry later")));
  }
  if (ctx_->draining.load() && path != "/version" && path != "/metrics") {
    return SendError(absl::UnavailableError("The server is shutting down"));
  }
  if (NeedsApiKey(path) && !Authorized()) {
    return SendError(absl::UnauthenticatedError(
        "Invalid or missing API key: send \"Authorization: Bearer <key>\""));
  }
  if (path == "/v1/completions") return HandleGenerate(ApiKind::kCompletion);
  if (path == "/v1/chat/completions") return HandleGenerate(ApiKind::kChat);
  if (path == "/v1/messages") return HandleGenerate(ApiKind::kChat, /*anthropic=*/true);
  if (path == "/invocations") return HandleInvocations();
  if (path == "/tokenize") return HandleTokenization(&frontend::HandleTokenize);
  if (path == "/detokenize") return HandleTokenization(&frontend::HandleDetokenize);
  if (path == "/v1/models") return HandleModels();
  if (path == "/health" || path == "/ping") return HandleHealth();
  if (path == "/version") {
    // vLLM answers {"version": its own}; ours names the vLLM API we serve, too.
    return SendJson(http::status::ok,
                    DumpJson(nlohmann::json{{"version", ctx_->options.version},
                                            {"vllm_api_version", kVllmApiVersion}}));
  }
  if (path == "/metrics") return HandleMetrics();
  if (path == "/load") {
    // vLLM's server_load_metrics: counted only with --enable-server-load-tracking, else 0.
    const int64_t load = ctx_->options.http.server_load_tracking ? ctx_->InFlight() : 0;
    return SendJson(http::status::ok, DumpJson(nlohmann::json{{"server_load", load}}));
  }
  return HandleDevRoute(path,
                        target.size() > raw_path.size() ? target.substr(raw_path.size() + 1) : "");
}

bool Session::Authorized() const {
  return ApiKeyAccepted(ctx_->options.http.api_keys, Header(http::field::authorization));
}

void Session::HandleModels() {
  EngineClient& e = *ctx_->engine;
  nlohmann::json model{{"id", e.ModelName()},
                       {"object", "model"},
                       {"created", ctx_->created},
                       {"owned_by", "vllm-launch"},
                       {"root", e.ModelName()},
                       {"parent", nullptr},
                       {"max_model_len", e.MaxModelLen()}};
  SendJson(http::status::ok,
           DumpJson(nlohmann::json{{"object", "list"}, {"data", nlohmann::json::array({model})}}));
}

void Session::HandleHealth() {
  absl::Status health = ctx_->engine->Health();
  if (!health.ok()) {
    return SendJson(http::status::service_unavailable,
                    DumpJson(ErrorBody(absl::UnavailableError(health.message()))));
  }
  nlohmann::json live = nlohmann::json::array(), dead = nlohmann::json::array();
  for (const EngineStatus& e : ctx_->engine->Engines()) {
    if (e.health.ok()) {
      live.push_back(e.rank);
    } else {
      dead.push_back({{"engine", e.rank}, {"error", std::string(e.health.message())}});
    }
  }
  if (dead.empty()) return SendBody(http::status::ok, "text/plain", "", nullptr);
  SendJson(http::status::ok, DumpJson(nlohmann::json{{"status", "degraded"},
                                                     {"live_engines", std::move(live)},
                                                     {"dead_engines", std::move(dead)}}));
}

void Session::HandleMetrics() {
  for (const EngineStatus& e : ctx_->engine->Engines()) {
    const EngineStats& stats = e.stats;
    const EngineMetrics& m = ctx_->metrics.engine(e.index);
    m.num_requests_running->Set(stats.num_requests_running);
    m.num_requests_waiting->Set(stats.num_requests_waiting);
    m.num_requests_waiting_capacity->Set(stats.num_requests_waiting);
    m.num_requests_waiting_deferred->Set(0);
    m.kv_cache_usage_perc->Set(stats.kv_cache_usage);
    m.prefix_cache_queries->Set(static_cast<double>(stats.prefix_cache_queries));
    m.prefix_cache_hits->Set(static_cast<double>(stats.prefix_cache_hits));
    m.external_prefix_cache_queries->Set(static_cast<double>(stats.connector_prefix_cache_queries));
    m.external_prefix_cache_hits->Set(static_cast<double>(stats.connector_prefix_cache_hits));
    m.num_preemptions->Set(static_cast<double>(stats.num_preemptions));
    m.prompt_tokens_cached_by_source[0]->Set(static_cast<double>(stats.prefix_cache_hits));
    m.prompt_tokens_cached_by_source[4]->Set(
        static_cast<double>(stats.connector_prefix_cache_hits));
    m.iteration_tokens->SetHistogram(stats.iteration_tokens_counts, stats.iteration_tokens_sum);
    m.SetStructuredOutput(stats.structured_output);
    m.SetSpecDecoding(stats.spec_decoding);
  }
  SendBody(http::status::ok, "text/plain; version=0.0.4; charset=utf-8", ctx_->registry.Render(),
           nullptr);
}

absl::Status Session::CheckContentType() const {
  auto it = request_.find(http::field::content_type);
  if (it == request_.end()) return absl::OkStatus();
  const std::string value(it->value());
  std::string mime = absl::AsciiStrToLower(
      absl::StripAsciiWhitespace(absl::string_view(value).substr(0, value.find(';'))));
  if (mime == "application/json" || absl::EndsWith(mime, "+json")) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("Content-Type must be application/json, got '", value.substr(0, 100), "'"));
}

void Session::HandleTokenization(TokenizationHandler handler) {
  if (absl::Status s = CheckContentType(); !s.ok()) return SendError(s);
  AnswerFromPrepPool([handler, ctx = ctx_, body = std::move(request_.body())] {
    return handler(body, *ctx->engine);
  });
}

void Session::AnswerFromPrepPool(std::function<absl::StatusOr<nlohmann::json>()> call) {
  Strand strand = stream_.get_executor();
  auto job = [self = shared_from_this(), strand, call = std::move(call)]() mutable {
    absl::StatusOr<nlohmann::json> answer = call();
    net::post(strand, [self = std::move(self), answer = std::move(answer)]() mutable {
      if (self->closed_) return;
      if (!answer.ok()) return self->SendError(answer.status());
      self->SendJson(http::status::ok, DumpJson(*answer));
    });
  };
  absl::MutexLock lock(&ctx_->prep_mu);
  if (!ctx_->prep.has_value()) {
    return SendError(absl::UnavailableError("The server is shutting down"));
  }
  net::post(*ctx_->prep, std::move(job));
}

void Session::HandleGenerate(ApiKind kind, bool anthropic) {
  if (absl::Status s = CheckContentType(); !s.ok()) return SendError(s);
  const uint64_t serial = ++generation_serial_;
  PostTarget target{ctx_, stream_.get_executor(), weak_from_this()};
  auto job = [self = shared_from_this(), target = std::move(target), kind, serial, anthropic,
              body = std::move(request_.body())]() mutable {
    Prepared prepared = Prepare(target, kind, serial, body, anthropic);
    Strand strand = target.strand;
    net::post(strand, [self = std::move(self), serial, prepared = std::move(prepared)]() mutable {
      self->OnPrepared(serial, std::move(prepared));
    });
  };
  {
    absl::MutexLock lock(&ctx_->prep_mu);
    if (!ctx_->prep.has_value()) {
      return SendError(absl::UnavailableError("The server is shutting down"));
    }
    net::post(*ctx_->prep, std::move(job));
  }
  preparing_serial_ = serial;
  early_outputs_.clear();
  BeginInFlight();
  StartWatch();
}

Prepared Session::Prepare(const PostTarget& target, ApiKind kind, uint64_t serial,
                          const std::string& body, bool anthropic) {
  ServerContext& ctx = *target.ctx;
  Prepared out;
  out.kind = kind;
  out.anthropic = anthropic;
  absl::StatusOr<std::string> chat_body =
      anthropic ? AnthropicToChatRequest(body) : absl::StatusOr<std::string>(std::string());
  if (!chat_body.ok()) {
    out.status = chat_body.status();
    return out;
  }
  absl::StatusOr<ParsedGeneration> parsed =
      ParseGeneration(kind, anthropic ? *chat_body : body, *ctx.engine, ctx.chat_parsers);
  if (!parsed.ok()) {
    out.status = parsed.status();
    return out;
  }
  out.meta = ResponseMeta{ctx.NewId(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-"),
                          static_cast<int64_t>(WallSeconds()), ctx.engine->ModelName()};
  out.options = std::move(parsed->options);
  out.logprobs = parsed->logprobs;
  out.echo_texts = std::move(parsed->echo_texts);
  out.echo_logprobs = parsed->echo_logprobs;
  out.chat_output = std::move(parsed->chat_output);
  std::vector<GenerateRequest> requests =
      FanOut(parsed->prompts, out.options, out.meta.id, WallSeconds());
  if (out.options.use_beam_search) {  // one search per prompt, over the engine (beam_search.h)
    for (const GenerateRequest& r : requests) out.request_ids.push_back(r.request_id);
    absl::StatusOr<std::vector<std::shared_ptr<BeamSearch>>> started = StartBeamSearches(
        *ctx.engine, std::move(requests), out.options.n, out.options.length_penalty,
        [&](int32_t i) { return MakeCallback(target, serial, i); });
    if (!started.ok()) {
      out.request_ids.clear();
      out.status = started.status();
      return out;
    }
    out.beam_searches = *std::move(started);
    return out;
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    std::string id = requests[i].request_id;
    LogRequest(ctx.options.http, requests[i]);  // --enable-log-requests
    absl::Status status = ctx.engine->Generate(
        std::move(requests[i]), MakeCallback(target, serial, static_cast<int32_t>(i)));
    if (!status.ok()) {
      for (const std::string& started : out.request_ids) ctx.engine->Abort(started);
      out.request_ids.clear();
      out.status = status;
      return out;
    }
    out.request_ids.push_back(std::move(id));
  }
  return out;
}

void Session::OnPrepared(uint64_t serial, Prepared prepared) {
  if (serial != preparing_serial_ || closed_ || shutting_down_) {
    // The connection went away (or the server stops) while the request was prepared.
    for (const std::string& id : prepared.request_ids) ctx_->engine->Abort(id);
    for (const auto& search : prepared.beam_searches) search->Abort();
    if (serial == preparing_serial_) {
      preparing_serial_ = 0;
      EndInFlight();
      if (!closed_) SendError(absl::UnavailableError("The server is shutting down"));
    }
    return;
  }
  preparing_serial_ = 0;
  if (!prepared.status.ok()) {
    early_outputs_.clear();  // outputs of engine requests Prepare aborted again
    EndInFlight();
    return SendGenerationError(prepared.status, prepared.anthropic);
  }
  Generation& gen = gen_.emplace();
  gen.serial = serial;
  gen.stream = prepared.options.stream;
  gen.arrival = request_arrival_;
  gen.assembler = std::make_unique<ResponseAssembler>(
      prepared.kind, std::move(prepared.meta), static_cast<int32_t>(prepared.request_ids.size()),
      prepared.options.n, prepared.options.stream, prepared.options.include_usage,
      prepared.logprobs);
  gen.assembler->SetEcho(std::move(prepared.echo_texts));
  gen.assembler->SetTokensAsTokenIds(prepared.options.return_tokens_as_token_ids);
  gen.assembler->SetOptions(prepared.options);
  gen.assembler->SetStreamInterval(
      std::max(prepared.options.stream_interval, ctx_->options.stream_interval));
  gen.assembler->SetChatOutput(std::move(prepared.chat_output));
  if (prepared.echo_logprobs) {
    gen.assembler->SetEchoLogprobs(prepared.options.params.logprobs.value_or(0));
  }
  for (std::string& id : prepared.request_ids) gen.subs.emplace_back().id = std::move(id);
  gen.beam_searches = std::move(prepared.beam_searches);
  if (prepared.anthropic) gen.anthropic = std::make_unique<AnthropicStream>();
  gen.n = prepared.options.n;
  gen.max_tokens = prepared.options.params.max_tokens;
  if (gen.stream) {
    std::string cors;
    for (const auto& [name, value] : cors_headers_)
      absl::StrAppend(&cors, name, ": ", value, "\r\n");
    LogAccess(200);
    QueueBytes(
        absl::StrCat("HTTP/1.1 200 OK\r\nServer: ", ctx_->options.server_name,
                     "\r\nContent-Type: text/event-stream; "
                     "charset=utf-8\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n",
                     cors, request_id_.empty() ? "" : "X-Request-Id: ",
                     request_id_.empty() ? "" : request_id_ + "\r\n",
                     keep_alive_ ? "" : "Connection: close\r\n", "\r\n"));
    if (ctx_->options.http.sse_keep_alive_interval_s > 0 && !prepared.anthropic) {
      gen.keep_alive_timer = std::make_unique<net::steady_timer>(stream_.get_executor());
      ArmSseKeepAlive();
    }
    std::string start = gen.assembler->Start();
    QueueChunk(gen.anthropic != nullptr ? gen.anthropic->Convert(start) : start);
  }
  std::vector<EarlyOutput> early = std::move(early_outputs_);
  early_outputs_.clear();
  for (EarlyOutput& e : early) OnEngineOutput(serial, e.index, std::move(e.output));
  StartWatch();
}

void Session::OnEngineOutput(uint64_t serial, int32_t index, absl::StatusOr<GenerateOutput> out) {
  if (closed_) return;
  if (serial == preparing_serial_) {
    early_outputs_.push_back(EarlyOutput{index, std::move(out)});
    return;
  }
  if (!gen_.has_value() || gen_->serial != serial || index < 0 ||
      static_cast<size_t>(index) >= gen_->subs.size() || gen_->subs[index].finished) {
    return;
  }
  if (!out.ok()) return FailGeneration(out.status());
  RecordMetrics(gen_->subs[index], *out);
  if (out->finished()) gen_->subs[index].finished = true;
  std::string events = gen_->assembler->OnOutput(index, *out);
  if (gen_->anthropic != nullptr && gen_->stream) events = gen_->anthropic->Convert(events);
  if (gen_->stream) QueueChunk(events);
  if (gen_->assembler->AllFinished()) CompleteGeneration();
}

void Session::RecordMetrics(SubRequest& sub, const GenerateOutput& out) {
  sub.engine_index = out.engine_index;
  const EngineMetrics& m = ctx_->metrics.engine(sub.engine_index);
  Clock::time_point now = Clock::now();
  int32_t new_tokens = out.num_output_tokens - sub.num_output_tokens;
  if (new_tokens > 0) {
    if (!sub.got_first_token) {
      sub.got_first_token = true;
      m.time_to_first_token->Observe(Seconds(now - gen_->arrival));
      m.prompt_tokens->Add(out.num_prompt_tokens);
      const int32_t cached = std::clamp(out.num_cached_tokens, 0, out.num_prompt_tokens);
      m.prompt_tokens_cached->Add(cached);
      m.prompt_tokens_by_source[0]->Add(out.num_prompt_tokens - cached);  // local_compute
      m.prompt_tokens_by_source[1]->Add(cached);                          // local_cache_hit
    } else {
      m.inter_token_latency->Observe(Seconds(now - sub.last_token_time));
    }
    sub.last_token_time = now;
    sub.num_output_tokens = out.num_output_tokens;
    m.generation_tokens->Add(new_tokens);
  }
  if (out.finished()) {
    if (!sub.got_first_token) m.prompt_tokens->Add(out.num_prompt_tokens);
    m.e2e_request_latency->Observe(Seconds(now - gen_->arrival));
    m.RequestSuccess(*out.finish_reason)->Add(1);
    RecordFinished(m, out);
  }
}

void Session::CompleteGeneration() {
  std::string tail = gen_->assembler->Finish();
  if (gen_->anthropic != nullptr) {
    tail = gen_->stream ? gen_->anthropic->Convert(tail) : AnthropicMessageFromChat(tail);
  }
  // vLLM's parent requests: per prompt, the most generated tokens of its n choices, and n.
  const size_t n = static_cast<size_t>(std::max(gen_->n, 1));
  for (size_t first = 0; first < gen_->subs.size(); first += n) {
    int32_t most = 0;
    for (size_t i = first; i < std::min(first + n, gen_->subs.size()); ++i) {
      most = std::max(most, gen_->subs[i].num_output_tokens);
    }
    const EngineMetrics& m = ctx_->metrics.engine(gen_->subs[first].engine_index);
    m.request_max_num_generation_tokens->Observe(most);
    m.request_params_n->Observe(static_cast<double>(n));
  }
  bool stream = gen_->stream;
  gen_.reset();
  EndInFlight();
  if (stream) {
    QueueChunk(tail);
    QueueLastChunk();
  } else {
    SendJson(http::status::ok, std::move(tail));
  }
}

void Session::FailGeneration(const absl::Status& status) {
  AbortUnfinished(core::FinishReason::kError);
  bool stream = gen_->stream;
  std::unique_ptr<AnthropicStream> anthropic = std::move(gen_->anthropic);
  gen_.reset();
  EndInFlight();
  if (stream) {
    std::string error = ResponseAssembler::StreamError(status);
    QueueChunk(anthropic != nullptr ? anthropic->Convert(error) : error);
    QueueLastChunk();
  } else {
    SendGenerationError(status, anthropic != nullptr);
  }
}

void Session::AbortUnfinished(std::optional<core::FinishReason> reason) {
  if (!gen_.has_value()) return;
  for (const auto& search : gen_->beam_searches) search->Abort();
  for (SubRequest& sub : gen_->subs) {
    if (!sub.finished) {
      ctx_->engine->Abort(sub.id);
      if (reason.has_value()) {
        ctx_->metrics.engine(sub.engine_index).RequestSuccess(*reason)->Add(1);
      }
    }
    sub.finished = true;
  }
}

void Session::BeginInFlight() {
  if (in_flight_) return;
  in_flight_ = true;
  request_arrival_ = Clock::now();
  ctx_->AddInFlight(1);
}

void Session::EndInFlight() {
  if (!in_flight_) return;
  in_flight_ = false;
  ctx_->AddInFlight(-1);
}

}  // namespace vllm::frontend::api_server_internal
