// Raising the accept backlog of a socket cpp-httplib already listens on.
//
// Why: Debian's libcpp-httplib 0.11 listens with a backlog of 5
// (CPPHTTPLIB_LISTEN_BACKLOG, compiled into the shared library, so the macro
// cannot be changed from here). A burst of more new connections than that
// overflows the accept queue and the kernel drops handshakes: measured with
// 64 clients connecting at once, about 1 in 5 saw its request go unanswered
// (the client reads an error) instead of getting an answer or a 429. On
// Linux, listen() on a socket that already listens only updates its
// backlog, so the socket is found by its port and listened on again.
#ifndef SPAR_SERVICES_HTTP_LISTEN_BACKLOG_H_
#define SPAR_SERVICES_HTTP_LISTEN_BACKLOG_H_

#include "absl/status/status.h"

namespace spar::http {

// Sets the backlog of this process's listening TCP socket(s) on `port`
// (the kernel caps it at net.core.somaxconn). NOT_FOUND when none listens.
absl::Status RaiseListenBacklog(int port, int backlog);

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_LISTEN_BACKLOG_H_
