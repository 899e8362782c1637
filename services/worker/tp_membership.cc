#include "services/worker/tp_membership.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace spar {

TpMembership::TpMembership(int size) : size_(size), members_(size > 0 ? size : 1) {}

absl::StatusOr<uint64_t> TpMembership::Join(int rank, int size, const std::string& address) {
  if (size != size_) {
    return absl::FailedPreconditionError(
        absl::StrCat("tensor-parallel size mismatch: the peer was started with --tp-size ", size,
                     ", this stage leader with ", size_));
  }
  if (rank < 1 || rank >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor-parallel rank ", rank, " cannot join a group of ", size_, " (peers are ranks 1..", size_ - 1, ")"));
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (closed_) return absl::UnavailableError("the stage leader is shutting down");
  Member& m = members_[rank];
  m.address = address;
  m.ticket = next_ticket_++;
  const uint64_t ticket = m.ticket;
  Changed(lock, absl::StrCat("rank ", rank, " joined from ", address));
  return ticket;
}

void TpMembership::Leave(int rank, uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  if (rank < 1 || rank >= size_ || members_[rank].ticket != ticket) return;
  members_[rank].ticket = 0;
  Changed(lock, absl::StrCat("rank ", rank, " left"));
}

void TpMembership::Changed(std::unique_lock<std::mutex>& lock, const std::string& what) {
  ++version_;
  std::function<void(const std::string&)> on_change = on_change_;
  lock.unlock();
  cv_.notify_all();
  if (on_change) on_change(what);
}

absl::StatusOr<std::vector<std::string>> TpMembership::WaitForAll(absl::Time deadline, uint64_t* version) {
  std::unique_lock<std::mutex> lock(mu_);
  auto done = [&] {
    if (closed_) return true;
    for (int r = 1; r < size_; ++r) {
      if (members_[r].ticket == 0) return false;
    }
    return true;
  };
  cv_.wait_until(lock, absl::ToChronoTime(deadline), done);
  if (closed_) return absl::CancelledError("the stage leader is shutting down");
  std::vector<int> missing;
  std::vector<std::string> addresses;
  for (int r = 1; r < size_; ++r) {
    if (members_[r].ticket == 0) missing.push_back(r);
    addresses.push_back(members_[r].address);
  }
  if (!missing.empty()) {
    return absl::UnavailableError(absl::StrCat("tensor-parallel peer rank(s) ", absl::StrJoin(missing, ", "), " of ",
                                               size_, " have not joined this stage leader (spar-worker --tp-rank R "
                                               "--tp-size ", size_, " --tp-leader this worker)"));
  }
  if (version != nullptr) *version = version_;
  return addresses;
}

bool TpMembership::complete() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (int r = 1; r < size_; ++r) {
    if (members_[r].ticket == 0) return false;
  }
  return true;
}

uint64_t TpMembership::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

void TpMembership::set_on_change(std::function<void(const std::string&)> on_change) {
  std::lock_guard<std::mutex> lock(mu_);
  on_change_ = std::move(on_change);
}

void TpMembership::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

absl::StatusOr<std::string> HostOfGrpcPeer(absl::string_view peer) {
  absl::string_view rest;
  if (absl::StartsWith(peer, "ipv4:")) {
    rest = peer.substr(5);
  } else if (absl::StartsWith(peer, "ipv6:")) {
    rest = peer.substr(5);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("cannot dial the caller back: its address is \"", peer,
                                                   "\" (set the peer's --tp-host)"));
  }
  const size_t colon = rest.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat("malformed peer address \"", peer, "\""));
  }
  std::string host(rest.substr(0, colon));
  // Newer gRPC releases percent-encode the brackets of IPv6 addresses.
  if (absl::StartsWith(host, "%5B")) host = absl::StrCat("[", host.substr(3));
  if (absl::EndsWith(host, "%5D")) host = absl::StrCat(host.substr(0, host.size() - 3), "]");
  return host;
}

}  // namespace spar
