// One HTTP/1.1 connection over Boost.Beast's parser: a state machine on
// the connection's strand (http_server.h says what it promises).
//
//   handshake (TLS) -> header -> body -> handling -> idle -> header ...
//
// One read is in flight at a time. While a request is being handled the
// connection keeps a read open (into the same buffer the next request's
// bytes go to): it fails the moment the client disconnects, which aborts
// the request (on_gone), and becomes the idle wait for the next request
// once the response is out. Writes are queued and sent one batch at a
// time, each under the write timeout.
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <exception>
#include <sstream>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "services/http/body_decoder.h"
#include "services/http/http_responder.h"
#include "services/http/http_server_core.h"

namespace spar::http {
namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

constexpr size_t kBodyReadChunk = 64 << 10;
constexpr size_t kWatchReadSize = 4096;
// After an error answer, how long and how much of what the client still
// sends is read and dropped so that it reads the answer (closing with
// unread data makes the kernel reset the connection, losing the answer).
constexpr absl::Duration kLingerTime = absl::Seconds(2);
constexpr size_t kLingerBytes = 64 << 20;
// Connections past the limit by this many are closed without a 503.
constexpr int kRefusalSlack = 1024;

absl::string_view Sv(beast::string_view s) { return absl::string_view(s.data(), s.size()); }

std::chrono::steady_clock::duration Chrono(absl::Duration d) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(absl::ToChronoNanoseconds(d));
}

// The timer's deadline is still ahead (it was re-armed).
bool Pending(const net::steady_timer& timer) { return timer.expiry() > std::chrono::steady_clock::now(); }

int HttpStatusOf(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kResourceExhausted:
      return 413;
    case absl::StatusCode::kUnimplemented:
      return 415;
    case absl::StatusCode::kInvalidArgument:
      return 400;
    default:
      return 500;
  }
}

template <bool kTls>
class Connection : public ConnectionOps, public std::enable_shared_from_this<Connection<kTls>> {
 public:
  using Stream = std::conditional_t<kTls, net::ssl::stream<tcp::socket>, tcp::socket>;

  Connection(ServerCore* core, tcp::socket socket, bool over_capacity)
      : core_(core),
        stream_(MakeStream(core, std::move(socket))),
        read_timer_(stream_.get_executor()),
        write_timer_(stream_.get_executor()),
        buffer_(core->options.max_header_bytes + kWatchReadSize),
        over_capacity_(over_capacity) {}

  ~Connection() override {
    if (responder_) responder_->MarkGone();
    core_->connections.Remove(registry_id_);
    --core_->open;
  }

  void Start() {
    registry_id_ = core_->connections.Add(this->weak_from_this());
    if constexpr (kTls) {
      phase_ = Phase::kHandshake;
      ArmReadTimer(core_->options.header_timeout);
      stream_.async_handshake(net::ssl::stream_base::server,
                              beast::bind_front_handler(&Connection::OnHandshake, this->shared_from_this()));
    } else {
      AfterHandshake();
    }
  }

  // ConnectionOps, on the strand.
  void DoSend(HttpResponse response) override {
    if (closed_ || phase_ != Phase::kHandling || streaming_ || response_done_) return;
    QueueResponse(std::move(response));
  }

  void DoStartStream(HttpResponse head) override {
    if (closed_ || phase_ != Phase::kHandling || streaming_ || response_done_) return;
    streaming_ = true;
    bhttp::response<bhttp::empty_body> res{static_cast<bhttp::status>(head.status), version_};
    SetFields(res, head);
    if (version_ >= 11) {
      res.chunked(true);
      res.keep_alive(keep_alive_);
    } else {
      // HTTP/1.0 has no chunked encoding: the body ends when the
      // connection closes.
      close_after_ = true;
      res.keep_alive(false);
      res.set(bhttp::field::connection, "close");
    }
    if (!keep_alive_) res.set(bhttp::field::connection, "close");
    std::ostringstream os;
    os << res.base();
    Enqueue(os.str());
    if (!head.body.empty()) DoWrite(std::move(head.body));
    Flush();
  }

