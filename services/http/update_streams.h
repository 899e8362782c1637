// Where the scheduler's updates for one HTTP request wait for the HTTP
// thread: one GenerationSink per prompt (each a scheduler request), one
// queue. The scheduler calls the sinks under its lock, so Send/Close only
// append and notify; the HTTP thread waits with a timeout so it can also
// watch its connection. Once the HTTP side abandons the streams (client
// gone), Send returns false and the scheduler cancels the request.
//
// Thread-safe.
#ifndef SPAR_SERVICES_HTTP_UPDATE_STREAMS_H_
#define SPAR_SERVICES_HTTP_UPDATE_STREAMS_H_

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "services/scheduler/generation_types.h"

namespace spar::http {

class UpdateStreams : public std::enable_shared_from_this<UpdateStreams> {
 public:
  struct Event {
    int source = 0;
    std::optional<GenerationUpdate> update;  // an update, or
    std::optional<absl::Status> closed;      // the end of that source's stream
  };

  static std::shared_ptr<UpdateStreams> Create(int sources);

  // The sink of source `i` (hand it to Scheduler::Submit).
  std::shared_ptr<GenerationSink> Sink(int i);

  // Waits until events are queued (returns them all) or `timeout` passes
  // (returns none).
  std::vector<Event> Wait(absl::Duration timeout);

  // Every source that was given a sink has closed (and its close event was
  // handed out by Wait).
  bool Done() const;

  // Marks source `i` as never submitted (Submit failed): Done() ignores it.
  void Forget(int i);

  // The consumer is gone: further Sends fail so the scheduler cancels.
  void Abandon();

 private:
  class SourceSink;
  explicit UpdateStreams(int sources) : open_(sources, true) {}
  bool Push(Event event);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> queue_;
  std::vector<bool> open_;  // not yet closed (as seen by the consumer)
  bool abandoned_ = false;
};

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_UPDATE_STREAMS_H_
