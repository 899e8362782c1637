// A stage leader's view of its tensor-parallel peers: which ranks are
// connected (each holds an open JoinTpGroup stream) and where their Worker
// services listen. A plain class: the gRPC adapter reports streams opening
// and closing; the runtime waits for a complete group and watches the
// version to learn that a formed group lost (or replaced) a member.
//
// Thread-safe.
#ifndef SPAR_SERVICES_WORKER_TP_MEMBERSHIP_H_
#define SPAR_SERVICES_WORKER_TP_MEMBERSHIP_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace spar {

class TpMembership {
 public:
  // A group of `size` ranks; rank 0 is the leader itself.
  explicit TpMembership(int size);

  int size() const { return size_; }
  // Registers peer `rank` (claiming group size `size`) reachable at
  // `address`; returns a ticket for Leave. A newer registration of the same
  // rank replaces an older one (a restarted peer may arrive before the old
  // stream is noticed gone). INVALID_ARGUMENT / FAILED_PRECONDITION for a
  // rank outside [1, size) or a different size.
  absl::StatusOr<uint64_t> Join(int rank, int size, const std::string& address);
  // The stream of `ticket` ended; ignored if that registration was replaced.
  void Leave(int rank, uint64_t ticket);

  // Every peer's address (index rank - 1) once all ranks are connected,
  // and in `version` the membership version they belong to; UNAVAILABLE
  // naming the missing ranks at `deadline`; CANCELLED after Close().
  absl::StatusOr<std::vector<std::string>> WaitForAll(absl::Time deadline, uint64_t* version = nullptr);
  bool complete() const;
  // Changes on every Join and every effective Leave: a group formed at one
  // version has lost or replaced a member once the version differs.
  uint64_t version() const;
  // Called (outside the lock) after every change, with what changed
  // ("rank 1 joined from 10.0.0.7:50062", "rank 1 left").
  void set_on_change(std::function<void(const std::string&)> on_change);
  // Wakes and fails every waiter; later waits fail at once (shutdown).
  void Close();

 private:
  struct Member {
    std::string address;
    uint64_t ticket = 0;  // 0: not connected
  };
  void Changed(std::unique_lock<std::mutex>& lock, const std::string& what);

  const int size_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Member> members_;  // index rank; [0] unused
  uint64_t next_ticket_ = 1;
  uint64_t version_ = 0;
  bool closed_ = false;
  std::function<void(const std::string&)> on_change_;
};

// The host part of a gRPC peer string ("ipv4:10.0.0.7:41234" -> "10.0.0.7",
// "ipv6:[::1]:5" -> "[::1]"), to dial a peer back at its own port; an error
// for anything else (e.g. a unix socket).
absl::StatusOr<std::string> HostOfGrpcPeer(absl::string_view peer);

}  // namespace spar

#endif  // SPAR_SERVICES_WORKER_TP_MEMBERSHIP_H_
