#include "kernels/cuda/gemm/gemm_config.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>

namespace spar::gemm {
namespace {

// Model constants (unit: one byte of the copy roofline per SM, ~31 ps on
// the H200). Tensor FLOP per such byte at the mma.sync peak.
constexpr double kFlopPerByte = 140.6;
// Bytes in flight per SM below which streaming slows down (Little's law).
constexpr double kInflightBytesForPeak = 63000.0;
// Pipeline fill of one wave of resident blocks (~1.3 µs on the H200).
constexpr double kWaveFill = 40782.0;
// Fixed cost of a launch (~2.9 µs back to back); equal for every plan.
constexpr double kLaunch = 92494.0;
// Smallest token tile whose grouped plans count the tiles the groups' rows
// fill (ChooseGemmPlan): the prefill tiles.
constexpr int kSpreadMinBlockTokens = 32;
// Activation tiles hit L2: almost free next to the weights.
constexpr double kActivationWeight = 0.001;
// Split-K partial traffic per fp32 element (written, then read back).
constexpr double kSplitBytesPerElement = 4.0 * 1.281;
// A grouped launch whose blocks make one partial wave of at most 8 warps
// per SM streams worse than the model's dense fit says: the MoE gate/up at
// one token (8 experts, 2 x 2048 x 6144 each) ran 77.1 us on T8R128M2F (two
// 4-warp blocks per SM) and 60.4 on T8W2QF (four), which the unpenalised
// model ranks the other way (H200 graph replays, 2026-12-02,
// bench/gemm/calibration/h200_sweep_2026-12-02_grouped.txt). The factor
// makes the model's ratio of the two the measured 1.28; several waves of
// the same tile (the down projection, more tokens) keep the dense fit.
constexpr double kGroupedThinWaveEfficiency = 0.7;
constexpr int kThinWaveWarps = 8;
// Shared memory per SM the occupancy estimate assumes (A100: 164 KB).
constexpr int64_t kSmemPerSm = 164 * 1024;
// The split-K factors the model ranks: those the calibration sweeps timed
// (gemm_bench --sweep). The model is only fitted where it was measured: an
// untimed factor (9, say) once won on paper and lost 16 % on the GPU.
constexpr int kSplitChoices[] = {1, 2, 3, 4, 6, 8, 12, 16};
constexpr int kMaxSplits = kSplitChoices[std::size(kSplitChoices) - 1];
// A split streams at least 256 bytes of every weight row.
constexpr int64_t kMinRowBytesPerSplit = 256;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int ResidentBlocks(const TileConfig& c) {
  const int64_t by_smem = kSmemPerSm / c.smem_bytes();
  const int64_t by_threads = 2048 / c.threads();
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({by_smem, by_threads, 32})));
}

}  // namespace

int64_t TileConfig::smem_bytes() const {
  const int64_t pipeline = int64_t{stages} * stage_bytes();
  return std::max(pipeline, epilogue_bytes()) + int64_t{stages} * sub * 2 * 4 + 16;
}

const TileConfig& GetTileConfig(TileConfigId id) { return kTileConfigs[static_cast<int>(id)]; }

int FindTileConfig(const char* name) {
  for (int i = 0; i < kNumTileConfigs; ++i) {
    if (name != nullptr && std::strcmp(kTileConfigs[i].name, name) == 0) return i;
  }
  return -1;
}

int64_t MaxGroupedWorkEntries(int64_t max_rows, int num_experts, int block_tokens) {
  return (max_rows + block_tokens - 1) / block_tokens + std::min<int64_t>(num_experts, max_rows);
}

int64_t MaxGroupedTailEntries(int64_t max_rows, int num_experts, int below, int main_tokens, int tail_tokens) {
  const int longest = std::min(below, main_tokens) - 1;
  return longest < 1 ? 0 : std::min<int64_t>(num_experts, max_rows) * ((longest + tail_tokens - 1) / tail_tokens);
}

int64_t OutputColumnsPerTile(const TileConfig& c, bool silu_mul) {
  return silu_mul ? c.block_rows / 2 : c.block_rows;
}

int64_t RowTiles(const GemmProblem& p, const TileConfig& c) {
  int64_t tiles = 0;
  for (int s = 0; s < p.num_segments; ++s) tiles += CeilDiv(p.segments[s].rows, OutputColumnsPerTile(c, p.silu_mul));
  return tiles;
}

int64_t KStages(int64_t k, int weight_bytes, int sub) { return k * weight_bytes / (int64_t{64} * sub); }

