#include "engine/checkpoint.h"

#include <sys/stat.h>

#include "tests/engine/test_util.h"
#include "gtest/gtest.h"

namespace spar {
namespace {

std::string Bytes(size_t n, char c) { return std::string(n, c); }

CheckpointWriter LayeredWriter() {
  CheckpointWriter w;
  EXPECT_TRUE(w.AddBytes("model.embed_tokens.weight", DType::kBF16, {4, 8}, Bytes(64, 'e')).ok());
  for (int l = 0; l < 4; ++l) {
    EXPECT_TRUE(w.AddBytes("model.layers." + std::to_string(l) + ".mlp.down_proj.weight", DType::kF8E4M3, {16, 16},
                           Bytes(256, static_cast<char>('0' + l)))
                    .ok());
    EXPECT_TRUE(w.AddBytes("model.layers." + std::to_string(l) + ".mlp.down_proj.weight_scale_inv", DType::kF32,
                           {1, 1}, Bytes(4, static_cast<char>('a' + l)))
                    .ok());
  }
  EXPECT_TRUE(w.AddBytes("model.norm.weight", DType::kBF16, {8}, Bytes(16, 'n')).ok());
  EXPECT_TRUE(w.AddBytes("lm_head.weight", DType::kBF16, {4, 8}, Bytes(64, 'h')).ok());
  return w;
}

TEST(CheckpointTest, SingleFileAndShardsReadTheSame) {
  const std::string one = testing::TempDir("ckpt_one"), many = testing::TempDir("ckpt_many");
  ASSERT_TRUE(LayeredWriter().Write(one).ok());
  ASSERT_TRUE(LayeredWriter().Write(many, /*max_shard_bytes=*/300).ok());
  struct stat st;
  EXPECT_EQ(::stat((many + "/model.safetensors.index.json").c_str(), &st), 0);
  EXPECT_EQ(::stat((many + "/model-00001-of-00005.safetensors").c_str(), &st), 0);
  auto a = Checkpoint::Open(one);
  auto b = Checkpoint::Open(many);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*a)->Names(), (*b)->Names());
  for (const auto& name : (*a)->Names()) {
    auto ta = (*a)->Get(name);
    auto tb = (*b)->Get(name);
    ASSERT_TRUE(ta.ok() && tb.ok());
    ASSERT_EQ(ta->nbytes, tb->nbytes);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(ta->data), ta->nbytes),
              std::string(reinterpret_cast<const char*>(tb->data), tb->nbytes));
  }
}

TEST(CheckpointTest, LayerRangeOpensOnlyItsShards) {
  const std::string dir = testing::TempDir("ckpt_range");
  ASSERT_TRUE(LayeredWriter().Write(dir, 300).ok());
  auto ck = Checkpoint::Open(dir, LayerRangeFilter(1, 3, /*embedding=*/false, /*head=*/false));
  ASSERT_TRUE(ck.ok()) << ck.status();
  const auto names = (*ck)->Names();
  ASSERT_EQ(names.size(), 4u);
  for (const auto& n : names) EXPECT_TRUE(LayerOfTensor(n) == 1 || LayerOfTensor(n) == 2) << n;
  EXPECT_FALSE((*ck)->Has("model.embed_tokens.weight"));
  EXPECT_LT((*ck)->num_open_files(), 5u);
  auto last = Checkpoint::Open(dir, LayerRangeFilter(3, 4, false, true));
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE((*last)->Has("lm_head.weight"));
  EXPECT_TRUE((*last)->Has("model.norm.weight"));
  EXPECT_FALSE((*last)->Has("model.layers.2.mlp.down_proj.weight"));
}

TEST(CheckpointTest, GetCheckedNamesFileAndTensor) {
  const std::string dir = testing::TempDir("ckpt_checked");
  ASSERT_TRUE(LayeredWriter().Write(dir).ok());
  auto ck = Checkpoint::Open(dir);
  ASSERT_TRUE(ck.ok());
  EXPECT_TRUE((*ck)->GetChecked("model.norm.weight", DType::kBF16, {8}).ok());
  auto bad = (*ck)->GetChecked("model.norm.weight", DType::kF32, {8});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("model.safetensors"), std::string::npos);
  EXPECT_NE(std::string(bad.status().message()).find("model.norm.weight"), std::string::npos);
  EXPECT_FALSE((*ck)->GetChecked("model.norm.weight", DType::kBF16, {9}).ok());
  EXPECT_EQ((*ck)->Get("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(CheckpointTest, BrokenIndexesAreErrors) {
  const std::string dir = testing::TempDir("ckpt_broken");
  ASSERT_TRUE(LayeredWriter().Write(dir, 300).ok());
  const std::string index = dir + "/model.safetensors.index.json";
  ASSERT_TRUE(WriteStringToFile(index, "{\"weight_map\": {\"x\": \"../../etc/passwd\"}}").ok());
  EXPECT_FALSE(Checkpoint::Open(dir).ok());
  ASSERT_TRUE(WriteStringToFile(index, "{\"weight_map\": {\"x\": \"model-00001-of-00005.safetensors\"}}").ok());
  auto lying = Checkpoint::Open(dir);
  ASSERT_FALSE(lying.ok());
  EXPECT_NE(std::string(lying.status().message()).find("lacks"), std::string::npos);
  ASSERT_TRUE(WriteStringToFile(index, "{\"weight_map\": {\"x\": \"missing.safetensors\"}}").ok());
  EXPECT_FALSE(Checkpoint::Open(dir).ok());
  ASSERT_TRUE(WriteStringToFile(index, "not json").ok());
  EXPECT_FALSE(Checkpoint::Open(dir).ok());
  EXPECT_EQ(Checkpoint::Open(dir + "/nowhere").status().code(), absl::StatusCode::kNotFound);
}

TEST(CheckpointTest, LayerOfTensor) {
  EXPECT_EQ(LayerOfTensor("model.layers.12.self_attn.q_a_proj.weight"), 12);
  EXPECT_EQ(LayerOfTensor("model.layers.x.foo"), -1);
  EXPECT_EQ(LayerOfTensor("lm_head.weight"), -1);
}

}  // namespace
}  // namespace spar
