#include "services/worker/tp_joiner.h"

#include <chrono>

#include "base/log.h"
#include "services/common/daemon.h"
#include "services/common/grpc_status.h"

namespace spar {

TpJoiner::TpJoiner(std::string leader, v1::JoinTpGroupRequest request, Callbacks callbacks)
    : leader_(std::move(leader)),
      request_(std::move(request)),
      callbacks_(std::move(callbacks)),
      stub_(v1::Worker::NewStub(CreateWorkerChannel(leader_))) {
  thread_ = std::thread([this] { Run(); });
}

TpJoiner::~TpJoiner() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }
  cv_.notify_all();
  thread_.join();
}

bool TpJoiner::joined() const {
  std::lock_guard<std::mutex> lock(mu_);
  return joined_;
}

void TpJoiner::Run() {
  absl::Status last_refusal;
  for (;;) {
    grpc::ClientContext ctx;
    // The leader may still be starting: wait for it rather than fail.
    ctx.set_wait_for_ready(true);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      context_ = &ctx;
    }
    std::unique_ptr<grpc::ClientReader<v1::TpGroupEvent>> reader = stub_->JoinTpGroup(&ctx, request_);
    v1::TpGroupEvent event;
    bool registered = false;
    if (reader->Read(&event)) {
      registered = true;
      {
        std::lock_guard<std::mutex> lock(mu_);
        joined_ = true;
      }
      SPAR_LOG(INFO) << "joined the tensor-parallel group of " << leader_ << ": " << event.message();
      last_refusal = absl::OkStatus();
      if (callbacks_.on_joined) callbacks_.on_joined();
      while (reader->Read(&event)) {
      }
    }
    const grpc::Status s = reader->Finish();
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mu_);
      context_ = nullptr;
      joined_ = false;
      stopping = stopping_;
    }
    const absl::Status status = FromGrpcStatus(s);
    if (registered) {
      if (!stopping) SPAR_LOG(WARNING) << "left the tensor-parallel group of " << leader_ << ": " << status;
      if (callbacks_.on_left) callbacks_.on_left(status.ok() ? absl::UnavailableError("the leader ended the group") : status);
    } else if (!stopping && status.code() != last_refusal.code()) {
      // Refusals (a wrong --tp-size, the leader not up) repeat every retry:
      // log each kind once.
      SPAR_LOG(WARNING) << "cannot join the tensor-parallel group of " << leader_ << ": " << status;
      last_refusal = status;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::milliseconds(500), [&] { return stopping_; })) return;
  }
}

}  // namespace spar