bool ConfigSupports(const GemmProblem& p, const TileConfig& c) {
  for (int s = 0; s < p.num_segments; ++s) {
    if ((p.k * p.segments[s].weight_bytes) % c.row_bytes_per_stage() != 0) return false;
  }
  return true;
}

size_t SplitWorkspaceBytes(const TileConfig& c, int64_t tiles, int splits) {
  if (splits <= 1) return 0;
  if (tiles > kMaxSplitTiles) return std::numeric_limits<size_t>::max();
  return kSplitCounterBytes + static_cast<size_t>(splits) * tiles * c.block_tokens * c.block_rows * sizeof(float);
}

double ExpectedTokenTilesPerGroup(double mean_rows, int block_tokens) {
  if (mean_rows <= 0 || block_tokens <= 0) return 1.0;
  // Poisson probabilities from the mode outwards by the ratio p(n+1) / p(n)
  // = mean / (n + 1): one exp at the mode (in log space, where e^-mean would
  // underflow) and a multiply per term. (A log and an exp per term made a
  // 4096-token chunk's plan ~16 us, planned a few times a layer.) The tail
  // past mean + 12 sd holds nothing that shows.
  const int64_t limit = static_cast<int64_t>(mean_rows + 12.0 * std::sqrt(mean_rows) + 20.0);
  const int64_t mode = std::clamp<int64_t>(static_cast<int64_t>(mean_rows), 1, limit);
  const double p_mode = std::exp(-mean_rows + static_cast<double>(mode) * std::log(mean_rows) -
                                 std::lgamma(static_cast<double>(mode) + 1.0));
  double tiles = p_mode * static_cast<double>(CeilDiv(mode, block_tokens));
  double p = p_mode;
  for (int64_t n = mode + 1; n <= limit; ++n) {
    p *= mean_rows / static_cast<double>(n);
    tiles += p * static_cast<double>(CeilDiv(n, block_tokens));
  }
  p = p_mode;
  for (int64_t n = mode - 1; n >= 1; --n) {
    p *= static_cast<double>(n + 1) / mean_rows;
    tiles += p * static_cast<double>(CeilDiv(n, block_tokens));
  }
  return tiles / (1.0 - std::exp(-mean_rows));
}

GemmPlan ChooseGemmPlan(const GemmProblem& p) {
  GemmPlan best;
  best.cost = std::numeric_limits<double>::infinity();
  const int sms = std::max(1, p.num_sms);
  const double eff_m = static_cast<double>(std::max<int64_t>(1, p.m));

  for (const TileConfig& c : kTileConfigs) {
    if (!ConfigSupports(p, c)) continue;
    int64_t max_kst = 0, min_kst = std::numeric_limits<int64_t>::max();
    for (int s = 0; s < p.num_segments; ++s) {
      const int64_t kst = KStages(p.k, p.segments[s].weight_bytes, c.sub);
      max_kst = std::max(max_kst, kst);
      min_kst = std::min(min_kst, kst);  // split-K is bounded by the shortest segment
    }
    const int64_t token_tiles = CeilDiv(std::max<int64_t>(1, p.m), c.block_tokens) * (p.grouped ? p.groups : 1);
    const int64_t row_tiles = RowTiles(p, c);
    const int64_t tiles = token_tiles * row_tiles;
    // Grouped prefill tiles: the work of the tiles the groups' rows actually
    // fill, not of the mean (see ExpectedTokenTilesPerGroup); at 2048 tokens
    // of GLM-5 (64 rows per expert) this moved the MoE from 64- to 128-token
    // tiles, 1.12x faster (H200, 2026-12-03). Not for the decode tiles: a
    // group's second 8- or 16-token tile re-reads the weight rows its first
    // one just brought into L2, and counting it moved 256 tokens (8 rows per
    // expert) to a 16-token tile 2.7 % slower than the 8-token one.
    const bool spread = p.grouped && c.block_tokens >= kSpreadMinBlockTokens;
    const double work_tiles = spread ? p.groups * ExpectedTokenTilesPerGroup(eff_m, c.block_tokens) * row_tiles
                                     : static_cast<double>(tiles);
    const int resident = ResidentBlocks(c);
    const int64_t min_stages = std::max<int64_t>(1, kMinRowBytesPerSplit / c.row_bytes_per_stage());
    const int max_splits = static_cast<int>(std::clamp<int64_t>(min_kst / min_stages, 1, kMaxSplits));
    for (const int splits : kSplitChoices) {
      if (splits > max_splits) break;
      const size_t ws = SplitWorkspaceBytes(c, tiles, splits);
      if (ws > p.workspace_bytes) break;
      const int64_t per_sm = static_cast<int64_t>(std::ceil(work_tiles * splits / sms - 1e-9));
      const int64_t kst = CeilDiv(max_kst, splits);
      const double w_bytes = static_cast<double>(c.block_rows) * c.row_bytes_per_stage() * kst;
      const double x_bytes = kActivationWeight * c.block_tokens * 2.0 * c.row_bytes_per_stage() * kst;
      const double flops = 2.0 * c.block_tokens * c.block_rows * static_cast<double>(p.k) / splits;
      const double inflight = static_cast<double>(std::min<int64_t>(per_sm, resident)) * (c.stages - 1) *
                              c.block_rows * c.row_bytes_per_stage();
      const int64_t waves = CeilDiv(per_sm, resident);
      const bool thin_wave = p.grouped && waves == 1 &&
                             std::min<int64_t>(per_sm, resident) * c.threads() / 32 <= kThinWaveWarps;
      const double bw_eff = std::min(1.0, inflight / kInflightBytesForPeak) * c.dram_efficiency *
                            (thin_wave ? kGroupedThinWaveEfficiency : 1.0);
      const double t_mem = (w_bytes + x_bytes) / bw_eff;
      const double t_cmp = flops / (kFlopPerByte * c.mma_efficiency);
      const double valid_tokens = std::min<double>(eff_m, c.block_tokens);
      const double t_split = splits > 1 ? kSplitBytesPerElement * valid_tokens * c.block_rows : 0.0;
      const double cost = per_sm * (std::max(t_mem, t_cmp) + t_split) + waves * kWaveFill + kLaunch;
      if (cost < best.cost * 0.999) {
        best.config = c.id;
        best.splits = splits;
        best.token_tiles = token_tiles;
        best.row_tiles = row_tiles;
        best.workspace_bytes = ws;
        best.cost = cost;
      }
    }
  }
  return best;
}

