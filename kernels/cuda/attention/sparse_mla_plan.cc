// Work decomposition of the sparse MLA kernel (host only, no CUDA calls).
#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/cuda/attention/sparse_mla.h"
#include "kernels/cuda/attention/sparse_mla_config.h"

namespace spar {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The most tokens an FP8 launch of more than 16 heads runs on 16-head tiles
// (the largest batch measured faster there than on the wide tile).
constexpr int64_t kNarrowFp8MaxTokens = 128;

// An index list's 32-key blocks and how many splits it may take: enough
// that no CTA takes more than kMaxKeysPerCta keys; at least two blocks per
// split, at most kMaxSplits splits.
struct ListSplits {
  int64_t blocks, min_splits, max_splits;
};
ListSplits SplitsOf(int list_len) {
  const int64_t nb = CeilDiv(std::max(list_len, 0), mla::kBlockKeys);
  const int64_t min_splits = std::max<int64_t>(1, CeilDiv(list_len, mla::kMaxKeysPerCta));
  return {nb, min_splits, std::min<int64_t>(std::max(min_splits, nb / 2), mla::kMaxSplits)};
}

}  // namespace

int SparseMlaCtasPerSm(int head_tile, bool fp8, int smem_per_sm) {
  // The driver reserves 1 KB of shared memory per resident CTA.
  auto fit = [&](int by_registers, int smem) { return std::max(1, std::min(by_registers, smem_per_sm / (smem + 1024))); };
  if (fp8 && head_tile <= 16) {
    const mla::NarrowTileConfig cfg{head_tile};
    return fit(cfg.MaxCtasByRegisters(), cfg.SmemBytes());
  }
  const mla::TileConfig cfg{head_tile, fp8};
  return fit(cfg.MaxCtasByRegisters(), cfg.SmemBytes());
}

SparseMlaPlan PlanSparseMla(int64_t tokens, int heads, int list_len, int num_sms, int smem_per_sm, bool fp8) {
  const int64_t max_splits = SplitsOf(list_len).max_splits;
  auto tiles = [&](int hm) { return CeilDiv(heads, hm); };
  // FP8 rows have an 8-head tile (sparse_mla_narrow.cu): no padded rows.
  int hm = fp8 && heads <= 8 ? 8 : heads <= 16 ? 16 : heads <= 32 ? 32 : 64;
  // Tiny batches: wide head tiles cannot make enough CTAs even with the
  // finest split; 16-head tiles trade row reuse (the other tiles re-read the
  // rows from L2) for parallelism.
  if (hm > 16 && tokens * tiles(hm) * max_splits < num_sms) hm = 16;
  // FP8 decode batches at more than 16 heads (tensor parallelism 1 / 2 of
  // GLM-5) also run the narrow kernel's 16-head tiles: up to 128 tokens they
  // measured faster than the wide FP8 tile though each tile re-reads the
  // rows from L2 (H100 running sm80 code, 2026-12-07, graph replays: 64 x 64
  // heads 133.7 against 155.8 us, 64 x 32 76.3 against 86.4, 128 x 32 137.1
  // against 150.5, 128 x 64 266.3 against 269.1). Larger FP8 batches stay on
  // the wide tile (prefill chunks widen their rows to bf16 first).
  if (fp8 && hm > 16 && tokens <= kNarrowFp8MaxTokens) hm = 16;
  return PlanSparseMlaSplits(tokens, heads, hm, list_len, num_sms, smem_per_sm, fp8);
}

SparseMlaPlan PlanSparseMlaSplits(int64_t tokens, int heads, int head_tile, int list_len, int num_sms, int smem_per_sm,
                                  bool fp8) {
  SparseMlaPlan plan;
  const int hm = head_tile;
  plan.head_tile = hm;
  const auto [nb, min_splits, max_splits] = SplitsOf(list_len);
  if (nb == 0 || tokens <= 0) {
    plan.num_splits = 1;
    plan.keys_per_split = mla::kBlockKeys;
    return plan;
  }
  const int64_t base = tokens * CeilDiv(heads, hm);
  const int64_t slots = static_cast<int64_t>(std::max(num_sms, 1)) * SparseMlaCtasPerSm(hm, fp8, smem_per_sm);
  // Cost model in units of one 32-key block: waves × (blocks per CTA + fixed
  // cost of the query load and epilogue + merge pass when split).
  int64_t best_splits = min_splits;
  double best_cost = std::numeric_limits<double>::infinity();
  for (int64_t s = min_splits; s <= max_splits; ++s) {
    const int64_t per = CeilDiv(nb, s);
    const int64_t splits = CeilDiv(nb, per);
    if (splits != s) continue;  // same cut as a smaller s
    const double waves = static_cast<double>(CeilDiv(base * splits, slots));
    const double cost = waves * (per + 2.0 + (splits > 1 ? 1.0 : 0.0));
    if (cost < best_cost) {
      best_cost = cost;
      best_splits = splits;
    }
  }
  plan.num_splits = static_cast<int>(best_splits);
  plan.keys_per_split = static_cast<int>(CeilDiv(nb, best_splits) * mla::kBlockKeys);
  return plan;
}

size_t SparseMlaWorkspaceBytes(const SparseMlaPlan& plan, int64_t tokens, int heads) {
  if (plan.num_splits <= 1 || tokens <= 0) return 0;
  return static_cast<size_t>(plan.num_splits) * tokens * heads * (mla::kDimV + 1) * sizeof(float);
}

SparseMlaPartialsView SparseMlaPartials(const SparseMlaPlan& plan, int64_t tokens, int heads, void* workspace) {
  SparseMlaPartialsView v;
  if (plan.num_splits <= 1 || workspace == nullptr) return v;
  v.o = static_cast<float*>(workspace);
  v.lse = v.o + static_cast<size_t>(plan.num_splits) * tokens * heads * mla::kDimV;
  return v;
}

}  // namespace spar
