#include "kernels/cuda/gemm/w8a16_gemm.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_info.h"
#include "kernels/cuda/common/invalid_arg.h"
#include "kernels/cuda/gemm/gemm_launch_internal.h"

namespace spar {
namespace {

static_assert(gemm::internal::kTileRows == gemm::kGemmTileRows && gemm::internal::kTileBytes == gemm::kGemmTileBytes &&
                  gemm::internal::kTiledAlongK == static_cast<int>(GemmWeightLayout::kTilesAlongK) &&
                  gemm::internal::kTiledAcrossRows == static_cast<int>(GemmWeightLayout::kTilesAcrossRows),
              "the kernels address the tiles w8a16_tiles.h writes");

using gemm::GemmPlan;
using gemm::GemmProblem;
using gemm::TileConfig;

bool Aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) % a) == 0; }

constexpr absl::string_view kOp = "W8A16Gemm";

absl::Status ValidateWeight(const GemmWeight& w, const std::string& name) {
  if (w.data == nullptr) return InvalidParam(kOp, name + ".data", "is null");
  if (!Aligned(w.data, 16)) return InvalidParam(kOp, name + ".data", "must be 16-byte aligned");
  if (w.n <= 0) return InvalidParam(kOp, name + ".n", "must be positive");
  if (w.type == GemmWeightType::kFp8Block128 && w.scale == nullptr) return InvalidParam(kOp, name + ".scale", "is null");
  if (w.type != GemmWeightType::kFp8Block128 && w.type != GemmWeightType::kBf16) {
    return InvalidParam(kOp, name + ".type", "is not a known weight type");
  }
  if (!IsKnownGemmWeightLayout(w.layout)) {
    return InvalidParam(kOp, name + ".layout", "is not a known weight layout");
  }
  return absl::OkStatus();
}

int WeightBytes(GemmWeightType type) { return type == GemmWeightType::kBf16 ? 2 : 1; }

// The K the kernel streams: every weight's row length (they must agree).
int64_t StreamedK(const W8A16GemmParams& p) { return GemmRowElements(p.segments[0], p.k); }

absl::Status Validate(const W8A16GemmParams& p) {
  if (p.m < 0) return InvalidParam(kOp, "m", "must be >= 0");
  if (p.k <= 0 || p.k % 8 != 0) return InvalidParam(kOp, "k", absl::StrCat("must be a positive multiple of 8, got ", p.k));
  if (p.num_segments < 1 || p.num_segments > gemm::kMaxGemmSegments) {
    return InvalidParam(kOp, "num_segments", absl::StrCat("must be in [1, ", gemm::kMaxGemmSegments, "]"));
  }
  if (p.m == 0) return absl::OkStatus();
  if (p.x == nullptr) return InvalidParam(kOp, "x", "is null");
  if (!Aligned(p.x, 16)) return InvalidParam(kOp, "x", "must be 16-byte aligned");
  if (p.ldx < p.k || p.ldx % 8 != 0) return InvalidParam(kOp, "ldx", "must be >= k and a multiple of 8");
  const int64_t k_rows = StreamedK(p);
  for (int s = 0; s < p.num_segments; ++s) {
    const std::string name = absl::StrCat("segments[", s, "]");
    absl::Status st = ValidateWeight(p.segments[s], name);
    if (!st.ok()) return st;
    const int64_t ld = GemmRowElements(p.segments[s], p.k);
    if (ld < p.k || ld != k_rows || (ld * WeightBytes(p.segments[s].type)) % 64 != 0) {
      return InvalidParam(kOp, name + ".ld",
                          absl::StrCat("must be >= k, the same for every weight, and rows of whole 64-byte stages ",
                                       "(PaddedGemmRowElements); got ", ld, " for k ", p.k));
    }
    if (p.segments[s].layout != p.segments[0].layout) {
      return InvalidParam(kOp, name + ".layout", "must equal segments[0].layout (one layout a launch)");
    }
  }
  if (p.epilogue == GemmEpilogue::kSiluMul) {
    if (p.num_segments != 1) return InvalidParam(kOp, "num_segments", "must be 1 with the SiLU·mul epilogue");
    absl::Status st = ValidateWeight(p.up, "up");
    if (!st.ok()) return st;
    if (p.up.type != p.segments[0].type) return InvalidParam(kOp, "up.type", "must equal segments[0].type");
    if (p.up.n != p.segments[0].n) return InvalidParam(kOp, "up.n", "must equal segments[0].n");
    if (GemmRowElements(p.up, p.k) != k_rows) return InvalidParam(kOp, "up.ld", "must equal segments[0]'s row length");
    if (p.up.layout != p.segments[0].layout) return InvalidParam(kOp, "up.layout", "must equal segments[0].layout");
  } else if (p.epilogue != GemmEpilogue::kNone) {
    return InvalidParam(kOp, "epilogue", "is not a known epilogue");
  }
  const int64_t n_out = W8A16GemmOutputColumns(p);
  if (p.y == nullptr) return InvalidParam(kOp, "y", "is null");
  if (!Aligned(p.y, p.y_fp32 ? 4 : 2)) return InvalidParam(kOp, "y", "is misaligned");
  if (p.ldy < n_out) return InvalidParam(kOp, "ldy", absl::StrCat("must be >= the output columns (", n_out, ")"));
  if (p.residual != nullptr && p.ldr < n_out) return InvalidParam(kOp, "ldr", "must be >= the output columns");
  if (p.workspace_bytes > 0 && p.workspace == nullptr) return InvalidParam(kOp, "workspace", "is null but workspace_bytes > 0");
  if (p.workspace != nullptr && !Aligned(p.workspace, 256)) return InvalidParam(kOp, "workspace", "must be 256-byte aligned");
  if (p.force_config >= gemm::kNumTileConfigs) return InvalidParam(kOp, "force_config", "is not a tile configuration");
  if (!gemm::ValidForcedStreamWarps(p.force_stream_warps)) {
    return InvalidParam(kOp, "force_stream_warps", "must be -1, 0, 1, 2, 4 or 8");
  }
  return absl::OkStatus();
}

