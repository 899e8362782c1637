#include "tests/kernels/gemm/w8a16_gemm_case.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/ref/moe_ref.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar::testing {

std::string Describe(const GemmCase& c) {
  std::string s = absl::StrCat("m=", c.m, " k=", c.k, " cfg=", c.force_config, " splits=", c.force_splits,
                               " stream_warps=", c.force_stream_warps,
                               c.layout == GemmWeightLayout::kTilesAlongK      ? " tiled along K"
                               : c.layout == GemmWeightLayout::kTilesAcrossRows ? " tiled across rows"
                                                                                : "",
                               c.up ? " silu" : "", c.residual ? " residual" : "", c.y_fp32 ? " fp32" : "", " n=");
  for (const HostWeight* w : c.segments) absl::StrAppend(&s, w->n, w->type == kFp8 ? "e4m3," : "bf16,");
  return s;
}

// Output rows are allocated with one spare row and 8 spare columns that
// must stay poisoned (catches stores outside [m, n_out)).
void RunAndCheck(const GemmCase& c, cudaStream_t stream, std::vector<float>* got_out) {
  SCOPED_TRACE(Describe(c));
  const int64_t m = c.m, k = c.k;
  const std::vector<float> x = MakeActivations(m, k, c.seed * 7919 + 1, c.exact);
  // X rows carry 8 NaN columns past k: the kernel must not read them (a K
  // tail is zero-filled, not loaded).
  const int64_t ldx = k + 8;
  std::vector<uint16_t> xh(static_cast<size_t>(m * ldx), 0xffff);
  const std::vector<uint16_t> xb = testing::ToBf16(x);
  for (int64_t i = 0; i < m; ++i) std::copy(xb.begin() + i * k, xb.begin() + (i + 1) * k, xh.begin() + i * ldx);
  DeviceArray<uint16_t> dx;
  dx.Upload(xh);

  std::vector<DeviceWeight> dw(c.segments.size());
  W8A16GemmParams p;
  p.m = m;
  p.k = k;
  p.x = reinterpret_cast<const __nv_bfloat16*>(dx.get());
  p.ldx = ldx;
  p.num_segments = static_cast<int>(c.segments.size());
  for (size_t s = 0; s < c.segments.size(); ++s) {
    dw[s].layout = c.layout;
    dw[s].Upload(*c.segments[s]);
    p.segments[s] = dw[s].View(*c.segments[s]);
  }
  DeviceWeight dup;
  if (c.up != nullptr) {
    dup.layout = c.layout;
    dup.Upload(*c.up);
    p.epilogue = GemmEpilogue::kSiluMul;
    p.up = dup.View(*c.up);
  }
  const int64_t n_out = W8A16GemmOutputColumns(p);
  const int64_t ldy = n_out + 8;

  // Reference (fp32) and the residual.
  std::vector<float> ref(m * n_out);
  if (c.up != nullptr) {
    const std::vector<float> gate = RefGemm(x, m, k, c.segments[0]->deq, n_out);
    const std::vector<float> up = RefGemm(x, m, k, c.up->deq, n_out);
    ref::SiluMul(gate.data(), up.data(), n_out, m, n_out, ref.data(), n_out);
  } else {
    int64_t col = 0;
    for (const HostWeight* w : c.segments) {
      const std::vector<float> y = RefGemm(x, m, k, w->deq, w->n);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < w->n; ++j) ref[i * n_out + col + j] = y[i * w->n + j];
      }
      col += w->n;
    }
  }
  const size_t elem = c.y_fp32 ? 4 : 2;
  DeviceArray<uint8_t> dy((m + 1) * ldy * elem);
  dy.Poison();
  std::vector<float> residual;
  if (c.residual) {
    ASSERT_FALSE(c.y_fp32);
    residual = MakeActivations(m, n_out, c.seed * 31 + 5);
    std::vector<uint16_t> yinit((m + 1) * ldy, 0xffff);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n_out; ++j) {
        yinit[i * ldy + j] = FloatToBf16(residual[i * n_out + j]);
        ref[i * n_out + j] += residual[i * n_out + j];
      }
    }
    SPAR_ASSERT_CUDA(cudaMemcpy(dy.get(), yinit.data(), yinit.size() * 2, cudaMemcpyHostToDevice));
    p.residual = reinterpret_cast<const __nv_bfloat16*>(dy.get());
    p.ldr = ldy;
  }
  p.y = dy.get();
  p.ldy = ldy;
  p.y_fp32 = c.y_fp32;
  DeviceArray<uint8_t> ws(kWorkspaceBytes);
  SPAR_ASSERT_CUDA(cudaMemset(ws.get(), 0, kWorkspaceBytes));
  p.workspace = ws.get();
  p.workspace_bytes = kWorkspaceBytes;
  p.force_config = c.force_config;
  p.force_splits = c.force_splits;
  p.force_stream_warps = c.force_stream_warps;

  const absl::Status st = LaunchW8A16Gemm(p, stream);
  ASSERT_TRUE(st.ok()) << st;
  SPAR_ASSERT_CUDA(cudaGetLastError());
  SPAR_ASSERT_CUDA(cudaStreamSynchronize(stream));

  // Download, split into the checked region and the guard cells.
  const std::vector<uint8_t> raw = dy.Download();
  std::vector<float> got(m * n_out);
  int64_t guard_bad = 0;
  auto at = [&](int64_t i, int64_t j) -> float {
    const size_t off = (i * ldy + j) * elem;
    if (c.y_fp32) {
      float f;
      std::memcpy(&f, raw.data() + off, 4);
      return f;
    }
    return Bf16ToFloat(static_cast<uint16_t>(raw[off] | (raw[off + 1] << 8)));
  };
  for (int64_t i = 0; i <= m; ++i) {
    for (int64_t j = 0; j < ldy; ++j) {
      const float v = at(i, j);
      if (i < m && j < n_out) {
        got[i * n_out + j] = v;
      } else if (!std::isnan(v)) {
        ++guard_bad;
      }
    }
  }
  EXPECT_EQ(guard_bad, 0) << "stores outside [m, n_out)";
  if (got_out != nullptr) *got_out = got;
  ASSERT_GT(testing::MaxAbs(ref), 0.0) << "vacuous reference";
  if (c.exact) {
    ASSERT_TRUE(c.y_fp32);
    int64_t mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) mismatches += got[i] != ref[i];
    EXPECT_EQ(mismatches, 0) << "exact case: first diff at max abs " << testing::MaxAbsDiff(got, ref);
    return;
  }
  const double rel = testing::RelativeL2(got, ref);
  const double max_ref = testing::MaxAbs(ref);
  // bf16 output: one rounding (rms ~1.1e-3 relative); fp32 output: only the
  // summation order differs.
  const double tol_rel = c.y_fp32 ? 1e-5 : 4e-3;
  EXPECT_LT(rel, tol_rel);
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - ref[i]);
    const double tol = c.y_fp32 ? 1e-5 * max_ref : std::fabs(ref[i]) / 128.0 + 2e-3 * max_ref;
    bad += !(d <= tol);
  }
  EXPECT_EQ(bad, 0) << "elements outside tolerance (rel L2 " << rel << ")";
}

}  // namespace spar::testing
