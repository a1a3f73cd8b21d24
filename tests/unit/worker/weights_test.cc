// WeightSource: safetensors checkpoints (one file or an index of shards) converted to float32
// and sliced for tensor parallelism, and the deterministic dummy source.
#include "worker/weights.h"

#include <stdlib.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/worker/safetensors_writer.h"

namespace vllm::worker {
namespace {

using ::testing::HasSubstr;

using testing::BuildFile;
using testing::RawTensor;

template <typename T>
std::string RawBytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::vector<float> Iota(int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return v;
}

// Reference: rows or columns [rank * part, (rank + 1) * part) of a row-major [rows, cols].
std::vector<float> Slice2D(const std::vector<float>& full, int64_t rows, int64_t cols, int dim,
                           int rank, int world) {
  std::vector<float> out;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t along = dim == 0 ? r : c;
      const int64_t part = (dim == 0 ? rows : cols) / world;
      if (along / part == rank) out.push_back(full[r * cols + c]);
    }
  }
  return out;
}

class WeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/weights_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Write(const std::string& name, const std::string& contents) {
    std::ofstream(dir_ / name, std::ios::binary | std::ios::trunc) << contents;
  }
  std::unique_ptr<WeightSource> OpenOrDie() {
    auto source = OpenSafetensors(dir_);
    EXPECT_TRUE(source.ok()) << source.status();
    return source.ok() ? *std::move(source) : nullptr;
  }
  std::string Message(const absl::Status& s) { return std::string(s.message()); }

  std::filesystem::path dir_;
};

TEST_F(WeightsTest, F32IsBitExactEvenWhenUnaligned) {
  const std::vector<float> values = {0.0f,
                                     -0.0f,
                                     1.5f,
                                     3.14159265f,
                                     std::numeric_limits<float>::denorm_min(),
                                     -1.1754942e-38f,
                                     std::numeric_limits<float>::max(),
                                     std::numeric_limits<float>::infinity(),
                                     -std::numeric_limits<float>::infinity()};
  // A 1-byte tensor first puts the F32 data at an odd address.
  Write("model.safetensors",
        BuildFile({{"pad", "U8", {1}, "x"}, {"w", "F32", {9}, RawBytes(values)}}));
  auto source = OpenOrDie();
  ASSERT_NE(source, nullptr);
  const int64_t shape[] = {9};
  auto loaded = source->Load("w", shape);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>((*loaded)[i]), std::bit_cast<uint32_t>(values[i])) << i;
  }
}

TEST_F(WeightsTest, F16ConvertsEveryClassExactly) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::pair<uint16_t, float>> cases = {
      {0x0000, 0.0f},
      {0x3c00, 1.0f},
      {0xc000, -2.0f},
      {0x3555, 0.333251953125f},
      {0x7bff, 65504.0f},                    // largest finite
      {0x0400, 6.103515625e-05f},            // smallest normal, 2^-14
      {0x0001, 5.9604644775390625e-08f},     // smallest subnormal, 2^-24
      {0x03ff, 6.0975551605224609375e-05f},  // largest subnormal, 1023 * 2^-24
      {0x8001, -5.9604644775390625e-08f},    // negative subnormal
      {0x0200, 3.0517578125e-05f},           // 2^-15
      {0x7c00, inf},
      {0xfc00, -inf},
  };
  std::vector<uint16_t> bits;
  for (const auto& [b, v] : cases) bits.push_back(b);
  bits.push_back(0x8000);  // -0
  bits.push_back(0x7e00);  // quiet NaN
  bits.push_back(0xfc01);  // signalling-pattern NaN, negative
  Write("model.safetensors", BuildFile({{"pad", "U8", {3}, "abc"},
                                        {"h", "F16", {int64_t(bits.size())}, RawBytes(bits)}}));
  auto source = OpenOrDie();
  ASSERT_NE(source, nullptr);
  const int64_t shape[] = {int64_t(bits.size())};
  auto loaded = source->Load("h", shape);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ((*loaded)[i], cases[i].second) << "f16 bits " << std::hex << cases[i].first;
  }
  const size_t n = cases.size();
  EXPECT_EQ((*loaded)[n], 0.0f);
  EXPECT_TRUE(std::signbit((*loaded)[n]));
  EXPECT_TRUE(std::isnan((*loaded)[n + 1]));
  EXPECT_TRUE(std::isnan((*loaded)[n + 2]));
  EXPECT_TRUE(std::signbit((*loaded)[n + 2]));
}

