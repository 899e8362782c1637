// The row-group top-k path (topk_plan.h: few long rows, decode at 32K-256K):
// `chunks` CTAs per row in one cooperative launch, each holding its chunk's
// keys in registers, running the short-row path's radix select together.
//
//   keys:    kKeys per thread, chunk position u * 512 + tid, loaded once;
//   level:   each CTA counts its keys' 8-bit digit (among the keys whose
//            higher digits match the prefix chosen so far) into a smem
//            histogram (8 copies by lane & 7), stores it to the workspace as
//            its chunk's, and arrives at the row's barrier (a counter in the
//            workspace); then every CTA reads the row's chunk histograms,
//            sums them and finds the bucket holding the rem-th key with one
//            scan, which also sums the earlier chunks' counts above and in
//            the bucket (where this chunk's output starts). All CTAs of a
//            row find the same bucket, so they take the same branches;
//   list:    once the bucket holds at most kTopKGroupListCap keys, each CTA
//            stores its keys of the bucket at its offset in the row's list
//            (the bucket's keys of the earlier chunks come first), one more
//            barrier, and every CTA ranks the whole list: the threshold T,
//            the keys above it and equal to it, and how many of each came
//            from earlier chunks;
//   output:  a key is selected when key > T, or key == T among the need_eq
//            lowest tied positions of the row (the earlier chunks' ties come
//            first); each CTA writes its selected positions in ascending
//            order (PositionRanks) after those of the earlier chunks.
// Same selection and the same bits as ref::TopK and the other paths. The
// barrier needs every CTA of the grid resident at once: the cooperative
// launch guarantees it (and fails rather than hang if the grid is too big;
// the launcher checks the occupancy first and takes another path).
#include "kernels/cuda/common/arch.cuh"

#include <cstdint>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/grid_arrival.cuh"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/cuda/indexer/topk_device.cuh"
#include "kernels/cuda/indexer/topk_keys.cuh"
#include "kernels/cuda/indexer/topk_paths.h"
#include "kernels/cuda/indexer/topk_plan.h"

