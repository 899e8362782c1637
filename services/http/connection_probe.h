// Tells whether the client of a request is still connected while the
// handler waits for a non-streaming completion, so a client that gives up
// (timeout, Ctrl-C) aborts its request and frees its KV blocks at once.
//
// cpp-httplib 0.11 (Debian 12) does not hand the connection's socket to
// handlers (later versions add Request::is_connection_closed), and a
// non-streaming response cannot be committed early without losing the
// error status codes. So the probe finds the socket by what httplib does
// report: the connection's local and peer addresses, unique among this
// process's open sockets. The socket stays open while the handler runs.
// For streamed responses httplib's DataSink::is_writable does the same job.
//
// Thread-compatible.
#ifndef SPAR_SERVICES_HTTP_CONNECTION_PROBE_H_
#define SPAR_SERVICES_HTTP_CONNECTION_PROBE_H_

#include <optional>
#include <string>

namespace spar::http {

class ConnectionProbe {
 public:
  // The open TCP socket with these endpoints, if there is one.
  static std::optional<ConnectionProbe> Find(const std::string& local_addr, int local_port,
                                             const std::string& remote_addr, int remote_port);

  // True once the peer closed or reset the connection (data it sent ahead,
  // such as a pipelined request, does not count).
  bool PeerGone() const;

  int fd() const { return fd_; }

 private:
  explicit ConnectionProbe(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_CONNECTION_PROBE_H_
