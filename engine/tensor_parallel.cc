#include "engine/tensor_parallel.h"

#include "absl/strings/str_cat.h"

namespace spar {

absl::Status ValidateTpRank(TpRank tp) {
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor-parallel rank ", tp.rank, " of size ", tp.size, " is not valid (0 <= rank < size)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Slice> EvenSlice(int64_t total, TpRank tp, const std::string& what) {
  if (auto s = ValidateTpRank(tp); !s.ok()) return s;
  if (total % tp.size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor-parallel size ", tp.size, " does not divide the ", total, " ", what));
  }
  const int64_t per = total / tp.size;
  return Slice{per * tp.rank, per * (tp.rank + 1)};
}

void RankOrderSum(const std::vector<const float*>& inputs, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = 0.0f;
  for (const float* in : inputs) {
    for (size_t i = 0; i < n; ++i) out[i] += in[i];
  }
}

void InProcessGroup::Barrier(std::unique_lock<std::mutex>& lock) {
  const uint64_t gen = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != gen; });
}

absl::Status InProcessGroup::AllReduceSum(int rank, float* data, size_t n) {
  if (rank < 0 || rank >= size_) return absl::InvalidArgumentError(absl::StrCat("all-reduce: rank ", rank));
  if (size_ == 1) return absl::OkStatus();
  std::unique_lock<std::mutex> lock(mu_);
  // Phase 1: publish inputs. A size mismatch is a programming error on some
  // rank; every rank still passes all barriers so none hangs.
  inputs_[rank] = data;
  if (rank == 0) n_ = n;
  Barrier(lock);
  const bool same = n_ == n;
  std::vector<float> sum;
  if (same) {
    sum.resize(n);
    lock.unlock();
    RankOrderSum(inputs_, n, sum.data());
    lock.lock();
  }
  // Phase 2: everyone has read every input; now overwrite our own.
  Barrier(lock);
  if (!same) return absl::InternalError(absl::StrCat("all-reduce: rank ", rank, " has ", n, " values, rank 0 ", n_));
  for (size_t i = 0; i < n; ++i) data[i] = sum[i];
  return absl::OkStatus();
}

}  // namespace spar
