#include "kernels/cuda/common/arch.cuh"
// Batched bf16 GEMM for the MLA absorptions: 64-column CTA tiles over 32-wide
// K tiles, 4 warps, a cp.async pipeline, mma.sync m16n8k16 with fp32
// accumulate. B comes either as K x N rows (ldmatrix.trans) or N x K rows
// (ldmatrix).
//
// Three tile shapes, one arithmetic. Up to 255 rows take 64-row tiles (4
// warps of 32 x 32, 3 stages); prefill chunks of 256 rows and more take
// 128-row tiles (4 warps of 64 x 32), whose warps load a B fragment for
// four m-tiles instead of two (6 ldmatrix for 16 mma instead of 4 for 8:
// the 64-row tile's k-steps wait on shared memory). At decode (<= 16
// tokens) the GEMM is a stream of weights and the 3-stage pipeline leaves each CTA waiting on memory once
// per two K tiles (the un-absorption's 16 K tiles: ~10 us for 17 MB at 64
// heads); there a 16-row tile (4 warps of 16 x 16, 7 stages in 44.8 KB of
// static shared memory) keeps 6 K tiles in flight. Every output element is
// the same sequence of mma k-steps from zero in every shape, so a token's
// row has the same bits whichever shape its step took (a speculative verify
// step's rows equal a plain decode step's: the engine's greedy equality
// relies on it, and absorb_gemm_gpu_test checks it).
//
// The merged variant (LaunchMlaMergeUnabsorb, decode only) builds its A
// operand, all 512 columns of up to 16 rows, from the sparse MLA's split
// partials before the K loop, with the merge kernel's arithmetic (weights
// e^(lse_s - max), partials summed by fmaf in split order, times 1 / the
// weights' sum, one rounding to bf16), so its rows equal merge-then-GEMM
// bit for bit; only B streams through the pipeline. Every CTA merges its
// head's rows itself (the four 64-column CTAs of a head each once): at a
// few tokens that re-read from L2 costs less than the merge launch it saves.
#include "kernels/cuda/attention/absorb_gemm.h"

#include <cuda_bf16.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/invalid_arg.h"
#include "kernels/cuda/common/mma_sm80.cuh"