  void DoWrite(std::string data) override {
    if (closed_ || !streaming_ || response_done_ || data.empty()) return;
    if (queued_bytes_ + data.size() > core_->options.max_queued_write_bytes) {
      SPAR_LOG(WARNING) << "HTTP client does not read its stream fast enough (" << queued_bytes_
                        << " bytes waiting): disconnecting it";
      return Fail();
    }
    if (version_ >= 11) {
      Enqueue(absl::StrCat(absl::Hex(data.size()), "\r\n"));
      Enqueue(std::move(data));
      Enqueue("\r\n");
    } else {
      Enqueue(std::move(data));
    }
    Flush();
  }

  void DoEndStream() override {
    if (closed_ || !streaming_ || response_done_) return;
    if (version_ >= 11) Enqueue("0\r\n\r\n");
    FinishResponse();
  }

  void RunOnStrand(std::function<void()> task) override { net::dispatch(stream_.get_executor(), std::move(task)); }

  void Abort() override {
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] { self->Fail(); });
  }

 private:
  enum class Phase { kHandshake, kHeader, kBody, kHandling, kIdle, kClosing };

  static Stream MakeStream(ServerCore* core, tcp::socket socket) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *core->ssl);
    } else {
      (void)core;
      return socket;
    }
  }

  tcp::socket& Socket() { return beast::get_lowest_layer(stream_); }

  // --- timers ---------------------------------------------------------

  void ArmReadTimer(absl::Duration d) {
    read_timer_.expires_after(Chrono(d));
    read_timer_.async_wait([self = this->shared_from_this()](error_code ec) {
      // A wait that completed just before the timer was re-armed is stale.
      if (ec != net::error::operation_aborted && !Pending(self->read_timer_)) self->OnReadTimeout();
    });
  }

  void OnReadTimeout() {
    if (closed_) return;
    timed_out_ = true;
    const bool got_bytes = phase_ == Phase::kBody || (phase_ == Phase::kHeader && buffer_.size() > 0);
    if (!kTls && got_bytes) {
      // Stop the read; its handler answers 408.
      error_code ignored;
      Socket().cancel(ignored);
      return;
    }
    Close();
  }

  void ArmWriteTimer() {
    write_timer_.expires_after(Chrono(core_->options.write_timeout));
    write_timer_.async_wait([self = this->shared_from_this()](error_code ec) {
      if (ec != net::error::operation_aborted && self->writing_ && !Pending(self->write_timer_) && !self->closed_) {
        SPAR_LOG(WARNING) << "HTTP client took no data for " << self->core_->options.write_timeout
                          << ": disconnecting it";
        self->Fail();
      }
    });
  }

  // --- reading a request ----------------------------------------------

  void OnHandshake(error_code ec) {
    read_timer_.cancel();
    if (ec || closed_) return Close();
    AfterHandshake();
  }

  void AfterHandshake() {
    if (over_capacity_) {
      phase_ = Phase::kHandling;
      keep_alive_ = false;
      return RespondError(
          503, absl::StrCat("the server has too many open connections (", core_->max_connections, "); retry later"),
          "too_many_connections");
    }
    ReadHeader();
  }

  void ReadHeader() {
    phase_ = Phase::kHeader;
    timed_out_ = false;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(core_->options.max_header_bytes));
    parser_->body_limit(core_->options.max_body_bytes);
    ArmReadTimer(core_->options.header_timeout);
    reading_ = true;
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             beast::bind_front_handler(&Connection::OnHeader, this->shared_from_this()));
  }

  void OnHeader(error_code ec, size_t) {
    reading_ = false;
    if (closed_) return;
    if (ec) return OnReadError(ec);
    auto& req = parser_->get();
    version_ = req.version();
    keep_alive_ = req.keep_alive();
    // A Transfer-Encoding other than chunked would leave the body's end
    // unknown (and the next request's start: request smuggling).
    if (req.count(bhttp::field::transfer_encoding) > 0 && !parser_->chunked()) {
      return RespondError(501, "Transfer-Encoding other than chunked is not supported",
                          "unsupported_transfer_encoding");
    }
    auto decoder = BodyDecoder::ForEncoding(
        Sv(req[bhttp::field::content_encoding]),
        {.max_decoded_bytes = core_->options.max_body_bytes, .max_ratio = core_->options.max_decompression_ratio});
    if (!decoder.ok())
      return RespondError(HttpStatusOf(decoder.status()), decoder.status().message(), "unsupported_encoding");
    decoder_ = std::move(*decoder);
    request_ = HeadOf(req);
    // Guards (API keys) refuse before the body is read: a client without
    // a key cannot make the server read, let alone inflate, a body.
    if (std::optional<HttpResponse> refusal = core_->router.Refusal(request_)) {
      return RespondAndClose(std::move(*refusal));
    }
    if (parser_->is_done()) return Dispatch();
    if (version_ >= 11 &&
        absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(Sv(req[bhttp::field::expect])), "100-continue")) {
      Enqueue("HTTP/1.1 100 Continue\r\n\r\n");
      Flush();
    }
    phase_ = Phase::kBody;
    ArmReadTimer(core_->options.body_timeout);
    body_chunk_.resize(kBodyReadChunk);
    ReadBodySome();
  }

  // The request as handlers see it, but for the body.
  HttpRequest HeadOf(const bhttp::request<bhttp::buffer_body>& req) const {
    HttpRequest request;
    request.method = std::string(req.method_string());
    const beast::string_view target = req.target();
    const size_t q = target.find('?');
    request.path = std::string(target.substr(0, q));
    if (q != beast::string_view::npos) request.query = std::string(target.substr(q + 1));
    request.version = version_;
    for (const auto& field : req) request.headers.Add(std::string(field.name_string()), std::string(field.value()));
    return request;
  }

  void ReadBodySome() {
    auto& body = parser_->get().body();
    body.data = body_chunk_.data();
    body.size = body_chunk_.size();
    reading_ = true;
    bhttp::async_read_some(stream_, buffer_, *parser_,
                           beast::bind_front_handler(&Connection::OnBody, this->shared_from_this()));
  }

  void OnBody(error_code ec, size_t) {
    reading_ = false;
    if (closed_) return;
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec) return OnReadError(ec);
    const size_t produced = body_chunk_.size() - parser_->get().body().size;
    if (absl::Status s = decoder_->Feed(body_chunk_.data(), produced); !s.ok()) {
      return RespondError(HttpStatusOf(s), s.message(),
                          s.code() == absl::StatusCode::kResourceExhausted ? "request_too_large" : "invalid_body");
    }
    if (!parser_->is_done()) return ReadBodySome();
    if (absl::Status s = decoder_->Finish(); !s.ok()) return RespondError(400, s.message(), "invalid_body");
    Dispatch();
  }

  void OnReadError(error_code ec) {
    read_timer_.cancel();
    if (timed_out_) {
      return RespondError(408,
                          absl::StrCat("the request did not arrive in time (",
                                       absl::FormatDuration(phase_ == Phase::kBody ? core_->options.body_timeout
                                                                                   : core_->options.header_timeout),
                                       ")"),
                          "request_timeout");
    }
    if (ec == bhttp::error::body_limit) {
      return RespondError(413,
                          absl::StrCat("the request body exceeds the server's limit of ", core_->options.max_body_bytes,
                                       " bytes (--max-body-bytes)"),
                          "request_too_large");
    }
    if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
      return RespondError(431, absl::StrCat("the request header exceeds ", core_->options.max_header_bytes, " bytes"),
                          "header_too_large");
    }
    if (ec == bhttp::error::bad_content_length) {
      return RespondError(400,
                          "the Content-Length header is malformed: it must be one decimal length (not negative, "
                          "not repeated with another value, not next to Transfer-Encoding: chunked)",
                          "bad_content_length");
    }
    if (ec == bhttp::error::bad_transfer_encoding) {
      return RespondError(400, "the Transfer-Encoding header is malformed or conflicts with Content-Length",
                          "bad_transfer_encoding");
    }
    if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
        ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
      return RespondError(400, absl::StrCat("malformed HTTP request: ", ec.message()), "bad_request");
    }
    Close();  // the client closed or reset the connection
  }

  // --- handling -------------------------------------------------------

  void Dispatch() {
    read_timer_.cancel();
    phase_ = Phase::kHandling;
    body_chunk_ = {};
    HttpRequest request = std::move(request_);
    request_ = HttpRequest();
    request.body = std::move(decoder_->body());
    decoder_.reset();
    parser_.reset();
    if (buffer_.size() == 0) buffer_.shrink_to_fit();  // a big body's reads grew it: idle connections stay small
    responder_ = std::make_shared<ResponderImpl>(core_->gate, this->weak_from_this());
    Watch();

    HttpRouter::Match match = core_->router.Find(request.method, request.path);
    if (match.route == nullptr) {
      if (match.allow.empty()) {
        return QueueResponse(
            core_->Error(404, absl::StrCat("Invalid URL (", request.method, " ", request.path, ")"), "unknown_url"));
      }
      HttpResponse r = core_->Error(
          405, absl::StrCat("method ", request.method, " is not allowed on ", request.path, " (use ", match.allow, ")"),
          "method_not_allowed");
      r.headers.Add("Allow", match.allow);
      return QueueResponse(std::move(r));
    }
    request.path_rest = std::move(match.path_rest);
    const HttpRouter::Route* route = match.route;
    auto run = [route, core = core_](HttpRequest r, std::shared_ptr<HttpResponder> responder) {
      try {
        route->handler(std::move(r), responder);
      } catch (const std::exception& e) {
        SPAR_LOG(ERROR) << "HTTP handler failed: " << e.what();
        responder->Send(core->Error(500, absl::StrCat("internal error: ", e.what()), "internal_error"));
      }
    };
    if (route->run_on == RunOn::kWorkers && core_->workers != nullptr) {
      net::post(*core_->workers, [run, r = std::move(request), responder = responder_]() mutable {
        run(std::move(r), std::move(responder));
      });
    } else {
      run(std::move(request), responder_);
    }
  }

  // A read that ends when the client disconnects (or sends the next
  // request, which stays in the buffer). Only when the buffer holds no
  // pipelined request yet: that one is parsed once the response is out.
  void Watch() {
    if (reading_ || closed_ || buffer_.size() > 0) return;
    reading_ = true;
    stream_.async_read_some(buffer_.prepare(kWatchReadSize),
                            beast::bind_front_handler(&Connection::OnWatch, this->shared_from_this()));
  }

  void OnWatch(error_code ec, size_t n) {
    reading_ = false;
    if (closed_) return;
    if (ec) {
      if (phase_ == Phase::kHandling) return Fail();  // the client left mid-request
      return Close();
    }
    if (phase_ == Phase::kClosing) {
      if constexpr (!kTls) Linger();  // TLS: the shutdown reads on
      return;
    }
    buffer_.commit(n);
    if (phase_ == Phase::kIdle) ReadHeader();
  }

  // --- writing --------------------------------------------------------

  void SetFields(bhttp::response_header<>& res, const HttpResponse& r) {
    res.set(bhttp::field::content_type, r.content_type);
    for (const auto& [name, value] : r.headers.fields()) res.insert(name, value);
  }

  void QueueResponse(HttpResponse r) {
    if (closed_ || streaming_ || response_done_) return;
    bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(r.status), version_};
    SetFields(res, r);
    res.body() = std::move(r.body);
    res.keep_alive(keep_alive_ && !close_after_);
    res.prepare_payload();
    std::ostringstream os;
    os << res;
    Enqueue(os.str());
    FinishResponse();
  }

  // The response is queued whole: the handler's state goes now, the
  // connection moves on once the bytes are out.
  void FinishResponse() {
    response_done_ = true;
    if (responder_) responder_->MarkComplete();
    Flush();
  }

  void RespondError(int status, absl::string_view message, const char* code) {
    RespondAndClose(core_->Error(status, std::string(message), code));
  }

  // An answer before (or instead of) reading the request's body.
  void RespondAndClose(HttpResponse response) {
    close_after_ = true;  // whatever the client sends next may be the rest of the body
    phase_ = Phase::kHandling;
    QueueResponse(std::move(response));
  }

  void Enqueue(std::string bytes) {
    queued_bytes_ += bytes.size();
    out_.push_back(std::move(bytes));
  }

  void Flush() {
    if (writing_ || closed_) return;
    if (out_.empty()) {
      if (response_done_) OnResponseWritten();
      return;
    }
    writing_bufs_.swap(out_);
    std::vector<net::const_buffer> bufs;
    bufs.reserve(writing_bufs_.size());
    for (const std::string& s : writing_bufs_) bufs.emplace_back(s.data(), s.size());
    writing_ = true;
    ArmWriteTimer();
    net::async_write(stream_, bufs, beast::bind_front_handler(&Connection::OnWrite, this->shared_from_this()));
  }

  void OnWrite(error_code ec, size_t) {
    writing_ = false;
    write_timer_.cancel();
    for (const std::string& s : writing_bufs_) queued_bytes_ -= s.size();
    writing_bufs_.clear();
    if (closed_) return;
    if (ec) return Fail();
    Flush();
  }

  void OnResponseWritten() {
    response_done_ = false;
    streaming_ = false;
    responder_.reset();
    if (close_after_ || !keep_alive_ || core_->stopping) return GracefulClose();
    phase_ = Phase::kIdle;
    ArmReadTimer(core_->options.idle_timeout);
    if (buffer_.size() > 0 && !reading_) return ReadHeader();  // a pipelined request
    Watch();
  }

  // --- closing --------------------------------------------------------

  void GracefulClose() {
    phase_ = Phase::kClosing;
    ArmReadTimer(kLingerTime);
    if constexpr (kTls) {
      stream_.async_shutdown([self = this->shared_from_this()](error_code) { self->Close(); });
    } else {
      error_code ignored;
      Socket().shutdown(tcp::socket::shutdown_send, ignored);
      if (!reading_) Linger();
    }
  }

  // Reads and drops what the client still sends, until it closes.
  void Linger() {
    reading_ = true;
    buffer_.clear();
    stream_.async_read_some(buffer_.prepare(kWatchReadSize),
                            [self = this->shared_from_this()](error_code ec, size_t n) {
                              self->reading_ = false;
                              self->lingered_ += n;
                              if (ec || self->closed_ || self->lingered_ > kLingerBytes) return self->Close();
                              self->Linger();
                            });
  }

  // The client is gone (or must go): its handler hears of it.
  void Fail() {
    if (responder_) {
      std::shared_ptr<ResponderImpl> r = std::move(responder_);
      r->MarkGone();
    }
    Close();
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    read_timer_.cancel();
    write_timer_.cancel();
    if (responder_) {
      std::shared_ptr<ResponderImpl> r = std::move(responder_);
      r->MarkGone();
    }
    error_code ignored;
    Socket().shutdown(tcp::socket::shutdown_both, ignored);
    Socket().close(ignored);
  }

  ServerCore* const core_;
  Stream stream_;
  net::steady_timer read_timer_;
  net::steady_timer write_timer_;
  beast::flat_buffer buffer_;
  const bool over_capacity_;
  uint64_t registry_id_ = 0;

  Phase phase_ = Phase::kHeader;
  bool reading_ = false;
  bool writing_ = false;
  bool timed_out_ = false;
  bool closed_ = false;
  size_t lingered_ = 0;

  std::optional<bhttp::request_parser<bhttp::buffer_body>> parser_;
  HttpRequest request_;  // the head, once parsed
  std::unique_ptr<BodyDecoder> decoder_;
  std::vector<char> body_chunk_;

  int version_ = 11;
  bool keep_alive_ = true;
  bool close_after_ = false;
  bool streaming_ = false;
  bool response_done_ = false;
  std::shared_ptr<ResponderImpl> responder_;
  std::vector<std::string> out_;
  std::vector<std::string> writing_bufs_;
  size_t queued_bytes_ = 0;
};

}  // namespace

void ServeConnection(ServerCore* core, tcp::socket socket) {
  const int open = ++core->open;
  if (open > core->max_connections + kRefusalSlack) {
    --core->open;
    error_code ignored;
    socket.close(ignored);  // past even the 503s: drop it
    return;
  }
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);  // token chunks are small and latency matters
  const bool over = open > core->max_connections;
  if (core->ssl != nullptr) {
    std::make_shared<Connection<true>>(core, std::move(socket), over)->Start();
  } else {
    std::make_shared<Connection<false>>(core, std::move(socket), over)->Start();
  }
}

}  // namespace spar::http
