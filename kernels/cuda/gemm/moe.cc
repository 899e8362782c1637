#include "kernels/cuda/gemm/moe.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_info.h"
#include "kernels/cuda/common/invalid_arg.h"
#include "kernels/cuda/gemm/gemm_launch_internal.h"
#include "kernels/cuda/gemm/w8a16_tiles.h"

namespace spar {
namespace {

bool Aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) % a) == 0; }

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

absl::Status ValidateRoute(const MoeRouteParams& p) {
  constexpr absl::string_view kOp = "MoeRoute";
  if (p.tokens < 0) return InvalidParam(kOp, "tokens", "must be >= 0");
  if (p.num_experts < 1 || p.num_experts > 512 || (p.num_experts > 32 && p.num_experts % 32 != 0)) {
    return InvalidParam(kOp, "num_experts", "must be in [1, 32] or a multiple of 32 up to 512");
  }
  if (p.n_group < 1 || p.n_group > 32 || p.num_experts % p.n_group != 0) {
    return InvalidParam(kOp, "n_group", "must divide num_experts and be <= 32");
  }
  if (p.topk_group < 1 || p.topk_group > p.n_group) return InvalidParam(kOp, "topk_group", "must be in [1, n_group]");
  if (p.top_k < 1 || p.top_k > 32 || p.top_k > p.topk_group * (p.num_experts / p.n_group)) {
    return InvalidParam(kOp, "top_k", "must be in [1, 32] and <= the experts of the allowed groups");
  }
  if (p.tokens == 0) return absl::OkStatus();
  if (p.logits == nullptr) return InvalidParam(kOp, "logits", "is null");
  if (p.ld_logits < p.num_experts) return InvalidParam(kOp, "ld_logits", "must be >= num_experts");
  if (p.bias == nullptr) return InvalidParam(kOp, "bias", "is null");
  if (p.expert_ids == nullptr) return InvalidParam(kOp, "expert_ids", "is null");
  if (p.expert_weights == nullptr) return InvalidParam(kOp, "expert_weights", "is null");
  return absl::OkStatus();
}

absl::Status ValidatePermute(const MoePermuteParams& p) {
  constexpr absl::string_view kOp = "MoePermute";
  if (p.tokens < 0) return InvalidParam(kOp, "tokens", "must be >= 0");
  if (p.top_k < 1) return InvalidParam(kOp, "top_k", "must be >= 1");
  if (p.tokens * p.top_k >= (int64_t{1} << 31)) return InvalidParam(kOp, "tokens", "tokens * top_k must be < 2^31");
  const int n_local = p.expert_end - p.expert_begin;
  if (p.expert_begin < 0 || n_local < 1 || n_local > 1024) {
    return InvalidParam(kOp, "expert_end", "local experts [expert_begin, expert_end) must number 1..1024");
  }
  if (p.expert_offsets == nullptr) return InvalidParam(kOp, "expert_offsets", "is null");
  if (p.num_work_lists < 0 || p.num_work_lists > kMaxPermuteWorkLists) {
    return InvalidParam(kOp, "num_work_lists", absl::StrCat("must be in [0, ", kMaxPermuteWorkLists, "]"));
  }
  for (int l = 0; l < p.num_work_lists; ++l) {
    // A list is MoeGroupedGemmWorkspaceBytes long: room for entries of 8 or
    // more rows only (fewer would write past it).
    if (p.work_block_tokens[l] < kMinWorkListBlockTokens) {
      return InvalidParam(kOp, "work_block_tokens",
                          absl::StrCat("must be >= ", kMinWorkListBlockTokens, ", got ", p.work_block_tokens[l]));
    }
    if (p.work[l] == nullptr || !Aligned(p.work[l], 16)) return InvalidParam(kOp, "work", "must be non-null, 16-byte aligned");
  }
  if (p.tokens > 0) {
    if (p.expert_ids == nullptr) return InvalidParam(kOp, "expert_ids", "is null");
    if (p.sorted_token == nullptr) return InvalidParam(kOp, "sorted_token", "is null");
    if (p.slot == nullptr) return InvalidParam(kOp, "slot", "is null");
  }
  return absl::OkStatus();
}

