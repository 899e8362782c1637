// A CpuGroup whose ranks are processes joined by TCP: how a tensor-parallel
// group of cpu-backend spar-worker processes all-reduces (CI runs real TP
// groups this way; the cuda backend uses NCCL instead).
//
// Topology: a star around rank 0. Each peer sends its partial sums to rank
// 0, which adds them in rank order exactly as InProcessGroup does
// (RankOrderSum) and sends the sum back, so every rank of every group kind
// holds the same bits.
//
// Rendezvous: rank 0 opens a SocketGroupListener (a port and a random
// 128-bit secret) and hands both to its peers over the worker control plane
// (JoinTpGroup/Configure, which the worker plane authenticates); a peer
// connects and presents the secret with its rank, so nothing else can join
// a group by guessing the port. The data itself is not encrypted: ranks of
// a stage run on one host (or one pod).
//
// Failure: every wait has a deadline. A peer that disappears (its socket
// closes) or stalls past the deadline fails the all-reduce on every rank
// with UNAVAILABLE naming the rank; the group is then broken for good
// (later calls fail at once) and must be formed again.
//
// Thread-safety: one thread per rank calls AllReduceSum (the backend's);
// Break() may be called from any thread.
#ifndef SPAR_ENGINE_SOCKET_GROUP_H_
#define SPAR_ENGINE_SOCKET_GROUP_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/tensor_parallel.h"

namespace spar {

// Rank 0's listening socket for one group formation.
class SocketGroupListener {
 public:
  // Listens on host:0 (host "" or "0.0.0.0": every interface).
  static absl::StatusOr<std::unique_ptr<SocketGroupListener>> Open(const std::string& host);
  ~SocketGroupListener();
  SocketGroupListener(const SocketGroupListener&) = delete;
  SocketGroupListener& operator=(const SocketGroupListener&) = delete;

  int port() const { return port_; }
  // What a peer must present (32 hex digits).
  const std::string& secret() const { return secret_; }
  // Makes a waiting SocketGroup::Lead give up (CANCELLED) soon; any thread.
  void Cancel() { cancelled_ = true; }

 private:
  friend class SocketGroup;
  SocketGroupListener() = default;
  int fd_ = -1;
  int port_ = 0;
  std::string secret_;
  std::atomic<bool> cancelled_{false};
};

class SocketGroup final : public CpuGroup {
 public:
  // Rank 0: accepts the size-1 peers on `listener` (connections with a wrong
  // secret, size or rank are refused and closed) until all ranks are in;
  // DEADLINE_EXCEEDED naming the missing ranks after `join_timeout`.
  // `op_timeout` bounds each later all-reduce.
  static absl::StatusOr<std::shared_ptr<SocketGroup>> Lead(SocketGroupListener* listener, int size,
                                                           absl::Duration join_timeout, absl::Duration op_timeout);
  // Rank r > 0: connects to rank 0 at host:port, retrying until `join_timeout`.
  static absl::StatusOr<std::shared_ptr<SocketGroup>> Join(const std::string& host, int port,
                                                           const std::string& secret, int rank, int size,
                                                           absl::Duration join_timeout, absl::Duration op_timeout);
  ~SocketGroup() override;

  int size() const override { return size_; }
  int rank() const { return rank_; }
  absl::Status AllReduceSum(int rank, float* data, size_t n) override;
  // Closes the connections: an all-reduce in progress on any rank fails now,
  // later ones fail at once with `why`.
  void Break(const absl::Status& why);
  // OK while usable; the reason otherwise.
  absl::Status health() const;

 private:
  SocketGroup(int rank, int size, absl::Duration op_timeout) : rank_(rank), size_(size), op_timeout_(op_timeout) {}
  absl::Status LeaderReduce(float* data, size_t n, absl::Time deadline);
  absl::Status PeerReduce(float* data, size_t n, absl::Time deadline);
  // Records the first failure, closes every socket, returns `s`.
  absl::Status Fail(const absl::Status& s);

  const int rank_;
  const int size_;
  const absl::Duration op_timeout_;
  // Rank 0: fds_[r] is peer r's connection (fds_[0] unused); peer: fds_[0]
  // is the connection to rank 0.
  std::vector<int> fds_;
  uint64_t seq_ = 0;
  mutable std::mutex mu_;
  absl::Status broken_;
  std::vector<float> scratch_;
};

}  // namespace spar

#endif  // SPAR_ENGINE_SOCKET_GROUP_H_