// The kernel parameters both kernels share; each segment's first_tile in
// tiles of rows_per_tile output columns.
gemm::internal::KernelParams BaseKernelParams(const W8A16GemmParams& p, int64_t rows_per_tile) {
  gemm::internal::KernelParams kp;
  kp.m = p.m;
  kp.k = StreamedK(p);
  kp.k_valid = p.k;
  kp.x = reinterpret_cast<const uint16_t*>(p.x);
  kp.ldx = p.ldx;
  kp.num_segments = p.num_segments;
  kp.silu = p.epilogue == GemmEpilogue::kSiluMul ? 1 : 0;
  int64_t tile = 0, col = 0;
  for (int s = 0; s < p.num_segments; ++s) {
    gemm::internal::KernelSegment& ks = kp.seg[s];
    ks.w = static_cast<const uint8_t*>(p.segments[s].data);
    ks.scale = p.segments[s].scale;
    ks.is_fp8 = p.segments[s].type == GemmWeightType::kFp8Block128 ? 1 : 0;
    ks.tiled = static_cast<int32_t>(p.segments[s].layout);
    ks.n = p.segments[s].n;
    ks.out_col0 = col;
    ks.first_tile = static_cast<int32_t>(tile);
    if (kp.silu) {
      ks.w_up = static_cast<const uint8_t*>(p.up.data);
      ks.scale_up = p.up.scale;
    }
    tile += (ks.n + rows_per_tile - 1) / rows_per_tile;
    col += ks.n;
  }
  kp.total_row_tiles = static_cast<int32_t>(tile);
  kp.residual = reinterpret_cast<const uint16_t*>(p.residual);
  kp.ldr = p.ldr;
  kp.y = p.y;
  kp.ldy = p.ldy;
  kp.y_fp32 = p.y_fp32 ? 1 : 0;
  return kp;
}

gemm::StreamPlan StreamPlanFor(const W8A16GemmParams& p) {
  int64_t rows[gemm::kMaxGemmSegments] = {};
  for (int s = 0; s < p.num_segments; ++s) rows[s] = p.segments[s].n;
  gemm::StreamProblem prob;
  prob.m = p.m;
  prob.rows = rows;
  prob.num_segments = p.num_segments;
  prob.silu = p.epilogue == GemmEpilogue::kSiluMul;
  if (p.force_stream_warps > 0) return gemm::MakeStreamPlan(prob, p.force_stream_warps);
  return gemm::ChooseStreamPlan(prob, p.num_sms > 0 ? p.num_sms : CurrentDeviceInfo().sm_count);
}

GemmProblem ToProblem(const W8A16GemmParams& p, size_t workspace_bytes) {
  GemmProblem prob;
  prob.m = p.m;
  prob.k = StreamedK(p);
  prob.num_segments = p.num_segments;
  for (int s = 0; s < p.num_segments; ++s) {
    prob.segments[s].rows = p.segments[s].n;
    prob.segments[s].weight_bytes = p.segments[s].type == GemmWeightType::kBf16 ? 2 : 1;
  }
  prob.silu_mul = p.epilogue == GemmEpilogue::kSiluMul;
  prob.num_sms = p.num_sms > 0 ? p.num_sms : CurrentDeviceInfo().sm_count;
  prob.workspace_bytes = workspace_bytes;
  return prob;
}

}  // namespace

