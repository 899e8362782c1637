// The FP8 latent rows widened for prefill (kernels/cuda/attention/latent_widen.h):
// widened rows bit-equal to bf16_rn of the reference decode, through shuffled
// block tables of ragged sequences (one block shared by two of them), the block
// map, the slot remap with invalid entries, and bad parameters. The attention
// over widened rows against the FP8 reference: sparse_mla_gpu_test.
#include "kernels/cuda/attention/latent_widen.h"

#include <cuda_bf16.h>

#include <cstring>
#include <vector>

#include "base/cache_layout.h"
#include "base/numeric.h"
#include "base/rng.h"
#include "gtest/gtest.h"
#include "kernels/ref/cache_ref.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar {
namespace {

using testing::DeviceArray;

constexpr int kFp8Row = static_cast<int>(LatentRowBytes(LatentFormat::kFp8Ds));

// A pool of random FP8 rows with differing tile magnitudes, and three
// sequences of 3, 1 and 5 blocks over shuffled pool blocks; sequence 2's
// third entry is sequence 0's first block (a shared prefix block).
struct WidenCase {
  int64_t num_blocks = 24;
  std::vector<uint8_t> pool;
  std::vector<int32_t> table;  // [3, stride]
  int64_t stride = 6;
  std::vector<int32_t> base = {0, 3, 4, 9};
  WidenCase() {
    Rng rng(5);
    pool.resize(num_blocks * 64 * kFp8Row);
    std::vector<float> row(kLatentDim);
    for (int64_t s = 0; s < num_blocks * 64; ++s) {
      for (int i = 0; i < kLatentDim; ++i) row[i] = (1.0f + 3.0f * static_cast<float>(i / 128 % 4)) * rng.Symmetric();
      ref::EncodeLatentRow(LatentFormat::kFp8Ds, row.data(), pool.data() + s * kFp8Row);
    }
    std::vector<int32_t> perm(num_blocks);
    for (int i = 0; i < num_blocks; ++i) perm[i] = i;
    for (int i = num_blocks - 1; i > 0; --i) std::swap(perm[i], perm[rng.Below(i + 1)]);
    table.assign(3 * stride, 0);  // padding entries 0: a valid block, never widened
    const int counts[3] = {3, 1, 5};
    int next = 0;
    for (int s = 0; s < 3; ++s) {
      for (int j = 0; j < counts[s]; ++j) table[s * stride + j] = perm[next++];
    }
    table[2 * stride + 2] = table[0];
  }
};

TEST(LatentWiden, RowsEqualTheRoundedReferenceDecode) {
  SPAR_REQUIRE_GPU();
  WidenCase su;
  DeviceArray<uint8_t> pool;
  pool.Upload(su.pool);
  DeviceArray<int32_t> table, base, map(su.num_blocks);
  table.Upload(su.table);
  base.Upload(su.base);
  map.Poison();
  const int64_t blocks = su.base.back();
  DeviceArray<uint16_t> wide(blocks * 64 * kLatentDim);
  wide.Poison();
  LatentWidenParams p;
  p.cache = pool.get();
  p.num_slots = su.num_blocks * 64;
  p.block_table = table.get();
  p.block_table_stride = su.stride;
  p.num_seqs = 3;
  p.seq_block_base = base.get();
  p.max_seq_blocks = 5;
  p.widened = reinterpret_cast<__nv_bfloat16*>(wide.get());
  p.block_map = map.get();
  ASSERT_TRUE(LaunchWidenLatentBlocks(p, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> got = wide.Download();
  const std::vector<int32_t> got_map = map.Download();

  std::vector<float> row(kLatentDim);
  int bad = 0;
  for (int s = 0; s < 3; ++s) {
    for (int32_t j = 0; j < su.base[s + 1] - su.base[s]; ++j) {
      const int32_t pool_block = su.table[s * su.stride + j];
      const int64_t scratch = su.base[s] + j;
      // The shared block maps to one of its two copies, both written.
      const bool shared = pool_block == su.table[0];
      if (shared) {
        EXPECT_TRUE(got_map[pool_block] == 0 || got_map[pool_block] == 6) << got_map[pool_block];
      } else {
        EXPECT_EQ(got_map[pool_block], scratch) << "block " << pool_block;
      }
      for (int r = 0; r < 64; ++r) {
        ref::DecodeLatentRow(LatentFormat::kFp8Ds, su.pool.data() + (pool_block * 64 + r) * kFp8Row, row.data());
        for (int i = 0; i < kLatentDim; ++i) {
          const uint16_t want = FloatToBf16(row[i]);
          if (got[(scratch * 64 + r) * kLatentDim + i] != want && bad++ < 5) {
            ADD_FAILURE() << "seq " << s << " block " << j << " row " << r << " lane " << i << ": "
                          << got[(scratch * 64 + r) * kLatentDim + i] << " vs " << want;
          }
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
  // Pool blocks no sequence widened keep the poison.
  std::vector<bool> used(su.num_blocks, false);
  for (int s = 0; s < 3; ++s) {
    for (int32_t j = 0; j < su.base[s + 1] - su.base[s]; ++j) used[su.table[s * su.stride + j]] = true;
  }
  for (int64_t b = 0; b < su.num_blocks; ++b) {
    if (!used[b]) EXPECT_EQ(got_map[b], -1) << "block " << b << " was not to be written";
  }
}

TEST(LatentWiden, RemapPointsIntoTheScratchAndDropsInvalidSlots) {
  SPAR_REQUIRE_GPU();
  const int64_t num_slots = 16 * 64;
  std::vector<int32_t> map(16);
  for (int b = 0; b < 16; ++b) map[b] = (b * 7 + 3) % 16;
  map[5] = -1;  // a block not widened: its slots are dropped
  const int64_t tokens = 37;
  const int list_len = 300, in_stride = 301, out_stride = 304;
  Rng rng(9);
  std::vector<int32_t> idx(tokens * in_stride, 12345);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int j = 0; j < list_len; ++j) {
      const uint64_t r = rng.Below(100);
      idx[t * in_stride + j] = r < 5 ? -1 : r < 8 ? static_cast<int32_t>(num_slots + rng.Below(100))
                                      : r < 10 ? -7 : static_cast<int32_t>(rng.Below(num_slots));
    }
  }
  DeviceArray<int32_t> din, dmap, dout(tokens * out_stride);
  din.Upload(idx);
  dmap.Upload(map);
  dout.Poison();
  SlotRemapParams p;
  p.indices = din.get();
  p.tokens = tokens;
  p.list_len = list_len;
  p.in_stride = in_stride;
  p.block_map = dmap.get();
  p.num_slots = num_slots;
  p.out = dout.get();
  p.out_stride = out_stride;
  ASSERT_TRUE(LaunchRemapSlots(p, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int32_t> got = dout.Download();
  int bad = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int j = 0; j < out_stride; ++j) {
      int32_t want = -1;  // the poison past list_len: untouched
      if (j < list_len) {
        const int32_t s = idx[t * in_stride + j];
        want = s < 0 || s >= num_slots || map[s / 64] < 0 ? -1 : map[s / 64] * 64 + s % 64;
      }
      if (got[t * out_stride + j] != want) ++bad;
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(LatentWiden, RejectsBadParams) {
  LatentWidenParams w;
  w.num_seqs = 1;
  w.max_seq_blocks = 1;
  EXPECT_EQ(LaunchWidenLatentBlocks(w, nullptr).code(), absl::StatusCode::kInvalidArgument);
  w.num_seqs = 70000;
  EXPECT_EQ(LaunchWidenLatentBlocks(w, nullptr).code(), absl::StatusCode::kInvalidArgument);
  w.num_seqs = 0;
  EXPECT_TRUE(LaunchWidenLatentBlocks(w, nullptr).ok());  // nothing to widen
  SlotRemapParams r;
  r.tokens = 2;
  r.list_len = 8;
  r.in_stride = r.out_stride = 4;
  EXPECT_EQ(LaunchRemapSlots(r, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace spar
