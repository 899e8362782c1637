// Where the scheduler's updates for one HTTP request wait for the HTTP
// side: one GenerationSink per prompt (each a scheduler request), one
// queue. The scheduler calls the sinks under its lock, so Send/Close only
// append and, when the queue had nothing waiting to be taken, call
// `on_ready` once (which must only hand work off: the HTTP side then
// Takes everything queued on its own thread). Once the HTTP side abandons
// the streams (client gone), Send returns false and the scheduler cancels
// the request.
//
// Thread-safe.
#ifndef SPAR_SERVICES_HTTP_UPDATE_STREAMS_H_
#define SPAR_SERVICES_HTTP_UPDATE_STREAMS_H_

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "services/scheduler/generation_types.h"

namespace spar::http {

class UpdateStreams : public std::enable_shared_from_this<UpdateStreams> {
 public:
  struct Event {
    int source = 0;
    std::optional<GenerationUpdate> update;  // an update, or
    std::optional<absl::Status> closed;      // the end of that source's stream
  };

  static std::shared_ptr<UpdateStreams> Create(int sources, std::function<void()> on_ready);

  // The sink of source `i` (hand it to Scheduler::Submit).
  std::shared_ptr<GenerationSink> Sink(int i);

  // Every event queued so far (none: an empty vector); the next event
  // calls on_ready again.
  std::vector<Event> Take();

  // Every source that was given a sink has closed (and its close event was
  // handed out by Take).
  bool Done() const;

  // Marks source `i` as never submitted (Submit failed): Done() ignores it.
  void Forget(int i);

  // The consumer is gone: further Sends fail so the scheduler cancels.
  void Abandon();

 private:
  class SourceSink;
  UpdateStreams(int sources, std::function<void()> on_ready) : on_ready_(std::move(on_ready)), open_(sources, true) {}
  bool Push(Event event);

  const std::function<void()> on_ready_;
  mutable std::mutex mu_;
  std::deque<Event> queue_;
  std::vector<bool> open_;  // not yet closed (as seen by the consumer)
  bool notified_ = false;   // on_ready was called and nothing was taken since
  bool abandoned_ = false;
};

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_UPDATE_STREAMS_H_
