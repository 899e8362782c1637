// Tensor and expert parallelism inside a node (dsa-spec.md §5, DESIGN §3):
// which slice of the attention heads, MLP columns and routed experts a rank
// holds, and the sum all-reduce groups of the cpu backend: CpuGroup is the
// interface, InProcessGroup runs a group as threads of one process (tests
// of the sharding against TP 1), SocketGroup (engine/socket_group.h) as
// processes joined by TCP (worker TP groups in CI). The cuda backend uses
// NCCL, one process per GPU.
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

// The cpu backend's all-reduce. Each rank calls AllReduceSum(rank, data, n)
// with the same n; every rank gets the sum taken in rank order, starting
// from 0 (0 + x0 + x1 + ...), so all ranks hold bit-identical results and
// every implementation gives the same bits (like NCCL's within a group).
// An error (a peer gone, a size mismatch) must be returned, never a hang.
class CpuGroup {
 public:
  virtual ~CpuGroup() = default;
  virtual int size() const = 0;
  virtual absl::Status AllReduceSum(int rank, float* data, size_t n) = 0;
};

// The rank-order sum every CpuGroup computes: out[i] = 0 + in[0][i] + ...
void RankOrderSum(const std::vector<const float*>& inputs, size_t n, float* out);

// A group of `size` threads of one process.
class InProcessGroup final : public CpuGroup {
 public:
  explicit InProcessGroup(int size) : size_(size), inputs_(size, nullptr) {}
  int size() const override { return size_; }
  absl::Status AllReduceSum(int rank, float* data, size_t n) override;

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
