#include "engine/safetensors.h"

#include <cstring>

#include "base/numeric.h"
#include "base/rng.h"
#include "tests/engine/test_util.h"
#include "gtest/gtest.h"

namespace spar {
namespace {

std::string RandomBytes(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng.NextU64() & 0xff);
  return s;
}

// A raw safetensors image from a header string and a data section.
std::string Image(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

TEST(SafetensorsTest, RoundTripsEveryDtype) {
  const std::string dir = testing::TempDir("st_roundtrip");
  SafetensorsWriter w;
  struct Want {
    DType dtype;
    std::vector<int64_t> shape;
    std::string bytes;
  };
  std::map<std::string, Want> wants;
  int seed = 0;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kI32, DType::kI64, DType::kU8}) {
    std::vector<int64_t> shape = {3, 5 + seed};
    const size_t n = DTypeSize(dt) * 3 * (5 + seed);
    Want want{dt, shape, RandomBytes(n, ++seed)};
    const std::string name = std::string("t.") + std::string(DTypeName(dt));
    ASSERT_TRUE(w.AddBytes(name, dt, shape, want.bytes).ok());
    wants[name] = want;
  }
  ASSERT_TRUE(w.AddBytes("scalar", DType::kF32, {}, std::string(4, '\x01')).ok());
  ASSERT_TRUE(w.AddBytes("empty", DType::kBF16, {0, 7}, "").ok());
  w.SetMetadata("format", "pt");
  ASSERT_TRUE(w.Write(dir + "/x.safetensors").ok());

  auto f = SafetensorsFile::Open(dir + "/x.safetensors");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  for (const auto& [name, want] : wants) {
    auto t = (*f)->Get(name);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->dtype, want.dtype);
    EXPECT_EQ(t->shape, want.shape);
    ASSERT_EQ(t->nbytes, want.bytes.size());
    EXPECT_EQ(std::memcmp(t->data, want.bytes.data(), t->nbytes), 0) << name;
  }
  auto scalar = (*f)->Get("scalar");
  ASSERT_TRUE(scalar.ok());
  EXPECT_EQ(scalar->numel(), 1);
  auto empty = (*f)->Get("empty");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->nbytes, 0u);
  EXPECT_FALSE((*f)->Get("missing").ok());
}

TEST(SafetensorsTest, WriterIsDeterministicAndAligned) {
  const std::string dir = testing::TempDir("st_determinism");
  for (const char* file : {"/a.safetensors", "/b.safetensors"}) {
    SafetensorsWriter w;
    // Added in different orders; the bytes must not depend on it.
    if (file[1] == 'a') {
      ASSERT_TRUE(w.AddBytes("z", DType::kU8, {3}, "abc").ok());
      ASSERT_TRUE(w.AddBytes("a", DType::kU8, {2}, "de").ok());
    } else {
      ASSERT_TRUE(w.AddBytes("a", DType::kU8, {2}, "de").ok());
      ASSERT_TRUE(w.AddBytes("z", DType::kU8, {3}, "abc").ok());
    }
    ASSERT_TRUE(w.Write(dir + file).ok());
  }
  auto a = ReadFileToString(dir + "/a.safetensors");
  auto b = ReadFileToString(dir + "/b.safetensors");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<uint8_t>((*a)[i]);
  EXPECT_EQ((8 + header) % 8, 0u);
}

