// What happens to requests, told as it happens, for whoever measures it
// (the scheduler's Prometheus metrics). The scheduler and its
// RequestTracker call these under the scheduler's lock (OnRejected also
// outside it), so implementations must be quick, must not block and must
// not call back into the scheduler. Timestamps are the implementation's
// business: the calls come at the moment the event happens.
#ifndef SPAR_SERVICES_SCHEDULER_REQUEST_OBSERVER_H_
#define SPAR_SERVICES_SCHEDULER_REQUEST_OBSERVER_H_

#include <string>

#include "absl/status/status.h"
#include "services/scheduler/scheduler_core.h"

namespace spar {

class RequestObserver {
 public:
  virtual ~RequestObserver() = default;

  // A request was admitted: `num_seqs` sequences (n) of `prompt_tokens`.
  virtual void OnAdmitted(const std::string& request_id, int prompt_tokens, int num_seqs) = 0;
  // A request was refused before admission (bad field, queue full, not
  // ready, draining, ...).
  virtual void OnRejected(absl::StatusCode code) = 0;
  // One of the request's sequences went into a micro-batch (called for
  // every micro-batch; the first call ends the request's queue time).
  virtual void OnScheduled(const std::string& request_id) = 0;
  // Sequence `index` of the request produced one output token.
  virtual void OnOutputToken(const std::string& request_id, int index) = 0;
  // Sequence `index` finished normally (stop or length).
  virtual void OnSequenceFinished(const std::string& request_id, int index, SeqFinishReason reason) = 0;
  // The request ended: OK once every sequence finished, else the error
  // that ended it (CANCELLED for aborts and clients that went away).
  virtual void OnRequestEnded(const std::string& request_id, const absl::Status& status) = 0;
};

}  // namespace spar

#endif  // SPAR_SERVICES_SCHEDULER_REQUEST_OBSERVER_H_
