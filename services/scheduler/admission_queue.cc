#include "services/scheduler/admission_queue.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace spar {

absl::Status AdmissionQueue::Admit(const std::vector<int64_t>& seqs) {
  if (queue_.size() + seqs.size() > max_waiting_) {
    return absl::ResourceExhaustedError(absl::StrCat("the request queue is full (", queue_.size(), " of ",
                                                     max_waiting_, " sequences waiting); retry later"));
  }
  queue_.insert(queue_.end(), seqs.begin(), seqs.end());
  return absl::OkStatus();
}

bool AdmissionQueue::Remove(int64_t seq) {
  auto it = std::find(queue_.begin(), queue_.end(), seq);
  if (it == queue_.end()) return false;
  queue_.erase(it);
  return true;
}

}  // namespace spar
