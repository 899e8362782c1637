#include "engine/socket_group.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace spar {
namespace {

constexpr char kMagic[8] = {'S', 'P', 'A', 'R', 'T', 'P', '0', '1'};
constexpr size_t kSecretLen = 32;

// The peer's greeting; all integers little-endian (every rank of a stage
// runs on one host, so byte order is the host's and is checked by size).
struct Hello {
  char magic[8];
  uint32_t rank;
  uint32_t size;
  char secret[kSecretLen];
};
// Each all-reduce: a peer sends {seq, n} + n floats; rank 0 answers
// {seq, kOk} + n floats (on any error it closes every connection instead).
struct Frame {
  uint64_t seq;
  uint64_t value;
};
constexpr uint64_t kOk = 0;

std::string Errno(absl::string_view what) { return absl::StrCat(what, ": ", std::strerror(errno)); }

int PollMs(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  // Wake at least every 100 ms so a cancelled join is noticed.
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 100));
}

// Reads or writes exactly `len` bytes before `deadline`. `who` names the
// other end in errors.
absl::Status Transfer(int fd, void* buf, size_t len, bool send, absl::Time deadline, absl::string_view who) {
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    ssize_t k = send ? ::send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL) : ::recv(fd, p, len, MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      len -= static_cast<size_t>(k);
      continue;
    }
    if (k == 0 && !send) return absl::UnavailableError(absl::StrCat(who, " closed the connection"));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(Errno(absl::StrCat("connection to ", who)));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(who, " did not ", send ? "take" : "send", " its data in time"));
    }
    pollfd pfd{fd, static_cast<short>(send ? POLLOUT : POLLIN), 0};
    if (::poll(&pfd, 1, PollMs(deadline)) < 0 && errno != EINTR) return absl::InternalError(Errno("poll"));
  }
  return absl::OkStatus();
}

void SetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

absl::StatusOr<std::string> RandomSecret() {
  unsigned char bytes[kSecretLen / 2];
  if (::getrandom(bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes))) {
    return absl::InternalError(Errno("getrandom"));
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (unsigned char b : bytes) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

std::string RankName(int rank) { return absl::StrCat("tensor-parallel rank ", rank); }

}  // namespace

absl::StatusOr<std::unique_ptr<SocketGroupListener>> SocketGroupListener::Open(const std::string& host) {
  auto l = std::unique_ptr<SocketGroupListener>(new SocketGroupListener());
  auto secret = RandomSecret();
  if (!secret.ok()) return secret.status();
  l->secret_ = *secret;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const bool any = host.empty() || host == "0.0.0.0" || host == "::";
  if (int e = ::getaddrinfo(any ? nullptr : host.c_str(), "0", &hints, &res); e != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor-parallel group: cannot resolve ", host, ": ", gai_strerror(e)));
  }
  absl::Status last = absl::UnavailableError("no address");
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      sockaddr_storage bound{};
      socklen_t len = sizeof(bound);
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
      l->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                   : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
      l->fd_ = fd;
      break;
    }
    last = absl::UnavailableError(Errno(absl::StrCat("tensor-parallel group: listening on ", host)));
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (l->fd_ < 0) return last;
  return l;
}