TEST(SafetensorsTest, WriterRejectsBadTensors) {
  SafetensorsWriter w;
  EXPECT_FALSE(w.AddBytes("x", DType::kF32, {2}, "abc").ok());  // 3 bytes for 8
  ASSERT_TRUE(w.AddBytes("x", DType::kU8, {1}, "a").ok());
  EXPECT_EQ(w.AddBytes("x", DType::kU8, {1}, "a").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(w.AddBytes("__metadata__", DType::kU8, {1}, "a").ok());
}

struct Corrupt {
  const char* name;
  std::string image;
  const char* must_mention;
};

TEST(SafetensorsTest, CorruptHeadersAreErrorsNotCrashes) {
  const std::string good_header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string huge_len(8, '\xff');
  const std::vector<Corrupt> cases = {
      {"empty file", "", "truncated"},
      {"short length", "abc", "truncated"},
      {"length overflow", huge_len + "{}", "exceeds"},
      {"length past end", Image(good_header, "12345678").substr(0, 20), "past the end"},
      {"bad json", Image("{\"w\":", ""), "not valid JSON"},
      {"array header", Image("[1,2,3]", ""), "must be a JSON object"},
      {"unknown dtype", Image(R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", "12345678"), "unsupported dtype"},
      {"missing dtype", Image(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", "12345678"), "dtype"},
      {"negative shape", Image(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", "12345678"), "shape"},
      {"float shape", Image(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", "12345678"), "shape"},
      {"reversed offsets", Image(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}})", "12345678"), "reversed"},
      {"offset out of range", Image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", "12345678"), "beyond"},
      {"size mismatch", Image(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "12345678"), "needs 12 bytes"},
      {"shape overflow", Image(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,8]}})", "12345678"), "shape"},
      {"overlap", Image(R"({"a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", "12345678"), "overlap"},
      {"offsets not list", Image(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":"0,1"}})", "1"), "data_offsets"},
      {"metadata not strings", Image(R"({"__metadata__":{"a":1}})", ""), "__metadata__"},
      {"entry not object", Image(R"({"w":5})", ""), "must be an object"},
  };
  for (const auto& c : cases) {
    auto f = SafetensorsFile::FromBuffer(c.image, "bad.safetensors");
    ASSERT_FALSE(f.ok()) << c.name;
    EXPECT_NE(std::string(f.status().message()).find(c.must_mention), std::string::npos) << c.name << ": " << f.status();
    EXPECT_NE(std::string(f.status().message()).find("bad.safetensors"), std::string::npos) << c.name;
  }
}

// Fuzz-style: random mutations of a valid file must never crash and must
// either parse to views inside the buffer or fail with a status.
TEST(SafetensorsTest, RandomMutationsNeverCrash) {
  SafetensorsWriter w;
  ASSERT_TRUE(w.AddBytes("layer.weight", DType::kBF16, {4, 4}, RandomBytes(32, 1)).ok());
  ASSERT_TRUE(w.AddBytes("layer.weight_scale_inv", DType::kF32, {1, 1}, RandomBytes(4, 2)).ok());
  const std::string dir = testing::TempDir("st_fuzz");
  ASSERT_TRUE(w.Write(dir + "/f.safetensors").ok());
  auto base = ReadFileToString(dir + "/f.safetensors");
  ASSERT_TRUE(base.ok());
  Rng rng(99);
  int parsed = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string img = *base;
    const int edits = 1 + static_cast<int>(rng.Below(4));
    for (int e = 0; e < edits; ++e) {
      switch (rng.Below(4)) {
        case 0:
          if (!img.empty()) img[rng.Below(img.size())] = static_cast<char>(rng.NextU64());
          break;
        case 1:
          img.resize(rng.Below(img.size() + 1));
          break;
        case 2:
          if (!img.empty()) img[rng.Below(std::min<size_t>(img.size(), 8))] = static_cast<char>(rng.NextU64());
          break;
        case 3: {
          static const char* tokens[] = {"\"", "[", "]", "{", "}", ",", "9", "-", "1e30", "null", "F8_E4M3"};
          if (img.size() > 8) img.insert(8 + rng.Below(img.size() - 8), tokens[rng.Below(11)]);
          break;
        }
      }
    }
    auto f = SafetensorsFile::FromBuffer(img, "fuzz");
    if (!f.ok()) continue;
    ++parsed;
    for (const auto& name : (*f)->Names()) {
      auto t = (*f)->Get(name);
      ASSERT_TRUE(t.ok());
      // Touch every byte: ASan would flag a view outside the buffer.
      unsigned sum = 0;
      for (size_t i = 0; i < t->nbytes; ++i) sum += t->data[i];
      (void)sum;
    }
  }
  EXPECT_GT(parsed, 0);
}

}  // namespace
}  // namespace spar
