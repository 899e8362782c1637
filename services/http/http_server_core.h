// Internal to the HTTP server (http_server.cc, http_connection.cc,
// http_responder.cc): the state its connections share, and the rules that
// keep them safe when other threads (the scheduler's, the worker pool's)
// answer requests.
//
// Lifetimes: ServerCore owns the io_context; connections live in the
// io_context's handlers and reach the core by plain pointer (the core's
// destructor destroys the io_context, and with it every connection,
// first). Threads outside the io_context never hold a connection or an
// Asio object: they hold an HttpResponder, which holds the PostGate and a
// weak pointer to its connection, and hand it work that runs on the
// connection's strand. Stop closes the gate first, so nothing reaches an
// io_context that is stopping.
#ifndef SPAR_SERVICES_HTTP_HTTP_SERVER_CORE_H_
#define SPAR_SERVICES_HTTP_HTTP_SERVER_CORE_H_

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "services/http/http_message.h"
#include "services/http/http_router.h"
#include "services/http/http_server.h"

namespace spar::http {

// Where threads outside the io_context post work: closed (posts dropped)
// once the server stops. Thread-safe.
class PostGate {
 public:
  explicit PostGate(boost::asio::io_context* io) : io_(io) {}
  // Runs `task` on an I/O thread; false (dropping it) once closed.
  bool Post(std::function<void()> task);
  void Close();

 private:
  std::mutex mu_;
  boost::asio::io_context* io_;
  bool open_ = true;
};

// What a responder asks of its connection, run on the connection's strand.
class ConnectionOps {
 public:
  virtual ~ConnectionOps() = default;
  virtual void DoSend(HttpResponse response) = 0;
  virtual void DoStartStream(HttpResponse head) = 0;
  virtual void DoWrite(std::string data) = 0;
  virtual void DoEndStream() = 0;
  // Runs `task` on the strand (now, when already on it).
  virtual void RunOnStrand(std::function<void()> task) = 0;
  // Disconnects (server stopping): handlers' on_gone run.
  virtual void Abort() = 0;
};

struct ServerCore {
  explicit ServerCore(HttpServer::Options o, HttpRouter r)
      : options(std::move(o)), router(std::move(r)), gate(std::make_shared<PostGate>(&io)) {}

  HttpResponse Error(int status, std::string message, std::string code) const;
  // Connections register while alive, so Stop can reach them.
  class Registry {
   public:
    uint64_t Add(std::weak_ptr<ConnectionOps> connection);
    void Remove(uint64_t id);
    std::vector<std::weak_ptr<ConnectionOps>> All();

   private:
    std::mutex mu_;
    uint64_t next_id_ = 0;
    std::unordered_map<uint64_t, std::weak_ptr<ConnectionOps>> connections_;
  };

  const HttpServer::Options options;
  const HttpRouter router;
  int max_connections = 0;
  std::unique_ptr<boost::asio::ssl::context> ssl;  // null: plaintext
  std::atomic<int> open{0};
  std::atomic<bool> stopping{false};
  std::unique_ptr<boost::asio::thread_pool> workers;
  Registry connections;

  // Declared after what connections use, so it is destroyed (with them)
  // first.
  boost::asio::io_context io;
  std::shared_ptr<PostGate> gate;
  boost::asio::ip::tcp::acceptor acceptor{io};
  boost::asio::steady_timer accept_retry{io};
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work;
  std::vector<std::thread> io_threads;
};

// Serves one accepted connection (TLS when core->ssl is set); beyond the
// connection limit it is answered 503 and closed.
void ServeConnection(ServerCore* core, boost::asio::ip::tcp::socket socket);

}  // namespace spar::http

#endif  // SPAR_SERVICES_HTTP_HTTP_SERVER_CORE_H_