TEST_F(WeightsTest, BF16IsTheTopHalfOfF32) {
  const std::vector<std::pair<uint16_t, float>> cases = {
      {0x3f80, 1.0f},
      {0xc040, -3.0f},
      {0x3eab, 0.333984375f},  // 1/3 rounded to bf16
      {0x4049, 3.140625f},     // pi rounded to bf16
      {0x7f7f, 3.3895313892515355e38f},
      {0x0001, std::bit_cast<float>(uint32_t{0x00010000})},  // a binary32 subnormal
      {0x7f80, std::numeric_limits<float>::infinity()},
      {0xff80, -std::numeric_limits<float>::infinity()},
  };
  std::vector<uint16_t> bits;
  for (const auto& [b, v] : cases) bits.push_back(b);
  bits.push_back(0x7fc0);  // NaN
  Write("model.safetensors", BuildFile({{"b", "BF16", {int64_t(bits.size())}, RawBytes(bits)}}));
  auto source = OpenOrDie();
  ASSERT_NE(source, nullptr);
  const int64_t shape[] = {int64_t(bits.size())};
  auto loaded = source->Load("b", shape);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ((*loaded)[i], cases[i].second) << "bf16 bits " << std::hex << cases[i].first;
  }
  EXPECT_TRUE(std::isnan(loaded->back()));
}

TEST_F(WeightsTest, ShapeMismatchNamesTensorAndBothShapes) {
  Write("model.safetensors",
        BuildFile({{"model.layers.0.mlp.up_proj.weight", "F32", {2, 3}, RawBytes(Iota(6))}}));
  auto source = OpenOrDie();
  ASSERT_NE(source, nullptr);
  const int64_t transposed[] = {3, 2};
  auto s = source->Load("model.layers.0.mlp.up_proj.weight", transposed).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("'model.layers.0.mlp.up_proj.weight'"));
  EXPECT_THAT(Message(s), HasSubstr("shape [2, 3], expected [3, 2]"));
  const int64_t flat[] = {6};
  EXPECT_EQ(source->Load("model.layers.0.mlp.up_proj.weight", flat).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(WeightsTest, MissingTensorIsNotFound) {
  Write("model.safetensors", BuildFile({{"b.weight", "F32", {1}, RawBytes(Iota(1))},
                                        {"a.weight", "F32", {1}, RawBytes(Iota(1))}}));
  auto source = OpenOrDie();
  ASSERT_NE(source, nullptr);
  const int64_t shape[] = {1};
  auto s = source->Load("model.layers.0.self_attn.q_proj.weight", shape).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(s), HasSubstr("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(source->Has("a.weight"));
  EXPECT_FALSE(source->Has("c.weight"));
  EXPECT_EQ(source->Names(), (std::vector<std::string>{"a.weight", "b.weight"}));
}

TEST_F(WeightsTest, IntegersLoadWhenExactOtherDtypesAreRefused) {
  const std::vector<int64_t> ids = {0, -7, 1 << 24, 4095};
  const std::vector<int32_t> small = {3, -(1 << 24)};
  const std::vector<int64_t> too_big = {1, (int64_t{1} << 24) + 1};
  Write("model.safetensors", BuildFile({{"ids", "I64", {4}, RawBytes(ids)},
                                        {"small", "I32", {2}, RawBytes(small)},
                                        {"too_big", "I64", {2}, RawBytes(too_big)},
                                        {"dbl", "F64", {2}, std::string(16, '\0')},
                                        {"bytes", "U8", {2}, "ab"}}));
  auto source = OpenOrDie();
  ASSERT_NE(source, nullptr);
  const int64_t four[] = {4};
  const int64_t two[] = {2};
  auto loaded = source->Load("ids", four);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, (std::vector<float>{0.0f, -7.0f, 16777216.0f, 4095.0f}));
  auto loaded32 = source->Load("small", two);
  ASSERT_TRUE(loaded32.ok()) << loaded32.status();
  EXPECT_EQ(*loaded32, (std::vector<float>{3.0f, -16777216.0f}));
  auto big = source->Load("too_big", two).status();
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(big), HasSubstr("'too_big'"));
  EXPECT_THAT(Message(big), HasSubstr("exact range"));
  for (const char* name : {"dbl", "bytes"}) {
    auto s = source->Load(name, two).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(s), HasSubstr(std::string("'") + name + "'"));
    EXPECT_THAT(Message(s), HasSubstr(name == std::string("dbl") ? "F64" : "U8"));
  }
}

