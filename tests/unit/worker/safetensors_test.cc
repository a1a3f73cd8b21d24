// SafetensorsFile: header validation of hand-built files, good and corrupt, and a mutation
// loop that must never crash or read outside the file.
#include "worker/safetensors.h"

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/worker/safetensors_writer.h"

namespace vllm::worker {
namespace {

using ::testing::HasSubstr;

using testing::BuildFile;
using testing::Frame;
using testing::RawTensor;

std::string Bytes(size_t n, char fill = '\x11') { return std::string(n, fill); }

class SafetensorsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/safetensors_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path Write(const std::string& contents, const std::string& name = "x.st") {
    std::filesystem::path path = dir_ / name;
    // A fresh file rather than a truncated one: ext4 flushes a file truncated and rewritten
    // (auto_da_alloc), which made the mutation loop wait on the disk.
    std::filesystem::remove(path);
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }

  // Opens `contents` and expects InvalidArgument whose message holds every needle.
  void ExpectInvalid(const std::string& contents, const std::vector<std::string>& needles) {
    auto file = SafetensorsFile::Open(Write(contents));
    ASSERT_FALSE(file.ok());
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
    for (const std::string& needle : needles) {
      EXPECT_THAT(std::string(file.status().message()), HasSubstr(needle));
    }
  }

  std::filesystem::path dir_;
};

TEST_F(SafetensorsFileTest, ReadsEntriesAndBytes) {
  const std::string a = "\x01\x02\x03\x04\x05\x06\x07\x08";
  const std::string b = "\x09\x0a";
  auto file = SafetensorsFile::Open(
      Write(BuildFile({{"a", "F32", {2}, a}, {"b", "BF16", {1, 1}, b}, {"e", "F16", {0, 3}, ""}})));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->Names(), (std::vector<std::string>{"a", "b", "e"}));  // no __metadata__
  const SafetensorsTensorInfo* info = (*file)->Find("b");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->dtype, SafetensorsDtype::kBF16);
  EXPECT_EQ(info->shape, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(info->begin, 8u);
  EXPECT_EQ(info->nbytes, 2u);
  auto data = (*file)->Data(*info);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(data.data()), data.size()), b);
  auto a_data = (*file)->Data(*(*file)->Find("a"));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(a_data.data()), a_data.size()), a);
  EXPECT_EQ((*file)->Find("e")->nbytes, 0u);
  EXPECT_EQ((*file)->Find("missing"), nullptr);
}

TEST_F(SafetensorsFileTest, AcceptsEveryStandardDtypeAndPaddedHeader) {
  // Element sizes by the spec, written out rather than derived from the names.
  const std::vector<std::pair<std::string, size_t>> dtypes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  std::vector<RawTensor> tensors;
  for (const auto& [dtype, size] : dtypes) tensors.push_back({dtype, dtype, {3}, Bytes(3 * size)});
  std::string contents = BuildFile(tensors);
  auto file = SafetensorsFile::Open(Write(contents));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->Find("I64")->dtype, SafetensorsDtype::kI64);
  EXPECT_EQ(SafetensorsDtypeSize(SafetensorsDtype::kF64), 8);
  EXPECT_EQ(SafetensorsDtypeName(SafetensorsDtype::kF8E4M3), "F8_E4M3");

  // The format allows trailing spaces after the JSON (writers pad to 8-byte alignment).
  auto padded =
      SafetensorsFile::Open(Write(Frame(R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}  )"
                                        "    ",
                                        "ab")));
  ASSERT_TRUE(padded.ok()) << padded.status();
  EXPECT_EQ((*padded)->Find("t")->nbytes, 2u);
}

TEST_F(SafetensorsFileTest, MissingAndNonRegularFiles) {
  auto missing = SafetensorsFile::Open(dir_ / "nope.safetensors");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("nope.safetensors"));
  auto directory = SafetensorsFile::Open(dir_);
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(directory.status().message()), HasSubstr("not a regular file"));
}

TEST_F(SafetensorsFileTest, RejectsBadHeaderLength) {
  ExpectInvalid("", {"too short"});
  ExpectInvalid("\x05\x00\x00", {"too short"});
  ExpectInvalid(Frame("{}", "", 1000), {"header length 1000", "runs past the end"});
  ExpectInvalid(Frame("{}", "", 200'000'000), {"200000000", "exceeds the limit"});
  ExpectInvalid(Frame("{}", "", ~uint64_t{0}), {"exceeds the limit"});
}