namespace spar {
namespace {

constexpr int kBN = 64, kBK = 32, kThreads = 128;
constexpr int kAStride = kBK + 8;    // 80-byte rows: ldmatrix conflict-free
constexpr int kBknStride = kBN + 8;  // 144-byte rows
constexpr int kBnkStride = kBK + 8;
constexpr int kBStage = kBK * kBknStride > kBN * kBnkStride ? kBK * kBknStride : kBN * kBnkStride;
constexpr int64_t kSmallTileMaxRows = 16;  // rows (tokens) up to which the 16-row tile runs
constexpr int64_t kTallTileMinRows = 256;  // rows from which the 128-row tile runs

// kWM warps along M with kMT 16-row fragments each; the other 4 / kWM warps
// split the 64 columns.
template <int kWarpsM, int kFragsM, int kStageCount>
struct TileShape {
  static constexpr int kWM = kWarpsM;
  static constexpr int kMT = kFragsM;
  static constexpr int kStages = kStageCount;
  static constexpr int kBM = kWM * kMT * 16;
  static constexpr int kWN = 4 / kWM;
  static constexpr int kNT = kBN / kWN / 8;  // 8-column fragments per warp
  static constexpr int kAStage = kBM * kAStride;
  static_assert(kNT % 2 == 0, "B fragments are loaded 16 columns at a time");
  static_assert((kAStage + kBStage) * 2 * kStages <= 48 * 1024, "static shared memory");
};
using WideTile = TileShape<2, 2, 3>;   // 64 rows
using TallTile = TileShape<2, 4, 3>;   // 128 rows: prefill chunks
using SmallTile = TileShape<1, 1, 7>;  // 16 rows, 6 K tiles in flight
// The merged variant: 16 rows of A merged whole into shared memory, B in 6
// stages (48 KB of static shared memory in all).
using MergedTile = TileShape<1, 1, 6>;
constexpr int kMergedK = 512;                   // the latent width: all of A
constexpr int kMergedAStride = kMergedK + 8;    // 1040-byte rows: ldmatrix conflict-free
constexpr int kMergedMaxEntries = 64;           // rows x splits one CTA merges
static_assert(MergedTile::kBM * kMergedAStride * 2 + MergedTile::kStages * kBStage * 2 +
                      3 * kMergedMaxEntries * 4 <= 48 * 1024,
              "merged variant: static shared memory");

// Where the merged variant's A comes from: split s of row th = token * heads
// + head at o[(s * rows + th) * 512], its log-sum-exp at lse[s * rows + th].
struct MergeSource {
  const float* o = nullptr;
  const float* lse = nullptr;
  int splits = 0;
  int64_t rows = 0;  // tokens * heads
  int heads = 0;
};

// A[r][0..512) for rows m0 + r < m of head `head`, as MergeSplitsKernel
// (sparse_mla.cu) computes them: w_s = expf(lse_s - max), sum = Σ w_s in
// split order, acc = fmaf(w_s, o_s, acc) in split order, bf16(acc * (1 /
// sum)); a row whose splits are all empty is 0. Rows past m are zeroed.
// The caller's barrier makes a visible.
__device__ __forceinline__ void MergeRowsIntoA(const MergeSource& src, int64_t m0, int64_t m, int head,
                                               __nv_bfloat16 (*a)[kMergedAStride], float* slse, float* sw,
                                               float* smax) {
  constexpr int kRows = MergedTile::kBM;
  constexpr int kColsPerThread = kMergedK / kThreads;  // 4
  // Splits loaded at once: 32 float4 a thread (128 registers, no spill;
  // the engine's batch-1 plan has 32 splits), so a row waits for memory once.
  constexpr int kBatch = 32;
  const int tid = threadIdx.x;
  const int rows = static_cast<int>(m - m0 < kRows ? m - m0 : kRows);
  const int entries = rows * src.splits;
  const int c0 = tid * kColsPerThread;
  float4 v[kBatch];
  auto load = [&](int r, int s0) {
    const float* o = src.o + ((m0 + r) * src.heads + head) * kMergedK + c0;
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      v[i] = s0 + i < src.splits ? *reinterpret_cast<const float4*>(o + (s0 + i) * src.rows * kMergedK)
                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  };
  // The first row's first partials fly while the weights are worked out.
  load(0, 0);
  for (int i = tid; i < entries; i += kThreads) {
    const int r = i / src.splits, s = i - r * src.splits;
    slse[i] = src.lse[s * src.rows + (m0 + r) * src.heads + head];
  }
  __syncthreads();
  if (tid < rows) {
    float mx = -INFINITY;
    for (int s = 0; s < src.splits; ++s) mx = fmaxf(mx, slse[tid * src.splits + s]);
    smax[tid] = mx;
  }
  __syncthreads();
  for (int i = tid; i < entries; i += kThreads) sw[i] = expf(slse[i] - smax[i / src.splits]);
  __syncthreads();
  for (int r = 0; r < kRows; ++r) {
    float acc[kColsPerThread] = {0.0f, 0.0f, 0.0f, 0.0f};
    float inv = 0.0f;
    if (r < rows && smax[r] != -INFINITY) {
      const float* w = sw + r * src.splits;
      float sum = 0.0f;
      for (int s = 0; s < src.splits; ++s) sum += w[s];
      for (int s0 = 0; s0 < src.splits; s0 += kBatch) {
        if (r > 0 || s0 > 0) load(r, s0);
#pragma unroll
        for (int i = 0; i < kBatch; ++i) {
          if (s0 + i < src.splits) {
            acc[0] = fmaf(w[s0 + i], v[i].x, acc[0]);
            acc[1] = fmaf(w[s0 + i], v[i].y, acc[1]);
            acc[2] = fmaf(w[s0 + i], v[i].z, acc[2]);
            acc[3] = fmaf(w[s0 + i], v[i].w, acc[3]);
          }
        }
      }
      inv = 1.0f / sum;
    }
    // An empty or padding row: acc and inv 0, so the row is 0.
    *reinterpret_cast<__nv_bfloat162*>(&a[r][c0]) = __floats2bfloat162_rn(acc[0] * inv, acc[1] * inv);
    *reinterpret_cast<__nv_bfloat162*>(&a[r][c0 + 2]) = __floats2bfloat162_rn(acc[2] * inv, acc[3] * inv);
  }
}

// kMerged: A is merged from `merge` (MergedTile, p.a unused); otherwise it
// streams with B.
template <bool kBKn, class S, bool kMerged = false>
__global__ void __launch_bounds__(kThreads) BatchedGemmKernel(const BatchedGemmParams p, const MergeSource merge) {
  constexpr int kStages = S::kStages;
  static_assert(!kMerged || (S::kBM == MergedTile::kBM && S::kMT == 1), "the merged A is one 16-row fragment");
  __shared__ __align__(16) __nv_bfloat16 as[kMerged ? 1 : kStages][kMerged ? 8 : S::kAStage];
  __shared__ __align__(16) __nv_bfloat16 bs[kStages][kBStage];
  __shared__ __align__(16) __nv_bfloat16 amerged[kMerged ? S::kBM : 1][kMerged ? kMergedAStride : 8];
  __shared__ float merge_scratch[kMerged ? 2 * kMergedMaxEntries + S::kBM : 1];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp % S::kWM, wn = warp / S::kWM;
  const int n0 = blockIdx.x * kBN;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * S::kBM;
  const int batch = blockIdx.z;
  const __nv_bfloat16* a = p.a + batch * p.a_batch_stride;
  const __nv_bfloat16* b = p.b + batch * p.b_batch_stride;
  const int ktiles = p.k / kBK;

  auto issue = [&](int kt) {
    if (kt >= ktiles) return;
    const int s = kt % kStages;
    const int k0 = kt * kBK;
#pragma unroll
    for (int i = 0; i < (S::kBM * 4 + kThreads - 1) / kThreads; ++i) {  // A: kBM rows x 4 chunks
      if constexpr (kMerged) break;
      const int c = tid + i * kThreads;
      if (c >= S::kBM * 4) break;
      const int r = c >> 2, cc = c & 3;
      const bool ok = m0 + r < p.m;
      const __nv_bfloat16* src = ok ? a + (m0 + r) * p.lda + k0 + cc * 8 : a;
      cuda::CpAsync16(&as[s][r * kAStride + cc * 8], src, ok ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int c = tid + i * kThreads;
      if constexpr (kBKn) {  // 32 k-rows x 8 chunks
        const int r = c >> 3, cc = c & 7;
        cuda::CpAsync16(&bs[s][r * kBknStride + cc * 8], b + static_cast<int64_t>(k0 + r) * p.ldb + n0 + cc * 8);
      } else {  // 64 n-rows x 4 chunks
        const int r = c >> 2, cc = c & 3;
        cuda::CpAsync16(&bs[s][r * kBnkStride + cc * 8], b + static_cast<int64_t>(n0 + r) * p.ldb + k0 + cc * 8);
      }
    }
  };

  float acc[S::kMT][S::kNT][4];
#pragma unroll
  for (int i = 0; i < S::kMT; ++i)
#pragma unroll
    for (int j = 0; j < S::kNT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
  for (int kt = 0; kt < kStages - 1; ++kt) {
    issue(kt);
    cuda::CpAsyncCommit();
  }
  if constexpr (kMerged) {  // while the first B tiles fly
    MergeRowsIntoA(merge, m0, p.m, batch, amerged, merge_scratch, merge_scratch + kMergedMaxEntries,
                   merge_scratch + 2 * kMergedMaxEntries);
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    cuda::CpAsyncWait<kStages - 2>();
    __syncthreads();  // tile kt landed; tile kt-1 fully consumed
    issue(kt + kStages - 1);
    cuda::CpAsyncCommit();
    const int s = kt % kStages;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t af[S::kMT][4];
#pragma unroll
      for (int mt = 0; mt < S::kMT; ++mt) {
        if constexpr (kMerged) {
          cuda::LdMatrixX4(af[mt], &amerged[lane & 15][kt * kBK + kk * 16 + (lane >> 4) * 8]);
        } else {
          cuda::LdMatrixX4(af[mt],
                           &as[s][(wm * S::kMT * 16 + mt * 16 + (lane & 15)) * kAStride + kk * 16 + (lane >> 4) * 8]);
        }
      }
#pragma unroll
      for (int np = 0; np < S::kNT / 2; ++np) {
        const int col = wn * S::kNT * 8 + np * 16;
        uint32_t bf[4];
        if constexpr (kBKn) {
          cuda::LdMatrixX4Trans(bf, &bs[s][(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kBknStride + col +
                                           (lane >> 4) * 8]);
        } else {
          cuda::LdMatrixX4(bf, &bs[s][(col + (lane & 7) + ((lane >> 4) << 3)) * kBnkStride + kk * 16 +
                                      ((lane >> 3) & 1) * 8]);
        }
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
#pragma unroll
        for (int mt = 0; mt < S::kMT; ++mt) {
          cuda::MmaBf16M16N8K16(acc[mt][2 * np], af[mt], b0, acc[mt][2 * np]);
          cuda::MmaBf16M16N8K16(acc[mt][2 * np + 1], af[mt], b1, acc[mt][2 * np + 1]);
        }
      }
    }
  }
  cuda::CpAsyncWait<0>();

  __nv_bfloat16* c = p.c + batch * p.c_batch_stride;
#pragma unroll
  for (int mt = 0; mt < S::kMT; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t m = m0 + wm * S::kMT * 16 + mt * 16 + (lane >> 2) + half * 8;
      if (m >= p.m) continue;
#pragma unroll
      for (int nt = 0; nt < S::kNT; ++nt) {
        const int n = n0 + wn * S::kNT * 8 + nt * 8 + (lane & 3) * 2;
        const __nv_bfloat162 v = __floats2bfloat162_rn(acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]);
        *reinterpret_cast<__nv_bfloat162*>(c + m * p.ldc + n) = v;
      }
    }
  }
}

template <class S>
void Launch(const BatchedGemmParams& p, cudaStream_t stream) {
  const dim3 grid(p.n / kBN, static_cast<unsigned>((p.m + S::kBM - 1) / S::kBM), p.batch);
  if (p.b_kn) {
    BatchedGemmKernel<true, S><<<grid, kThreads, 0, stream>>>(p, MergeSource{});
  } else {
    BatchedGemmKernel<false, S><<<grid, kThreads, 0, stream>>>(p, MergeSource{});
  }
}

bool Aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

constexpr absl::string_view kOp = "BatchedGemm";

}  // namespace

bool BatchedGemmSupported(int n, int k) { return n > 0 && n % kBN == 0 && k > 0 && k % kBK == 0; }

namespace {

// The batched GEMM's checks; a_merged: A is merged from split partials
// (LaunchMlaMergeUnabsorb), so p.a is not read. m == 0 or batch == 0 passes
// (a no-op launch) without the pointer checks.
absl::Status CheckBatchedGemm(const BatchedGemmParams& p, bool a_merged) {
  if (!BatchedGemmSupported(p.n, p.k)) return InvalidParam(kOp, "n/k", "n must be a multiple of 64 and k of 32");
  if (p.m < 0 || p.batch < 0 || p.batch > 65535) return InvalidParam(kOp, "m/batch", "out of range");
  if (p.m == 0 || p.batch == 0) return absl::OkStatus();
  if ((p.m + WideTile::kBM - 1) / WideTile::kBM > 65535) return InvalidParam(kOp, "m", "too many rows");
  if (!a_merged && (!p.a || !Aligned16(p.a) || p.lda % 8 != 0 || p.a_batch_stride % 8 != 0)) {
    return InvalidParam(kOp, "a", "null, unaligned or stride not a multiple of 8");
  }
  if (!p.b || !Aligned16(p.b) || p.ldb % 8 != 0 || p.b_batch_stride % 8 != 0) return InvalidParam(kOp, "b", "null, unaligned or stride not a multiple of 8");
  if (!p.c || (reinterpret_cast<uintptr_t>(p.c) & 3) != 0 || p.ldc % 2 != 0 || p.c_batch_stride % 2 != 0) {
    return InvalidParam(kOp, "c", "null, unaligned or odd stride");
  }
  return absl::OkStatus();
}

absl::Status CheckAbsorbWeights(const MlaAbsorbWeights& w) {
  if (w.heads <= 0 || w.nope_dim <= 0 || w.v_dim <= 0) {
    return absl::InvalidArgumentError("MlaAbsorbWeights: heads, nope_dim, v_dim must be positive");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchBatchedGemm(const BatchedGemmParams& p, cudaStream_t stream) {
  SPAR_RETURN_IF_ERROR(CheckBatchedGemm(p, /*a_merged=*/false));
  if (p.m == 0 || p.batch == 0) return absl::OkStatus();
  if (p.tile_rows != 0 && p.tile_rows != SmallTile::kBM && p.tile_rows != WideTile::kBM &&
      p.tile_rows != TallTile::kBM) {
    return InvalidParam(kOp, "tile_rows", "must be 0, 16, 64 or 128");
  }
  int rows = p.tile_rows;
  if (rows == 0) {
    rows = p.m <= kSmallTileMaxRows ? SmallTile::kBM : p.m >= kTallTileMinRows ? TallTile::kBM : WideTile::kBM;
  }
  if (rows == SmallTile::kBM) {
    Launch<SmallTile>(p, stream);
  } else if (rows == TallTile::kBM) {
    Launch<TallTile>(p, stream);
  } else {
    Launch<WideTile>(p, stream);
  }
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("BatchedGemmKernel");
  return absl::OkStatus();
}

BatchedGemmParams MlaQAbsorbGemm(const MlaAbsorbWeights& w, const __nv_bfloat16* q, int64_t tokens, int q_head_dim,
                                 __nv_bfloat16* q_out, int64_t q_out_token_stride, int64_t q_out_head_stride) {
  BatchedGemmParams p;
  p.a = q;
  p.lda = static_cast<int64_t>(w.heads) * q_head_dim;
  p.a_batch_stride = q_head_dim;
  p.b = w.kv_b;
  p.ldb = 512;
  p.b_batch_stride = static_cast<int64_t>(w.nope_dim + w.v_dim) * 512;
  p.b_kn = true;
  p.c = q_out;
  p.ldc = q_out_token_stride;
  p.c_batch_stride = q_out_head_stride;
  p.m = tokens;
  p.n = 512;
  p.k = w.nope_dim;
  p.batch = w.heads;
  return p;
}

BatchedGemmParams MlaOutUnabsorbGemm(const MlaAbsorbWeights& w, const __nv_bfloat16* o_lat, int64_t tokens,
                                     int64_t o_lat_token_stride, int64_t o_lat_head_stride, __nv_bfloat16* out) {
  BatchedGemmParams p;
  p.a = o_lat;
  p.lda = o_lat_token_stride;
  p.a_batch_stride = o_lat_head_stride;
  p.b = w.kv_b == nullptr ? nullptr : w.kv_b + static_cast<int64_t>(w.nope_dim) * 512;
  p.ldb = 512;
  p.b_batch_stride = static_cast<int64_t>(w.nope_dim + w.v_dim) * 512;
  p.b_kn = false;
  p.c = out;
  p.ldc = static_cast<int64_t>(w.heads) * w.v_dim;
  p.c_batch_stride = w.v_dim;
  p.m = tokens;
  p.n = w.v_dim;
  p.k = 512;
  p.batch = w.heads;
  return p;
}

absl::Status LaunchMlaQAbsorb(const MlaAbsorbWeights& w, const __nv_bfloat16* q, int64_t tokens, int q_head_dim,
                              __nv_bfloat16* q_out, int64_t q_out_token_stride, int64_t q_out_head_stride,
                              cudaStream_t stream) {
  SPAR_RETURN_IF_ERROR(CheckAbsorbWeights(w));
  if (q_head_dim < w.nope_dim) return absl::InvalidArgumentError("MlaQAbsorb: q_head_dim must be >= nope_dim");
  return LaunchBatchedGemm(MlaQAbsorbGemm(w, q, tokens, q_head_dim, q_out, q_out_token_stride, q_out_head_stride),
                           stream);
}

absl::Status LaunchMlaOutUnabsorb(const MlaAbsorbWeights& w, const __nv_bfloat16* o_lat, int64_t tokens,
                                  int64_t o_lat_token_stride, int64_t o_lat_head_stride, __nv_bfloat16* out,
                                  cudaStream_t stream) {
  SPAR_RETURN_IF_ERROR(CheckAbsorbWeights(w));
  return LaunchBatchedGemm(MlaOutUnabsorbGemm(w, o_lat, tokens, o_lat_token_stride, o_lat_head_stride, out), stream);
}

bool MlaMergeUnabsorbFits(int64_t tokens, int splits) {
  return tokens >= 1 && tokens <= MergedTile::kBM && splits >= 1 && tokens * splits <= kMergedMaxEntries;
}

absl::Status LaunchMlaMergeUnabsorb(const MlaAbsorbWeights& w, const MlaSplitPartials& parts, int64_t tokens,
                                    __nv_bfloat16* out, cudaStream_t stream) {
  constexpr absl::string_view kMergeOp = "MlaMergeUnabsorb";
  SPAR_RETURN_IF_ERROR(CheckAbsorbWeights(w));
  if (!MlaMergeUnabsorbFits(tokens, parts.splits)) {
    return InvalidParam(kMergeOp, "tokens/splits",
                        absl::StrCat("needs 1..16 tokens and tokens x splits <= ", kMergedMaxEntries, ", got ", tokens,
                                     " x ", parts.splits));
  }
  if (parts.o == nullptr || !Aligned16(parts.o)) return InvalidParam(kMergeOp, "parts.o", "null or not 16-byte aligned");
  if (parts.lse == nullptr) return InvalidParam(kMergeOp, "parts.lse", "is null");
  // The un-absorption's GEMM (k = 512, the whole merged row); A is the partials.
  const BatchedGemmParams p = MlaOutUnabsorbGemm(w, nullptr, tokens, 0, 0, out);
  SPAR_RETURN_IF_ERROR(CheckBatchedGemm(p, /*a_merged=*/true));
  MergeSource src;
  src.o = parts.o;
  src.lse = parts.lse;
  src.splits = parts.splits;
  src.rows = tokens * w.heads;
  src.heads = w.heads;
  const dim3 grid(p.n / kBN, 1, p.batch);
  BatchedGemmKernel<false, MergedTile, true><<<grid, kThreads, 0, stream>>>(p, src);
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("BatchedGemmKernel<merged>");
  return absl::OkStatus();
}

}  // namespace spar