TEST_F(WeightsTest, NoCheckpointIsNotFound) {
  auto source = OpenSafetensors(dir_);
  EXPECT_EQ(source.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(source.status()), HasSubstr("model.safetensors"));
}

TEST_F(WeightsTest, CorruptSingleFileNamesIt) {
  Write("model.safetensors", std::string("\x10\0\0\0\0\0\0\0{\"a\":", 13));
  auto source = OpenSafetensors(dir_);
  EXPECT_EQ(source.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(source.status()), HasSubstr("model.safetensors"));
}

class ShardedTest : public WeightsTest {
 protected:
  void WriteShards() {
    Write(
        "model-00001-of-00002.safetensors",
        BuildFile(
            {{"model.embed_tokens.weight", "F32", {2, 2}, RawBytes(Iota(4))},
             {"model.norm.weight", "BF16", {2}, RawBytes(std::vector<uint16_t>{0x3f80, 0x4000})}}));
    Write("model-00002-of-00002.safetensors",
          BuildFile({{"lm_head.weight",
                      "F16",
                      {2, 2},
                      RawBytes(std::vector<uint16_t>{0x3c00, 0x4000, 0x4200, 0x4400})},
                     {"unlisted", "F32", {1}, RawBytes(Iota(1))}}));
  }
  void WriteIndex(const nlohmann::json& weight_map) {
    Write("model.safetensors.index.json",
          nlohmann::json{{"metadata", {{"total_size", 28}}}, {"weight_map", weight_map}}.dump());
  }
  const nlohmann::json kWeightMap = {
      {"model.embed_tokens.weight", "model-00001-of-00002.safetensors"},
      {"model.norm.weight", "model-00001-of-00002.safetensors"},
      {"lm_head.weight", "model-00002-of-00002.safetensors"}};
};

TEST_F(ShardedTest, LoadsFromEveryShard) {
  WriteShards();
  WriteIndex(kWeightMap);
  auto source = OpenOrDie();
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(source->Names(),
            (std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight",
                                      "model.norm.weight"}));
  const int64_t square[] = {2, 2};
  const int64_t vec[] = {2};
  auto embed = source->Load("model.embed_tokens.weight", square);
  ASSERT_TRUE(embed.ok()) << embed.status();
  EXPECT_EQ(*embed, Iota(4));
  auto norm = source->Load("model.norm.weight", vec);
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_EQ(*norm, (std::vector<float>{1.0f, 2.0f}));
  auto head = source->Load("lm_head.weight", square, Shard{0, 1, 2});
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(*head, (std::vector<float>{3.0f, 4.0f}));  // row 1 of [[1, 2], [3, 4]]
  EXPECT_FALSE(source->Has("unlisted"));  // the index decides what the checkpoint holds
}

TEST_F(ShardedTest, IndexPointingAtMissingFile) {
  WriteShards();
  nlohmann::json map = kWeightMap;
  map["lm_head.weight"] = "model-00003-of-00002.safetensors";
  WriteIndex(map);
  auto source = OpenSafetensors(dir_);
  EXPECT_EQ(source.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(source.status()), HasSubstr("model-00003-of-00002.safetensors"));
  EXPECT_THAT(Message(source.status()), HasSubstr("lm_head.weight"));
}

TEST_F(ShardedTest, IndexPointingAtFileWithoutTheTensor) {
  WriteShards();
  nlohmann::json map = kWeightMap;
  map["model.layers.0.mlp.down_proj.weight"] = "model-00002-of-00002.safetensors";
  WriteIndex(map);
  auto source = OpenSafetensors(dir_);
  EXPECT_EQ(source.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(source.status()), HasSubstr("model.layers.0.mlp.down_proj.weight"));
  EXPECT_THAT(Message(source.status()), HasSubstr("model-00002-of-00002.safetensors"));
}

TEST_F(ShardedTest, BadIndexOrShard) {
  WriteShards();
  Write("model.safetensors.index.json", "{\"weight_map\": [");
  EXPECT_EQ(OpenSafetensors(dir_).status().code(), absl::StatusCode::kInvalidArgument);
  WriteIndex({{"a", 5}});
  EXPECT_THAT(Message(OpenSafetensors(dir_).status()), HasSubstr("weight_map['a']"));
  WriteIndex({{"a", "../outside.safetensors"}});
  EXPECT_THAT(Message(OpenSafetensors(dir_).status()), HasSubstr("not a shard name"));
  Write("model.safetensors.index.json", "{\"metadata\": {}}");
  EXPECT_THAT(Message(OpenSafetensors(dir_).status()), HasSubstr("weight_map"));
  // A corrupt shard is named in the error.
  WriteIndex(kWeightMap);
  Write("model-00002-of-00002.safetensors", "garbage!garbage!");
  auto source = OpenSafetensors(dir_);
  EXPECT_EQ(source.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(source.status()), HasSubstr("model-00002-of-00002.safetensors"));
}

