// A tensor-parallel peer's membership in its stage leader's group: a thread
// that holds a JoinTpGroup stream open to the leader, joining again
// whenever the stream ends (the leader restarted, or is not up yet).
//
// Thread-safe. The destructor stops the thread.
#ifndef SPAR_SERVICES_WORKER_TP_JOINER_H_
#define SPAR_SERVICES_WORKER_TP_JOINER_H_

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <grpcpp/client_context.h>

#include "absl/status/status.h"
#include "spar/v1/worker.grpc.pb.h"

namespace spar {

class TpJoiner {
 public:
  struct Callbacks {
    // The leader registered this peer.
    std::function<void()> on_joined;
    // A registered membership ended: the leader is gone (or shut down).
    std::function<void(const absl::Status&)> on_left;
  };
  // Joins `leader` (host:port) as `request.tp_rank()` of `request.tp_size()`.
  TpJoiner(std::string leader, v1::JoinTpGroupRequest request, Callbacks callbacks);
  ~TpJoiner();
  TpJoiner(const TpJoiner&) = delete;
  TpJoiner& operator=(const TpJoiner&) = delete;

  bool joined() const;

 private:
  void Run();

  const std::string leader_;
  const v1::JoinTpGroupRequest request_;
  const Callbacks callbacks_;
  std::unique_ptr<v1::Worker::Stub> stub_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool joined_ = false;
  grpc::ClientContext* context_ = nullptr;  // of the open stream, for TryCancel
  std::thread thread_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_WORKER_TP_JOINER_H_