int64_t PaddedGemmRowElements(int64_t k, GemmWeightType type) {
  const int64_t per_stage = 64 / WeightBytes(type);  // elements in a 64-byte stage
  return (k + per_stage - 1) / per_stage * per_stage;
}

int64_t W8A16GemmOutputColumns(const W8A16GemmParams& p) {
  if (p.epilogue == GemmEpilogue::kSiluMul) return p.segments[0].n;
  int64_t n = 0;
  for (int s = 0; s < p.num_segments && s < gemm::kMaxGemmSegments; ++s) n += p.segments[s].n;
  return n;
}

gemm::GemmPlan W8A16GemmPlan(const W8A16GemmParams& p) {
  const GemmProblem prob = ToProblem(p, p.workspace != nullptr ? p.workspace_bytes : 0);
  if (p.force_config >= 0 && p.force_config < gemm::kNumTileConfigs) {
    return gemm::MakeGemmPlan(prob, static_cast<gemm::TileConfigId>(p.force_config), p.force_splits);
  }
  return gemm::ChooseGemmPlan(prob);
}

size_t W8A16GemmWorkspaceBytes(const W8A16GemmParams& p) {
  return gemm::ChooseGemmPlan(ToProblem(p, std::numeric_limits<size_t>::max())).workspace_bytes;
}

bool W8A16GemmUsesStreamKernel(const W8A16GemmParams& p) {
  if (p.force_config >= 0 || p.force_stream_warps < 0) return false;
  if (p.m < 1 || p.m > gemm::kStreamMaxDenseTokens) return false;
  return StreamedK(p) == p.k;  // rows padded past k: the tile kernel's K tail
}

bool W8A16GemmSupported(const W8A16GemmParams& p) {
  if (!Validate(p).ok()) return false;
  const GemmPlan plan = W8A16GemmPlan(p);
  return plan.row_tiles <= 65535 && gemm::ConfigSupports(ToProblem(p, 0), gemm::GetTileConfig(plan.config));
}

absl::Status LaunchW8A16Gemm(const W8A16GemmParams& p, cudaStream_t stream) {
  absl::Status st = Validate(p);
  if (!st.ok()) return st;
  if (p.m == 0) return absl::OkStatus();
  if (W8A16GemmUsesStreamKernel(p)) {
    const gemm::StreamPlan plan = StreamPlanFor(p);
    const gemm::internal::KernelParams kp = BaseKernelParams(p, plan.tile_rows);
    return CudaStatus(gemm::internal::LaunchStreamKernel(plan, kp, dim3(static_cast<unsigned>(plan.row_tiles)), stream),
                      "W8A16StreamKernel launch");
  }
  const GemmPlan plan = W8A16GemmPlan(p);
  const TileConfig& cfg = gemm::GetTileConfig(plan.config);
  if (gemm::internal::KernelSmemBytes(plan.config) != cfg.smem_bytes()) {
    return absl::InternalError(absl::StrCat("W8A16Gemm: kernel instance ", cfg.name, " disagrees with its TileConfig"));
  }
  if (plan.row_tiles > 65535) return InvalidParam(kOp, "segments[].n", "too many output tiles (grid.y > 65535)");
  if (!gemm::ConfigSupports(ToProblem(p, 0), cfg)) {
    return InvalidParam(kOp, "force_config", absl::StrCat(cfg.name, " needs k * weight bytes to be a multiple of ",
                                                cfg.row_bytes_per_stage()));
  }
  if (plan.workspace_bytes > 0 && (p.workspace == nullptr || p.workspace_bytes < plan.workspace_bytes)) {
    return InvalidParam(kOp, "workspace", absl::StrCat("needs ", plan.workspace_bytes, " bytes for the forced split"));
  }

  gemm::internal::KernelParams kp =
      BaseKernelParams(p, gemm::OutputColumnsPerTile(cfg, p.epilogue == GemmEpilogue::kSiluMul));
  kp.splits = plan.splits;
  if (plan.splits > 1) {  // layout: see gemm::kSplitCounterBytes
    kp.counters = static_cast<int32_t*>(p.workspace);
    kp.partials = reinterpret_cast<float*>(static_cast<char*>(p.workspace) + gemm::kSplitCounterBytes);
  }
  const dim3 grid(static_cast<unsigned>(plan.token_tiles), static_cast<unsigned>(plan.row_tiles),
                  static_cast<unsigned>(plan.splits));
  return CudaStatus(gemm::internal::LaunchGemmKernel(plan.config, kp, grid, stream), "W8A16GemmKernel launch");
}

}  // namespace spar
