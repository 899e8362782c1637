#include "services/worker/results_hub.h"

namespace spar {

void ResultsHub::Attach(std::shared_ptr<Handle> subscriber) {
  std::lock_guard<std::mutex> lock(mu_);
  if (subscriber_) subscriber_->Finish(grpc::Status(grpc::StatusCode::ABORTED, "another subscriber attached"));
  subscriber_ = std::move(subscriber);
  while (!kept_.empty()) {
    if (!subscriber_->Push(kept_.front())) break;
    kept_.pop_front();
  }
}

void ResultsHub::Publish(v1::MicroBatchResult result) {
  std::lock_guard<std::mutex> lock(mu_);
  if (subscriber_ && kept_.empty() && subscriber_->Push(result)) return;
  if (subscriber_ && !subscriber_->open()) subscriber_.reset();
  if (kept_.size() >= kMaxKept) kept_.pop_front();
  kept_.push_back(std::move(result));
}

void ResultsHub::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  kept_.clear();
  if (subscriber_) subscriber_->Finish(grpc::Status(grpc::StatusCode::ABORTED, "pipeline reconfigured"));
  subscriber_.reset();
}

size_t ResultsHub::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kept_.size();
}

}  // namespace spar
