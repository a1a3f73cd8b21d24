#include "worker/intermediate_tensors.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace vllm::worker {
namespace {

constexpr char kMagic[4] = {'V', 'P', 'P', '1'};
constexpr char kTensors = 'T';
constexpr char kError = 'E';

template <typename T>
void Put(std::string& out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof(v));
}

template <typename T>
T Get(absl::Span<const uint8_t> bytes, size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof(v));
  return v;
}

absl::Status Bad(const std::string& what) {
  return absl::DataLossError(absl::StrCat("pipeline stage frame: ", what));
}

}  // namespace

size_t StageFrameBytes(const IntermediateTensors& t) {
  return kStageFrameHeaderBytes + (t.residual.size() + t.hidden.size()) * sizeof(float);
}

std::string EncodeStageTensorsHeader(uint64_t step_id, const IntermediateTensors& t) {
  std::string out(kStageFrameHeaderBytes, '\0');
  std::memcpy(out.data(), kMagic, 4);
  out[4] = kTensors;
  Put<uint64_t>(out, 8, step_id);
  Put<int32_t>(out, 16, t.next_layer);
  Put<int32_t>(out, 20, t.hidden_size);
  Put<int64_t>(out, 24, t.num_tokens);
  out[32] = t.hidden.empty() ? 0 : 1;
  return out;
}

std::string EncodeStageError(uint64_t step_id, const absl::Status& status) {
  const absl::string_view message = status.message().substr(0, kMaxStageErrorBytes);
  std::string out(20, '\0');
  std::memcpy(out.data(), kMagic, 4);
  out[4] = kError;
  Put<uint64_t>(out, 8, step_id);
  Put<int32_t>(out, 16,
               static_cast<int32_t>(status.ok() ? absl::StatusCode::kInternal : status.code()));
  out.append(message.data(), message.size());
  return out;
}

absl::StatusOr<uint64_t> DecodeStageFrame(absl::Span<const uint8_t> bytes,
                                          const StageFrameLimits& limits, IntermediateTensors* out,
                                          absl::Status* stage_error) {
  *stage_error = absl::OkStatus();
  if (bytes.size() < 20) return Bad(absl::StrCat(bytes.size(), " bytes, shorter than a header"));
  if (std::memcmp(bytes.data(), kMagic, 4) != 0) return Bad("bad magic");
  const auto step_id = Get<uint64_t>(bytes, 8);
  if (bytes[4] == kError) {
    if (bytes.size() > 20 + kMaxStageErrorBytes) return Bad("error message too long");
    const auto code = Get<int32_t>(bytes, 16);
    if (code <= 0 || code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated)) {
      return Bad(absl::StrCat("error frame with status code ", code));
    }
    *stage_error = absl::Status(
        static_cast<absl::StatusCode>(code),
        absl::string_view(reinterpret_cast<const char*>(bytes.data()) + 20, bytes.size() - 20));
    return step_id;
  }
  if (bytes[4] != kTensors) return Bad(absl::StrCat("unknown kind ", static_cast<int>(bytes[4])));
  if (bytes.size() < kStageFrameHeaderBytes) return Bad("truncated header");
  const auto next_layer = Get<int32_t>(bytes, 16);
  const auto hidden_size = Get<int32_t>(bytes, 20);
  const auto num_tokens = Get<int64_t>(bytes, 24);
  const uint8_t has_hidden = bytes[32];
  if (hidden_size != limits.hidden_size) {
    return Bad(
        absl::StrFormat("hidden size %d, this stage's is %d", hidden_size, limits.hidden_size));
  }
  if (num_tokens < 1 || num_tokens > limits.max_num_tokens) {
    return Bad(absl::StrFormat("%d tokens, outside [1, %d]", num_tokens, limits.max_num_tokens));
  }
  if (next_layer < 0 || next_layer > limits.num_layers) {
    return Bad(absl::StrFormat("next layer %d outside [0, %d]", next_layer, limits.num_layers));
  }
  if (has_hidden > 1 || (has_hidden == 0) != (next_layer == 0)) {
    return Bad(absl::StrFormat("hidden states %s at layer %d", has_hidden ? "present" : "absent",
                               next_layer));
  }
  // Both factors are bounded above (the limits), so the product cannot overflow.
  const size_t floats = static_cast<size_t>(num_tokens) * static_cast<size_t>(hidden_size);
  const size_t expected = kStageFrameHeaderBytes + floats * sizeof(float) * (has_hidden ? 2 : 1);
  if (bytes.size() != expected) {
    return Bad(
        absl::StrFormat("%d bytes, %d expected for %d tokens", bytes.size(), expected, num_tokens));
  }
  out->next_layer = next_layer;
  out->hidden_size = hidden_size;
  out->num_tokens = num_tokens;
  const uint8_t* data = bytes.data() + kStageFrameHeaderBytes;
  out->residual.resize(floats);
  std::memcpy(out->residual.data(), data, floats * sizeof(float));
  out->hidden.resize(has_hidden ? floats : 0);
  if (has_hidden) {
    std::memcpy(out->hidden.data(), data + floats * sizeof(float), floats * sizeof(float));
  }
  return step_id;
}

}  // namespace vllm::worker