TEST_F(SafetensorsFileTest, RejectsMalformedJson) {
  ExpectInvalid(Frame(R"({"a": {"dtype": "F32",)"), {"not valid JSON"});
  ExpectInvalid(Frame("\xff\xfe garbage"), {"not valid JSON"});
  ExpectInvalid(Frame("[1, 2, 3]"), {"not a JSON object"});
  ExpectInvalid(Frame(std::string(50, '[') + std::string(50, ']')), {"nests too deeply"});
  // Brackets inside strings do not count as nesting.
  auto quoted = SafetensorsFile::Open(Write(Frame(R"({"__metadata__": {"k": "[[[[[[[[[[[["}})")));
  EXPECT_TRUE(quoted.ok()) << quoted.status();
}

TEST_F(SafetensorsFileTest, RejectsBadEntries) {
  const std::string data = Bytes(64);
  auto entry = [&](const std::string& body) { return Frame("{\"w\": " + body + "}", data); };
  ExpectInvalid(entry("5"), {"tensor 'w'", "not an object"});
  ExpectInvalid(entry(R"({"shape": [1], "data_offsets": [0, 4]})"), {"tensor 'w'", "dtype"});
  ExpectInvalid(entry(R"({"dtype": "Q9", "shape": [1], "data_offsets": [0, 4]})"),
                {"tensor 'w'", "unknown dtype 'Q9'"});
  ExpectInvalid(entry(R"({"dtype": 7, "shape": [1], "data_offsets": [0, 4]})"),
                {"tensor 'w'", "dtype"});
  ExpectInvalid(entry(R"({"dtype": "F32", "shape": [-1, 4], "data_offsets": [0, 16]})"),
                {"tensor 'w'", "negative"});
  ExpectInvalid(entry(R"({"dtype": "F32", "shape": [2.5], "data_offsets": [0, 16]})"),
                {"tensor 'w'", "non-integer"});
  ExpectInvalid(entry(R"({"dtype": "F32", "shape": 4, "data_offsets": [0, 16]})"),
                {"tensor 'w'", "shape is not a list"});
  ExpectInvalid(
      entry(R"({"dtype": "F32", "shape": [1099511627776, 1099511627776], "data_offsets": [0, 4]})"),
      {"tensor 'w'", "too many elements"});
  ExpectInvalid(entry(R"({"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]})"),
                {"tensor 'w'", "span 20 bytes", "need 24"});
  ExpectInvalid(entry(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]})"),
                {"tensor 'w'", "2 values"});
  ExpectInvalid(entry(R"({"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]})"),
                {"tensor 'w'", "negative"});
}

TEST_F(SafetensorsFileTest, RejectsOffsetsOutsideTheBuffer) {
  ExpectInvalid(
      Frame(R"({"w": {"dtype": "U8", "shape": [100], "data_offsets": [0, 100]}})", Bytes(10)),
      {"tensor 'w'", "data_offsets [0, 100]", "10-byte data buffer"});
  ExpectInvalid(Frame(R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [8, 4]}})", Bytes(10)),
                {"tensor 'w'", "out of range"});
  ExpectInvalid(
      Frame(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [18446744073709551615, 0]}})",
            Bytes(10)),
      {"tensor 'w'", "out of range"});
}

TEST_F(SafetensorsFileTest, RejectsTruncatedFile) {
  std::string contents = BuildFile({{"a", "F32", {4}, Bytes(16)}, {"b", "F32", {4}, Bytes(16)}});
  ExpectInvalid(contents.substr(0, contents.size() - 3), {"tensor 'b'", "out of range"});
  ExpectInvalid(contents.substr(0, 20), {"runs past the end"});
}

TEST_F(SafetensorsFileTest, RejectsOverlappingTensors) {
  ExpectInvalid(Frame(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                          "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                      Bytes(24)),
                {"'a'", "'b'", "overlap"});
  ExpectInvalid(Frame(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                          "b": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}})",
                      Bytes(8)),
                {"overlap"});
}

TEST_F(SafetensorsFileTest, MutatedFilesNeverCrash) {
  const std::string valid =
      BuildFile({{"model.embed_tokens.weight", "BF16", {4, 3}, Bytes(24, '\x3f')},
                 {"model.norm.weight", "F32", {3}, Bytes(12, '\x01')},
                 {"lm_head.weight", "F16", {4, 3}, Bytes(24, '\x22')}});
  ASSERT_TRUE(SafetensorsFile::Open(Write(valid)).ok());
  const uint64_t header_len = valid.size() - 8 - 60;
  std::mt19937 rng(1234);
  int rejected = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string bytes = valid;
    switch (rng() % 4) {
      case 0:  // truncate anywhere
        bytes.resize(rng() % valid.size());
        break;
      case 1:  // corrupt the length prefix
        bytes[rng() % 8] = static_cast<char>(rng());
        break;
      default:  // corrupt 1-4 bytes, mostly in the JSON, where mutations are interesting
        for (uint32_t n = 1 + rng() % 4; n > 0; --n) {
          const size_t at = rng() % 3 ? 8 + rng() % header_len : rng() % bytes.size();
          bytes[at] = static_cast<char>(rng() % 2 ? rng() : "{}[]\",:0123456789-e"[rng() % 20]);
        }
    }
    auto file = SafetensorsFile::Open(Write(bytes, "fuzz.st"));
    if (!file.ok()) {
      ++rejected;
      EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
      continue;
    }
    // Whatever was accepted must lie inside the file, and the mapped bytes must be the file's
    // bytes at those offsets; reading every byte also lets ASan check the bounds.
    auto parsed = ParseSafetensorsHeader(
        {reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()}, "fuzz.st");
    ASSERT_TRUE(parsed.ok()) << "iteration " << iter << ": " << parsed.status();
    uint64_t hdr = 0;
    std::memcpy(&hdr, bytes.data(), 8);
    for (const auto& [name, info] : *parsed) {
      ASSERT_LE(8 + hdr + info.begin + info.nbytes, bytes.size()) << name;
      auto mapped = (*file)->Data(*(*file)->Find(name));
      ASSERT_EQ(mapped.size(), info.nbytes);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(mapped.data()), mapped.size()),
                bytes.substr(8 + hdr + info.begin, info.nbytes))
          << name;
    }
  }
  // Most mutations break the file; the loop would prove little if none did.
  EXPECT_GT(rejected, 1000);
}

}  // namespace
}  // namespace vllm::worker