namespace spar::topk {
namespace {

constexpr int kThreads = kTopKGroupThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = kTopKGroupBins;
constexpr int kGroupCopies = 8;
constexpr int kListCap = kTopKGroupListCap;
static_assert(kBins == 256 && kBins <= kThreads, "SelectDigit: one bin per thread of the first 8 warps");
static_assert(kListCap <= kThreads, "one list entry per thread");

struct GroupArgs {
  uint32_t* arrived;  // [rows], zero at launch; left zero
  uint32_t* hists;    // [rows][kTopKGroupLevels][chunks][kBins]
  uint2* list;        // [rows][kListCap]
  int chunks;
};

// The row's bucket holding the rem-th largest key, from the chunks'
// histograms of one level (hists[c][bin], `chunks` of them; this CTA is
// chunk `me`), with the earlier chunks' share of the counts.
__device__ __forceinline__ DigitSelect FindGroupBucket(const uint32_t* hists, int chunks, int me, uint32_t rem,
                                                       uint32_t (*scratch)[8], DigitSelect* result) {
  uint32_t cnt = 0, before = 0;
  if (threadIdx.x < kBins) {
    const int bin = kBins - 1 - threadIdx.x;
#pragma unroll 8
    for (int c = 0; c < chunks; ++c) {
      const uint32_t v = __ldcg(hists + c * kBins + bin);
      cnt += v;
      before += c < me ? v : 0u;
    }
  }
  return SelectDigit<true>(cnt, before, rem, scratch, result);
}

template <int kKeys>
__global__ void __launch_bounds__(kThreads, 2) TopKGroupKernel(const TopKParams p, const GroupArgs a) {
  constexpr int kChunk = kKeys * kThreads;
  constexpr int kTableEntries = kChunk / kCacheBlockTokens;
  static_assert(kTableEntries <= kThreads, "one block table entry per thread");
  __shared__ __align__(16) uint32_t hist[2][kGroupCopies][kBins];
  __shared__ uint32_t counts[kKeys * kWarps];
  __shared__ uint32_t scratch[33];
  __shared__ uint32_t bucket_scratch[2][8];
  __shared__ DigitSelect sel;
  __shared__ uint2 list_s[kListCap];
  __shared__ uint32_t list_count;
  __shared__ uint32_t finish[3];  // T, the list's keys above it, equal to it
  __shared__ int32_t table_s[kTableEntries];
  const int tid = threadIdx.x, lane = tid & 31;
  const int copy = lane & (kGroupCopies - 1);
  const int me = static_cast<int>(blockIdx.x);
  const int64_t row = blockIdx.y;
  const int c0 = me * kChunk;
  const int len = RowLen(p, row);
  uint32_t key[kKeys];
  LoadRowKeys<kThreads>(p, row, c0, len, key);
  const int32_t* table = SlotTable(p, row);
  static_assert(2 * kGroupCopies * kBins == 8 * kThreads, "two uint4 of zeros per thread");
  reinterpret_cast<uint4*>(&hist[0][0][0])[tid] = make_uint4(0, 0, 0, 0);
  reinterpret_cast<uint4*>(&hist[0][0][0])[kThreads + tid] = make_uint4(0, 0, 0, 0);
  if (tid == 0) list_count = 0;
  __syncthreads();
  int32_t table_entry = 0;  // read while the levels run
  if (table != nullptr && tid < kTableEntries && c0 + tid * kCacheBlockTokens < len)
    table_entry = table[c0 / kCacheBlockTokens + tid];

  // ---- radix select over the row --------------------------------------------
  const uint32_t k = static_cast<uint32_t>(p.k);
  const int chunks = a.chunks;
  uint32_t* arrived = a.arrived + row;
  uint32_t* row_hists = a.hists + row * kTopKGroupLevels * chunks * kBins;
  uint32_t barriers = 0;
  uint32_t prefix = 0, rem = k, eq_count = 0;
  uint32_t earlier_above = 0, earlier_eq = 0;  // the earlier chunks' keys surely taken / equal to T
  uint32_t row_valid = 0, earlier_valid = 0;   // when the row holds at most k valid keys
  bool take_all_valid = false;
#pragma unroll 1
  for (int level = 0; level < kTopKGroupLevels; ++level) {
    const int shift = 24 - 8 * level;
    uint32_t(*h)[kBins] = hist[level & 1];
    CountDigitRuns(key, shift, prefix, h[copy]);
    // The other buffer was last read before the previous level's bucket
    // search ended with a barrier: zero it for the next level.
    if (level < kTopKGroupLevels - 1 && tid < kGroupCopies * kBins / 4)
      reinterpret_cast<uint4*>(&hist[(level + 1) & 1][0][0])[tid] = make_uint4(0, 0, 0, 0);
    __syncthreads();
    uint32_t* level_hists = row_hists + level * chunks * kBins;
    if (tid < kBins) {
      uint32_t c = 0;
#pragma unroll
      for (int cp = 0; cp < kGroupCopies; ++cp) c += h[cp][tid];
      level_hists[me * kBins + tid] = c;
    }
    cuda::ArriveAndWait(arrived, ++barriers * chunks);
    const DigitSelect s = FindGroupBucket(level_hists, chunks, me, rem, bucket_scratch, &sel);
    if (level == 0 && s.total <= k) {
      take_all_valid = true;
      row_valid = s.total;
      earlier_valid = s.earlier_total;
      break;
    }
    prefix = (prefix << 8) | s.bucket;
    rem -= s.above;
    eq_count = s.count;
    earlier_above += s.earlier_above;
    earlier_eq = s.earlier_bucket;  // after the last level: the earlier chunks' keys == T
    if (level < kTopKGroupLevels - 1 && s.count <= kListCap) {
      // The bucket's keys (digits down to `shift` == prefix) to the row's
      // list, this chunk's after the earlier chunks'.
      uint2* list = a.list + row * kListCap;
#pragma unroll
      for (int u = 0; u < kKeys; ++u) {
        const bool in = key[u] != 0 && (key[u] >> shift) == prefix;
        Append(in, key[u], c0 + u * kThreads + tid, list + s.earlier_bucket, &list_count,
               kListCap - s.earlier_bucket);
      }
      cuda::ArriveAndWait(arrived, ++barriers * chunks);
      const uint32_t n = s.count;
      if (tid < static_cast<int>(n)) list_s[tid] = __ldcg(list + tid);
      __syncthreads();
      if (tid < static_cast<int>(n)) {
        const uint32_t mine = list_s[tid].x;
        uint32_t above = 0, equal = 0;
        for (uint32_t j = 0; j < n; ++j) {
          const uint32_t other = list_s[j].x;
          above += other > mine;
          equal += other == mine;
        }
        // Exactly the entries holding the rem-th key qualify; they write alike.
        if (above < rem && above + equal >= rem) {
          finish[0] = mine;
          finish[1] = above;
          finish[2] = equal;
        }
      }
      __syncthreads();
      const uint32_t t = finish[0];
      const bool earlier = tid < static_cast<int>(s.earlier_bucket);
      earlier_above += __syncthreads_count(earlier && list_s[tid].x > t);
      earlier_eq = __syncthreads_count(earlier && list_s[tid].x == t);
      prefix = t;
      rem -= finish[1];
      eq_count = finish[2];
      break;
    }
  }
  const uint32_t threshold = prefix, need_eq = rem;

  // ---- this chunk's selected positions, after the earlier chunks' ---------
  WarpFlags<kKeys> selected;  // chunk position u * kThreads + tid is selected
  uint32_t out_base = 0;
  if (take_all_valid) {
    selected = BallotEach<kKeys>([&](int u) { return key[u] != 0; });
    out_base = earlier_valid;
  } else {
    selected = BallotEach<kKeys>([&](int u) { return key[u] > threshold; });
    const WarpFlags<kKeys> eq = BallotEach<kKeys>([&](int u) { return key[u] == threshold; });
    out_base = earlier_above + min(earlier_eq, need_eq);
    if (need_eq >= eq_count) {
#pragma unroll
      for (int u = 0; u < kKeys; ++u) selected.b[u] |= eq.b[u];  // every tied key of the row is taken
    } else if (earlier_eq < need_eq) {
      // Keep this chunk's tied positions while the row's count stays below need_eq.
      uint32_t unused;
      PositionRanks<kThreads>(eq, counts, scratch, &unused);
#pragma unroll
      for (int u = 0; u < kKeys; ++u) {
        const uint32_t rank = RankInOrder<kThreads>(eq, u, counts);
        selected.b[u] |= __ballot_sync(0xffffffffu, eq.Mine(u) && earlier_eq + rank < need_eq);
      }
      __syncthreads();  // counts is rewritten below
    }
  }
  uint32_t total = 0;
  if (tid < kTableEntries) table_s[tid] = table_entry;  // published by PositionRanks' barriers
  PositionRanks<kThreads>(selected, counts, scratch, &total);
  int32_t* out = p.out + row * p.out_stride + out_base;
#pragma unroll
  for (int u = 0; u < kKeys; ++u) {
    if (!selected.Mine(u)) continue;
    const int pos = c0 + u * kThreads + tid;
    const int32_t value = table != nullptr ? table_s[(pos - c0) / kCacheBlockTokens] * kCacheBlockTokens +
                                                 pos % kCacheBlockTokens
                                           : pos;
    out[RankInOrder<kThreads>(selected, u, counts)] = value;
  }
  if (me == 0) {
    const int row_total = static_cast<int>(take_all_valid ? row_valid : k);
    int32_t* row_out = p.out + row * p.out_stride;
    for (int i = row_total + tid; i < p.k; i += kThreads) row_out[i] = -1;
  }
  // The counter back to zero for the next launch: each CTA arrives once
  // more after its last barrier (every CTA of the row passes the same
  // barriers), and the last to arrive resets it; no CTA waits on it then.
  if (tid == 0 && atomicAdd(arrived, 1u) == (barriers + 1) * chunks - 1) atomicExch(arrived, 0u);
}

// CTAs of this kernel resident per SM (the cooperative launch's bound),
// asked once: the same on every device of one build.
template <int kKeys>
absl::StatusOr<int> ResidentPerSm() {
  static const absl::StatusOr<int> per_sm = []() -> absl::StatusOr<int> {
    int n = 0;
    SPAR_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, TopKGroupKernel<kKeys>, kThreads, 0));
    return n;
  }();
  return per_sm;
}

