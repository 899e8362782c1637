// Raw HTTP/1.x over loopback sockets, for the tests of the HTTP front door
// that send what ordinary clients never would (slow or malformed headers,
// HTTP/1.0, bombs, thousands of streams at once), and a parser of the
// answers that checks their framing itself. Every wait has a timeout.
#ifndef SPAR_TESTS_RELIABILITY_RAW_HTTP_H_
#define SPAR_TESTS_RELIABILITY_RAW_HTTP_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace spar::testing {

// Raises this process's open-file limit to its hard limit; returns it.
inline int64_t RaiseFdLimit() {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);
  getrlimit(RLIMIT_NOFILE, &lim);
  return lim.rlim_cur == RLIM_INFINITY ? INT64_MAX : static_cast<int64_t>(lim.rlim_cur);
}

// A loopback socket to `port`, connected (blocking) or only started
// (non-blocking: finish with poll for POLLOUT); -1 on failure.
inline int ConnectLoopback(int port, bool nonblocking = false) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && !(nonblocking && errno == EINPROGRESS)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// One HTTP/1.x answer as it came over the wire.
struct RawResponse {
  std::string version;  // "HTTP/1.1"
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string head;                            // status line and headers as sent
  std::string body;                            // de-chunked when chunked
  bool chunked = false;
  size_t size = 0;  // bytes of the whole answer
};

// The first complete answer in `bytes` (interim 1xx answers skipped),
// framed by Content-Length, chunked encoding, or the end of the stream
// when `closed`. Empty while incomplete.
inline std::optional<RawResponse> ParseResponse(const std::string& bytes, bool closed) {
  size_t start = 0;
  for (;;) {
    const size_t end = bytes.find("\r\n\r\n", start);
    if (end == std::string::npos) return std::nullopt;
    RawResponse r;
    r.head = bytes.substr(start, end - start);
    const size_t line_end = r.head.find("\r\n");
    const std::string status_line = r.head.substr(0, line_end);
    r.version = status_line.substr(0, status_line.find(' '));
    if (!absl::SimpleAtoi(status_line.substr(r.version.size() + 1, 3), &r.status)) return std::nullopt;
    for (size_t p = line_end; p != std::string::npos && p < r.head.size();) {
      const size_t next = r.head.find("\r\n", p + 2);
      const std::string line = r.head.substr(p + 2, next == std::string::npos ? std::string::npos : next - p - 2);
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        r.headers[absl::AsciiStrToLower(line.substr(0, colon))] =
            std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
      p = next;
    }
    size_t pos = end + 4;
    if (r.status >= 100 && r.status < 200) {
      start = pos;  // 100 Continue: the real answer follows
      continue;
    }
    if (r.headers.count("transfer-encoding") > 0) {
      r.chunked = true;
      for (;;) {
        const size_t le = bytes.find("\r\n", pos);
        if (le == std::string::npos) return std::nullopt;
        size_t n = 0;
        if (!absl::SimpleHexAtoi(bytes.substr(pos, le - pos), &n)) return std::nullopt;
        if (bytes.size() < le + 2 + n + 2) return std::nullopt;
        if (n == 0) {
          r.size = le + 4;
          return r;
        }
        r.body.append(bytes, le + 2, n);
        pos = le + 2 + n + 2;
      }
    }
    if (auto cl = r.headers.find("content-length"); cl != r.headers.end()) {
      size_t n = 0;
      if (!absl::SimpleAtoi(cl->second, &n) || bytes.size() < pos + n) return std::nullopt;
      r.body = bytes.substr(pos, n);
      r.size = pos + n;
      return r;
    }
    if (!closed) return std::nullopt;  // close-delimited
    r.body = bytes.substr(pos);
    r.size = bytes.size();
    return r;
  }
}

