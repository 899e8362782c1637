// Admission: the bounded FIFO of sequences waiting to run. New requests are
// admitted only while the queue has room for all their sequences, otherwise
// refused with RESOURCE_EXHAUSTED so clients back off (or a gateway routes
// elsewhere) instead of the queue growing without bound. Sequences
// preempted from running return to the front, ignoring the bound: they were
// admitted already.
//
// Pure and thread-compatible.
#ifndef SPAR_SERVICES_SCHEDULER_ADMISSION_QUEUE_H_
#define SPAR_SERVICES_SCHEDULER_ADMISSION_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/status/status.h"

namespace spar {

class AdmissionQueue {
 public:
  explicit AdmissionQueue(size_t max_waiting) : max_waiting_(max_waiting) {}

  // Appends all of `seqs` (one request's sequences) or none.
  absl::Status Admit(const std::vector<int64_t>& seqs);
  // Puts a preempted sequence at the front.
  void Requeue(int64_t seq) { queue_.push_front(seq); }
  // Removes `seq` wherever it is; false if absent.
  bool Remove(int64_t seq);

  const std::deque<int64_t>& items() const { return queue_; }
  size_t size() const { return queue_.size(); }
  bool empty() const { return queue_.empty(); }
  size_t max_waiting() const { return max_waiting_; }

 private:
  size_t max_waiting_;
  std::deque<int64_t> queue_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_ADMISSION_QUEUE_H_