template <int kKeys>
absl::Status Launch(const TopKParams& p, const TopKSplitPlan& plan, const GroupArgs& a, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(plan.chunks), static_cast<unsigned>(p.rows));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  SPAR_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&cfg, TopKGroupKernel<kKeys>, p, a));
  SPAR_CUDA_RETURN_IF_LAUNCH_FAILED("TopKGroupKernel");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> TopKGroupFits(const TopKSplitPlan& plan, int64_t rows, int sm_count) {
  if (!plan.group()) return false;
  const absl::StatusOr<int> per_sm = plan.group_keys == 4   ? ResidentPerSm<4>()
                                     : plan.group_keys == 8 ? ResidentPerSm<8>()
                                                            : ResidentPerSm<16>();
  if (!per_sm.ok()) return per_sm.status();
  return rows * plan.chunks <= int64_t{*per_sm} * sm_count;
}

absl::Status LaunchTopKGroup(const TopKParams& p, const TopKSplitPlan& plan, cudaStream_t stream) {
  const TopKGroupLayout l = TopKGroupWorkspaceLayout(plan, p.rows);
  char* ws = static_cast<char*>(p.workspace);
  // The caller's counters (kept at zero between launches) or the
  // workspace's, zeroed here.
  const bool kept = p.row_counters != nullptr && p.rows <= p.row_counters_capacity;
  uint32_t* arrived = kept ? p.row_counters : reinterpret_cast<uint32_t*>(ws + l.arrived);
  const GroupArgs a{arrived, reinterpret_cast<uint32_t*>(ws + l.hists), reinterpret_cast<uint2*>(ws + l.list),
                    plan.chunks};
  if (!kept) SPAR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(arrived, 0, static_cast<size_t>(p.rows) * 4, stream));
  switch (plan.group_keys) {
    case 4: return Launch<4>(p, plan, a, stream);
    case 8: return Launch<8>(p, plan, a, stream);
    case 16: return Launch<16>(p, plan, a, stream);
    default: return absl::InvalidArgumentError("LaunchTopKGroup: group_keys must be 4, 8 or 16");  // ValidateTopK refused it
  }
}

}  // namespace spar::topk
