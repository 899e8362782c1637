#include "kernels/cuda/common/arch.cuh"
// Batched bf16 GEMM for the MLA absorptions: 64-column CTA tiles over 32-wide
// K tiles, 4 warps, a cp.async pipeline, mma.sync m16n8k16 with fp32
// accumulate. B comes either as K x N rows (ldmatrix.trans) or N x K rows
// (ldmatrix).
//
// Two tile shapes, one arithmetic. Prefill takes 64-row tiles (4 warps of
// 32 x 32, 3 stages). At decode (<= 16 tokens) the GEMM is a stream of
// weights and the 3-stage pipeline leaves each CTA waiting on memory once
// per two K tiles (the un-absorption's 16 K tiles: ~10 us for 17 MB at 64
// heads); there a 16-row tile (4 warps of 16 x 16, 7 stages in 44.8 KB of
// static shared memory) keeps 6 K tiles in flight. Every output element is
// the same sequence of mma k-steps from zero in both shapes, so a token's
// row has the same bits whichever shape its step took (a speculative verify
// step's rows equal a plain decode step's: the engine's greedy equality
// relies on it, and absorb_gemm_gpu_test checks it).
#include "kernels/cuda/attention/absorb_gemm.h"

#include <cuda_bf16.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
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
using SmallTile = TileShape<1, 1, 7>;  // 16 rows, 6 K tiles in flight

template <bool kBKn, class S>
__global__ void __launch_bounds__(kThreads) BatchedGemmKernel(const BatchedGemmParams p) {
  constexpr int kStages = S::kStages;
  __shared__ __align__(16) __nv_bfloat16 as[kStages][S::kAStage];
  __shared__ __align__(16) __nv_bfloat16 bs[kStages][kBStage];
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
        cuda::LdMatrixX4(af[mt],
                         &as[s][(wm * S::kMT * 16 + mt * 16 + (lane & 15)) * kAStride + kk * 16 + (lane >> 4) * 8]);
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
    BatchedGemmKernel<true, S><<<grid, kThreads, 0, stream>>>(p);
  } else {
    BatchedGemmKernel<false, S><<<grid, kThreads, 0, stream>>>(p);
  }
}

bool Aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

constexpr absl::string_view kOp = "BatchedGemm";

}  // namespace

bool BatchedGemmSupported(int n, int k) { return n > 0 && n % kBN == 0 && k > 0 && k % kBK == 0; }

absl::Status LaunchBatchedGemm(const BatchedGemmParams& p, cudaStream_t stream) {
  if (!BatchedGemmSupported(p.n, p.k)) return InvalidParam(kOp, "n/k", "n must be a multiple of 64 and k of 32");
  if (p.m < 0 || p.batch < 0 || p.batch > 65535) return InvalidParam(kOp, "m/batch", "out of range");
  if (p.m == 0 || p.batch == 0) return absl::OkStatus();
  if ((p.m + WideTile::kBM - 1) / WideTile::kBM > 65535) return InvalidParam(kOp, "m", "too many rows");
  if (!p.a || !Aligned16(p.a) || p.lda % 8 != 0 || p.a_batch_stride % 8 != 0) return InvalidParam(kOp, "a", "null, unaligned or stride not a multiple of 8");
  if (!p.b || !Aligned16(p.b) || p.ldb % 8 != 0 || p.b_batch_stride % 8 != 0) return InvalidParam(kOp, "b", "null, unaligned or stride not a multiple of 8");
  if (!p.c || (reinterpret_cast<uintptr_t>(p.c) & 3) != 0 || p.ldc % 2 != 0 || p.c_batch_stride % 2 != 0) {
    return InvalidParam(kOp, "c", "null, unaligned or odd stride");
  }
  if (p.tile_rows != 0 && p.tile_rows != SmallTile::kBM && p.tile_rows != WideTile::kBM) {
    return InvalidParam(kOp, "tile_rows", "must be 0, 16 or 64");
  }
  if (p.tile_rows == SmallTile::kBM || (p.tile_rows == 0 && p.m <= kSmallTileMaxRows)) {
    Launch<SmallTile>(p, stream);
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
  if (w.heads <= 0 || w.nope_dim <= 0 || w.v_dim <= 0 || q_head_dim < w.nope_dim) {
    return absl::InvalidArgumentError("MlaAbsorbWeights: heads, nope_dim, v_dim must be positive, q_head_dim >= nope_dim");
  }
  return LaunchBatchedGemm(MlaQAbsorbGemm(w, q, tokens, q_head_dim, q_out, q_out_token_stride, q_out_head_stride),
                           stream);
}

absl::Status LaunchMlaOutUnabsorb(const MlaAbsorbWeights& w, const __nv_bfloat16* o_lat, int64_t tokens,
                                  int64_t o_lat_token_stride, int64_t o_lat_head_stride, __nv_bfloat16* out,
                                  cudaStream_t stream) {
  if (w.heads <= 0 || w.nope_dim <= 0 || w.v_dim <= 0) {
    return absl::InvalidArgumentError("MlaAbsorbWeights: heads, nope_dim, v_dim must be positive");
  }
  return LaunchBatchedGemm(MlaOutUnabsorbGemm(w, o_lat, tokens, o_lat_token_stride, o_lat_head_stride, out), stream);
}

}  // namespace spar
