#include "services/http/listen_backlog.h"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace spar::http {
namespace {

// The local port of `fd` if it is a listening TCP socket, else -1.
int ListeningPort(int fd) {
  int listening = 0;
  socklen_t len = sizeof(listening);
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) return -1;
  sockaddr_storage addr;
  socklen_t alen = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) return -1;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return -1;
}

}  // namespace

absl::Status RaiseListenBacklog(int port, int backlog) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return absl::UnavailableError(absl::StrCat("cannot list /proc/self/fd: ", std::strerror(errno)));
  int raised = 0;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::atoi(e->d_name);
    if (fd == ::dirfd(dir) || ListeningPort(fd) != port) continue;
    if (::listen(fd, backlog) == 0) ++raised;
  }
  ::closedir(dir);
  if (raised == 0) return absl::NotFoundError(absl::StrCat("no listening socket on port ", port));
  return absl::OkStatus();
}

}  // namespace spar::http