GemmPlan MakeGemmPlan(const GemmProblem& p, TileConfigId id, int splits) {
  const TileConfig& c = GetTileConfig(id);
  int64_t min_kst = std::numeric_limits<int64_t>::max();
  for (int s = 0; s < p.num_segments; ++s) {
    min_kst = std::min(min_kst, KStages(p.k, p.segments[s].weight_bytes, c.sub));
  }
  GemmPlan plan;
  plan.config = id;
  plan.splits = static_cast<int>(std::clamp<int64_t>(splits, 1, std::max<int64_t>(1, min_kst)));
  plan.token_tiles = CeilDiv(std::max<int64_t>(1, p.m), c.block_tokens) * (p.grouped ? p.groups : 1);
  plan.row_tiles = RowTiles(p, c);
  plan.workspace_bytes = SplitWorkspaceBytes(c, plan.token_tiles * plan.row_tiles, plan.splits);
  return plan;
}

std::ostream& operator<<(std::ostream& os, const GemmPlan& plan) {
  return os << GetTileConfig(plan.config).name << " splits=" << plan.splits << " tiles=" << plan.token_tiles << "x"
            << plan.row_tiles << " ws=" << plan.workspace_bytes << " cost=" << plan.cost;
}

StreamPlan MakeStreamPlan(const StreamProblem& p, int warps) {
  StreamPlan plan;
  plan.streams = p.m <= kStreamTwoHalvesMaxTokens && !p.silu && !p.grouped ? 2 : 1;
  plan.warps = warps;
  plan.tile_rows = plan.streams == 2 || p.silu ? kStreamTileRows2 : kStreamTileRows1;
  plan.token_frags = static_cast<int>(std::clamp<int64_t>(CeilDiv(p.m, kStreamMaxTokens), 1, kStreamMaxTokenFrags));
  for (int s = 0; s < p.num_segments; ++s) plan.row_tiles += CeilDiv(p.rows[s], plan.tile_rows);
  return plan;
}

StreamPlan ChooseStreamPlan(const StreamProblem& p, int num_sms) {
  StreamPlan plan = MakeStreamPlan(p, 1);
  const int64_t capacity = static_cast<int64_t>(std::max(1, num_sms)) * kStreamWarpsPerSm;
  for (const int warps : {8, 4, 2}) {
    if (plan.row_tiles * warps <= capacity) {
      plan.warps = warps;
      break;
    }
  }
  return plan;
}

}  // namespace spar::gemm