SocketGroupListener::~SocketGroupListener() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<std::shared_ptr<SocketGroup>> SocketGroup::Lead(SocketGroupListener* listener, int size,
                                                               absl::Duration join_timeout,
                                                               absl::Duration op_timeout) {
  if (size < 2) return absl::InvalidArgumentError(absl::StrCat("tensor-parallel group of size ", size));
  auto g = std::shared_ptr<SocketGroup>(new SocketGroup(0, size, op_timeout));
  g->fds_.assign(size, -1);
  int joined = 1;
  const absl::Time deadline = absl::Now() + join_timeout;
  while (joined < size) {
    if (listener->cancelled_) return absl::CancelledError("tensor-parallel group formation was cancelled");
    if (absl::Now() >= deadline) {
      std::vector<int> missing;
      for (int r = 1; r < size; ++r) {
        if (g->fds_[r] < 0) missing.push_back(r);
      }
      return absl::DeadlineExceededError(absl::StrCat("tensor-parallel group: rank(s) ", absl::StrJoin(missing, ", "),
                                                      " did not connect within ",
                                                      absl::FormatDuration(join_timeout)));
    }
    pollfd pfd{listener->fd_, POLLIN, 0};
    if (::poll(&pfd, 1, PollMs(deadline)) <= 0) continue;
    int fd = ::accept4(listener->fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    SetNoDelay(fd);
    Hello h{};
    // A short deadline per greeting: a silent connection must not stall the
    // formation.
    absl::Status s = Transfer(fd, &h, sizeof(h), false, std::min(deadline, absl::Now() + absl::Seconds(5)), "a peer");
    uint32_t answer = 1;
    if (s.ok() && std::memcmp(h.magic, kMagic, sizeof(kMagic)) == 0 &&
        std::string(h.secret, kSecretLen) == listener->secret_ && h.size == static_cast<uint32_t>(size) &&
        h.rank >= 1 && h.rank < static_cast<uint32_t>(size) && g->fds_[h.rank] < 0) {
      answer = 0;
    }
    if (answer == 0 && Transfer(fd, &answer, sizeof(answer), true, deadline, "a peer").ok()) {
      g->fds_[h.rank] = fd;
      ++joined;
    } else {
      if (s.ok()) Transfer(fd, &answer, sizeof(answer), true, absl::Now() + absl::Seconds(1), "a peer").IgnoreError();
      ::close(fd);
    }
  }
  return g;
}

absl::StatusOr<std::shared_ptr<SocketGroup>> SocketGroup::Join(const std::string& host, int port,
                                                               const std::string& secret, int rank, int size,
                                                               absl::Duration join_timeout,
                                                               absl::Duration op_timeout) {
  if (rank < 1 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("tensor-parallel group: rank ", rank, " of size ", size));
  }
  if (secret.size() != kSecretLen) return absl::InvalidArgumentError("tensor-parallel group: malformed secret");
  const absl::Time deadline = absl::Now() + join_timeout;
  absl::Status last = absl::UnavailableError("not tried");
  while (absl::Now() < deadline) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string service = std::to_string(port);
    if (int e = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); e != 0) {
      last = absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(e)));
    } else {
      for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
        int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
          last = absl::UnavailableError(Errno(absl::StrCat("connecting to ", host, ":", port)));
          ::close(fd);
          continue;
        }
        SetNoDelay(fd);
        Hello h{};
        std::memcpy(h.magic, kMagic, sizeof(kMagic));
        h.rank = static_cast<uint32_t>(rank);
        h.size = static_cast<uint32_t>(size);
        std::memcpy(h.secret, secret.data(), kSecretLen);
        uint32_t answer = 1;
        absl::Status s = Transfer(fd, &h, sizeof(h), true, deadline, RankName(0));
        if (s.ok()) s = Transfer(fd, &answer, sizeof(answer), false, deadline, RankName(0));
        if (s.ok() && answer == 0) {
          ::freeaddrinfo(res);
          auto g = std::shared_ptr<SocketGroup>(new SocketGroup(rank, size, op_timeout));
          g->fds_ = {fd};
          return g;
        }
        ::close(fd);
        if (s.ok()) {
          ::freeaddrinfo(res);
          return absl::PermissionDeniedError(absl::StrCat("tensor-parallel group at ", host, ":", port,
                                                          " refused rank ", rank, " of size ", size,
                                                          " (wrong secret, size or a rank already taken)"));
        }
        last = s;
      }
      ::freeaddrinfo(res);
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat("tensor-parallel group: cannot join rank 0 at ", host, ":", port,
                                                  " within ", absl::FormatDuration(join_timeout), ": ",
                                                  last.message()));
}

