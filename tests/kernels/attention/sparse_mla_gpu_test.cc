// Sparse MLA attention (kernels/cuda/attention/sparse_mla.h) against
// ref::SparseMla on fresh random inputs: every head count, both cache
// formats, forced and automatic splits, -1 / out-of-range / duplicate
// indices, empty rows, the dense fast path (bit-equal to the sparse path),
// and FP8 rows widened for prefill read by the bf16 kernel.
#include "kernels/cuda/attention/sparse_mla.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/rng.h"
#include "gtest/gtest.h"
#include "kernels/cuda/attention/latent_widen.h"
#include "kernels/ref/cache_ref.h"
#include "kernels/ref/sparse_mla_ref.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar {
namespace {

using testing::DeviceArray;

constexpr float kScaleGlm = 0.0625f;
constexpr float kScaleDs = 0.135234f;

const char* FormatName(LatentFormat f) { return f == LatentFormat::kBF16 ? "bf16" : "fp8"; }

// A latent cache of random rows; FP8 tiles get different magnitudes so the
// per-128 scales differ.
struct Cache {
  LatentFormat format;
  int64_t num_slots;
  std::vector<uint8_t> bytes;
  DeviceArray<uint8_t> dev;
};

void MakeCache(Cache& c, LatentFormat format, int64_t num_slots, uint64_t seed) {
  c.format = format;
  c.num_slots = num_slots;
  const size_t rb = LatentRowBytes(format);
  c.bytes.assign(rb * num_slots, 0);
  Rng rng(seed);
  std::vector<float> row(kLatentDim);
  for (int64_t s = 0; s < num_slots; ++s) {
    for (int i = 0; i < kLatentDim; ++i) {
      const float mag = i < 512 ? 0.5f + 0.5f * static_cast<float>(i / 128) : 1.0f;
      row[i] = mag * rng.Symmetric();
    }
    ref::EncodeLatentRow(format, row.data(), c.bytes.data() + rb * s);
  }
  c.dev.Upload(c.bytes);
}

struct Result {
  std::vector<float> out;      // [tokens, heads, 512]
  std::vector<float> lse;      // [tokens, heads]
  std::vector<float> lse_tol;  // reference only: allowed |lse error| per (token, head)
  SparseMlaPlan plan;
};

struct Problem {
  int64_t tokens = 1;
  int heads = 8;
  int list_len = 0;
  float scale = kScaleGlm;
  std::vector<float> q;  // bf16-exact values [tokens, heads, 576]
  std::vector<int32_t> indices;  // [tokens, list_len] (sparse mode)
  // Dense mode
  bool dense = false;
  std::vector<int32_t> block_table, token_seq, kv_lens;
  int64_t bt_stride = 0;
};

void RandomQ(Problem& p, uint64_t seed) {
  p.q = testing::RandomFloats(p.tokens * p.heads * kLatentDim, seed, -1.5f, 1.5f);
  for (auto& v : p.q) v = RoundToBf16(v);
}

Result RunGpu(const Problem& p, const Cache& c, const SparseMlaPlan& forced = {}) {
  Result r;
  DeviceArray<uint16_t> q, out;
  q.Upload(testing::ToBf16(p.q));
  out.Resize(p.tokens * p.heads * kLatentNopeDim);
  out.Poison();
  DeviceArray<float> lse(p.tokens * p.heads);
  lse.Poison();
  DeviceArray<int32_t> idx, bt, seq, lens;
  SparseMlaParams prm;
  prm.q = reinterpret_cast<const __nv_bfloat16*>(q.get());
  prm.tokens = p.tokens;
  prm.heads = p.heads;
  prm.q_head_stride = kLatentDim;
  prm.q_token_stride = static_cast<int64_t>(p.heads) * kLatentDim;
  prm.format = c.format;
  prm.cache = c.dev.get();
  prm.num_slots = c.num_slots;
  prm.list_len = p.list_len;
  if (p.dense) {
    bt.Upload(p.block_table);
    seq.Upload(p.token_seq);
    lens.Upload(p.kv_lens);
    prm.block_table = bt.get();
    prm.block_table_stride = p.bt_stride;
    prm.token_seq = seq.get();
    prm.kv_lens = lens.get();
  } else {
    if (!p.indices.empty()) idx.Upload(p.indices);
    prm.indices = p.indices.empty() ? reinterpret_cast<const int32_t*>(q.get()) : idx.get();
    prm.indices_stride = p.list_len;
  }
  prm.scale = p.scale;
  prm.out = reinterpret_cast<__nv_bfloat16*>(out.get());
  prm.out_head_stride = kLatentNopeDim;
  prm.out_token_stride = static_cast<int64_t>(p.heads) * kLatentNopeDim;
  prm.lse = lse.get();
  SparseMlaPlan plan = forced;
  if (plan.head_tile == 0) {
    EXPECT_TRUE(PlanSparseMlaForDevice(p.tokens, p.heads, p.list_len, c.format, &plan).ok());
  }
  prm.plan = plan;
  r.plan = plan;
  DeviceArray<uint8_t> ws(std::max<size_t>(16, SparseMlaWorkspaceBytes(plan, p.tokens, p.heads)));
  ws.Poison();
  prm.workspace = ws.get();
  prm.workspace_bytes = ws.size();
  const absl::Status st = LaunchSparseMla(prm, nullptr);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  r.out = testing::FromBf16(out.Download());
  r.lse = lse.Download();
  return r;
}

// The reference on the same inputs; the dense mode is expanded to explicit
// per-token slot lists.
Result RunRef(const Problem& p, const Cache& c) {
  std::vector<int32_t> idx = p.indices;
  if (p.dense) {
    idx.assign(p.tokens * p.list_len, -1);
    for (int64_t t = 0; t < p.tokens; ++t) {
      for (int j = 0; j < p.kv_lens[t]; ++j) {
        idx[t * p.list_len + j] = p.block_table[p.token_seq[t] * p.bt_stride + j / 64] * 64 + j % 64;
      }
    }
  }
  Result r;
  r.out.assign(p.tokens * p.heads * kLatentNopeDim, 0.0f);
  r.lse.assign(p.tokens * p.heads, 0.0f);
  ref::LatentCacheView view{c.format, c.bytes.data(), c.num_slots};
  ref::SparseMla(p.q.data(), p.tokens, p.heads, view, idx.data(), p.list_len, p.scale, r.out.data(), r.lse.data());
  // lse tolerance. bf16 rows: the kernel's products are exact, only the fp32
  // summation order differs (2e-3 is ~100x that). FP8 rows: the e4m3 codes
  // widen exactly and each 128-column partial score is multiplied by the
  // fp32 scale, so scores are as exact as bf16 rows'; the bound keeps the
  // margin of a kernel that rounds every widened key value to bf16 (relative
  // error <= 2^-8: score j moves by at most scale * 2^-8 * sum_i |q_i k_ji|,
  // the rope lanes exact), and lse is 1-Lipschitz in the largest score change.
  r.lse_tol.assign(p.tokens * p.heads, 2e-3f);
  if (c.format == LatentFormat::kFp8Ds) {
    std::vector<float> row(kLatentDim);
    const size_t rb = LatentRowBytes(c.format);
    for (int64_t t = 0; t < p.tokens; ++t) {
      std::vector<float> bound(p.heads, 0.0f);
      for (int j = 0; j < p.list_len; ++j) {
        const int32_t slot = idx[t * p.list_len + j];
        if (slot < 0 || slot >= c.num_slots) continue;
        ref::DecodeLatentRow(c.format, c.bytes.data() + slot * rb, row.data());
        for (int h = 0; h < p.heads; ++h) {
          const float* qh = p.q.data() + (t * p.heads + h) * kLatentDim;
          float sum = 0;
          for (int i = 0; i < kLatentNopeDim; ++i) sum += std::fabs(qh[i] * row[i]);
          bound[h] = std::max(bound[h], sum);
        }
      }
      for (int h = 0; h < p.heads; ++h) r.lse_tol[t * p.heads + h] = 2e-3f + std::fabs(p.scale) * bound[h] / 256.0f;
    }
  }
  return r;
}

// out: rel L2 over the whole tensor; empty rows must be exactly 0 with lse +inf.
void ExpectClose(const Result& got, const Result& want, LatentFormat f, const std::string& what) {
  SCOPED_TRACE(what);
  const double rel = testing::RelativeL2(got.out, want.out);
  // bf16 P and bf16 output rounding: ~3e-3; FP8 rows round P times each
  // key's scale to bf16 instead of P.
  EXPECT_LT(rel, f == LatentFormat::kBF16 ? 8e-3 : 1.2e-2) << "rel L2 of out";
  int bad = 0;
  for (size_t i = 0; i < want.lse.size(); ++i) {
    if (std::isinf(want.lse[i])) {
      if (!(std::isinf(got.lse[i]) && got.lse[i] > 0)) ++bad;
      for (int d = 0; d < kLatentNopeDim; ++d) {
        if (got.out[i * kLatentNopeDim + d] != 0.0f) ++bad;
      }
    } else if (!(std::fabs(got.lse[i] - want.lse[i]) <= want.lse_tol[i])) {
      if (bad < 5) ADD_FAILURE() << "lse[" << i << "] " << got.lse[i] << " vs " << want.lse[i] << " (tolerance " << want.lse_tol[i] << ")";
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0);
}

// Random slots in [0, num_slots), with a fraction of -1, out-of-range and
// repeated entries.
std::vector<int32_t> RandomIndices(int64_t tokens, int list_len, int64_t num_slots, uint64_t seed, bool edge) {
  Rng rng(seed);
  std::vector<int32_t> idx(tokens * list_len);
  for (auto& v : idx) {
    v = static_cast<int32_t>(rng.Below(num_slots));
    if (!edge) continue;
    const uint64_t r = rng.Below(100);
    if (r < 8) v = -1;
    else if (r < 10) v = static_cast<int32_t>(num_slots + rng.Below(1000));
    else if (r < 12) v = -1000 - static_cast<int32_t>(rng.Below(1000));
  }
  if (edge) {
    for (int64_t t = 0; t < tokens; ++t) {  // duplicates: copy a few earlier entries
      for (int j = 5; j < list_len; j += 17) idx[t * list_len + j] = idx[t * list_len + j / 3];
    }
  }
  return idx;
}

class SparseMlaHeads : public ::testing::TestWithParam<std::tuple<int, LatentFormat>> {};

TEST_P(SparseMlaHeads, MatchesReferenceAutoPlan) {
  SPAR_REQUIRE_GPU();
  const auto [heads, format] = GetParam();
  Cache cache;
  MakeCache(cache, format, 64 * 40, 11 + heads);
  for (int tokens : {1, 5}) {
    Problem p;
    p.tokens = tokens;
    p.heads = heads;
    p.list_len = 300;  // not a multiple of 32
    p.scale = heads == 128 ? kScaleDs : kScaleGlm;
    RandomQ(p, 100 + heads + tokens);
    p.indices = RandomIndices(p.tokens, p.list_len, cache.num_slots, 7 + tokens, /*edge=*/true);
    const Result got = RunGpu(p, cache);
    ExpectClose(got, RunRef(p, cache), format,
                ::testing::PrintToString(heads) + " heads, " + FormatName(format) + ", tokens " +
                    ::testing::PrintToString(tokens) + ", head_tile " + ::testing::PrintToString(got.plan.head_tile) +
                    ", splits " + ::testing::PrintToString(got.plan.num_splits));
  }
}

INSTANTIATE_TEST_SUITE_P(All, SparseMlaHeads,
                         ::testing::Combine(::testing::Values(8, 16, 32, 64, 128),
                                            ::testing::Values(LatentFormat::kBF16, LatentFormat::kFp8Ds)));

// Every head tile with no split, a few splits and one block per split; head
// counts that leave the last tile partly empty (5 and 12 heads: padded rows
// of the narrow FP8 tiles).
TEST(SparseMla, ForcedPlans) {
  SPAR_REQUIRE_GPU();
  for (LatentFormat format : {LatentFormat::kBF16, LatentFormat::kFp8Ds}) {
    Cache cache;
    MakeCache(cache, format, 64 * 32, 21);
    for (int heads : {5, 8, 12, 48, 64, 128}) {
      Problem p;
      p.tokens = 3;
      p.heads = heads;
      p.list_len = 200;
      RandomQ(p, 31 + heads);
      p.indices = RandomIndices(p.tokens, p.list_len, cache.num_slots, 41 + heads, true);
      const Result want = RunRef(p, cache);
      for (int tile : {8, 16, 32, 64}) {
        if (tile == 8 && format != LatentFormat::kFp8Ds) continue;  // FP8 rows only
        for (int kps : {224, 96, 32}) {
          SparseMlaPlan plan{tile, (p.list_len + kps - 1) / kps, kps};
          ExpectClose(RunGpu(p, cache, plan), want, format,
                      std::string(FormatName(format)) + " heads " + ::testing::PrintToString(heads) + " tile " +
                          ::testing::PrintToString(tile) + " keys/split " + ::testing::PrintToString(kps));
        }
      }
    }
  }
}

// The split merge runs one column per thread for up to 1024 (token, head)
// rows and four above (sparse_mla.cu); both sum in the same order, so the
// first 16 tokens of a 17-token call (1088 rows) have the bits of a
// 16-token call (1024 rows). Some lists are empty (lse +inf, out 0).
TEST(SparseMla, MergeVariantsGiveTheSameBits) {
  SPAR_REQUIRE_GPU();
  for (LatentFormat format : {LatentFormat::kBF16, LatentFormat::kFp8Ds}) {
    Cache cache;
    MakeCache(cache, format, 64 * 32, 23);
    Problem big;
    big.tokens = 17;
    big.heads = 64;
    big.list_len = 256;
    RandomQ(big, 61);
    big.indices = RandomIndices(big.tokens, big.list_len, cache.num_slots, 62, true);
    for (int j = 0; j < big.list_len; ++j) big.indices[3 * big.list_len + j] = -1;  // token 3: nothing to read
    Problem small = big;
    small.tokens = 16;
    small.q.resize(small.tokens * small.heads * kLatentDim);
    small.indices.resize(small.tokens * small.list_len);
    const SparseMlaPlan plan{16, 4, 64};
    const Result a = RunGpu(small, cache, plan), b = RunGpu(big, cache, plan);
    EXPECT_TRUE(std::equal(a.out.begin(), a.out.end(), b.out.begin())) << FormatName(format) << ": out";
    EXPECT_TRUE(std::equal(a.lse.begin(), a.lse.end(), b.lse.begin())) << FormatName(format) << ": lse";
    ExpectClose(b, RunRef(big, cache), format, std::string(FormatName(format)) + " 17 tokens");
  }
}

// Rows whose entries are all invalid give out 0 and lse +inf, split or not;
// a list of one slot repeated gives exactly that row's values (up to bf16).
// 16 heads: the 16-head tiles; 64 heads: the 64-head tile (bf16 rows: the
// pipelined loop, splits of one block and of none valid).
TEST(SparseMla, EmptyRowsAndDuplicates) {
  SPAR_REQUIRE_GPU();
  for (LatentFormat format : {LatentFormat::kBF16, LatentFormat::kFp8Ds}) {
    for (int heads : {16, 64}) {
      Cache cache;
      MakeCache(cache, format, 64 * 8, 51);
      Problem p;
      p.tokens = 4;
      p.heads = heads;
      p.list_len = 130;
      RandomQ(p, 52);
      p.indices = RandomIndices(p.tokens, p.list_len, cache.num_slots, 53, false);
      for (int j = 0; j < p.list_len; ++j) {
        p.indices[0 * p.list_len + j] = -1;                                     // empty
        p.indices[1 * p.list_len + j] = j % 2 ? -1 : static_cast<int32_t>(cache.num_slots + j);  // empty (out of range)
        p.indices[2 * p.list_len + j] = 77;                                     // one slot 130 times
        if (j < 100) p.indices[3 * p.list_len + j] = -1;                        // valid only at the end
      }
      const Result want = RunRef(p, cache);
      for (const SparseMlaPlan& plan : {SparseMlaPlan{}, SparseMlaPlan{heads, 5, 32}, SparseMlaPlan{heads, 1, 160}}) {
        const Result got = RunGpu(p, cache, plan);
        ExpectClose(got, want, format,
                    std::string(FormatName(format)) + " heads " + ::testing::PrintToString(heads) + " splits " +
                        ::testing::PrintToString(got.plan.num_splits));
        for (int h = 0; h < p.heads; ++h) {
          EXPECT_TRUE(std::isinf(got.lse[0 * p.heads + h]) && got.lse[0 * p.heads + h] > 0);
          EXPECT_TRUE(std::isinf(got.lse[1 * p.heads + h]) && got.lse[1 * p.heads + h] > 0);
        }
        // Token 2 attends to one row: out = row 77's first 512 values.
        std::vector<float> row(kLatentDim);
        ref::DecodeLatentRow(format, cache.bytes.data() + 77 * LatentRowBytes(format), row.data());
        double worst = 0;
        for (int h = 0; h < p.heads; ++h) {
          for (int d = 0; d < kLatentNopeDim; ++d) {
            worst = std::max(worst, static_cast<double>(std::fabs(got.out[(2 * p.heads + h) * 512 + d] - row[d])));
          }
        }
        EXPECT_LT(worst, 0.02) << "repeated slot";
      }
    }
  }
  // list_len 0: every row empty (no key block at all), 8 and 64 heads.
  Cache cache;
  MakeCache(cache, LatentFormat::kBF16, 64, 61);
  for (int heads : {8, 64}) {
    Problem p;
    p.tokens = 2;
    p.heads = heads;
    p.list_len = 0;
    RandomQ(p, 62);
    const Result got = RunGpu(p, cache);
    for (float v : got.out) EXPECT_EQ(v, 0.0f);
    for (float v : got.lse) EXPECT_TRUE(std::isinf(v) && v > 0);
  }
}

// Ragged batch of sequences in the dense mode (prefill tokens and decode
// tokens, each with its causal length) equals the sparse mode fed the same
// slots in ascending order, bit for bit, and both match the reference.
TEST(SparseMla, DenseFastPathBitEqualsSparse) {
  SPAR_REQUIRE_GPU();
  for (LatentFormat format : {LatentFormat::kBF16, LatentFormat::kFp8Ds}) {
    Cache cache;
    const int num_blocks = 48;
    MakeCache(cache, format, 64 * num_blocks, 71);
    const std::vector<int> seq_lens = {1, 37, 64, 65, 300, 513};
    const int max_blocks = 9;
    Problem d;
    d.dense = true;
    d.bt_stride = max_blocks;
    // Shuffled, disjoint block ids per sequence.
    std::vector<int32_t> perm(num_blocks);
    for (int i = 0; i < num_blocks; ++i) perm[i] = i;
    Rng rng(72);
    for (int i = num_blocks - 1; i > 0; --i) std::swap(perm[i], perm[rng.Below(i + 1)]);
    d.block_table.assign(seq_lens.size() * max_blocks, -1);
    int next = 0;
    for (size_t s = 0; s < seq_lens.size(); ++s) {
      for (int b = 0; b < (seq_lens[s] + 63) / 64; ++b) d.block_table[s * max_blocks + b] = perm[next++];
      // Prefill-like: the last up-to-4 positions of every sequence.
      for (int pos = std::max(0, seq_lens[s] - 4); pos < seq_lens[s]; ++pos) {
        d.token_seq.push_back(static_cast<int32_t>(s));
        d.kv_lens.push_back(pos + 1);
      }
    }
    d.tokens = static_cast<int64_t>(d.kv_lens.size());
    d.list_len = *std::max_element(seq_lens.begin(), seq_lens.end());
    for (int heads : {16, 64}) {
      d.heads = heads;
      RandomQ(d, 73 + heads);
      Problem s = d;
      s.dense = false;
      s.indices.assign(s.tokens * s.list_len, -1);
      for (int64_t t = 0; t < s.tokens; ++t) {
        for (int j = 0; j < s.kv_lens[t]; ++j) {
          s.indices[t * s.list_len + j] = d.block_table[d.token_seq[t] * max_blocks + j / 64] * 64 + j % 64;
        }
      }
      const Result want = RunRef(d, cache);
      for (const SparseMlaPlan& plan :
           {SparseMlaPlan{}, SparseMlaPlan{16, 3, 192}, SparseMlaPlan{64, 1, 544}, SparseMlaPlan{format == LatentFormat::kFp8Ds ? 8 : 16, 2, 288}}) {
        const Result gd = RunGpu(d, cache, plan), gs = RunGpu(s, cache, plan);
        const std::string what = std::string(FormatName(format)) + " heads " + ::testing::PrintToString(heads) +
                                 " splits " + ::testing::PrintToString(gd.plan.num_splits);
        ExpectClose(gd, want, format, what);
        EXPECT_EQ(std::memcmp(gd.out.data(), gs.out.data(), gd.out.size() * sizeof(float)), 0) << what;
        EXPECT_EQ(std::memcmp(gd.lse.data(), gs.lse.data(), gd.lse.size() * sizeof(float)), 0) << what;
      }
    }
  }
}

// Prefill-sized batch: many tokens, each with its own list, one split.
TEST(SparseMla, PrefillManyTokens) {
  SPAR_REQUIRE_GPU();
  for (LatentFormat format : {LatentFormat::kBF16, LatentFormat::kFp8Ds}) {
    Cache cache;
    MakeCache(cache, format, 64 * 64, 81);
    for (int heads : {64, 128}) {
      Problem p;
      p.tokens = 96;
      p.heads = heads;
      p.list_len = 256;
      p.scale = kScaleDs;
      RandomQ(p, 82 + heads);
      p.indices = RandomIndices(p.tokens, p.list_len, cache.num_slots, 83, true);
      // Ragged: token t keeps only its first (t * 7) % 257 entries.
      for (int64_t t = 0; t < p.tokens; ++t) {
        for (int j = static_cast<int>((t * 7) % 257); j < p.list_len; ++j) p.indices[t * p.list_len + j] = -1;
      }
      const Result got = RunGpu(p, cache);
      EXPECT_EQ(got.plan.num_splits, 1);
      ExpectClose(got, RunRef(p, cache), format, std::string(FormatName(format)) + " heads " + ::testing::PrintToString(heads));
    }
  }
}

// The prefill path of FP8 caches (latent_widen.h): the step's context blocks
// widened into a bf16 scratch, the index lists remapped into it and read by
// the bf16 kernel, against the exact FP8 reference on the original lists.
// Three ragged sequences over shuffled pool blocks, one block shared.
TEST(SparseMla, WidenedFp8RowsMatchTheFp8Reference) {
  SPAR_REQUIRE_GPU();
  Cache fp8;
  const int64_t pool_blocks = 20;
  MakeCache(fp8, LatentFormat::kFp8Ds, 64 * pool_blocks, 91);
  std::vector<int32_t> perm(pool_blocks);
  for (int i = 0; i < pool_blocks; ++i) perm[i] = i;
  Rng rng(92);
  for (int i = pool_blocks - 1; i > 0; --i) std::swap(perm[i], perm[rng.Below(i + 1)]);
  const int64_t stride = 5;
  const std::vector<int> seq_blocks = {4, 1, 5};
  const std::vector<int> seq_tokens = {7, 2, 9};
  std::vector<int32_t> table(seq_blocks.size() * stride, 0), base = {0};
  int next = 0;
  for (size_t s = 0; s < seq_blocks.size(); ++s) {
    for (int j = 0; j < seq_blocks[s]; ++j) table[s * stride + j] = perm[next++];
    base.push_back(base.back() + seq_blocks[s]);
  }
  table[2 * stride + 1] = table[0];  // a prefix block two sequences share
  for (int heads : {32, 64}) {
    Problem p;
    p.heads = heads;
    p.list_len = 256;
    for (size_t s = 0; s < seq_blocks.size(); ++s) {
      for (int t = 0; t < seq_tokens[s]; ++t) {
        for (int j = 0; j < p.list_len; ++j) {
          const int64_t pos = static_cast<int64_t>(rng.Below(seq_blocks[s] * 64));
          const uint64_t r = rng.Below(100);
          p.indices.push_back(r < 6 ? -1 : r < 8 ? static_cast<int32_t>(fp8.num_slots + r)
                                                 : table[s * stride + pos / 64] * 64 + static_cast<int32_t>(pos % 64));
        }
      }
    }
    p.tokens = static_cast<int64_t>(p.indices.size()) / p.list_len;
    RandomQ(p, 93 + heads);

    DeviceArray<int32_t> dtable, dbase, dmap(pool_blocks), didx, dremap(p.indices.size());
    dtable.Upload(table);
    dbase.Upload(base);
    didx.Upload(p.indices);
    dmap.Poison();
    dremap.Poison();
    DeviceArray<uint8_t> wide(WidenedLatentBytes(base.back()));
    wide.Poison();
    LatentWidenParams w;
    w.cache = fp8.dev.get();
    w.num_slots = fp8.num_slots;
    w.block_table = dtable.get();
    w.block_table_stride = stride;
    w.num_seqs = static_cast<int64_t>(seq_blocks.size());
    w.seq_block_base = dbase.get();
    w.max_seq_blocks = 5;
    w.widened = reinterpret_cast<__nv_bfloat16*>(wide.get());
    w.block_map = dmap.get();
    ASSERT_TRUE(LaunchWidenLatentBlocks(w, nullptr).ok());
    SlotRemapParams m;
    m.indices = didx.get();
    m.tokens = p.tokens;
    m.list_len = p.list_len;
    m.in_stride = m.out_stride = p.list_len;
    m.block_map = dmap.get();
    m.num_slots = fp8.num_slots;
    m.out = dremap.get();
    ASSERT_TRUE(LaunchRemapSlots(m, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

    Cache widened;
    widened.format = LatentFormat::kBF16;
    widened.num_slots = base.back() * 64;
    widened.bytes = wide.Download();
    widened.dev.Upload(widened.bytes);
    Problem pw = p;
    pw.indices = dremap.Download();
    const Result want = RunRef(p, fp8);
    for (const SparseMlaPlan& plan : {SparseMlaPlan{}, SparseMlaPlan{64, 1, 256}, SparseMlaPlan{32, 2, 128}}) {
      const Result got = RunGpu(pw, widened, plan);
      ExpectClose(got, want, LatentFormat::kFp8Ds,
                  "widened, heads " + ::testing::PrintToString(heads) + " tile " + ::testing::PrintToString(got.plan.head_tile));
    }
  }
}

TEST(SparseMla, RejectsBadParams) {
  SparseMlaParams p;
  p.tokens = 1;
  p.heads = 8;
  EXPECT_EQ(LaunchSparseMla(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p.format = LatentFormat::kF32;
  EXPECT_FALSE(SparseMlaSupported(8, LatentFormat::kF32));
  EXPECT_EQ(LaunchSparseMla(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace spar
