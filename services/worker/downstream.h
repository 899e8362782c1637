// The link from a stage leader to the next stage's leader: a sender thread
// owning one client stream (Worker.Pipeline) and writing micro-batches in
// the order they were queued. The compute thread only queues, so a slow
// network never stalls compute (flow control blocks this thread instead).
//
// Thread-safe. The destructor closes the stream and joins the thread.
#ifndef SPAR_SERVICES_WORKER_DOWNSTREAM_H_
#define SPAR_SERVICES_WORKER_DOWNSTREAM_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <grpcpp/client_context.h>

#include "absl/time/time.h"
#include "spar/v1/worker.grpc.pb.h"

namespace spar {

class Downstream {
 public:
  // Told after each delivered micro-batch how long its write took
  // (serialization and flow control) and how many activation bytes it
  // carried; called on the sender thread.
  using SentCallback = std::function<void(absl::Duration write_time, uint64_t activation_bytes)>;

  explicit Downstream(std::string address, SentCallback on_sent = nullptr);
  ~Downstream();
  Downstream(const Downstream&) = delete;
  Downstream& operator=(const Downstream&) = delete;

  const std::string& address() const { return address_; }
  // Queues a micro-batch for the next stage; never blocks.
  void Send(std::unique_ptr<v1::MicroBatch> batch);
  uint64_t bytes_sent() const;
  // Micro-batches that could not be delivered (stream broken).
  uint64_t dropped() const;

 private:
  void Run();

  const std::string address_;
  const SentCallback on_sent_;
  std::unique_ptr<v1::Worker::Stub> stub_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<v1::MicroBatch>> queue_;
  bool stopping_ = false;
  uint64_t bytes_sent_ = 0, dropped_ = 0;
  std::unique_ptr<grpc::ClientContext> context_;  // of the open stream; guarded by mu_ for TryCancel
  std::thread thread_;
};

}  // namespace spar

#endif  // SPAR_SERVICES_WORKER_DOWNSTREAM_H_
