// For the top-k GPU tests: rows of logits in the distributions that stress
// a radix select (uniform, few distinct values, +0 / -0, one exponent, all
// equal, NaN / +-inf, all -inf, the indexer's real-like scores), and the
// check that a captured launch replays correctly.
#ifndef SPAR_TESTS_KERNELS_INDEXER_TOPK_TEST_UTIL_H_
#define SPAR_TESTS_KERNELS_INDEXER_TOPK_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "base/rng.h"
#include "kernels/cuda/indexer/indexer.h"
#include "kernels/ref/topk_ref.h"
#include "tests/kernels/gpu_test_util.h"

namespace spar::testing {

enum class Dist { kUniform, kTies, kZerosAndTies, kNarrow, kAllEqual, kSpecials, kAllNegInf, kRealLike };

inline std::vector<float> MakeRow(Dist d, int len, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(len);
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < len; ++i) {
    switch (d) {
      case Dist::kUniform: v[i] = 10.0f * rng.Symmetric(); break;
      case Dist::kTies: v[i] = static_cast<float>(rng.Below(5)); break;  // 5 distinct values
      case Dist::kZerosAndTies:  // relu-like: many +0 and -0, a few tied positives
        v[i] = rng.Below(3) == 0 ? (rng.Below(2) ? 0.0f : -0.0f) : static_cast<float>(rng.Below(40)) * 0.25f;
        break;
      case Dist::kNarrow: v[i] = 1.0f + rng.Uniform(); break;  // one exponent: huge top-level buckets
      case Dist::kAllEqual: v[i] = 3.5f; break;
      case Dist::kSpecials: {
        const uint64_t r = rng.Below(16);
        v[i] = r == 0 ? ninf : r == 1 ? std::numeric_limits<float>::quiet_NaN()
                       : r == 2 ? std::numeric_limits<float>::infinity()
                                : 5.0f * rng.Symmetric();
        break;
      }
      case Dist::kAllNegInf: v[i] = ninf; break;
      case Dist::kRealLike: {
        // Sum of relu'd weighted dot products over 32 heads, as the indexer makes.
        float s = 0;
        for (int h = 0; h < 32; ++h) s += std::max(0.0f, rng.Symmetric() + 0.3f) * (0.02f + 0.01f * rng.Uniform());
        v[i] = s * (i % 997 == 0 ? 3.0f : 1.0f);
        break;
      }
    }
  }
  return v;
}

// Captures LaunchTopK(p) in a CUDA graph and replays it on two sets of rows
// (real-like, then five-value ties) uploaded to `logits` (p.logits, rows x
// len contiguous, every row full): each replay must equal ref::TopK in
// `out` (p.out, stride k), so no state of the first survives into the second.
// p's workspace is the caller's (garbage-filled).
inline void ExpectGraphReplaysMatchReference(const TopKParams& p, DeviceArray<float>& logits_d,
                                             DeviceArray<int32_t>& out_d) {
  const int rows = static_cast<int>(p.rows), len = static_cast<int>(p.num_cols), k = p.k;
  cudaStream_t stream;
  SPAR_ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  SPAR_ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status st = LaunchTopK(p, stream);
  SPAR_ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(st.ok()) << st;
  cudaGraphExec_t exec;
  SPAR_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    std::vector<float> logits(static_cast<size_t>(rows) * len);
    for (int r = 0; r < rows; ++r) {
      const std::vector<float> row = MakeRow(replay == 0 ? Dist::kRealLike : Dist::kTies, len, 70 + r + 10 * replay);
      std::copy(row.begin(), row.end(), logits.begin() + static_cast<size_t>(r) * len);
    }
    logits_d.Upload(logits);
    SPAR_ASSERT_CUDA(cudaMemset(out_d.get(), 0x7f, out_d.bytes()));
    SPAR_ASSERT_CUDA(cudaGraphLaunch(exec, stream));
    SPAR_ASSERT_CUDA(cudaStreamSynchronize(stream));
    const std::vector<int32_t> got = out_d.Download();
    std::vector<int32_t> want(k);
    for (int r = 0; r < rows; ++r) {
      ref::TopK(logits.data() + static_cast<size_t>(r) * len, len, k, want.data());
      for (int i = 0; i < k; ++i) ASSERT_EQ(got[static_cast<size_t>(r) * k + i], want[i]) << "replay " << replay;
    }
  }
  SPAR_ASSERT_CUDA(cudaGraphExecDestroy(exec));
  SPAR_ASSERT_CUDA(cudaGraphDestroy(graph));
  SPAR_ASSERT_CUDA(cudaStreamDestroy(stream));
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_KERNELS_INDEXER_TOPK_TEST_UTIL_H_
