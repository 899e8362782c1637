#include "services/http/http_responder.h"

#include <exception>
#include <utility>

#include "base/log.h"

namespace spar::http {

void ResponderImpl::Send(HttpResponse response) {
  Enqueue([r = std::move(response)](ConnectionOps& c) mutable { c.DoSend(std::move(r)); });
}

void ResponderImpl::StartStream(HttpResponse head) {
  Enqueue([h = std::move(head)](ConnectionOps& c) mutable { c.DoStartStream(std::move(h)); });
}

void ResponderImpl::Write(std::string data) {
  Enqueue([d = std::move(data)](ConnectionOps& c) mutable { c.DoWrite(std::move(d)); });
}

void ResponderImpl::EndStream() {
  Enqueue([](ConnectionOps& c) { c.DoEndStream(); });
}

void ResponderImpl::Post(std::function<void()> task) {
  Enqueue([t = std::move(task)](ConnectionOps&) { t(); });
}

bool ResponderImpl::Attach(std::shared_ptr<void> state, std::function<void()> on_gone) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return false;
  state_ = std::move(state);
  on_gone_ = std::move(on_gone);
  return true;
}

void ResponderImpl::Enqueue(Op op) {
  if (finished_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ops_.push_back(std::move(op));
    if (scheduled_) return;
    scheduled_ = true;
  }
  // On an I/O thread: find the connection (it may be gone), then its strand.
  gate_->Post([self = shared_from_this()] {
    std::shared_ptr<ConnectionOps> c = self->connection_.lock();
    if (c == nullptr) {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->ops_.clear();
      return;  // scheduled_ stays set: nothing will run any more
    }
    c->RunOnStrand([self, c] { self->RunQueued(*c); });
  });
}

void ResponderImpl::RunQueued(ConnectionOps& connection) {
  for (;;) {
    std::deque<Op> ops;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ops_.empty()) {
        scheduled_ = false;
        return;
      }
      ops.swap(ops_);
    }
    for (Op& op : ops) {
      if (finished_) return;  // the rest belongs to a response that is over
      try {
        op(connection);
      } catch (const std::exception& e) {
        // A handler's task failed half-way: the answer cannot be trusted.
        SPAR_LOG(ERROR) << "HTTP response task failed: " << e.what() << "; disconnecting the client";
        connection.Abort();
        return;
      }
    }
  }
}

void ResponderImpl::MarkComplete() { Finish(/*gone=*/false); }

void ResponderImpl::MarkGone() { Finish(/*gone=*/true); }

void ResponderImpl::Finish(bool gone) {
  std::shared_ptr<void> state;
  std::function<void()> on_gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    gone_ = gone;
    state.swap(state_);
    on_gone.swap(on_gone_);
  }
  if (gone && on_gone) on_gone();
  // `state` is released here, on the strand, after on_gone ran.
}

}  // namespace spar::http
