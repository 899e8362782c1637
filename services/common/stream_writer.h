// A server-streaming reactor with an unbounded outgoing queue, for streams
// fed by threads other than gRPC's (the scheduler loop, a worker's compute
// thread). Producers hold a StreamHandle: Push and Finish never block and
// stay safe after the call has ended (they become no-ops), so producers
// need not track the reactor's lifetime.
//
// Threading: gRPC's callback API runs reactions on its own threads and never
// inline inside StartWrite/Finish called by the application, so calling them
// under the handle's mutex is safe; OnWriteDone simply waits for the mutex.
#ifndef SPAR_SERVICES_COMMON_STREAM_WRITER_H_
#define SPAR_SERVICES_COMMON_STREAM_WRITER_H_

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>

#include <grpcpp/support/server_callback.h>
#include <grpcpp/support/status.h>

namespace spar {

template <typename Response>
class QueuedWriteReactor;

template <typename Response>
class StreamHandle {
 public:
  // Queues a message. Returns false when the stream is finished or gone.
  bool Push(Response message) {
    std::lock_guard<std::mutex> lock(mu_);
    if (reactor_ == nullptr || finish_requested_) return false;
    queue_.push_back(std::move(message));
    if (!writing_) {
      writing_ = true;
      reactor_->StartWrite(&queue_.front());
    }
    return true;
  }

  // Ends the stream after the queued messages with `status`. Idempotent.
  void Finish(const grpc::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (reactor_ == nullptr || finish_requested_) return;
    finish_requested_ = true;
    status_ = status;
    if (!writing_) FinishLocked(status_);
  }

  // Whether the stream can still take messages.
  bool open() {
    std::lock_guard<std::mutex> lock(mu_);
    return reactor_ != nullptr && !finish_requested_;
  }

 private:
  friend class QueuedWriteReactor<Response>;

  void FinishLocked(const grpc::Status& status) {
    if (finished_) return;
    finished_ = true;
    finish_requested_ = true;
    queue_.clear();
    reactor_->Finish(status);
  }

  // Reactions (called by QueuedWriteReactor).
  void OnWriteDone(bool ok) {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (reactor_ == nullptr || finished_) return;
    if (!queue_.empty()) queue_.pop_front();
    if (!ok) {  // the client went away
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    if (!queue_.empty()) {
      writing_ = true;
      reactor_->StartWrite(&queue_.front());
    } else if (finish_requested_) {
      FinishLocked(status_);
    }
  }
  void OnCancel() {
    std::lock_guard<std::mutex> lock(mu_);
    // With a write outstanding, its OnWriteDone(false) finishes the call.
    if (reactor_ != nullptr && !writing_) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }
  void OnDone() {
    std::lock_guard<std::mutex> lock(mu_);
    reactor_ = nullptr;
    queue_.clear();
  }

  std::mutex mu_;
  grpc::ServerWriteReactor<Response>* reactor_ = nullptr;
  std::deque<Response> queue_;  // front() is being written while writing_
  bool writing_ = false;
  bool finish_requested_ = false;
  bool finished_ = false;
  grpc::Status status_;
};

// The reactor. `on_cancel` runs (on a gRPC thread, without locks held) when
// the client cancels or disconnects; it must not block.
template <typename Response>
class QueuedWriteReactor : public grpc::ServerWriteReactor<Response> {
 public:
  explicit QueuedWriteReactor(std::function<void()> on_cancel = nullptr)
      : handle_(std::make_shared<StreamHandle<Response>>()), on_cancel_(std::move(on_cancel)) {
    handle_->reactor_ = this;
  }

  std::shared_ptr<StreamHandle<Response>> handle() const { return handle_; }
  void set_on_cancel(std::function<void()> fn) { on_cancel_ = std::move(fn); }

  void OnWriteDone(bool ok) override {
    if (!ok && on_cancel_) on_cancel_();
    handle_->OnWriteDone(ok);
  }
  void OnCancel() override {
    if (on_cancel_) on_cancel_();
    handle_->OnCancel();
  }
  void OnDone() override {
    handle_->OnDone();
    delete this;
  }

 private:
  std::shared_ptr<StreamHandle<Response>> handle_;
  std::function<void()> on_cancel_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_COMMON_STREAM_WRITER_H_