// A blocking client connection that sends raw bytes and reads with
// timeouts.
class RawConnection {
 public:
  explicit RawConnection(int port) : fd_(ConnectLoopback(port)) {}
  ~RawConnection() { Close(); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // False once the server closed or reset the connection.
  bool Send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads until an answer is complete (or the peer closes, or `timeout`).
  std::optional<RawResponse> ReadResponse(absl::Duration timeout = absl::Seconds(30)) {
    const absl::Time until = absl::Now() + timeout;
    for (;;) {
      if (auto r = ParseResponse(received_, closed_)) {
        received_.erase(0, r->size);
        return r;
      }
      if (closed_ || !ReadSome(until)) return std::nullopt;
    }
  }
  // Reads until the peer closes; true when it did within `timeout`.
  bool ReadToEof(absl::Duration timeout) {
    const absl::Time until = absl::Now() + timeout;
    while (!closed_) {
      if (!ReadSome(until)) return closed_;
    }
    return true;
  }
  const std::string& received() const { return received_; }
  bool closed() const { return closed_; }
  // True when the server has sent something (or closed) that nobody has read
  // yet; reads nothing, so another thread may ask while one reads.
  bool HasUnreadInput() const {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  // One read; false on timeout.
  bool ReadSome(absl::Time until) {
    const int64_t ms = absl::ToInt64Milliseconds(until - absl::Now());
    if (ms <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(ms)) <= 0) return false;
    char buf[64 << 10];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) return true;
      closed_ = true;
      return true;
    }
    received_.append(buf, static_cast<size_t>(n));
    return true;
  }

  int fd_;
  std::string received_;
  bool closed_ = false;
};

// A raw request: `extra_headers` are whole lines ("Name: value\r\n").
inline std::string RawRequest(const std::string& method, const std::string& path, const std::string& body,
                              const std::string& extra_headers = "", const std::string& version = "HTTP/1.1") {
  return absl::StrCat(method, " ", path, " ", version, "\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n",
                      "Content-Length: ", body.size(), "\r\n", extra_headers, "\r\n", body);
}

enum class Packing { kGzip, kZlib, kRawDeflate };

// `text` compressed by zlib: gzip (RFC 1952), zlib-wrapped deflate (RFC
// 1950, what `deflate` means) or a raw deflate stream (RFC 1951).
inline std::string Compress(const std::string& text, Packing packing) {
  const int window_bits =
      packing == Packing::kGzip ? 16 + MAX_WBITS : (packing == Packing::kZlib ? MAX_WBITS : -MAX_WBITS);
  z_stream z{};
  deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, window_bits, 9, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, text.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A gzip body that inflates to `prefix` followed by `unpacked` spaces,
// compressed piece by piece (the whole text is never in memory).
inline std::string GzipBomb(const std::string& prefix, size_t unpacked) {
  z_stream z{};
  deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY);
  std::string out;
  char buf[64 << 10];
  auto pump = [&](const char* data, size_t n, int flush) {
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
    z.avail_in = static_cast<uInt>(n);
    do {
      z.next_out = reinterpret_cast<Bytef*>(buf);
      z.avail_out = sizeof(buf);
      deflate(&z, flush);
      out.append(buf, sizeof(buf) - z.avail_out);
    } while (z.avail_out == 0);
  };
  pump(prefix.data(), prefix.size(), Z_NO_FLUSH);
  const std::string spaces(1 << 20, ' ');
  for (size_t left = unpacked; left > 0;) {
    const size_t n = std::min(left, spaces.size());
    left -= n;
    pump(spaces.data(), n, left == 0 ? Z_FINISH : Z_NO_FLUSH);
  }
  deflateEnd(&z);
  return out;
}

// A process's peak resident memory (VmHWM) in KiB; -1 if unknown.
inline int64_t PeakRssKib(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      int64_t kib = -1;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(line).substr(6, line.size() - 9)), &kib)) {
        return kib;
      }
    }
  }
  return -1;
}

}  // namespace spar::testing

#endif  // SPAR_TESTS_RELIABILITY_RAW_HTTP_H_
