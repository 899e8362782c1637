// The scheduler requests of one HTTP request (one per prompt) and their
// way back to its connection, for any API on the HTTP server (OpenAI's
// now; an Anthropic Messages adapter would use it the same way):
//
//   auto relay = GenerationRelay::Create(scheduler, responder, n);
//   if (status = relay->Submit(params); !ok) -> answer the error
//   relay->Start(on_events, on_done)
//
// Updates wait in UpdateStreams; each batch is handed to `on_events` on
// the connection's strand (so the callbacks need no lock and never run
// on a scheduler thread, under its lock), then `on_done` once every
// request has ended. No thread waits: an SSE stream costs no thread. A
// client that disconnects first cancels every request at once (their KV
// blocks are freed), and neither callback runs again.
//
// Thread-safe.
#ifndef SPAR_SERVICES_HTTP_GENERATION_RELAY_H_
#define SPAR_SERVICES_HTTP_GENERATION_RELAY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "services/http/http_message.h"
#include "services/http/update_streams.h"
#include "services/scheduler/scheduler.h"

namespace spar::http {

class GenerationRelay : public std::enable_shared_from_this<GenerationRelay> {
 public:
  using OnEvents = std::function<void(GenerationRelay& relay, std::vector<UpdateStreams::Event> events)>;
  using OnDone = std::function<void(GenerationRelay& relay)>;

  // `scheduler` must outlive the relay's requests (the HTTP server's
  // Stop comes before the scheduler goes).
  static std::shared_ptr<GenerationRelay> Create(Scheduler* scheduler, std::shared_ptr<HttpResponder> responder,
                                                 int sources);
  // Once the relay is dropped unstarted (or after it was abandoned), its
  // requests' updates are refused, which cancels them.
  ~GenerationRelay();
  GenerationRelay(const GenerationRelay&) = delete;
  GenerationRelay& operator=(const GenerationRelay&) = delete;

  // Submits params[i] as source i, in order. The first refusal cancels
  // the requests already submitted and is returned (nothing is relayed).
  absl::Status Submit(std::vector<GenerateParams> params);

  // Relays from now on (see above). Call once, after Submit succeeded.
  void Start(OnEvents on_events, OnDone on_done);

  // Ends every request (e.g. when one failed and the answer is an error):
  // their close events still arrive.
  void CancelAll();

  HttpResponder& responder() { return *responder_; }
  const std::vector<std::string>& request_ids() const { return request_ids_; }

 private:
  GenerationRelay(Scheduler* scheduler, std::shared_ptr<HttpResponder> responder)
      : scheduler_(scheduler), responder_(std::move(responder)) {}
  void Drain();    // on the strand
  void Abandon();  // the client is gone

  Scheduler* const scheduler_;
  const std::shared_ptr<HttpResponder> responder_;
  std::shared_ptr<UpdateStreams> streams_;
  std::vector<std::string> request_ids_;
  // Strand-only state.
  bool started_ = false;
  bool done_ = false;
  OnEvents on_events_;
  OnDone on_done_;
};

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_GENERATION_RELAY_H_
