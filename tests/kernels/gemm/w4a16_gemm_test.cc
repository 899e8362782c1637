// The W4A16 GEMM (int4 and NVFP4, dense and grouped) against kernels/ref on
// fresh random inputs: the weights are random canonical codes (group scales
// spread over 2^±4, so per-group scaling matters), repacked by
// w4_layout.h as the cuda backend does at load, dequantized by kernels/ref
// and multiplied in fp32. Products are exact in the kernel, so fp32 output
// agrees to fp32 summation order (1e-5 of the row scale) and bf16 output to
// its rounding. Edge cases: M not a multiple of any tile, K = 128, N not a
// multiple of 64, every tile configuration, split-K, SiLU pairs, a column
// range of a wider Y; grouped: one expert, an expert without tokens, every
// token on one expert, 64 tokens x top-8. The planners and the launch
// validation, which need no GPU: w4a16_plan_test.cc.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/rng.h"
#include "gtest/gtest.h"
#include "kernels/cuda/gemm/moe.h"
#include "kernels/cuda/gemm/w4_layout.h"
#include "kernels/cuda/gemm/w4a16_gemm.h"
#include "kernels/ref/int4_ref.h"
#include "kernels/ref/nvfp4_ref.h"
#include "tests/kernels/gemm/gemm_test_util.h"

