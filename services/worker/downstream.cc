#include "services/worker/downstream.h"

#include "base/log.h"
#include "services/common/daemon.h"

namespace spar {

Downstream::Downstream(std::string address, SentCallback on_sent)
    : address_(std::move(address)), on_sent_(std::move(on_sent)), stub_(v1::Worker::NewStub(CreateWorkerChannel(address_))) {
  thread_ = std::thread([this] { Run(); });
}

Downstream::~Downstream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    // A Write blocked on flow control (or waiting for the peer) returns.
    if (context_) context_->TryCancel();
  }
  cv_.notify_all();
  thread_.join();
}

void Downstream::Send(std::unique_ptr<v1::MicroBatch> batch) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(batch));
  }
  cv_.notify_one();
}

uint64_t Downstream::bytes_sent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_sent_;
}

uint64_t Downstream::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

void Downstream::Run() {
  v1::PipelineSummary summary;
  std::unique_ptr<grpc::ClientWriter<v1::MicroBatch>> writer;
  auto close = [&] {
    if (writer) {
      writer->WritesDone();
      grpc::Status s = writer->Finish();
      bool stopping;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stopping = stopping_;
      }
      if (!s.ok() && !stopping) SPAR_LOG(WARNING) << "stream to " << address_ << " ended: " << s.error_message();
      writer.reset();
    }
    std::lock_guard<std::mutex> lock(mu_);
    context_.reset();
  };
  for (;;) {
    std::unique_ptr<v1::MicroBatch> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) break;
      batch = std::move(queue_.front());
      queue_.pop_front();
      if (!writer) {
        context_ = std::make_unique<grpc::ClientContext>();
        // The next stage may still be starting: wait for it rather than fail.
        context_->set_wait_for_ready(true);
      }
    }
    if (!writer) writer = stub_->Pipeline(context_.get(), &summary);
    const size_t bytes = batch->ByteSizeLong();
    const uint64_t activation_bytes = batch->hidden().data().size();
    const absl::Time write_start = absl::Now();
    if (!writer->Write(*batch)) {
      SPAR_LOG(ERROR) << "cannot send micro-batch " << batch->batch_id() << " to " << address_
                      << "; the next stage is unreachable";
      close();
      std::lock_guard<std::mutex> lock(mu_);
      ++dropped_;
      continue;
    }
    if (on_sent_) on_sent_(absl::Now() - write_start, activation_bytes);
    std::lock_guard<std::mutex> lock(mu_);
    bytes_sent_ += bytes;
  }
  close();
}

}  // namespace spar
