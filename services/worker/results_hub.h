// The last stage's outbox: micro-batch results in production order, handed
// to the scheduler's subscription (Worker.Results). Results produced while
// no subscriber is attached are kept, so a subscriber that arrives a little
// after the first micro-batch loses nothing.
//
// Thread-safe.
#ifndef SPAR_SERVICES_WORKER_RESULTS_HUB_H_
#define SPAR_SERVICES_WORKER_RESULTS_HUB_H_

#include <deque>
#include <memory>
#include <mutex>

#include "services/common/stream_writer.h"
#include "spar/v1/worker.pb.h"

namespace spar {

class ResultsHub {
 public:
  using Handle = StreamHandle<v1::MicroBatchResult>;

  // Replaces the subscriber (a newer scheduler connection wins; the older
  // stream is ended with ABORTED) and hands it the kept results.
  void Attach(std::shared_ptr<Handle> subscriber);
  void Publish(v1::MicroBatchResult result);
  // Drops kept results and ends the subscription (a new epoch).
  void Reset();
  size_t pending() const;

 private:
  // Keep at most this many results without a subscriber (a scheduler keeps
  // at most S micro-batches in flight, so this is never reached normally).
  static constexpr size_t kMaxKept = 4096;
  mutable std::mutex mu_;
  std::shared_ptr<Handle> subscriber_;
  std::deque<v1::MicroBatchResult> kept_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_WORKER_RESULTS_HUB_H_
