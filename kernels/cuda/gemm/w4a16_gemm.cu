// Host side of the W4A16 GEMM: the tile configurations, the plan (tile and
// split-K), validation, and the dense and grouped launches.
#include "kernels/cuda/gemm/w4a16_gemm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_info.h"
#include "kernels/cuda/common/invalid_arg.h"
#include "kernels/cuda/gemm/gemm_config.h"
#include "kernels/cuda/gemm/gemm_launch_internal.h"
#include "kernels/cuda/gemm/moe.h"
#include "kernels/cuda/gemm/w4a16_configs.h"
#include "kernels/cuda/gemm/w4a16_gemm_kernel.cuh"

namespace spar {
namespace {

using gemm::w4::kW4Configs;
using gemm::w4::W4Config;

template <int kId, bool kFp4>
cudaError_t LaunchTileConfig(const gemm::w4::KernelParams& p, dim3 grid, cudaStream_t stream) {
  constexpr W4Config c = kW4Configs[kId];
  return gemm::w4::LaunchW4Tile<c.bt, c.br, c.wr, c.wt, c.stages, c.sub, kFp4, c.min_blocks>(p, grid, stream);
}

template <bool kFp4, int... kIds>
cudaError_t LaunchTileIn(int id, const gemm::w4::KernelParams& p, dim3 grid, cudaStream_t stream,
                         std::integer_sequence<int, kIds...>) {
  cudaError_t result = cudaErrorInvalidValue;
  (
      [&] {
        if constexpr (!kW4Configs[kIds].decode && !kW4Configs[kIds].stream) {
          if (id == kIds) result = LaunchTileConfig<kIds, kFp4>(p, grid, stream);
        }
      }(),
      ...);
  return result;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool Aligned(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// Configuration ids by name (the table is the single source).
constexpr int IdOf(const char* name) {
  for (int i = 0; i < kW4NumConfigs; ++i) {
    const char* a = kW4Configs[i].name;
    const char* b = name;
    while (*a != 0 && *a == *b) ++a, ++b;
    if (*a == 0 && *b == 0) return i;
  }
  return -1;
}
constexpr int kTile32 = IdOf("W4T32");
constexpr int kTile64 = IdOf("W4T64");
constexpr int kPrefill = IdOf("W4P128T");
constexpr int kTile64Rows128 = IdOf("W4T64R4");
constexpr int kDecode16 = IdOf("W4D16M2S4");
// The streaming kernel's configurations the planners take (w4a16_bench
// --sweep, H200 running this sm80 code, 2026-12-04: bench/RESULTS.md); the
// dense ones in the order StreamConfigFor tries them.
constexpr int kStreamDense[] = {IdOf("W4SM1D4W8"), IdOf("W4SM1D4W4"), IdOf("W4SM2D3W4"), IdOf("W4SM2D3W2")};
constexpr int kStreamDense16[] = {IdOf("W4SM1N2D3W8"), IdOf("W4SM1N2D3W4"), IdOf("W4SM2N2D2W4"), IdOf("W4SM2N2D2W2")};
constexpr int kGroupedStream8 = IdOf("W4SM2D3W2");
constexpr int kGroupedStream1 = IdOf("W4SM2D3W4");
constexpr bool AllNamed(std::initializer_list<int> ids) {
  for (const int id : ids) {
    if (id < 0) return false;
  }
  return true;
}
static_assert(AllNamed({kTile32, kTile64, kPrefill, kTile64Rows128, kDecode16, kStreamDense[0], kStreamDense[1],
                        kStreamDense[2], kStreamDense[3], kStreamDense16[0], kStreamDense16[1], kStreamDense16[2],
                        kStreamDense16[3], kGroupedStream8, kGroupedStream1}),
              "configurations named by the planner");

// The streaming kernel's block: the first of kStreamDense (8-token tiles)
// or kStreamDense16 (16-token tiles: two 8-token B fragments a lane, for
// 9-16 tokens), most warps on one 16-row fragment first, then two
// fragments a block, whose blocks are all resident at once
// (kStreamWarpsPerSm warps an SM), as the W8A16 streaming plan
// (gemm::ChooseStreamPlan); the last one beyond that. It picked the
// sweep's best streaming configuration on every dense shape.
int StreamConfigFor(int64_t m, int64_t rows_padded, int sms) {
  const int(&family)[4] = m <= 8 ? kStreamDense : kStreamDense16;
  for (const int id : family) {
    const int64_t blocks = CeilDiv(m, kW4Configs[id].bt) * CeilDiv(rows_padded, kW4Configs[id].br);
    if (blocks * kW4Configs[id].warps <= int64_t{sms} * gemm::kStreamWarpsPerSm) return id;
  }
  return family[3];
}

// Whether the row blocks of configuration `config` tile `rows_padded`
// packed rows exactly (the tile kernels take no partial row block).
constexpr bool TilesRows(int config, int64_t rows_padded) { return rows_padded % kW4Configs[config].br == 0; }

// Beyond 16 rows per tile, dense and grouped alike: the tile kernel by
// tokens; the 128 x 128 prefill tile from 65 tokens, where it tiles the
// packed rows (padded to 64). At 128 rows per expert (the grouped MoE of a
// 4096-token chunk) it took 18.3 ms against W4T64's 24.0 for int4 (H200
// running this sm80 code, 2026-12-03).
int TileConfigFor(int64_t rows_per_tile, int64_t rows_padded) {
  if (rows_per_tile <= 32) return kTile32;
  if (rows_per_tile <= 64 || !TilesRows(kPrefill, rows_padded)) return kTile64;
  return kPrefill;
}

// Dense GEMMs of more than 64 tokens (a speculative verify step of a large
// batch, a prefill chunk) on 64-token tiles of 128 rows with the prefill
// tile's 32 x 64 warp tiles: twice the blocks of the 128 x 128 tile at
// 65-128 tokens, and each widened weight fragment feeds 8 token fragments
// where W4T64's feed 4. 1.19-1.33x W4P128T at 128 and 256 tokens on the
// dense gate (12288 x 6144) and the shared expert's gate/up (4096 x 6144),
// int4 and NVFP4 (H200 running this sm80 code, 2026-12-07); on those two and
// o_proj at TP 8 it took 0.66-0.98x W4P128T's time forced at 384-1024
// tokens and 0.95-0.99x planned at 1024-4096 (H100 running this sm80 code,
// 2026-12-07, session 44). At 64 tokens it won on the first (1.07x) and
// lost on the second (0.90x), so W4T64 keeps 33-64. Grouped GEMMs:
// GroupedConfigFor.
constexpr int64_t kTile64Rows128MinTokens = 65;

// The dense plan's tile, fitted to w4a16_bench on the H200 running this
// sm80 code: up to 8 tokens the streaming kernel's 8-token tiles (1.05-1.57x
// the decode kernel, 2026-12-04), 9-16 tokens its 16-token tiles (1.33-1.67x
// the decode and tile kernels it replaced at 16 tokens on every GLM-5 shape,
// int4 and NVFP4, 2026-12-04 session 25); from 65 W4T64R4 (above); else
// TileConfigFor.
int DenseConfigFor(int64_t m, int64_t rows_padded, int sms) {
  if (m <= 16) return StreamConfigFor(m, rows_padded, sms);
  if (m >= kTile64Rows128MinTokens && TilesRows(kTile64Rows128, rows_padded)) return kTile64Rows128;
  return TileConfigFor(m, rows_padded);
}

// Grouped (MoE): up to 8 rows per expert the streaming kernel (work
// entries of <= 8 rows, two 16-row fragments a block), with four warps a
// block at one row per expert and two beyond (one token: 1.02-1.04x the
// decode kernel's one-row tile; 8 and 64 tokens: 1.00x int4, 1.09x NVFP4;
// 2026-12-04); up to 16 the decode kernel; 33-64 (a 2048-token chunk) the
// 64-token tile of 128 rows where it tiles the packed rows: 0.714x / 0.743x
// W4T64's time at 2048 tokens, int4 / NVFP4, even routing (H100 running
// this sm80 code, 2026-12-07, session 45); else TileConfigFor. At 128 rows
// an expert (a 4096-token chunk) it took 1.053x / 0.976x W4P128T + tail's
// time and the AWQ layer's prefill 1.005x: no gain, so W4P128T keeps it.
int GroupedConfigFor(int64_t rows_per_tile, int64_t rows_padded) {
  if (rows_per_tile <= 1) return kGroupedStream1;
  if (rows_per_tile <= 8) return kGroupedStream8;
  if (rows_per_tile <= 16) return kDecode16;
  if (rows_per_tile > 32 && rows_per_tile <= 64 && TilesRows(kTile64Rows128, rows_padded)) return kTile64Rows128;
  return TileConfigFor(rows_per_tile, rows_padded);
}

// The grouped launch's configuration: the forced one, else by rows per
// expert (the one-token plan only where no expert can get two rows).
int GroupedPlanConfig(const W4MoeGroupedGemmParams& p) {
  if (p.force_config >= 0) return p.force_config;
  const int64_t most_rows = p.max_rows_per_expert > 0 ? p.max_rows_per_expert : p.max_rows;
  const int64_t per_tile = most_rows <= 1 ? 1 : std::max<int64_t>(2, p.expected_rows_per_expert);
  return GroupedConfigFor(per_tile, p.weight.rows_padded);
}

// A forced configuration (the parameter `field`) must tile the packed rows.
absl::Status CheckForced(absl::string_view op, int config, int64_t rows_padded,
                         absl::string_view field = "force_config") {
  if (config < 0) return absl::OkStatus();
  if (config >= kW4NumConfigs) return InvalidParam(op, field, "is not a tile configuration");
  // The decode kernel takes a partial last row block (its warps past the rows idle).
  if (!kW4Configs[config].decode && !TilesRows(config, rows_padded)) {
    return InvalidParam(op, field, absl::StrCat(kW4Configs[config].name, " needs rows_padded to be a multiple of ",
                                                kW4Configs[config].br));
  }
  return absl::OkStatus();
}

struct Plan {
  int config = 0;
  int splits = 1;
  int64_t token_tiles = 0, row_tiles = 0;
  size_t workspace_bytes = 0;
};

// Tile by M; split K when the output tiles leave SMs idle (decode). The
// tile kernel: about two blocks per SM, each split keeping at least 4 chunks
// (256 columns). The decode kernel: one wave of its resident blocks, each
// warp streaming at least 4 chunks. Partials go to the workspace.
Plan MakePlan(const W4A16GemmParams& p, size_t workspace_limit) {
  Plan plan;
  const int sms = p.num_sms > 0 ? p.num_sms : CurrentDeviceInfo().sm_count;
  plan.config = p.force_config >= 0 ? p.force_config
                                    : DenseConfigFor(p.m, p.w.rows_padded, sms);
  const W4Config& c = kW4Configs[plan.config];
  plan.token_tiles = CeilDiv(p.m, c.bt);
  plan.row_tiles = CeilDiv(p.w.rows_padded, c.br);
  const int64_t tiles = plan.token_tiles * plan.row_tiles;
  if (c.stream) return plan;  // its warps split K inside the block: never over blocks
  const int64_t chunks = p.k / 64;
  const int64_t resident =
      c.decode ? int64_t{sms} * gemm::w4::DecodeConfigBlocksPerSm(plan.config, p.w.type == W4WeightType::kNvfp4)
               : int64_t{2} * sms;
  int64_t splits = std::min<int64_t>(16, CeilDiv(resident, tiles));
  splits = std::clamp<int64_t>(splits, 1, std::max<int64_t>(1, chunks / 4));
  if (p.force_config >= 0 && p.force_splits > 0) splits = std::clamp<int64_t>(p.force_splits, 1, chunks);
  auto bytes = [&](int64_t s) {
    return s == 1 ? size_t{0} : gemm::kSplitCounterBytes + static_cast<size_t>(s * tiles * c.bt * c.br * 4);
  };
  while (splits > 1 && (tiles > gemm::kMaxSplitTiles || bytes(splits) > workspace_limit)) --splits;
  plan.splits = static_cast<int>(splits);
  plan.workspace_bytes = bytes(splits);
  return plan;
}

constexpr absl::string_view kOp = "W4A16Gemm";

absl::Status ValidateWeight(absl::string_view op, const W4GemmWeight& w, int64_t k) {
  if (w.values == nullptr || !Aligned(w.values, 16)) return InvalidParam(op, "w.values", "must be non-null and 16-byte aligned");
  if (w.n <= 0) return InvalidParam(op, "w.n", "must be positive");
  if (w.rows_padded <= 0 || w.rows_padded % 64 != 0 || w.rows_padded < (w.silu_pair ? 2 * w.n : w.n)) {
    return InvalidParam(op, "w.rows_padded", "must be a multiple of 64 holding every packed row");
  }
  if (w.type == W4WeightType::kInt4) {
    if (w.group <= 0 || w.group % 64 != 0 || k % w.group != 0) {
      return InvalidParam(op, "w.group", "must be a multiple of 64 that divides k");
    }
    if (w.scales == nullptr || !Aligned(w.scales, 16)) return InvalidParam(op, "w.scales", "must be non-null and 16-byte aligned");
    if (w.zeros == nullptr || !Aligned(w.zeros, 16)) return InvalidParam(op, "w.zeros", "must be non-null and 16-byte aligned");
  } else if (w.type == W4WeightType::kNvfp4) {
    if (w.fp4_scales == nullptr || !Aligned(w.fp4_scales, 4)) return InvalidParam(op, "w.fp4_scales", "must be non-null and 4-byte aligned");
    if (w.global_scale == nullptr) return InvalidParam(op, "w.global_scale", "is null");
  } else {
    return InvalidParam(op, "w.type", "is not a known 4-bit type");
  }
  return absl::OkStatus();
}

gemm::w4::KernelParams KernelParamsFor(const W4GemmWeight& w, int64_t k, const __nv_bfloat16* x, int64_t ldx, void* y,
                                       int64_t ldy, bool y_fp32) {
  gemm::w4::KernelParams kp;
  kp.k = k;
  kp.x = reinterpret_cast<const uint16_t*>(x);
  kp.ldx = ldx;
  kp.values = w.values;
  kp.scales = w.scales;
  kp.zeros = w.zeros;
  kp.fp4_scales = w.fp4_scales;
  kp.global_scale = w.global_scale;
  kp.n = w.n;
  kp.rows_padded = w.rows_padded;
  kp.group = w.group;
  kp.silu = w.silu_pair ? 1 : 0;
  kp.y = y;
  kp.ldy = ldy;
  kp.y_fp32 = y_fp32 ? 1 : 0;
  return kp;
}

cudaError_t Launch(bool fp4, int config, const gemm::w4::KernelParams& kp, dim3 grid, cudaStream_t stream) {
  using Ids = std::make_integer_sequence<int, kW4NumConfigs>;
  if (kW4Configs[config].decode) return gemm::w4::LaunchDecodeConfig(config, fp4, kp, grid, stream);
  if (kW4Configs[config].stream) return gemm::w4::LaunchStreamConfig(config, fp4, kp, grid, stream);
  return fp4 ? LaunchTileIn<true>(config, kp, grid, stream, Ids{}) : LaunchTileIn<false>(config, kp, grid, stream, Ids{});
}

}  // namespace

const char* W4ConfigName(int config) { return config >= 0 && config < kW4NumConfigs ? kW4Configs[config].name : "?"; }

int W4ConfigNamed(const char* name) {
  for (int c = 0; c < kW4NumConfigs; ++c) {
    if (name != nullptr && std::strcmp(kW4Configs[c].name, name) == 0) return c;
  }
  return -1;
}

bool W4ConfigIsDecode(int config) { return config >= 0 && config < kW4NumConfigs && kW4Configs[config].decode; }

bool W4ConfigIsStream(int config) { return config >= 0 && config < kW4NumConfigs && kW4Configs[config].stream; }

int W4A16GemmPlannedConfig(const W4A16GemmParams& p) {
  if (p.m <= 0 || p.k <= 0 || p.w.rows_padded <= 0) return -1;
  return MakePlan(p, std::numeric_limits<size_t>::max()).config;
}

int W4MoeGroupedGemmPlannedConfig(const W4MoeGroupedGemmParams& p) {
  if (p.max_rows <= 0 || p.weight.rows_padded <= 0) return -1;
  return GroupedPlanConfig(p);
}

bool W4ConfigTiles(int config, int64_t rows_padded) { return CheckForced(kOp, config, rows_padded).ok(); }

int W4ConfigBlockTokens(int config) { return config >= 0 && config < kW4NumConfigs ? kW4Configs[config].bt : 0; }

namespace {

// The tail split's tile (W4MoeGroupedGemmTailPlan; the bound is the FP8
// launch's, kMoeTailAutoRows).
constexpr int kTailConfig = kDecode16;

// Work entries of a grouped list of bt-row entries at most (one per row for
// a 1-row tile).
int64_t GroupedEntries(const W4MoeGroupedGemmParams& p, int bt) {
  return bt == 1 ? p.max_rows : gemm::MaxGroupedWorkEntries(p.max_rows, p.num_experts, bt);
}

}  // namespace

W4MoeTailPlan W4MoeGroupedGemmTailPlan(const W4MoeGroupedGemmParams& p) {
  W4MoeTailPlan none;
  if (p.tail_rows == 0 || p.max_rows <= 0 || p.weight.rows_padded <= 0) return none;
  if (p.force_tail_config >= kW4NumConfigs) return none;
  const int config = GroupedPlanConfig(p);
  const bool forced = p.tail_rows > 0;
  if (!forced && config != kPrefill) return none;
  W4MoeTailPlan t;
  t.below = forced ? p.tail_rows : kMoeTailAutoRows;
  t.config = p.force_tail_config >= 0 ? p.force_tail_config : kTailConfig;
  if (t.below < 2 || kW4Configs[t.config].bt < 2 || !W4ConfigTiles(t.config, p.weight.rows_padded)) return none;
  const int main_bt = kW4Configs[config].bt;
  const size_t bytes = gemm::GroupedTailSplitBytes(
      GroupedEntries(p, main_bt),
      gemm::MaxGroupedTailEntries(p.max_rows, p.num_experts, t.below, main_bt, kW4Configs[t.config].bt));
  return bytes <= p.workspace_bytes ? t : none;
}

int W4MoeGroupedGemmBlockTokens(const W4MoeGroupedGemmParams& p) {
  if (W4MoeGroupedGemmTailPlan(p).below > 0) return 0;  // the launch builds both lists itself
  return W4ConfigBlockTokens(W4MoeGroupedGemmPlannedConfig(p));
}

size_t W4A16GemmWorkspaceBytes(const W4A16GemmParams& p) {
  if (p.m <= 0 || p.k <= 0 || p.w.rows_padded <= 0) return 0;
  return MakePlan(p, std::numeric_limits<size_t>::max()).workspace_bytes;
}

absl::Status LaunchW4A16Gemm(const W4A16GemmParams& p, cudaStream_t stream) {
  if (p.m < 0) return InvalidParam(kOp, "m", "must be >= 0");
  if (p.k <= 0 || p.k % 64 != 0) return InvalidParam(kOp, "k", absl::StrCat("must be a positive multiple of 64, got ", p.k));
  if (auto s = ValidateWeight(kOp, p.w, p.k); !s.ok()) return s;
  if (auto s = CheckForced(kOp, p.force_config, p.w.rows_padded); !s.ok()) return s;
  if (p.m == 0) return absl::OkStatus();
  if (p.x == nullptr || !Aligned(p.x, 16)) return InvalidParam(kOp, "x", "must be non-null and 16-byte aligned");
  if (p.ldx < p.k || p.ldx % 8 != 0) return InvalidParam(kOp, "ldx", "must be >= k and a multiple of 8");
  if (p.y == nullptr || !Aligned(p.y, p.y_fp32 ? 4 : 2)) return InvalidParam(kOp, "y", "is null or misaligned");
  if (p.ldy < p.w.n) return InvalidParam(kOp, "ldy", "must be >= n");
  if (p.workspace_bytes > 0 && (p.workspace == nullptr || !Aligned(p.workspace, 256))) {
    return InvalidParam(kOp, "workspace", "must be non-null and 256-byte aligned");
  }
  const Plan plan = MakePlan(p, p.workspace != nullptr ? p.workspace_bytes : 0);
  if (plan.row_tiles > 65535 || plan.token_tiles > (int64_t{1} << 31) - 1) {
    return InvalidParam(kOp, "w.n", "too many output tiles");
  }
  gemm::w4::KernelParams kp = KernelParamsFor(p.w, p.k, p.x, p.ldx, p.y, p.ldy, p.y_fp32);
  kp.m = p.m;
  kp.splits = plan.splits;
  kp.row_tiles = static_cast<int32_t>(plan.row_tiles);
  if (plan.splits > 1) {
    kp.counters = static_cast<int32_t*>(p.workspace);
    kp.partials = reinterpret_cast<float*>(static_cast<char*>(p.workspace) + gemm::kSplitCounterBytes);
  }
  const dim3 grid(static_cast<unsigned>(plan.token_tiles), static_cast<unsigned>(plan.row_tiles),
                  static_cast<unsigned>(plan.splits));
  return CudaStatus(Launch(p.w.type == W4WeightType::kNvfp4, plan.config, kp, grid, stream), "W4A16GemmKernel launch");
}

absl::Status LaunchW4MoeGroupedGemm(const W4MoeGroupedGemmParams& p, cudaStream_t stream) {
  constexpr absl::string_view kMoeOp = "W4MoeGroupedGemm";
  if (p.num_experts < 1 || p.num_experts > 1024) return InvalidParam(kMoeOp, "num_experts", "must be in [1, 1024]");
  if (p.max_rows < 0 || p.max_rows >= (int64_t{1} << 31)) return InvalidParam(kMoeOp, "max_rows", "must be in [0, 2^31)");
  if (p.k <= 0 || p.k % 64 != 0) return InvalidParam(kMoeOp, "k", "must be a positive multiple of 64");
  if (auto s = ValidateWeight(kMoeOp, p.weight, p.k); !s.ok()) return s;
  if (auto s = CheckForced(kMoeOp, p.force_config, p.weight.rows_padded); !s.ok()) return s;
  if (p.max_rows == 0) return absl::OkStatus();
  if (p.expert_offsets == nullptr) return InvalidParam(kMoeOp, "expert_offsets", "is null");
  if (p.x == nullptr || !Aligned(p.x, 16)) return InvalidParam(kMoeOp, "x", "must be non-null and 16-byte aligned");
  if (p.ldx < p.k || p.ldx % 8 != 0) return InvalidParam(kMoeOp, "ldx", "must be >= k and a multiple of 8");
  const int64_t values = p.weight.rows_padded * p.k / 2;
  if (p.values_stride < values || p.values_stride % 16 != 0) {
    return InvalidParam(kMoeOp, "values_stride", "must be >= rows_padded * k / 2 and a multiple of 16");
  }
  if (p.weight.type == W4WeightType::kInt4) {
    const int64_t per = p.weight.rows_padded * (p.k / p.weight.group);
    if (p.scales_stride < per || p.scales_stride % 4 != 0) return InvalidParam(kMoeOp, "scales_stride", "is too small or misaligned");
    if (p.zeros_stride < per || p.zeros_stride % 16 != 0) return InvalidParam(kMoeOp, "zeros_stride", "is too small or misaligned");
  } else if (p.fp4_scales_stride < p.weight.rows_padded * (p.k / 16) || p.fp4_scales_stride % 4 != 0) {
    return InvalidParam(kMoeOp, "fp4_scales_stride", "is too small or misaligned");
  }
  if (p.y == nullptr) return InvalidParam(kMoeOp, "y", "is null");
  if (p.ldy < p.weight.n) return InvalidParam(kMoeOp, "ldy", "must be >= n");
  if (p.workspace == nullptr || !Aligned(p.workspace, 16) ||
      p.workspace_bytes < MoeGroupedGemmWorkspaceBytes(p.max_rows, p.num_experts)) {
    return InvalidParam(kMoeOp, "workspace", "must be 16-byte aligned and hold MoeGroupedGemmWorkspaceBytes()");
  }
  if (p.max_rows_per_expert < 0) return InvalidParam(kMoeOp, "max_rows_per_expert", "must be >= 0");
  if (p.tail_rows < -1) return InvalidParam(kMoeOp, "tail_rows", "must be -1 (automatic), 0 (never) or a row bound");
  if (auto s = CheckForced(kMoeOp, p.force_tail_config, p.weight.rows_padded, "force_tail_config"); !s.ok()) {
    return s;
  }
  const int config = GroupedPlanConfig(p);
  // The work list {expert, first row, rows} as the W8A16 grouped GEMM builds
  // it, then its count. The workspace is sized for entries of >= 8 rows, as
  // every planned configuration has; a forced 1-row tile's list (one entry
  // per row) may not fit.
  const W4Config& c = kW4Configs[config];
  const int64_t entries = GroupedEntries(p, c.bt);
  const int64_t capacity = static_cast<int64_t>(p.workspace_bytes / 16) - 1;
  if (entries > capacity) {
    return InvalidParam(kMoeOp, p.force_config >= 0 ? "force_config" : "workspace",
                        absl::StrCat(c.name, "'s work list of ", entries, " entries does not fit the workspace"));
  }
  // One launch of configuration `id` over a work list of at most n entries.
  auto launch = [&](int id, const int32_t* work, const int32_t* work_count, int64_t n) -> absl::Status {
    const int64_t row_tiles = CeilDiv(p.weight.rows_padded, kW4Configs[id].br);
    if (row_tiles > 65535) return InvalidParam(kMoeOp, "weight.n", "too many output tiles");
    gemm::w4::KernelParams kp = KernelParamsFor(p.weight, p.k, p.x, p.ldx, p.y, p.ldy, p.y_fp32);
    kp.x_row_index = p.x_row_index;
    kp.row_tiles = static_cast<int32_t>(row_tiles);
    kp.work = work;
    kp.work_count = work_count;
    kp.values_stride = p.values_stride;
    kp.scales_stride = p.scales_stride;
    kp.zeros_stride = p.zeros_stride;
    kp.fp4_stride = p.fp4_scales_stride;
    const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(row_tiles), 1);
    return CudaStatus(Launch(p.weight.type == W4WeightType::kNvfp4, id, kp, grid, stream),
                      "W4MoeGroupedGemm kernel launch");
  };
  const W4MoeTailPlan tail = W4MoeGroupedGemmTailPlan(p);
  if (tail.below == 0) {
    if (p.work != nullptr && p.work_block_tokens == c.bt) {
      // The permutation's layout: the count, then the entries from byte 16
      // (at most `entries` of them: the same tile height).
      if (!Aligned(p.work, 16)) return InvalidParam(kMoeOp, "work", "must be 16-byte aligned");
      const int32_t* work_count = static_cast<const int32_t*>(p.work);
      return launch(config, work_count + 4, work_count, entries);
    }
    int32_t* built = static_cast<int32_t*>(p.workspace);
    int32_t* built_count = built + entries * 4;
    SPAR_CUDA_RETURN_IF_ERROR(
        gemm::internal::LaunchGroupedWorkList(p.expert_offsets, p.num_experts, c.bt, built, built_count, stream));
    return launch(config, built, built_count, entries);
  }
  // The tail split: the main list first in the workspace, then the tail
  // list, each followed by its count.
  const int tail_bt = kW4Configs[tail.config].bt;
  const int64_t tail_entries = gemm::MaxGroupedTailEntries(p.max_rows, p.num_experts, tail.below, c.bt, tail_bt);
  const gemm::internal::GroupedWorkLists lists =
      gemm::internal::TailSplitListsIn(p.workspace, c.bt, entries, tail.below, tail_bt, tail_entries);
  SPAR_CUDA_RETURN_IF_ERROR(gemm::internal::LaunchGroupedWorkLists(p.expert_offsets, p.num_experts, lists, stream));
  if (auto s = launch(config, lists.work, lists.work_count, entries); !s.ok()) return s;
  return launch(tail.config, lists.tail_work, lists.tail_count, tail_entries);
}

}  // namespace spar