SocketGroup::~SocketGroup() {
  for (int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

absl::Status SocketGroup::health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

void SocketGroup::Break(const absl::Status& why) { Fail(why).IgnoreError(); }

absl::Status SocketGroup::Fail(const absl::Status& s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_.ok()) broken_ = s.ok() ? absl::UnavailableError("tensor-parallel group closed") : s;
  // shutdown, not close: the compute thread may be polling these fds; it
  // wakes up to a closed connection, and the fds stay valid until the
  // destructor.
  for (int fd : fds_) {
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
  }
  return s;
}

absl::Status SocketGroup::AllReduceSum(int rank, float* data, size_t n) {
  if (rank != rank_) {
    return absl::InvalidArgumentError(absl::StrCat("all-reduce: called as rank ", rank, " on rank ", rank_, "'s group"));
  }
  if (absl::Status s = health(); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("tensor-parallel group is broken: ", s.message()));
  }
  ++seq_;
  const absl::Time deadline = absl::Now() + op_timeout_;
  return rank_ == 0 ? LeaderReduce(data, n, deadline) : PeerReduce(data, n, deadline);
}

absl::Status SocketGroup::LeaderReduce(float* data, size_t n, absl::Time deadline) {
  // Receive every peer's partial sums (rank order; each must arrive anyway).
  std::vector<std::vector<float>> parts(size_);
  for (int r = 1; r < size_; ++r) {
    Frame f{};
    if (absl::Status s = Transfer(fds_[r], &f, sizeof(f), false, deadline, RankName(r)); !s.ok()) return Fail(s);
    if (f.seq != seq_) {
      return Fail(absl::InternalError(
          absl::StrCat("all-reduce: ", RankName(r), " is at all-reduce ", f.seq, ", rank 0 at ", seq_)));
    }
    // Checked before anything is allocated from it. A mismatch is a bug on
    // some rank: the group breaks, and the peers see rank 0 close.
    if (f.value != n) {
      return Fail(absl::InternalError(absl::StrCat("all-reduce: ", RankName(r), " has ", f.value, " values, rank 0 ", n)));
    }
    parts[r].resize(n);
    if (absl::Status s = Transfer(fds_[r], parts[r].data(), n * sizeof(float), false, deadline, RankName(r)); !s.ok()) {
      return Fail(s);
    }
  }
  std::vector<const float*> inputs(size_);
  inputs[0] = data;
  for (int r = 1; r < size_; ++r) inputs[r] = parts[r].data();
  scratch_.resize(n);
  RankOrderSum(inputs, n, scratch_.data());
  std::memcpy(data, scratch_.data(), n * sizeof(float));
  for (int r = 1; r < size_; ++r) {
    Frame f{seq_, kOk};
    absl::Status s = Transfer(fds_[r], &f, sizeof(f), true, deadline, RankName(r));
    if (s.ok()) s = Transfer(fds_[r], data, n * sizeof(float), true, deadline, RankName(r));
    if (!s.ok()) return Fail(s);
  }
  return absl::OkStatus();
}

absl::Status SocketGroup::PeerReduce(float* data, size_t n, absl::Time deadline) {
  Frame f{seq_, n};
  absl::Status s = Transfer(fds_[0], &f, sizeof(f), true, deadline, RankName(0));
  if (s.ok()) s = Transfer(fds_[0], data, n * sizeof(float), true, deadline, RankName(0));
  if (s.ok()) s = Transfer(fds_[0], &f, sizeof(f), false, deadline, RankName(0));
  if (!s.ok()) return Fail(s);
  if (f.seq != seq_ || f.value != kOk) {
    return Fail(absl::InternalError(absl::StrCat("all-reduce ", seq_, ": rank 0 answered all-reduce ", f.seq)));
  }
  if (absl::Status r = Transfer(fds_[0], data, n * sizeof(float), false, deadline, RankName(0)); !r.ok()) return Fail(r);
  return absl::OkStatus();
}

}  // namespace spar
