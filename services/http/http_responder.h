// Internal to the HTTP server: the HttpResponder a connection hands its
// handler. Calls from any thread are queued in order (a mailbox) and run
// on the connection's strand; the queue is handed over through the
// PostGate, so a thread outside the io_context never holds the
// connection (its last reference, and so its destruction, stays on the
// I/O threads).
#ifndef SPAR_SERVICES_HTTP_HTTP_RESPONDER_H_
#define SPAR_SERVICES_HTTP_HTTP_RESPONDER_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

#include "services/http/http_message.h"
#include "services/http/http_server_core.h"

namespace spar::http {

class ResponderImpl : public HttpResponder, public std::enable_shared_from_this<ResponderImpl> {
 public:
  ResponderImpl(std::shared_ptr<PostGate> gate, std::weak_ptr<ConnectionOps> connection)
      : gate_(std::move(gate)), connection_(std::move(connection)) {}

  void Send(HttpResponse response) override;
  void StartStream(HttpResponse head) override;
  void Write(std::string data) override;
  void EndStream() override;
  void Post(std::function<void()> task) override;
  bool Attach(std::shared_ptr<void> state, std::function<void()> on_gone) override;
  bool gone() const override { return gone_.load(); }

  // The connection's side, on its strand. The response went out whole:
  // the attached state is dropped, later calls do nothing.
  void MarkComplete();
  // The client left first: on_gone runs, the state is dropped.
  void MarkGone();

 private:
  using Op = std::function<void(ConnectionOps&)>;
  void Enqueue(Op op);
  void Finish(bool gone);
  void RunQueued(ConnectionOps& connection);

  const std::shared_ptr<PostGate> gate_;
  const std::weak_ptr<ConnectionOps> connection_;
  std::atomic<bool> gone_{false};
  std::atomic<bool> finished_{false};  // complete or gone

  std::mutex mu_;
  std::deque<Op> ops_;
  bool scheduled_ = false;  // a RunQueued is on its way
  std::shared_ptr<void> state_;
  std::function<void()> on_gone_;
};

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_HTTP_RESPONDER_H_
