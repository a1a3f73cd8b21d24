#include "worker/weights.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/hash.h"
#include "base/status_macros.h"
#include "worker/safetensors.h"

namespace vllm::worker {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

using json = nlohmann::json;

std::string ShapeString(std::span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Where a shard's elements sit in the row-major full tensor: `outer` runs of `run` contiguous
// elements, run i starting at element first + i * stride.
struct SliceLayout {
  int64_t outer = 1;
  int64_t run = 0;
  int64_t stride = 0;
  int64_t first = 0;
};

absl::StatusOr<SliceLayout> PlanSlice(absl::string_view name, std::span<const int64_t> shape,
                                      const Shard& shard) {
  int64_t total = 1;
  for (int64_t d : shape) total *= d;
  if (shard.dim == -1) return SliceLayout{1, total, total, 0};
  const int64_t rank_count = static_cast<int64_t>(shape.size());
  if (shard.dim < 0 || shard.dim >= rank_count || shard.world_size < 1 || shard.rank < 0 ||
      shard.rank >= shard.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' of shape ", ShapeString(shape), ": invalid shard (dim ",
                     shard.dim, ", rank ", shard.rank, ", world_size ", shard.world_size, ")"));
  }
  const int64_t dim_size = shape[shard.dim];
  const int64_t range_size = shard.range_size < 0 ? dim_size : shard.range_size;
  if (shard.range_size >= 0 &&
      (shard.range_begin < 0 || shard.range_begin > dim_size - range_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' of shape ", ShapeString(shape), ": rows [", shard.range_begin, ", ",
        shard.range_begin + range_size, ") of dim ", shard.dim, " are outside it"));
  }
  if (range_size % shard.world_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' of shape ", ShapeString(shape), ": dim ", shard.dim, " (",
                     range_size, shard.range_size >= 0 ? " in the range taken" : "",
                     ") does not divide by tensor-parallel world_size ", shard.world_size));
  }
  int64_t outer = 1;
  for (int32_t i = 0; i < shard.dim; ++i) outer *= shape[i];
  int64_t inner = 1;
  for (int64_t i = shard.dim + 1; i < rank_count; ++i) inner *= shape[i];
  const int64_t begin = shard.range_size >= 0 ? shard.range_begin : 0;
  const int64_t part = range_size / shard.world_size;
  return SliceLayout{outer, part * inner, dim_size * inner, (begin + shard.rank * part) * inner};
}

absl::Status CheckShape(absl::string_view name, std::span<const int64_t> actual,
                        std::span<const int64_t> expected, absl::string_view where) {
  if (std::equal(actual.begin(), actual.end(), expected.begin(), expected.end())) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "'", where, " has shape ",
                                                 ShapeString(actual), ", expected ",
                                                 ShapeString(expected)));
}