// The checks of a launch that routes and then permutes the routing's ids.
absl::Status ValidateRouteThenPermute(absl::string_view op, const MoeRouteParams& route, const MoePermuteParams& perm,
                                      const int32_t* done_counter) {
  SPAR_RETURN_IF_ERROR(ValidateRoute(route));
  SPAR_RETURN_IF_ERROR(ValidatePermute(perm));
  if (perm.tokens != route.tokens || perm.top_k != route.top_k || perm.expert_ids != route.expert_ids) {
    return InvalidParam(op, "perm", "must permute the routing's own expert_ids (same tokens and top_k)");
  }
  if (done_counter == nullptr) return InvalidParam(op, "done_counter", "is null (a zeroed device int32)");
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchMoeRoute(const MoeRouteParams& p, cudaStream_t stream) {
  SPAR_RETURN_IF_ERROR(ValidateRoute(p));
  if (p.tokens == 0) return absl::OkStatus();
  return CudaStatus(gemm::internal::LaunchMoeRouteKernel(p, stream), "MoeRouteKernel launch");
}

absl::Status LaunchMoePermute(const MoePermuteParams& p, cudaStream_t stream) {
  SPAR_RETURN_IF_ERROR(ValidatePermute(p));
  // Runs with tokens == 0 too, so expert_offsets is always written.
  return CudaStatus(gemm::internal::LaunchMoePermuteKernel(p, stream), "MoePermuteKernel launch");
}

absl::Status LaunchMoeRoutePermute(const MoeRouteParams& route, const MoePermuteParams& perm, int32_t* done_counter,
                                   cudaStream_t stream) {
  SPAR_RETURN_IF_ERROR(ValidateRouteThenPermute("MoeRoutePermute", route, perm, done_counter));
  // Runs with tokens == 0 too (one block), so expert_offsets is always written.
  return CudaStatus(gemm::internal::LaunchMoeRoutePermuteKernel(route, perm, done_counter, stream),
                    "MoeRoutePermuteKernel launch");
}

bool MoeRouterRoutePermuteSupported(const MoeRouterParams& router, const MoeRouteParams& route) {
  const int64_t ld = router.ld > 0 ? router.ld : router.hidden;
  return route.tokens == 1 && router.hidden > 0 && router.hidden % 8 == 0 && ld >= router.hidden && ld % 8 == 0 &&
         router.x != nullptr && router.weight != nullptr && router.logits != nullptr && Aligned(router.x, 16) &&
         Aligned(router.weight, 16) && route.logits == router.logits && route.ld_logits >= route.num_experts;
}

absl::Status LaunchMoeRouterRoutePermute(const MoeRouterParams& router, const MoeRouteParams& route,
                                         const MoePermuteParams& perm, int32_t* done_counter, cudaStream_t stream) {
  constexpr absl::string_view kOp = "MoeRouterRoutePermute";
  SPAR_RETURN_IF_ERROR(ValidateRouteThenPermute(kOp, route, perm, done_counter));
  if (!MoeRouterRoutePermuteSupported(router, route)) {
    return InvalidParam(kOp, "router",
                        "needs one token, hidden and ld multiples of 8, 16-byte aligned x and weight, and "
                        "route.logits == router.logits");
  }
  MoeRouterParams r = router;
  if (r.ld == 0) r.ld = r.hidden;
  return CudaStatus(gemm::internal::LaunchMoeRouterRoutePermuteKernel(r, route, perm, done_counter, stream),
                    "MoeRouterRoutePermuteKernel launch");
}

void* RequestPermuteWorkList(MoePermuteParams* perm, int block_tokens, void* storage, size_t list_bytes) {
  if (block_tokens == 0) return nullptr;
  for (int l = 0; l < perm->num_work_lists; ++l) {
    if (perm->work_block_tokens[l] == block_tokens) return perm->work[l];
  }
  if (perm->num_work_lists >= kMaxPermuteWorkLists) return nullptr;
  const int n = perm->num_work_lists++;
  perm->work_block_tokens[n] = block_tokens;
  perm->work[n] = static_cast<uint8_t*>(storage) + n * list_bytes;
  return perm->work[n];
}

size_t MoeGroupedGemmWorkspaceBytes(int64_t max_rows, int num_experts) {
  const int64_t entries = gemm::MaxGroupedWorkEntries(max_rows, num_experts, kMinWorkListBlockTokens);
  return static_cast<size_t>(entries + 1) * 16;
}

namespace {

// The K the kernel streams: the experts' row length (weight.ld, padded to
// whole 64-byte stages where k is not), else k.
int64_t StreamedK(const MoeGroupedGemmParams& p) { return GemmRowElements(p.weight, p.k); }

// The experts with rows the planners assume: the caller's hint, or as many
// as there can be.
int64_t ExpectedActiveExperts(const MoeGroupedGemmParams& p) {
  return p.expected_active_experts > 0 ? p.expected_active_experts
                                       : std::max<int64_t>(1, std::min<int64_t>(p.num_experts, p.max_rows));
}

// The planner's view of the launch.
gemm::GemmProblem GroupedProblem(const MoeGroupedGemmParams& p) {
  gemm::GemmProblem prob;
  prob.workspace_bytes = p.split_workspace != nullptr ? p.split_workspace_bytes : 0;
  prob.m = std::max<int64_t>(1, p.expected_rows_per_expert);
  prob.k = StreamedK(p);
  prob.num_segments = 1;
  prob.segments[0].rows = p.weight.n;
  prob.segments[0].weight_bytes = p.weight.type == GemmWeightType::kBf16 ? 2 : 1;
  prob.silu_mul = p.epilogue == GemmEpilogue::kSiluMul;
  prob.grouped = true;
  prob.groups = ExpectedActiveExperts(p);
  prob.num_sms = p.num_sms > 0 ? p.num_sms : CurrentDeviceInfo().sm_count;
  return prob;
}

}  // namespace

gemm::GemmPlan MoeGroupedGemmPlan(const MoeGroupedGemmParams& p) {
  const gemm::GemmProblem prob = GroupedProblem(p);
  gemm::GemmPlan plan = p.force_config >= 0 && p.force_config < gemm::kNumTileConfigs
                            ? gemm::MakeGemmPlan(prob, static_cast<gemm::TileConfigId>(p.force_config),
                                                 p.split_workspace != nullptr ? p.force_splits : 1)
                            : gemm::ChooseGemmPlan(prob);
  if (plan.splits > 1) {
    // The model counted the expected tiles; the launch's grid (and the
    // split counters and partials) covers every work entry it may have.
    const gemm::TileConfig& c = gemm::GetTileConfig(plan.config);
    const int64_t tiles = gemm::MaxGroupedWorkEntries(p.max_rows, p.num_experts, c.block_tokens) *
                          CeilDiv(p.weight.n, gemm::OutputColumnsPerTile(c, prob.silu_mul));
    plan.workspace_bytes = gemm::SplitWorkspaceBytes(c, tiles, plan.splits);
    if (plan.workspace_bytes > prob.workspace_bytes) {
      plan = gemm::MakeGemmPlan(prob, plan.config, 1);
      plan.workspace_bytes = 0;
    }
  }
  return plan;
}

bool MoeGroupedGemmUsesStreamKernel(const MoeGroupedGemmParams& p) {
  if (p.force_config >= 0 || p.force_stream_warps < 0) return false;
  const int64_t most_rows = p.force_stream_warps > 0 ? kMoeStreamMaxRows : kMoeStreamAutoMaxRows;
  return p.max_rows > 0 && p.max_rows <= most_rows && StreamedK(p) == p.k;
}

namespace {

bool ValidTileConfig(int id) { return id >= 0 && id < gemm::kNumTileConfigs; }

// MoeGroupedGemmTailPlan for the launch's plan (computed once by the launcher).
MoeTailPlan TailPlanFor(const MoeGroupedGemmParams& p, const gemm::GemmPlan& plan) {
  MoeTailPlan none;
  if (p.tail_rows == 0 || p.max_rows <= 0) return none;
  if (p.force_tail_config >= 0 && !ValidTileConfig(p.force_tail_config)) return none;
  const gemm::TileConfig& main = gemm::GetTileConfig(plan.config);
  const bool forced = p.tail_rows > 0;
  if (plan.splits != 1 || (!forced && main.block_tokens < kMoeTailMinTileTokens)) return none;
  MoeTailPlan t;
  t.below = forced ? p.tail_rows : kMoeTailAutoRows;
  t.config = p.force_tail_config >= 0 ? static_cast<gemm::TileConfigId>(p.force_tail_config) : kMoeTailConfig;
  const gemm::TileConfig& tail = gemm::GetTileConfig(t.config);
  const int wbytes = p.weight.type == GemmWeightType::kBf16 ? 2 : 1;
  if (t.below < 2 || (StreamedK(p) * wbytes) % tail.row_bytes_per_stage() != 0) return none;
  const size_t bytes = gemm::GroupedTailSplitBytes(
      gemm::MaxGroupedWorkEntries(p.max_rows, p.num_experts, main.block_tokens),
      gemm::MaxGroupedTailEntries(p.max_rows, p.num_experts, t.below, main.block_tokens, tail.block_tokens));
  return bytes <= p.workspace_bytes ? t : none;
}

}  // namespace

MoeTailPlan MoeGroupedGemmTailPlan(const MoeGroupedGemmParams& p) {
  if (p.max_rows <= 0 || MoeGroupedGemmUsesStreamKernel(p)) return {};
  return TailPlanFor(p, MoeGroupedGemmPlan(p));
}

int MoeGroupedGemmBlockTokens(const MoeGroupedGemmParams& p) {
  if (MoeGroupedGemmUsesStreamKernel(p)) return gemm::kStreamMaxTokens;
  const gemm::GemmPlan plan = MoeGroupedGemmPlan(p);
  if (TailPlanFor(p, plan).below > 0) return 0;  // the launch builds both lists itself
  return gemm::GetTileConfig(plan.config).block_tokens;
}

namespace {

// The launch's work list: the permutation's when it was written for tiles
// of block_tokens rows, else built into the workspace.
absl::Status WorkList(const MoeGroupedGemmParams& p, int block_tokens, int64_t entries, const int32_t** work,
                      const int32_t** work_count, cudaStream_t stream) {
  if (p.work != nullptr && p.work_block_tokens == block_tokens) {
    if (!Aligned(p.work, 16)) return InvalidParam("MoeGroupedGemm", "work", "must be 16-byte aligned");
    *work_count = static_cast<const int32_t*>(p.work);  // the permutation's layout: count, then entries at byte 16
    *work = *work_count + 4;
    return absl::OkStatus();
  }
  int32_t* built = static_cast<int32_t*>(p.workspace);
  int32_t* built_count = built + entries * 4;
  SPAR_CUDA_RETURN_IF_ERROR(
      gemm::internal::LaunchGroupedWorkList(p.expert_offsets, p.num_experts, block_tokens, built, built_count, stream));
  *work = built;
  *work_count = built_count;
  return absl::OkStatus();
}

// The kernel parameters both kernels share.
gemm::internal::KernelParams GroupedKernelParams(const MoeGroupedGemmParams& p, int64_t k_rows, int wbytes) {
  gemm::internal::KernelParams kp;
  kp.k = k_rows;
  kp.k_valid = p.k;  // X columns past k are zero-filled (the tile kernel's kKTail instances)
  kp.x = reinterpret_cast<const uint16_t*>(p.x);
  kp.ldx = p.ldx;
  kp.x_row_index = p.x_row_index;
  kp.num_segments = 1;
  kp.silu = p.epilogue == GemmEpilogue::kSiluMul ? 1 : 0;
  gemm::internal::KernelSegment& ks = kp.seg[0];
  ks.w = static_cast<const uint8_t*>(p.weight.data);
  ks.scale = p.weight.scale;
  if (kp.silu) {
    ks.w_up = static_cast<const uint8_t*>(p.up.data);
    ks.scale_up = p.up.scale;
  }
  ks.n = p.weight.n;
  ks.is_fp8 = p.weight.type == GemmWeightType::kFp8Block128 ? 1 : 0;
  ks.tiled = static_cast<int32_t>(p.weight.layout);
  kp.y = p.y;
  kp.ldy = p.ldy;
  kp.y_fp32 = p.y_fp32 ? 1 : 0;
  kp.expert_w_stride_bytes = p.expert_weight_stride * wbytes;
  kp.expert_scale_stride = p.expert_scale_stride;
  return kp;
}

absl::Status LaunchGroupedStream(const MoeGroupedGemmParams& p, int64_t k_rows, int wbytes, cudaStream_t stream) {
  const int64_t n = p.weight.n;
  gemm::StreamProblem prob;
  prob.m = gemm::kStreamMaxTokens;
  prob.rows = &n;
  prob.silu = p.epilogue == GemmEpilogue::kSiluMul;
  prob.grouped = true;
  // Not ChooseStreamPlan's one wave of warps: its one-warp blocks were the
  // slowest width here (moe.h, kMoeStreamAutoWarps).
  const gemm::StreamPlan plan =
      gemm::MakeStreamPlan(prob, p.force_stream_warps > 0 ? p.force_stream_warps : kMoeStreamAutoWarps);
  if (plan.row_tiles > 65535) return InvalidParam("MoeGroupedGemm", "weight.n", "too many output tiles");
  const int64_t entries = gemm::MaxGroupedWorkEntries(p.max_rows, p.num_experts, gemm::kStreamMaxTokens);
  gemm::internal::KernelParams kp = GroupedKernelParams(p, k_rows, wbytes);
  kp.total_row_tiles = static_cast<int32_t>(plan.row_tiles);
  const int32_t* work = nullptr;
  const int32_t* work_count = nullptr;
  SPAR_RETURN_IF_ERROR(WorkList(p, gemm::kStreamMaxTokens, entries, &work, &work_count, stream));
  kp.work = work;
  kp.work_count = work_count;
  const dim3 grid(static_cast<unsigned>(entries), static_cast<unsigned>(plan.row_tiles));
  return CudaStatus(gemm::internal::LaunchStreamKernel(plan, kp, grid, stream), "MoeGroupedGemm stream kernel launch");
}

// The checks of a tile configuration for this launch (before anything is
// launched): its stages divide the experts' rows, its kernel instance
// agrees with its TileConfig, its output tiles fit grid.y.
absl::Status CheckGroupedTile(const MoeGroupedGemmParams& p, gemm::TileConfigId id, int64_t k_rows, int wbytes,
                              absl::string_view field, int64_t* row_tiles) {
  constexpr absl::string_view kOp = "MoeGroupedGemm";
  const gemm::TileConfig& cfg = gemm::GetTileConfig(id);
  if ((k_rows * wbytes) % cfg.row_bytes_per_stage() != 0) {
    return InvalidParam(kOp, field, absl::StrCat(cfg.name, "'s stage does not divide the experts' rows (",
                                                 k_rows * wbytes, " bytes)"));
  }
  if (gemm::internal::KernelSmemBytes(id) != cfg.smem_bytes()) {
    return absl::InternalError(absl::StrCat(kOp, ": kernel instance ", cfg.name, " disagrees with its TileConfig"));
  }
  *row_tiles = CeilDiv(p.weight.n, gemm::OutputColumnsPerTile(cfg, p.epilogue == GemmEpilogue::kSiluMul));
  if (*row_tiles > 65535) return InvalidParam(kOp, "weight.n", "too many output tiles");
  return absl::OkStatus();
}

// One tile-kernel launch over a work list of at most `entries` entries.
absl::Status LaunchGroupedTiles(const MoeGroupedGemmParams& p, const gemm::GemmPlan& plan, int64_t k_rows, int wbytes,
                                int64_t row_tiles, const int32_t* work, const int32_t* work_count, int64_t entries,
                                cudaStream_t stream) {
  gemm::internal::KernelParams kp = GroupedKernelParams(p, k_rows, wbytes);
  kp.total_row_tiles = static_cast<int32_t>(row_tiles);
  kp.work = work;
  kp.work_count = work_count;
  kp.splits = plan.splits;
  if (plan.splits > 1) {  // layout: see gemm::kSplitCounterBytes
    kp.counters = static_cast<int32_t*>(p.split_workspace);
    kp.partials = reinterpret_cast<float*>(static_cast<char*>(p.split_workspace) + gemm::kSplitCounterBytes);
  }
  const dim3 grid(static_cast<unsigned>(entries), static_cast<unsigned>(row_tiles),
                  static_cast<unsigned>(plan.splits));
  return CudaStatus(gemm::internal::LaunchGemmKernel(plan.config, kp, grid, stream), "MoeGroupedGemm kernel launch");
}

}  // namespace

absl::Status LaunchMoeGroupedGemm(const MoeGroupedGemmParams& p, cudaStream_t stream) {
  constexpr absl::string_view kOp = "MoeGroupedGemm";
  if (p.num_experts < 1 || p.num_experts > 1024) return InvalidParam(kOp, "num_experts", "must be in [1, 1024]");
  if (p.max_rows < 0 || p.max_rows >= (int64_t{1} << 31)) return InvalidParam(kOp, "max_rows", "must be in [0, 2^31)");
  if (p.k <= 0 || p.k % 8 != 0) return InvalidParam(kOp, "k", absl::StrCat("must be a positive multiple of 8, got ", p.k));
  if (p.max_rows == 0) return absl::OkStatus();
  if (p.expert_offsets == nullptr) return InvalidParam(kOp, "expert_offsets", "is null");
  if (p.x == nullptr || !Aligned(p.x, 16)) return InvalidParam(kOp, "x", "must be non-null and 16-byte aligned");
  if (p.ldx < p.k || p.ldx % 8 != 0) return InvalidParam(kOp, "ldx", "must be >= k and a multiple of 8");
  const bool silu = p.epilogue == GemmEpilogue::kSiluMul;
  if (!silu && p.epilogue != GemmEpilogue::kNone) return InvalidParam(kOp, "epilogue", "is not a known epilogue");
  for (const GemmWeight* w : {&p.weight, silu ? &p.up : nullptr}) {
    if (w == nullptr) continue;
    const char* name = w == &p.weight ? "weight" : "up";
    if (w->data == nullptr || !Aligned(w->data, 16)) return InvalidParam(kOp, name, "data must be non-null, 16-byte aligned");
    if (w->n <= 0) return InvalidParam(kOp, name, "n must be positive");
    if (w->type == GemmWeightType::kFp8Block128 && w->scale == nullptr) return InvalidParam(kOp, name, "scale is null");
  }
  if (!IsKnownGemmWeightLayout(p.weight.layout)) {
    return InvalidParam(kOp, "weight.layout", "is not a known weight layout");
  }
  if (silu && (p.up.type != p.weight.type || p.up.n != p.weight.n || p.up.layout != p.weight.layout)) {
    return InvalidParam(kOp, "up", "must have the type, n and layout of weight");
  }
  const int wbytes = p.weight.type == GemmWeightType::kBf16 ? 2 : 1;
  const int64_t k_rows = StreamedK(p);
  if (k_rows < p.k || (k_rows * wbytes) % 64 != 0) {
    return InvalidParam(kOp, "weight.ld",
                        absl::StrCat("must be >= k with rows of whole 64-byte stages (PaddedGemmRowElements); got ",
                                     k_rows, " for k ", p.k));
  }
  if (silu && GemmRowElements(p.up, p.k) != k_rows) return InvalidParam(kOp, "up.ld", "must equal weight's row length");
  // A tiled expert stores its rows padded to whole 16-row tiles.
  const int64_t stored_rows = IsTiled(p.weight.layout) ? gemm::GemmTiledRows(p.weight.n) : p.weight.n;
  if (p.expert_weight_stride < stored_rows * k_rows || (p.expert_weight_stride * wbytes) % 16 != 0) {
    return InvalidParam(kOp, "expert_weight_stride",
                        "must be >= the stored rows (tiled: n padded to 16) x row length elements and a multiple of 16 bytes");
  }
  if (p.weight.type == GemmWeightType::kFp8Block128 &&
      p.expert_scale_stride < CeilDiv(p.weight.n, 128) * CeilDiv(p.k, 128)) {
    return InvalidParam(kOp, "expert_scale_stride", "must be >= ceil(n/128) * ceil(k/128)");
  }
  const int64_t n_out = p.weight.n;
  if (p.y == nullptr) return InvalidParam(kOp, "y", "is null");
  if (p.ldy < n_out) return InvalidParam(kOp, "ldy", "must be >= n");
  if (p.workspace == nullptr || !Aligned(p.workspace, 16) ||
      p.workspace_bytes < MoeGroupedGemmWorkspaceBytes(p.max_rows, p.num_experts)) {
    return InvalidParam(kOp, "workspace", "must be 16-byte aligned and hold MoeGroupedGemmWorkspaceBytes()");
  }

  if (p.split_workspace != nullptr && !Aligned(p.split_workspace, 256)) {
    return InvalidParam(kOp, "split_workspace", "must be 256-byte aligned");
  }
  if (!gemm::ValidForcedStreamWarps(p.force_stream_warps)) {
    return InvalidParam(kOp, "force_stream_warps", "must be -1, 0, 1, 2, 4 or 8");
  }
  if (p.tail_rows < -1) return InvalidParam(kOp, "tail_rows", "must be -1 (automatic), 0 (never) or a row bound");
  if (MoeGroupedGemmUsesStreamKernel(p)) return LaunchGroupedStream(p, k_rows, wbytes, stream);
  const gemm::GemmPlan plan = MoeGroupedGemmPlan(p);
  int64_t row_tiles = 0;
  SPAR_RETURN_IF_ERROR(CheckGroupedTile(p, plan.config, k_rows, wbytes, "force_config", &row_tiles));
  const int main_tokens = gemm::GetTileConfig(plan.config).block_tokens;
  const int64_t entries = gemm::MaxGroupedWorkEntries(p.max_rows, p.num_experts, main_tokens);
  if (p.force_tail_config >= 0) {
    if (!ValidTileConfig(p.force_tail_config)) return InvalidParam(kOp, "force_tail_config", "is not a tile configuration");
    int64_t unused = 0;
    SPAR_RETURN_IF_ERROR(CheckGroupedTile(p, static_cast<gemm::TileConfigId>(p.force_tail_config), k_rows, wbytes,
                                          "force_tail_config", &unused));
  }
  const MoeTailPlan tail = TailPlanFor(p, plan);
  if (tail.below == 0) {
    const int32_t* work = nullptr;
    const int32_t* work_count = nullptr;
    SPAR_RETURN_IF_ERROR(WorkList(p, main_tokens, entries, &work, &work_count, stream));
    return LaunchGroupedTiles(p, plan, k_rows, wbytes, row_tiles, work, work_count, entries, stream);
  }
  // The tail split: both lists built here, the main list first in the
  // workspace, then the tail list, each followed by its count.
  int64_t tail_row_tiles = 0;
  SPAR_RETURN_IF_ERROR(CheckGroupedTile(p, tail.config, k_rows, wbytes, "force_tail_config", &tail_row_tiles));
  const gemm::TileConfig& tail_cfg = gemm::GetTileConfig(tail.config);
  const int64_t tail_entries =
      gemm::MaxGroupedTailEntries(p.max_rows, p.num_experts, tail.below, main_tokens, tail_cfg.block_tokens);
  const gemm::internal::GroupedWorkLists lists = gemm::internal::TailSplitListsIn(
      p.workspace, main_tokens, entries, tail.below, tail_cfg.block_tokens, tail_entries);
  SPAR_CUDA_RETURN_IF_ERROR(gemm::internal::LaunchGroupedWorkLists(p.expert_offsets, p.num_experts, lists, stream));
  SPAR_RETURN_IF_ERROR(
      LaunchGroupedTiles(p, plan, k_rows, wbytes, row_tiles, lists.work, lists.work_count, entries, stream));
  const gemm::GemmPlan tail_plan = gemm::MakeGemmPlan(GroupedProblem(p), tail.config, 1);
  return LaunchGroupedTiles(p, tail_plan, k_rows, wbytes, tail_row_tiles, lists.tail_work, lists.tail_count,
                            tail_entries, stream);
}

absl::Status LaunchMoeCombine(const MoeCombineParams& p, cudaStream_t stream) {
  constexpr absl::string_view kOp = "MoeCombine";
  if (p.tokens < 0) return InvalidParam(kOp, "tokens", "must be >= 0");
  if (p.top_k < 1 || p.top_k > 32) return InvalidParam(kOp, "top_k", "must be in [1, 32]");
  if (p.hidden <= 0 || p.hidden % 8 != 0) return InvalidParam(kOp, "hidden", "must be a positive multiple of 8");
  if (p.tokens == 0) return absl::OkStatus();
  if (p.expert_out == nullptr || !Aligned(p.expert_out, 16) || p.ld_expert < p.hidden || p.ld_expert % 8 != 0) {
    return InvalidParam(kOp, "expert_out", "must be 16-byte aligned with ld_expert >= hidden, multiple of 8");
  }
  if (p.slot == nullptr) return InvalidParam(kOp, "slot", "is null");
  if (p.weights == nullptr) return InvalidParam(kOp, "weights", "is null");
  if (p.shared != nullptr && (!Aligned(p.shared, 16) || p.ld_shared < p.hidden || p.ld_shared % 8 != 0)) {
    return InvalidParam(kOp, "shared", "must be 16-byte aligned with ld_shared >= hidden, multiple of 8");
  }
  if (p.residual != nullptr && (!Aligned(p.residual, 16) || p.ld_residual < p.hidden || p.ld_residual % 8 != 0)) {
    return InvalidParam(kOp, "residual", "must be 16-byte aligned with ld_residual >= hidden, multiple of 8");
  }
  if ((p.out == nullptr) == (p.out_f32 == nullptr)) return InvalidParam(kOp, "out", "set exactly one of out and out_f32");
  const void* out = p.out != nullptr ? static_cast<const void*>(p.out) : static_cast<const void*>(p.out_f32);
  if (!Aligned(out, 16) || p.ld_out < p.hidden || p.ld_out % 8 != 0) {
    return InvalidParam(kOp, "out", "must be 16-byte aligned with ld_out >= hidden, multiple of 8");
  }
  return CudaStatus(gemm::internal::LaunchMoeCombineKernel(p, stream), "MoeCombineKernel launch");
}

}  // namespace spar
