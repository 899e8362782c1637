#include "services/http/generation_relay.h"

namespace spar::http {

std::shared_ptr<GenerationRelay> GenerationRelay::Create(Scheduler* scheduler, std::shared_ptr<HttpResponder> responder,
                                                         int sources) {
  std::shared_ptr<GenerationRelay> relay(new GenerationRelay(scheduler, responder));
  // Called by the sinks (a scheduler thread, under its lock): hand the
  // drain to the connection's strand. Only weak: the sinks must not keep
  // the relay (and what its callbacks hold) alive.
  std::weak_ptr<GenerationRelay> weak = relay;
  relay->streams_ = UpdateStreams::Create(sources, [responder, weak] {
    responder->Post([weak] {
      if (std::shared_ptr<GenerationRelay> r = weak.lock()) r->Drain();
    });
  });
  return relay;
}

GenerationRelay::~GenerationRelay() {
  if (streams_) streams_->Abandon();
}

absl::Status GenerationRelay::Submit(std::vector<GenerateParams> params) {
  for (size_t p = 0; p < params.size(); ++p) {
    auto id = scheduler_->Submit(std::move(params[p]), streams_->Sink(static_cast<int>(p)));
    if (!id.ok()) {
      for (size_t q = p; q < params.size(); ++q) streams_->Forget(static_cast<int>(q));
      Abandon();
      return id.status();
    }
    request_ids_.push_back(*id);
  }
  return absl::OkStatus();
}

void GenerationRelay::Start(OnEvents on_events, OnDone on_done) {
  on_events_ = std::move(on_events);
  on_done_ = std::move(on_done);
  std::weak_ptr<GenerationRelay> weak = weak_from_this();
  // The connection keeps the relay (and the callbacks' state) until the
  // answer is complete; a client that leaves first cancels.
  if (!responder_->Attach(shared_from_this(), [weak] {
        if (std::shared_ptr<GenerationRelay> r = weak.lock()) r->Abandon();
      })) {
    Abandon();
    return;
  }
  responder_->Post([weak] {
    if (std::shared_ptr<GenerationRelay> r = weak.lock()) {
      r->started_ = true;
      r->Drain();
    }
  });
}

void GenerationRelay::Drain() {
  if (!started_ || done_) return;  // before Start, events wait in the streams
  std::vector<UpdateStreams::Event> events = streams_->Take();
  if (!events.empty()) on_events_(*this, std::move(events));
  if (streams_->Done()) {
    done_ = true;
    on_done_(*this);
  }
}

void GenerationRelay::CancelAll() {
  for (const std::string& id : request_ids_) scheduler_->Cancel(id);
}

void GenerationRelay::Abandon() {
  streams_->Abandon();
  CancelAll();
}

}  // namespace spar::http