// IEEE binary16 → binary32, exact for every input (binary32 holds every binary16 value).
float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa × 2^-24, exactly representable in binary32.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) {
    // Infinity (mantissa 0) or NaN; the payload moves to the top of the wider mantissa.
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  }
  return std::bit_cast<float>(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

// bfloat16 is the top half of a binary32, so widening is a shift.
float BFloat16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// Converts `count` elements starting at element `first` of `data` to float32 into `out`.
// memcpy per element because safetensors does not align tensor data.
// Integers (I32, I64) must be exact in float32 (|v| <= 2^24): false when one is not.
bool ConvertRun(SafetensorsDtype dtype, const std::byte* data, int64_t first, int64_t count,
                float* out) {
  if (dtype == SafetensorsDtype::kF32) {
    std::memcpy(out, data + first * 4, static_cast<size_t>(count) * 4);
    return true;
  }
  if (dtype == SafetensorsDtype::kI32 || dtype == SafetensorsDtype::kI64) {
    constexpr int64_t kExact = int64_t{1} << 24;
    const int64_t size = dtype == SafetensorsDtype::kI32 ? 4 : 8;
    for (int64_t i = 0; i < count; ++i) {
      int64_t v = 0;
      if (size == 4) {
        int32_t v32;
        std::memcpy(&v32, data + (first + i) * 4, 4);
        v = v32;
      } else {
        std::memcpy(&v, data + (first + i) * 8, 8);
      }
      if (v > kExact || v < -kExact) return false;
      out[i] = static_cast<float>(v);
    }
    return true;
  }
  const std::byte* src = data + first * 2;
  for (int64_t i = 0; i < count; ++i) {
    uint16_t bits;
    std::memcpy(&bits, src + i * 2, 2);
    out[i] = dtype == SafetensorsDtype::kF16 ? HalfToFloat(bits) : BFloat16ToFloat(bits);
  }
  return true;
}

class SafetensorsSource final : public WeightSource {
 public:
  // `index` maps each tensor to the file that holds it (already checked to).
  SafetensorsSource(std::vector<std::unique_ptr<SafetensorsFile>> files,
                    std::map<std::string, const SafetensorsFile*, std::less<>> index)
      : files_(std::move(files)), index_(std::move(index)) {}

  absl::StatusOr<std::vector<float>> Load(std::string_view name,
                                          std::span<const int64_t> full_shape,
                                          const Shard& shard) override {
    // absl::StrCat takes Abseil's own string_view (Debian's build), not std::string_view.
    const absl::string_view tensor(name.data(), name.size());
    auto it = index_.find(name);
    if (it == index_.end()) {
      return absl::NotFoundError(absl::StrCat("tensor '", tensor, "' is not in the checkpoint"));
    }
    const SafetensorsFile& file = *it->second;
    const SafetensorsTensorInfo& info = *file.Find(name);
    const std::string where = absl::StrCat(" in ", file.path().filename().string());
    VLLM_RETURN_IF_ERROR(CheckShape(tensor, info.shape, full_shape, where));
    if (info.dtype != SafetensorsDtype::kF32 && info.dtype != SafetensorsDtype::kF16 &&
        info.dtype != SafetensorsDtype::kBF16 && info.dtype != SafetensorsDtype::kI32 &&
        info.dtype != SafetensorsDtype::kI64) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", tensor, "'", where, " has dtype ",
                       std::string(SafetensorsDtypeName(info.dtype)),
                       "; only F32, F16, BF16, I32 and I64 can be loaded"));
    }
    VLLM_ASSIGN_OR_RETURN(SliceLayout slice, PlanSlice(tensor, info.shape, shard));
    std::vector<float> out(static_cast<size_t>(slice.outer * slice.run));
    const std::byte* data = file.Data(info).data();
    for (int64_t o = 0; o < slice.outer; ++o) {
      if (!ConvertRun(info.dtype, data, slice.first + o * slice.stride, slice.run,
                      out.data() + o * slice.run)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", tensor, "'", where, " holds an integer beyond float32's exact range"));
      }
    }
    return out;
  }

  bool Has(std::string_view name) const override { return index_.contains(name); }

  std::vector<std::string> Names() const override {
    std::vector<std::string> names;
    names.reserve(index_.size());
    for (const auto& [name, file] : index_) names.push_back(name);
    return names;
  }

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*, std::less<>> index_;
};

absl::StatusOr<std::unique_ptr<WeightSource>> OpenSingleFile(const std::filesystem::path& path) {
  VLLM_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(path));
  std::map<std::string, const SafetensorsFile*, std::less<>> index;
  for (std::string& name : file->Names()) index.emplace(std::move(name), file.get());
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  files.push_back(std::move(file));
  return std::make_unique<SafetensorsSource>(std::move(files), std::move(index));
}

absl::StatusOr<std::string> ReadTextFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InternalError(absl::StrCat("cannot read ", path.string()));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Reads the index's weight_map: tensor name → shard file name.
absl::StatusOr<std::map<std::string, std::string>> ReadWeightMap(
    const std::filesystem::path& index_path) {
  const std::string index_name = index_path.string();
  VLLM_ASSIGN_OR_RETURN(std::string text, ReadTextFile(index_path));
  const json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index_name, ": not a JSON object"));
  }
  auto weight_map = index.find("weight_map");
  if (weight_map == index.end() || !weight_map->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index_name, ": weight_map is not an object"));
  }
  std::map<std::string, std::string> out;
  for (const auto& [tensor, file] : weight_map->items()) {
    if (!file.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_name, ": weight_map['", tensor, "'] is not a file name"));
    }
    const std::filesystem::path rel(file.get<std::string>());
    // Shards sit beside the index; a path leaving the model directory is not a shard.
    if (rel.empty() || rel.is_absolute() ||
        std::find(rel.begin(), rel.end(), std::filesystem::path("..")) != rel.end()) {
      return absl::InvalidArgumentError(absl::StrCat(index_name, ": weight_map['", tensor, "'] = '",
                                                     rel.string(), "' is not a shard name"));
    }
    out.emplace(tensor, rel.string());
  }
  return out;
}