TEST_F(WeightsTest, TensorParallelSlicesMatchTheFullTensor) {
  const std::vector<float> full = Iota(24);
  // The same values in F16, encoded by hand: i = 2^e * (1 + m / 1024) for 1 <= i < 2048.
  std::vector<uint16_t> half(full.size(), 0);
  for (int i = 1; i < static_cast<int>(full.size()); ++i) {
    const int e = std::bit_width(static_cast<unsigned>(i)) - 1;
    half[i] = static_cast<uint16_t>(((e + 15) << 10) | ((i << (10 - e)) & 0x3ff));
  }
  Write("model.safetensors", BuildFile({{"w32", "F32", {4, 6}, RawBytes(full)},
                                        {"w16", "F16", {4, 6}, RawBytes(half)},
                                        {"bias", "F32", {8}, RawBytes(Iota(8))}}));
  auto source = OpenOrDie();
  ASSERT_NE(source, nullptr);
  const int64_t shape[] = {4, 6};
  for (const char* name : {"w32", "w16"}) {
    auto whole = source->Load(name, shape);
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_EQ(*whole, full) << name;
    for (auto [dim, world] : {std::pair{0, 2}, {0, 4}, {1, 2}, {1, 3}, {1, 6}}) {
      for (int rank = 0; rank < world; ++rank) {
        auto part = source->Load(name, shape, Shard{dim, rank, world});
        ASSERT_TRUE(part.ok()) << part.status();
        EXPECT_EQ(*part, Slice2D(full, 4, 6, dim, rank, world))
            << name << " dim " << dim << " rank " << rank << "/" << world;
      }
    }
  }
  // The reference itself, checked by hand: columns 2 and 3 of each row.
  auto cols = source->Load("w32", shape, Shard{1, 1, 3});
  ASSERT_TRUE(cols.ok());
  EXPECT_EQ(*cols, (std::vector<float>{2, 3, 8, 9, 14, 15, 20, 21}));
  // A column-parallel bias shards along its only dimension.
  const int64_t bias_shape[] = {8};
  auto bias = source->Load("bias", bias_shape, Shard{0, 3, 4});
  ASSERT_TRUE(bias.ok()) << bias.status();
  EXPECT_EQ(*bias, (std::vector<float>{6, 7}));
}

// A range of a fused tensor (Phi-3's qkv_proj) split over the ranks: rows [2, 6) of an
// [8, 3] tensor in two parts are rows 2-3 and 4-5; the dummy source cuts identically.
TEST_F(WeightsTest, RangeShardsSplitOnlyTheirRows) {
  const std::vector<float> full = Iota(24);
  Write("model.safetensors", BuildFile({{"fused", "F32", {8, 3}, RawBytes(full)}}));
  auto source = OpenOrDie();
  ASSERT_NE(source, nullptr);
  const int64_t shape[] = {8, 3};
  auto first = source->Load("fused", shape, Shard{0, 0, 2, /*range_begin=*/2, /*range_size=*/4});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, (std::vector<float>{6, 7, 8, 9, 10, 11}));
  auto second = source->Load("fused", shape, Shard{0, 1, 2, 2, 4});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*second, (std::vector<float>{12, 13, 14, 15, 16, 17}));
  auto whole_range = source->Load("fused", shape, Shard{0, 0, 1, 7, 1});
  ASSERT_TRUE(whole_range.ok()) << whole_range.status();
  EXPECT_EQ(*whole_range, (std::vector<float>{21, 22, 23}));
  // Outside the dimension, or a range that does not divide.
  auto outside = source->Load("fused", shape, Shard{0, 0, 1, 6, 4}).status();
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(outside), HasSubstr("rows [6, 10) of dim 0 are outside it"));
  auto odd = source->Load("fused", shape, Shard{0, 0, 2, 0, 3}).status();
  EXPECT_THAT(Message(odd), HasSubstr("(3 in the range taken) does not divide"));

  auto dummy = MakeDummyWeights(7);
  auto dummy_full = dummy->Load("fused", shape);
  auto dummy_part = dummy->Load("fused", shape, Shard{0, 1, 2, 2, 4});
  ASSERT_TRUE(dummy_full.ok() && dummy_part.ok());
  EXPECT_EQ(*dummy_part, std::vector<float>(dummy_full->begin() + 12, dummy_full->begin() + 18));
}