namespace spar::testing {
namespace {

// One random 4-bit matrix, its canonical codes and its fp32 value.
struct Host4 {
  bool fp4 = false;
  ref::Int4Weights i4;
  ref::Nvfp4Weights f4;
  std::vector<float> deq;  // [n, k]
  gemm::W4Source Source() const { return fp4 ? gemm::W4SourceOf(f4) : gemm::W4SourceOf(i4); }
};

Host4 Make4(bool fp4, int64_t n, int64_t k, int64_t group, uint64_t seed) {
  Host4 h;
  h.fp4 = fp4;
  Rng rng(seed);
  h.deq.resize(n * k);
  if (fp4) {
    h.f4.rows = n;
    h.f4.cols = k;
    h.f4.global_scale = 0.01f + rng.Uniform() * 0.05f;
    for (int64_t i = 0; i < n * k; ++i) h.f4.codes.push_back(static_cast<uint8_t>(rng.Below(16)));
    // e4m3 block scales from 2^-6 to ~2^4 (subnormal ones included).
    for (int64_t i = 0; i < n * k / 16; ++i) h.f4.scales.push_back(static_cast<uint8_t>(1 + rng.Below(0x58)));
    ref::DequantizeNvfp4(h.f4, 0, n, h.deq.data());
  } else {
    h.i4.rows = n;
    h.i4.cols = k;
    h.i4.group = group;
    for (int64_t i = 0; i < n * k; ++i) h.i4.codes.push_back(static_cast<uint8_t>(rng.Below(16)));
    for (int64_t i = 0; i < n * (k / group); ++i) {
      h.i4.zeros.push_back(static_cast<uint8_t>(rng.Below(17)));  // GPTQ v1 reaches 16
      h.i4.scales.push_back(std::ldexp(0.5f + rng.Uniform(), static_cast<int>(rng.Below(9)) - 10));
    }
    ref::DequantizeInt4(h.i4, 0, n, h.deq.data());
  }
  return h;
}

// The packed matrix on the device.
struct Device4 {
  DeviceArray<uint8_t> values, zeros, fp4_scales;
  DeviceArray<float> scales, global;
  W4GemmWeight w;
  void Upload(const gemm::W4Packed& p, bool silu) {
    values.Upload(p.values);
    w = W4GemmWeight();
    w.values = values.get();
    w.rows_padded = p.rows_padded;
    w.silu_pair = silu;
    w.n = silu ? p.rows / 2 : p.rows;
    if (p.fp4) {
      fp4_scales.Upload(p.fp4_scales);
      global.Upload({p.global_scale, p.global_scale_up});
      w.type = W4WeightType::kNvfp4;
      w.fp4_scales = fp4_scales.get();
      w.global_scale = global.get();
    } else {
      scales.Upload(p.scales);
      zeros.Upload(p.zeros);
      w.type = W4WeightType::kInt4;
      w.scales = scales.get();
      w.zeros = zeros.get();
      w.group = p.group;
    }
  }
};

std::vector<uint16_t> ToBf16Bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = FloatToBf16(v[i]);
  return b;
}

float Silu(float g) { return g / (1.0f + std::exp(-g)); }

// max |got - want| over a row relative to the row's max |want|, worst row.
double WorstRowError(const std::vector<float>& got, const std::vector<float>& want, int64_t m, int64_t n, int64_t ld) {
  double worst = 0;
  for (int64_t r = 0; r < m; ++r) {
    double err = 0, scale = 1e-30;
    for (int64_t j = 0; j < n; ++j) {
      const double w = want[r * n + j], g = got[r * ld + j];
      if (!std::isfinite(g)) return INFINITY;
      err = std::max(err, std::fabs(g - w));
      scale = std::max(scale, std::fabs(w));
    }
    worst = std::max(worst, err / scale);
  }
  return worst;
}

struct DenseCase {
  bool fp4;
  int64_t m, n, k, group;
  bool silu = false;
  bool fp32_out = true;
  int force_config = -1;
  int force_splits = 1;
  int64_t ld_extra = 0;  // Y is a column range of a wider matrix
};

void RunDense(const DenseCase& c) {
  SCOPED_TRACE(absl::StrCat(c.fp4 ? "nvfp4" : "int4", " m=", c.m, " n=", c.n, " k=", c.k, " g=", c.group,
                            c.silu ? " silu" : "", c.fp32_out ? " fp32" : " bf16", " cfg=", c.force_config, " splits=",
                            c.force_splits));
  const Host4 a = Make4(c.fp4, c.n, c.k, c.group, c.m * 131 + c.n + c.k);
  const Host4 b = c.silu ? Make4(c.fp4, c.n, c.k, c.group, c.m + 7) : Host4();
  const std::vector<float> x = MakeActivations(c.m, c.k, c.n + 3);
  std::vector<float> want = RefGemm(x, c.m, c.k, a.deq, c.n);
  if (c.silu) {
    const std::vector<float> up = RefGemm(x, c.m, c.k, b.deq, c.n);
    for (size_t i = 0; i < want.size(); ++i) want[i] = Silu(want[i]) * up[i];
  }
  Device4 w;
  w.Upload(c.silu ? gemm::PackW4SiluPair(a.Source(), b.Source()) : gemm::PackW4(a.Source()), c.silu);
  DeviceArray<uint16_t> dx;
  dx.Upload(ToBf16Bits(x));
  const int64_t ldy = c.n + c.ld_extra;
  DeviceArray<float> y32(c.m * ldy);
  DeviceArray<uint16_t> y16(c.m * ldy);
  DeviceArray<uint8_t> ws(64 << 20);
  SPAR_ASSERT_CUDA(cudaMemset(ws.get(), 0, ws.bytes()));
  W4A16GemmParams p;
  p.m = c.m;
  p.k = c.k;
  p.x = reinterpret_cast<const __nv_bfloat16*>(dx.get());
  p.ldx = c.k;
  p.w = w.w;
  p.y = c.fp32_out ? static_cast<void*>(y32.get()) : static_cast<void*>(y16.get());
  p.ldy = ldy;
  p.y_fp32 = c.fp32_out;
  p.workspace = ws.get();
  p.workspace_bytes = ws.bytes();
  p.force_config = c.force_config;
  p.force_splits = c.force_splits;
  // Poison Y so unwritten outputs show.
  SPAR_ASSERT_CUDA(cudaMemset(p.y, 0xff, c.m * ldy * (c.fp32_out ? 4 : 2)));
  const absl::Status st = LaunchW4A16Gemm(p, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<float> got(c.m * ldy);
  if (c.fp32_out) {
    got = y32.Download();
  } else {
    const auto h = y16.Download();
    for (size_t i = 0; i < h.size(); ++i) got[i] = Bf16ToFloat(h[i]);
  }
  const double err = WorstRowError(got, want, c.m, c.n, ldy);
  EXPECT_LE(err, c.fp32_out ? 2e-5 : 1e-2);
  // The split-K counters are left at zero: a second launch gives the same
  // bits. Compared as bits: the poisoned columns outside the range are NaN,
  // and NaN != NaN would fail a float comparison of identical outputs.
  if (c.fp32_out) {
    ASSERT_TRUE(LaunchW4A16Gemm(p, nullptr).ok());
    SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<float> again = y32.Download();
    ASSERT_EQ(again.size(), got.size());
    EXPECT_EQ(std::memcmp(again.data(), got.data(), got.size() * sizeof(float)), 0);
  }
}

TEST(W4A16GemmTest, DenseShapesAndEdges) {
  SPAR_REQUIRE_GPU();
  for (bool fp4 : {false, true}) {
    RunDense({fp4, 1, 256, 128, 64});                    // K = 128 (two chunks)
    RunDense({fp4, 5, 200, 384, 128});                   // M, N off every tile; K/64 = 6 (partial stages)
    RunDense({fp4, 16, 512, 2048, 128});
    RunDense({fp4, 33, 320, 512, 64});
    RunDense({fp4, 200, 384, 1024, 128});                // the prefill tile
    RunDense({fp4, 1, 2048, 6144, 128});                 // decode: split-K
    RunDense({fp4, 7, 96, 256, 256, false, false});      // bf16 out, one group of 256
    RunDense({fp4, 9, 64, 192, 64, false, true, -1, 1, 40});  // a column range of a wider Y
  }
}

TEST(W4A16GemmTest, EveryConfigurationAndSplit) {
  SPAR_REQUIRE_GPU();
  for (bool fp4 : {false, true}) {
    for (int cfg = 0; cfg < kW4NumConfigs; ++cfg) {
      for (int splits : {1, 3, 8}) RunDense({fp4, 37, 256, 1024, 128, false, true, cfg, splits});
    }
  }
}

// The tile kernel's int4 groups: it tracks each copy's group and each
// group's end by counting chunks from the split's first one, so group sizes
// of 1, 2, 3 and 4 chunks (64-256 columns) against stages of 2 or 4 chunks,
// splits that start and end inside a group (24 chunks over 5 and 7 splits),
// a partial row block, two token tiles and a token tail. NVFP4 (no groups)
// on the same shapes.
TEST(W4A16GemmTest, TileKernelGroupsAcrossStagesAndSplits) {
  SPAR_REQUIRE_GPU();
  for (bool fp4 : {false, true}) {
    for (int cfg = 0; cfg < kW4NumConfigs; ++cfg) {
      if (W4ConfigIsDecode(cfg) || W4ConfigIsStream(cfg)) continue;
      const int64_t m = W4ConfigBlockTokens(cfg) + 7;  // two token tiles, the second partial
      for (int64_t group : {64, 128, 192, 256}) {
        if (fp4 && group != 64) continue;  // (NVFP4 ignores it)
        for (int splits : {1, 5, 7}) RunDense({fp4, m, 200, 1536, group, false, true, cfg, splits});
      }
    }
  }
}

// The decode kernel (per-warp rings, no block barrier in the K loop) on the
// shapes that stress it: a partial last row block (idle warps), K splits
// that start and end inside an int4 group, fewer chunks than ring slots,
// more tokens than one decode tile, SiLU pairs, bf16 out.
TEST(W4A16GemmTest, DecodeKernelEdges) {
  SPAR_REQUIRE_GPU();
  for (bool fp4 : {false, true}) {
    for (int cfg = 0; cfg < kW4NumConfigs; ++cfg) {
      if (!W4ConfigIsDecode(cfg)) continue;
      RunDense({fp4, 1, 320, 640, 128, false, true, cfg, 0});     // the planner's split
      RunDense({fp4, 3, 96, 1024, 256, true, false, cfg, 5});     // splits inside 256-column groups
      RunDense({fp4, 16, 64, 128, 64, false, true, cfg, 1});      // 2 chunks, 1 group per chunk
      RunDense({fp4, 11, 200, 384, 128, false, true, cfg, 2});    // several token tiles
      RunDense({fp4, 2, 136, 1152, 64, false, true, cfg, 7, 24});  // a column range of a wider Y
    }
  }
}

// The streaming kernel (a block's warps split K, several chunks loaded a
// round, no split over blocks) on the shapes that stress it: K ranges that
// end in a partial round, int4 groups of 4 chunks split between warps,
// warps without a chunk (K = 64), several token tiles, SiLU pairs, bf16
// out, a column range of a wider Y. The launcher ignores a forced split.
TEST(W4A16GemmTest, StreamKernelEdges) {
  SPAR_REQUIRE_GPU();
  int streams = 0;
  for (bool fp4 : {false, true}) {
    for (int cfg = 0; cfg < kW4NumConfigs; ++cfg) {
      if (!W4ConfigIsStream(cfg)) continue;
      ++streams;
      RunDense({fp4, 1, 320, 640, 128, false, true, cfg, 0});       // 10 chunks
      RunDense({fp4, 3, 96, 1024, 256, true, false, cfg, 5});       // SiLU, groups split between warps
      RunDense({fp4, 8, 64, 64, 64, false, true, cfg, 1});          // one chunk
      RunDense({fp4, 11, 200, 1152, 64, false, true, cfg, 2});      // two token tiles
      RunDense({fp4, 2, 136, 1152, 128, false, true, cfg, 7, 24});  // a column range of a wider Y
      RunDense({fp4, 16, 192, 768, 128, true, true, cfg, 1});       // a full 16-token tile, SiLU
      RunDense({fp4, 13, 64, 640, 64, false, false, cfg, 1});       // 13 tokens, bf16 out
    }
  }
  EXPECT_GT(streams, 0);
}

TEST(W4A16GemmTest, SiluPairs) {
  SPAR_REQUIRE_GPU();
  for (bool fp4 : {false, true}) {
    RunDense({fp4, 3, 192, 512, 128, true});
    RunDense({fp4, 64, 256, 256, 64, true, false});
    RunDense({fp4, 130, 128, 512, 128, true, true, 4, 1});
  }
}

TEST(W4A16GemmTest, RejectsWhatItCannotRun) {
  SPAR_REQUIRE_GPU();
  const Host4 a = Make4(false, 64, 256, 64, 1);
  Device4 w;
  w.Upload(gemm::PackW4(a.Source()), false);
  DeviceArray<uint16_t> dx(256);
  DeviceArray<float> y(64);
  W4A16GemmParams p;
  p.m = 1;
  p.k = 256;
  p.x = reinterpret_cast<const __nv_bfloat16*>(dx.get());
  p.ldx = 256;
  p.w = w.w;
  p.y = y.get();
  p.ldy = 64;
  p.y_fp32 = true;
  EXPECT_TRUE(LaunchW4A16Gemm(p, nullptr).ok());
  W4A16GemmParams bad = p;
  bad.k = 200;
  EXPECT_NE(LaunchW4A16Gemm(bad, nullptr).message().find("k"), absl::string_view::npos);
  bad = p;
  bad.w.group = 32;
  EXPECT_NE(LaunchW4A16Gemm(bad, nullptr).message().find("w.group"), absl::string_view::npos);
  bad = p;
  bad.w.scales = nullptr;
  EXPECT_FALSE(LaunchW4A16Gemm(bad, nullptr).ok());
  bad = p;
  bad.ldy = 10;
  EXPECT_FALSE(LaunchW4A16Gemm(bad, nullptr).ok());
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
}

// ---- grouped (MoE) ----


struct GroupedCase {
  bool fp4;
  std::vector<int> rows_per_expert;  // permuted rows of each local expert
  int64_t n, k, group;
  bool silu;
  int force_config = -1;
  int64_t max_rows_per_expert = 0;
  // Also launch with the work list the permutation would write (moe.h's
  // layout) and check the launch follows it.
  bool permutation_list = false;
  int tail_rows = -1;    // W4MoeGroupedGemmParams::tail_rows (> 0: the split must be made)
  int tail_config = -1;  // its force_tail_config
};

// The permutation's work list for entries of bt rows (MoePermuteParams::work):
// the count, three words of padding, then {expert, first row, rows, 0}.
// drop_last: the list without its last entry.
std::vector<int32_t> PermutationList(const std::vector<int32_t>& offsets, int bt, bool drop_last) {
  std::vector<int32_t> list(4, 0);
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    for (int32_t r0 = offsets[e]; r0 < offsets[e + 1]; r0 += bt) {
      list.insert(list.end(), {static_cast<int32_t>(e), r0, std::min(bt, offsets[e + 1] - r0), 0});
    }
  }
  if (drop_last && list.size() > 4) list.resize(list.size() - 4);
  list[0] = static_cast<int32_t>(list.size() / 4 - 1);
  return list;
}

// LaunchW4MoeGroupedGemm of p given the permutation's list (work_bt: the
// height it claims) into p.y, poisoned first; y downloaded as raw bits.
std::vector<uint32_t> RunWithList(W4MoeGroupedGemmParams p, const std::vector<int32_t>& list, int work_bt,
                                  int64_t y_words) {
  DeviceArray<int32_t> dl;
  dl.Upload(list);
  p.work = dl.get();
  p.work_block_tokens = work_bt;
  EXPECT_EQ(cudaMemset(p.y, 0xff, y_words * 4), cudaSuccess);
  const absl::Status st = LaunchW4MoeGroupedGemm(p, nullptr);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint32_t> y(y_words);
  EXPECT_EQ(cudaMemcpy(y.data(), p.y, y_words * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  return y;
}

void RunGrouped(const GroupedCase& c) {
  const int experts = static_cast<int>(c.rows_per_expert.size());
  const int64_t rows = std::accumulate(c.rows_per_expert.begin(), c.rows_per_expert.end(), int64_t{0});
  SCOPED_TRACE(absl::StrCat(c.fp4 ? "nvfp4" : "int4", " experts=", experts, " rows=", rows, " n=", c.n, " k=", c.k,
                            c.silu ? " silu" : "", " cfg=", c.force_config));
  // X has its own rows; the permuted rows gather them (x_row_index).
  const int64_t x_rows = std::max<int64_t>(1, rows / 2 + 3);
  const std::vector<float> x = MakeActivations(x_rows, c.k, rows + 11);
  Rng rng(rows * 7 + experts);
  std::vector<int32_t> row_index(std::max<int64_t>(rows, 1));
  for (auto& r : row_index) r = static_cast<int32_t>(rng.Below(x_rows));
  std::vector<int32_t> offsets(experts + 1, 0);
  for (int e = 0; e < experts; ++e) offsets[e + 1] = offsets[e] + c.rows_per_expert[e];
  std::vector<Host4> gate, up;
  std::vector<uint8_t> values, zeros, fp4s;
  std::vector<float> scales, globals;
  int64_t vs = 0, ss = 0, zs = 0, fs = 0, rows_padded = 0;
  for (int e = 0; e < experts; ++e) {
    gate.push_back(Make4(c.fp4, c.n, c.k, c.group, 100 + e));
    if (c.silu) up.push_back(Make4(c.fp4, c.n, c.k, c.group, 200 + e));
    const gemm::W4Packed p = c.silu ? gemm::PackW4SiluPair(gate[e].Source(), up[e].Source()) : gemm::PackW4(gate[e].Source());
    vs = static_cast<int64_t>(p.values.size());
    ss = static_cast<int64_t>(p.scales.size());
    zs = static_cast<int64_t>(p.zeros.size());
    fs = static_cast<int64_t>(p.fp4_scales.size());
    rows_padded = p.rows_padded;
    values.insert(values.end(), p.values.begin(), p.values.end());
    scales.insert(scales.end(), p.scales.begin(), p.scales.end());
    zeros.insert(zeros.end(), p.zeros.begin(), p.zeros.end());
    fp4s.insert(fp4s.end(), p.fp4_scales.begin(), p.fp4_scales.end());
    globals.push_back(p.global_scale);
    if (c.silu) globals.push_back(p.global_scale_up);
  }
  std::vector<float> want(std::max<int64_t>(rows, 1) * c.n, 0.0f);
  for (int e = 0; e < experts; ++e) {
    for (int32_t r = offsets[e]; r < offsets[e + 1]; ++r) {
      const float* xr = x.data() + static_cast<int64_t>(row_index[r]) * c.k;
      for (int64_t j = 0; j < c.n; ++j) {
        float a = 0, b = 0;
        for (int64_t q = 0; q < c.k; ++q) {
          a += xr[q] * gate[e].deq[j * c.k + q];
          if (c.silu) b += xr[q] * up[e].deq[j * c.k + q];
        }
        want[r * c.n + j] = c.silu ? Silu(a) * b : a;
      }
    }
  }
  // Room for a 1-row tile's work list (one entry per row) when one is forced.
  const size_t ws_bytes = std::max<size_t>(MoeGroupedGemmWorkspaceBytes(std::max<int64_t>(rows, 1), experts),
                                           static_cast<size_t>(rows + 2) * 16);
  DeviceArray<uint8_t> dv, dz, df, ws(ws_bytes);
  DeviceArray<float> dsc, dg, y(std::max<int64_t>(rows, 1) * c.n);
  DeviceArray<uint16_t> dx;
  DeviceArray<int32_t> doff, dri;
  dv.Upload(values);
  if (c.fp4) {
    df.Upload(fp4s);
    dg.Upload(globals);
  } else {
    dsc.Upload(scales);
    dz.Upload(zeros);
  }
  dx.Upload(ToBf16Bits(x));
  doff.Upload(offsets);
  dri.Upload(row_index);
  W4MoeGroupedGemmParams p;
  p.num_experts = experts;
  p.expert_offsets = doff.get();
  p.max_rows = rows;
  p.expected_rows_per_expert = std::max<int64_t>(1, rows / experts);
  p.k = c.k;
  p.x = reinterpret_cast<const __nv_bfloat16*>(dx.get());
  p.ldx = c.k;
  p.x_row_index = dri.get();
  p.weight.type = c.fp4 ? W4WeightType::kNvfp4 : W4WeightType::kInt4;
  p.weight.values = dv.get();
  p.weight.scales = dsc.get();
  p.weight.zeros = dz.get();
  p.weight.fp4_scales = df.get();
  p.weight.global_scale = dg.get();
  p.weight.n = c.n;
  p.weight.rows_padded = rows_padded;
  p.weight.group = c.fp4 ? 0 : c.group;
  p.weight.silu_pair = c.silu;
  p.values_stride = vs;
  p.scales_stride = ss;
  p.zeros_stride = zs;
  p.fp4_scales_stride = fs;
  p.y = y.get();
  p.ldy = c.n;
  p.y_fp32 = true;
  p.workspace = ws.get();
  p.workspace_bytes = ws.bytes();
  p.force_config = c.force_config;
  p.max_rows_per_expert = c.max_rows_per_expert;
  p.tail_rows = c.tail_rows;
  p.force_tail_config = c.tail_config;
  if (c.tail_rows > 0) {
    ASSERT_GT(W4MoeGroupedGemmTailPlan(p).below, 0) << "the case asks for a tail split the launch does not make";
    EXPECT_EQ(W4MoeGroupedGemmBlockTokens(p), 0) << "a split launch reads no permutation list";
  }
  SPAR_ASSERT_CUDA(cudaMemset(y.get(), 0xff, y.bytes()));
  const absl::Status st = LaunchW4MoeGroupedGemm(p, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  SPAR_ASSERT_CUDA(cudaDeviceSynchronize());
  if (c.force_config >= 0 && W4ConfigBlockTokens(c.force_config) == 1 &&
      rows > (rows + 7) / 8 + std::min<int64_t>(experts, rows)) {
    // The launcher's own workspace size (for >= 8-row tiles) cannot hold a
    // 1-row tile's list here: refused, naming the field, nothing launched.
    W4MoeGroupedGemmParams small = p;
    small.workspace_bytes = MoeGroupedGemmWorkspaceBytes(rows, experts);
    const absl::Status refused = LaunchW4MoeGroupedGemm(small, nullptr);
    EXPECT_NE(refused.message().find("force_config"), absl::string_view::npos) << refused;
  }
  if (rows == 0) return;
  const std::vector<float> got = y.Download();
  EXPECT_LE(WorstRowError(got, want, rows, c.n, c.n), 2e-5);
  if (!c.permutation_list) return;
  // Given the permutation's list for its tile height the launch reads it:
  // the same bits; without its last entry, that entry's rows stay poisoned.
  // A list of another height is ignored.
  const int bt = W4MoeGroupedGemmBlockTokens(p);
  ASSERT_GE(bt, 1);
  std::vector<uint32_t> own(got.size());
  std::memcpy(own.data(), got.data(), own.size() * 4);
  const int64_t words = static_cast<int64_t>(own.size());
  EXPECT_EQ(RunWithList(p, PermutationList(offsets, bt, false), bt, words), own) << "bt " << bt;
  const std::vector<int32_t> short_list = PermutationList(offsets, bt, true);
  const std::vector<uint32_t> partial = RunWithList(p, short_list, bt, words);
  const int32_t dropped_first = short_list.size() > 4 ? short_list[short_list.size() - 3] + short_list[short_list.size() - 2] : 0;
  for (int64_t r = 0; r < rows; ++r) {
    const bool computed = r < dropped_first;  // entries are in row order; the dropped one is last
    for (int64_t j = 0; j < c.n; ++j) {
      const uint32_t bits = partial[r * c.n + j];
      if (computed ? bits != own[r * c.n + j] : bits != 0xffffffffu) {
        ADD_FAILURE() << "row " << r << " col " << j << (computed ? " differs from" : " was written without") << " its entry";
        return;
      }
    }
  }
  EXPECT_EQ(RunWithList(p, short_list, bt + 1, words), own) << "a list of another height was read";
}

TEST(W4MoeGroupedGemmTest, EdgeCasesAndDecodeBatch) {
  SPAR_REQUIRE_GPU();
  for (bool fp4 : {false, true}) {
    RunGrouped({fp4, {13}, 256, 512, 128, true});                    // a single expert
    RunGrouped({fp4, {5, 0, 9, 0}, 192, 256, 64, false});             // experts without tokens
    RunGrouped({fp4, {0, 0, 70, 0}, 128, 384, 128, true});            // every token on one expert
    RunGrouped({fp4, {0, 0, 0}, 128, 256, 64, false});                // no tokens at all
    // 64 tokens x top-8 over 16 local experts (32 rows each, uneven).
    std::vector<int> decode(16);
    for (int e = 0; e < 16; ++e) decode[e] = 16 + (e * 7) % 33;
    RunGrouped({fp4, decode, 256, 512, 128, true});
    for (int cfg = 0; cfg < kW4NumConfigs; ++cfg) RunGrouped({fp4, {3, 40, 1}, 128, 256, 128, true, cfg});
  }
}

// The tail split (W4MoeGroupedGemmTailPlan): forced on the prefill tile with
// tails on the decode, streaming and tile kernels' small tiles, and on a
// 32-token main tile; experts with a few rows past whole tiles, experts
// wholly in the tail, one with tails of two entries, one without a tail
// (44 rows past its tiles, above the bound), experts without rows.
TEST(W4MoeGroupedGemmTest, TailTilesOfPartialExperts) {
  SPAR_REQUIRE_GPU();
  const std::vector<int> rows = {130, 5, 0, 150, 128, 300, 31};
  struct Split {
    const char *main, *tail;
    int below;
  };
  const Split splits[] = {{"W4P128T", "W4D16M2S4", 32}, {"W4P128T", "W4SM2D3W2", 32}, {"W4P128T", "W4T16", 24},
                          {"W4P128T", "W4T32", 48}, {"W4T32", "W4SM2D3W2", 16}};
  for (bool fp4 : {false, true}) {
    for (const Split& sp : splits) {
      SCOPED_TRACE(absl::StrCat(sp.main, " + tail < ", sp.below, " on ", sp.tail));
      GroupedCase c{fp4, rows, 128, 256, 128, true, W4ConfigNamed(sp.main)};
      c.tail_rows = sp.below;
      c.tail_config = W4ConfigNamed(sp.tail);
      ASSERT_GE(c.force_config, 0);
      ASSERT_GE(c.tail_config, 0);
      RunGrouped(c);
    }
  }
}

// A one-token decode step (max_rows_per_expert 1: the one-token plan) and
// an 8-token one, as the engine launches them: top-8 of 32 local experts.
TEST(W4MoeGroupedGemmTest, DecodeStepsAsTheEngineLaunchesThem) {
  SPAR_REQUIRE_GPU();
  for (bool fp4 : {false, true}) {
    std::vector<int> one(32, 0), eight(32, 0);
    for (int e : {1, 4, 9, 13, 17, 22, 28, 31}) one[e] = 1;
    for (int e = 0; e < 32; ++e) eight[e] = (e * 5) % 4;  // 0..3 rows each, 48 in all
    RunGrouped({fp4, one, 192, 640, 128, true, -1, 1});
    RunGrouped({fp4, one, 320, 256, 64, false, -1, 1});
    RunGrouped({fp4, eight, 192, 640, 128, true, -1, 8});
  }
}

// The engine's path: the launch reads the work list the permutation wrote
// for its tile height (one launch fewer) at one token, eight, and a prefill
// size with an expert spanning several entries, experts without rows.
TEST(W4MoeGroupedGemmTest, ReadsThePermutationsWorkList) {
  SPAR_REQUIRE_GPU();
  for (bool fp4 : {false, true}) {
    std::vector<int> one(32, 0), eight(32, 0), many(16, 0);
    for (int e : {1, 4, 9, 13, 17, 22, 28, 31}) one[e] = 1;
    for (int e = 0; e < 32; ++e) eight[e] = (e * 5) % 4;
    for (int e = 0; e < 16; ++e) many[e] = e % 3 == 0 ? 0 : 20 + 13 * e;
    RunGrouped({fp4, one, 192, 640, 128, true, -1, 1, true});
    RunGrouped({fp4, eight, 192, 640, 128, true, -1, 8, true});
    // ~73 rows an expert: the prefill tile, whose automatic tail split
    // builds its own lists; with the split off it reads the permutation's.
    GroupedCase prefill{fp4, many, 256, 512, 128, false, -1, 0, true};
    prefill.tail_rows = 0;
    RunGrouped(prefill);
    prefill.tail_rows = -1;
    prefill.permutation_list = false;
    RunGrouped(prefill);
  }
}

}  // namespace
}  // namespace spar::testing
