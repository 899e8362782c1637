// Tensor and expert parallelism inside a node (dsa-spec.md §5, DESIGN §3):
// which slice of the attention heads, MLP columns and routed experts a rank
// holds, and the in-process sum all-reduce the cpu backend uses to run a
// tensor-parallel group as threads (tests of the sharding against TP 1;
// the cuda backend uses NCCL, one process per GPU).
#ifndef SPAR_ENGINE_TENSOR_PARALLEL_H_
#define SPAR_ENGINE_TENSOR_PARALLEL_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace spar {

struct TpRank {
  int rank = 0;
  int size = 1;
};

// [begin, end) of `total` items held by `tp.rank` when they are split evenly;
// an error naming `what` unless tp.size divides total.
struct Slice {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
absl::StatusOr<Slice> EvenSlice(int64_t total, TpRank tp, const std::string& what);

// Checks a rank/size pair (0 <= rank < size, size >= 1).
absl::Status ValidateTpRank(TpRank tp);

// A sum all-reduce over `size` threads of one process. Each participant calls
// AllReduceSum(rank, data, n) with the same n; every rank gets the sum taken
// in rank order, so all ranks hold bit-identical results (like NCCL's).
class InProcessGroup {
 public:
  explicit InProcessGroup(int size) : size_(size), inputs_(size, nullptr) {}
  int size() const { return size_; }
  absl::Status AllReduceSum(int rank, float* data, size_t n);

 private:
  // Blocks until all ranks have arrived at the barrier of this phase.
  void Barrier(std::unique_lock<std::mutex>& lock);

  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<const float*> inputs_;
  size_t n_ = 0;
};

}  // namespace spar

#endif  // SPAR_ENGINE_TENSOR_PARALLEL_H_