TEST_F(WeightsTest, BadShardsAreRejected) {
  Write("model.safetensors", BuildFile({{"w", "F32", {4, 6}, RawBytes(Iota(24))}}));
  auto source = OpenOrDie();
  ASSERT_NE(source, nullptr);
  const int64_t shape[] = {4, 6};
  auto s = source->Load("w", shape, Shard{1, 0, 4}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("'w'"));
  EXPECT_THAT(Message(s), HasSubstr("dim 1 (6) does not divide by tensor-parallel world_size 4"));
  EXPECT_EQ(source->Load("w", shape, Shard{0, 2, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);  // rank out of range
  EXPECT_EQ(source->Load("w", shape, Shard{2, 0, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);  // no dim 2
  EXPECT_EQ(source->Load("w", shape, Shard{0, 0, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DummyWeightsTest, DeterministicAndInRange) {
  auto a = MakeDummyWeights(7, 0.5f);
  auto b = MakeDummyWeights(7, 0.5f);
  auto c = MakeDummyWeights(8, 0.5f);
  const int64_t shape[] = {64, 80};
  const std::string name = "model.layers.3.self_attn.q_proj.weight";
  auto va = a->Load(name, shape);
  auto vb = b->Load(name, shape);
  auto vc = c->Load(name, shape);
  auto other = a->Load("model.layers.3.self_attn.k_proj.weight", shape);
  ASSERT_TRUE(va.ok() && vb.ok() && vc.ok() && other.ok());
  ASSERT_EQ(va->size(), 64u * 80u);
  EXPECT_EQ(*va, *vb);
  EXPECT_NE(*va, *vc);
  EXPECT_NE(*va, *other);
  float lo = 1, hi = -1;
  for (float v : *va) {
    ASSERT_GE(v, -0.5f);
    ASSERT_LT(v, 0.5f);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_LT(lo, -0.45f);  // spread over the whole range, not a constant
  EXPECT_GT(hi, 0.45f);
  EXPECT_TRUE(a->Has("anything"));
  EXPECT_TRUE(a->Names().empty());
}

TEST(DummyWeightsTest, ShardsAreSlicesOfTheFullTensor) {
  auto source = MakeDummyWeights(42);
  const int64_t shape[] = {12, 10};
  auto full = source->Load("model.layers.0.mlp.down_proj.weight", shape);
  ASSERT_TRUE(full.ok());
  for (auto [dim, world] : {std::pair{0, 3}, {1, 2}, {1, 5}}) {
    for (int rank = 0; rank < world; ++rank) {
      auto part =
          source->Load("model.layers.0.mlp.down_proj.weight", shape, Shard{dim, rank, world});
      ASSERT_TRUE(part.ok()) << part.status();
      EXPECT_EQ(*part, Slice2D(*full, 12, 10, dim, rank, world)) << dim << " " << rank;
    }
  }
  const int64_t bias_shape[] = {12};
  auto bias = source->Load("model.layers.0.self_attn.q_proj.bias", bias_shape);
  auto bias_part = source->Load("model.layers.0.self_attn.q_proj.bias", bias_shape, Shard{0, 1, 4});
  ASSERT_TRUE(bias.ok() && bias_part.ok());
  EXPECT_EQ(*bias_part, std::vector<float>(bias->begin() + 3, bias->begin() + 6));
  EXPECT_EQ(source->Load("x", shape, Shard{1, 0, 3}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DummyWeightsTest, NormWeightsAreOnes) {
  auto source = MakeDummyWeights(1);
  const int64_t shape[] = {16};
  for (const char* name : {"model.norm.weight", "model.layers.0.input_layernorm.weight",
                           "model.layers.5.post_attention_layernorm.weight"}) {
    auto v = source->Load(name, shape);
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(*v, std::vector<float>(16, 1.0f)) << name;
  }
  auto not_norm = source->Load("model.layers.0.mlp.gate_proj.weight", shape);
  ASSERT_TRUE(not_norm.ok());
  EXPECT_NE(*not_norm, std::vector<float>(16, 1.0f));
}

}  // namespace
}  // namespace vllm::worker
