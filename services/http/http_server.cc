#include "services/http/http_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "services/http/http_server_core.h"

namespace spar::http {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

// Descriptors kept for everything but the connections (gRPC, files, the
// metrics port).
constexpr int kReservedFds = 256;

// Raises the soft open-file limit to the hard one; returns the soft limit
// now in effect.
int64_t RaiseOpenFileLimit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return -1;
  if (lim.rlim_cur < lim.rlim_max) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  return lim.rlim_cur == RLIM_INFINITY ? INT64_MAX : static_cast<int64_t>(lim.rlim_cur);
}

absl::StatusOr<std::unique_ptr<net::ssl::context>> MakeSslContext(const TlsFiles& files, const std::string& prefix) {
  auto material = LoadTlsMaterial(files, prefix);
  if (!material.ok()) return material.status();
  auto ctx = std::make_unique<net::ssl::context>(net::ssl::context::tls_server);
  ctx->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 | net::ssl::context::no_sslv3 |
                   net::ssl::context::no_tlsv1 | net::ssl::context::no_tlsv1_1 | net::ssl::context::single_dh_use);
  error_code ec;
  ctx->use_certificate_chain(net::buffer(material->cert_chain), ec);
  if (!ec) ctx->use_private_key(net::buffer(material->private_key), net::ssl::context::pem, ec);
  if (!ec && !files.ca.empty()) {
    ctx->add_certificate_authority(net::buffer(material->root_certs), ec);
    if (!ec) ctx->set_verify_mode(net::ssl::verify_peer | net::ssl::verify_fail_if_no_peer_cert, ec);
  }
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat("cannot serve HTTPS with ", prefix, "-cert ", files.cert, " and ",
                                                   prefix, "-key ", files.key, ": ", ec.message()));
  }
  return ctx;
}

void Accept(ServerCore* core) {
  core->acceptor.async_accept(net::make_strand(core->io), [core](error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !core->acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors (EMFILE) and the like: wait instead of spinning.
      SPAR_LOG(WARNING) << core->options.name << ": accept failed: " << ec.message();
      core->accept_retry.expires_after(std::chrono::milliseconds(50));
      core->accept_retry.async_wait([core](error_code wait_ec) {
        if (!wait_ec) Accept(core);
      });
      return;
    }
    ServeConnection(core, std::move(socket));
    Accept(core);
  });
}

}  // namespace

bool PostGate::Post(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_) return false;
  net::post(*io_, std::move(task));
  return true;
}

void PostGate::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  open_ = false;
}

uint64_t ServerCore::Registry::Add(std::weak_ptr<ConnectionOps> connection) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = ++next_id_;
  connections_.emplace(id, std::move(connection));
  return id;
}

void ServerCore::Registry::Remove(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  connections_.erase(id);
}

std::vector<std::weak_ptr<ConnectionOps>> ServerCore::Registry::All() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::weak_ptr<ConnectionOps>> out;
  out.reserve(connections_.size());
  for (const auto& entry : connections_) out.push_back(entry.second);
  return out;
}

HttpResponse ServerCore::Error(int status, std::string message, std::string code) const {
  if (options.error_response) return options.error_response(status, std::move(message), std::move(code));
  return PlainTextError(status, std::move(message), std::move(code));
}

HttpResponse PlainTextError(int status, std::string message, std::string) {
  HttpResponse r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(message) + "\n";
  return r;
}

HttpServer::HttpServer(Options options, HttpRouter router)
    : core_(std::make_shared<ServerCore>(std::move(options), std::move(router))) {}

HttpServer::~HttpServer() { Stop(); }

int HttpServer::open_connections() const { return core_->open.load(); }
int HttpServer::max_connections() const { return core_->max_connections; }

absl::StatusOr<int> HttpServer::Start() {
  ServerCore& c = *core_;
  const Options& o = c.options;
  if (o.io_threads < 1 || o.worker_threads < 0 || o.max_connections < 1) {
    return absl::InvalidArgumentError(absl::StrCat(o.name, ": needs at least one I/O thread and one connection"));
  }
  if (!o.tls.cert.empty()) {
    auto ssl = MakeSslContext(o.tls, o.tls_flag_prefix);
    if (!ssl.ok()) return ssl.status();
    c.ssl = std::move(*ssl);
  }
  const int64_t fds = RaiseOpenFileLimit();
  c.max_connections = o.max_connections;
  if (fds > 0 && fds - kReservedFds < o.max_connections) {
    c.max_connections = static_cast<int>(std::max<int64_t>(16, fds - kReservedFds));
    SPAR_LOG(WARNING) << o.name << ": the open-file limit (" << fds << ") holds only " << c.max_connections
                      << " connections; raise it (ulimit -n) to serve " << o.max_connections;
  }

  error_code ec;
  tcp::resolver resolver(c.io);
  auto endpoints = resolver.resolve(o.host, std::to_string(o.port), tcp::resolver::passive, ec);
  auto cannot_listen = [&](const std::string& why) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", o.host, ":", o.port, " (", o.name, "): ", why));
  };
  if (ec || endpoints.empty()) return cannot_listen(ec ? ec.message() : "no such address");
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  c.acceptor.open(endpoint.protocol(), ec);
  // SO_REUSEADDR only (restarts while old connections linger); never
  // SO_REUSEPORT, which would let a second daemon share the port silently.
  if (!ec) c.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) c.acceptor.bind(endpoint, ec);
  if (!ec) c.acceptor.listen(4096, ec);  // bursts of connections must not overflow the accept queue
  if (ec) {
    error_code ignored;
    c.acceptor.close(ignored);
    return cannot_listen(ec.message());
  }
  port_ = c.acceptor.local_endpoint().port();

  if (o.worker_threads > 0) c.workers = std::make_unique<net::thread_pool>(static_cast<size_t>(o.worker_threads));
  c.work.emplace(net::make_work_guard(c.io));
  ServerCore* core = core_.get();
  net::post(c.io, [core] { Accept(core); });
  for (int i = 0; i < o.io_threads; ++i) {
    c.io_threads.emplace_back([core] {
      // A handler that throws must not take an I/O thread (and every
      // connection it would serve) with it.
      for (;;) {
        try {
          core->io.run();
          return;
        } catch (const std::exception& e) {
          SPAR_LOG(ERROR) << core->options.name << ": an I/O handler failed: " << e.what();
        }
      }
    });
  }
  started_ = true;
  return port_;
}

void HttpServer::Stop() {
  if (!started_) return;
  started_ = false;
  ServerCore& c = *core_;
  c.stopping = true;
  // Nothing from outside reaches the io_context any more.
  c.gate->Close();
  ServerCore* core = core_.get();
  net::post(c.io, [core] {
    error_code ignored;
    core->acceptor.close(ignored);
    core->accept_retry.cancel();
  });
  // Handlers still preparing requests finish; queued ones are dropped.
  if (c.workers) {
    c.workers->stop();
    c.workers->join();
  }
  for (const std::weak_ptr<ConnectionOps>& w : c.connections.All()) {
    if (std::shared_ptr<ConnectionOps> conn = w.lock()) conn->Abort();
  }
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (c.open.load() > 0 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(2));
  c.work.reset();
  c.io.stop();
  for (std::thread& t : c.io_threads) t.join();
  c.io_threads.clear();
}

}  // namespace spar::http