absl::StatusOr<std::unique_ptr<WeightSource>> OpenSharded(const std::filesystem::path& model_dir,
                                                          const std::filesystem::path& index_path) {
  // nlohmann only throws on allocation failure here; keep even that inside the boundary.
  absl::StatusOr<std::map<std::string, std::string>> weight_map;
  try {
    weight_map = ReadWeightMap(index_path);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": ", e.what()));
  }
  if (!weight_map.ok()) return weight_map.status();

  std::map<std::string, SafetensorsFile*> by_file;
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, const SafetensorsFile*, std::less<>> index;
  for (const auto& [tensor, file_name] : *weight_map) {
    SafetensorsFile*& file = by_file[file_name];
    if (file == nullptr) {
      absl::StatusOr<std::unique_ptr<SafetensorsFile>> opened =
          SafetensorsFile::Open(model_dir / file_name);
      if (absl::IsNotFound(opened.status())) {
        return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": tensor '", tensor,
                                                       "' is in '", file_name,
                                                       "', which does not exist"));
      }
      if (!opened.ok()) return opened.status();
      file = opened->get();
      files.push_back(*std::move(opened));
    }
    if (file->Find(tensor) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path.string(), ": tensor '", tensor, "' is not in '", file_name, "'"));
    }
    index.emplace(tensor, file);
  }
  return std::make_unique<SafetensorsSource>(std::move(files), std::move(index));
}

// FNV-1a: stable across platforms and runs, unlike std::hash.
uint64_t HashName(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// Element i of a dummy tensor is a pure function of (key, i), so a shard computes only its
// own elements and still equals the matching slice of the full tensor.
class DummySource final : public WeightSource {
 public:
  DummySource(uint64_t seed, float scale) : seed_(seed), scale_(scale) {}

  absl::StatusOr<std::vector<float>> Load(std::string_view name,
                                          std::span<const int64_t> full_shape,
                                          const Shard& shard) override {
    const absl::string_view tensor(name.data(), name.size());  // for absl::StrCat
    for (int64_t d : full_shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor, "': requested shape ",
                                                       ShapeString(full_shape), " is negative"));
      }
    }
    VLLM_ASSIGN_OR_RETURN(SliceLayout slice, PlanSlice(tensor, full_shape, shard));
    std::vector<float> out(static_cast<size_t>(slice.outer * slice.run));
    if (name.ends_with("norm.weight")) {
      std::fill(out.begin(), out.end(), 1.0f);
      return out;
    }
    const uint64_t key = base::Mix64(seed_ ^ base::Mix64(HashName(name)));
    float* dst = out.data();
    for (int64_t o = 0; o < slice.outer; ++o) {
      const int64_t first = slice.first + o * slice.stride;
      for (int64_t i = 0; i < slice.run; ++i) *dst++ = Value(key, first + i);
    }
    return out;
  }

  bool Has(std::string_view) const override { return true; }
  std::vector<std::string> Names() const override { return {}; }

 private:
  float Value(uint64_t key, int64_t index) const {
    const uint64_t bits = base::Mix64(key + static_cast<uint64_t>(index) * 0x9e3779b97f4a7c15ull);
    // Top 24 bits → a uniform float in [0, 1) with every value exact.
    const float unit = static_cast<float>(bits >> 40) * 0x1p-24f;
    const float v = scale_ * (2.0f * unit - 1.0f);
    // Rounding in the multiply can land exactly on +scale; the range is half-open.
    return v < scale_ ? v : std::nextafter(scale_, 0.0f);
  }

  uint64_t seed_;
  float scale_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<WeightSource>> OpenSafetensors(
    const std::filesystem::path& model_dir) {
  std::error_code ec;
  const std::filesystem::path single = model_dir / "model.safetensors";
  if (std::filesystem::exists(single, ec)) return OpenSingleFile(single);
  const std::filesystem::path index = model_dir / "model.safetensors.index.json";
  if (std::filesystem::exists(index, ec)) return OpenSharded(model_dir, index);
  return absl::NotFoundError(absl::StrCat(model_dir.string(),
                                          ": neither model.safetensors nor "
                                          "model.safetensors.index.json exists"));
}

std::unique_ptr<WeightSource> MakeDummyWeights(uint64_t seed, float scale) {
  return std::make_unique<DummySource>(seed, scale);
}

}  // namespace vllm::worker
