// spar's HTTP server (services/http/http_server.h) on its own, in-process:
// the pure parts (body decoding and its limits, routing, request ids)
// case by case, then the server with test handlers over loopback: writes
// from other threads arrive in order, a client that leaves or a server
// that stops reaches the handler's on_gone, a client that stops reading
// is cut off at the write queue limit.
#include "services/http/http_server.h"

#include <zlib.h>

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "services/common/status_field.h"
#include "services/http/body_decoder.h"
#include "services/http/http_router.h"
#include "services/http/request_id.h"
#include "tests/reliability/raw_http.h"

namespace spar::http {
namespace {

using testing::Packing;
using testing::RawConnection;

absl::StatusOr<std::string> Decode(absl::string_view coding, const std::string& wire, BodyLimits limits = {},
                                   size_t piece = 7) {
  auto d = BodyDecoder::ForEncoding(coding, limits);
  if (!d.ok()) return d.status();
  for (size_t i = 0; i < wire.size(); i += piece) {
    if (absl::Status s = (*d)->Feed(wire.data() + i, std::min(piece, wire.size() - i)); !s.ok()) return s;
  }
  if (absl::Status s = (*d)->Finish(); !s.ok()) return s;
  return std::move((*d)->body());
}

TEST(BodyDecoderTest, DecodesEveryCodingPieceByPiece) {
  std::string text;
  for (int i = 0; i < 5000; ++i) absl::StrAppend(&text, "token ", i, " ");
  for (size_t piece : {size_t{1}, size_t{7}, size_t{4096}}) {
    SCOPED_TRACE(piece);
    EXPECT_EQ(Decode("", text, {}, piece).value_or("<error>"), text);
    EXPECT_EQ(Decode("identity", text, {}, piece).value_or("<error>"), text);
    EXPECT_EQ(Decode("gzip", testing::Compress(text, Packing::kGzip), {}, piece).value_or("<error>"), text);
    EXPECT_EQ(Decode("X-GZIP", testing::Compress(text, Packing::kGzip), {}, piece).value_or("<error>"), text);
    EXPECT_EQ(Decode("deflate", testing::Compress(text, Packing::kZlib), {}, piece).value_or("<error>"), text);
    EXPECT_EQ(Decode("deflate", testing::Compress(text, Packing::kRawDeflate), {}, piece).value_or("<error>"),
              text);  // what some clients send
  }
  // Several gzip members one after another are one body (RFC 1952).
  EXPECT_EQ(Decode("gzip", testing::Compress("abc", Packing::kGzip) + testing::Compress("def", Packing::kGzip))
                .value_or("<error>"),
            "abcdef");
  EXPECT_EQ(Decode("gzip", "").value_or("<error>"), "");  // an empty body stays empty
}

TEST(BodyDecoderTest, LimitsHoldAfterDecodingAndBadDataIsRefused) {
  const std::string big(3 << 20, 'x');  // compresses ~1000x
  // Over the decoded limit: 413, though the wire bytes are few.
  auto over = Decode("gzip", testing::Compress(big, Packing::kGzip), {.max_decoded_bytes = 1 << 20, .max_ratio = 1e9});
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted) << over.status();
  EXPECT_NE(over.status().message().find("once decompressed"), std::string::npos);
  // A ratio past the cap is refused before the size limit is reached.
  auto bomb = Decode("gzip", testing::Compress(big, Packing::kGzip), {.max_decoded_bytes = 64 << 20, .max_ratio = 100});
  EXPECT_EQ(bomb.status().code(), absl::StatusCode::kResourceExhausted) << bomb.status();
  EXPECT_NE(bomb.status().message().find("expands more than 100 times"), std::string::npos);
  // Below the ratio floor small repetitive bodies pass.
  EXPECT_TRUE(Decode("gzip", testing::Compress(std::string(100000, 'x'), Packing::kGzip), {.max_ratio = 2}).ok());
  // Identity bodies are limited too.
  EXPECT_EQ(Decode("", std::string(2000, 'a'), {.max_decoded_bytes = 1000}).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Decode("gzip", "\x1f\x8bnot gzip").status().code(), absl::StatusCode::kInvalidArgument);
  std::string cut = testing::Compress("hello there, a body", Packing::kGzip);
  cut.resize(cut.size() - 4);
  EXPECT_EQ(Decode("gzip", cut).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Decode("deflate", testing::Compress("a", Packing::kZlib) + "trailing").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Decode("br", "x").status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(Decode("gzip, deflate", "x").status().code(), absl::StatusCode::kUnimplemented);
}

TEST(BodyDecoderTest, TheBodyNeverGrowsPastTheLimit) {
  auto d = BodyDecoder::ForEncoding("", {.max_decoded_bytes = 100000});
  ASSERT_TRUE(d.ok());
  const std::string piece(999, 'a');
  while ((*d)->Feed(piece.data(), piece.size()).ok()) {
  }
  EXPECT_LE((*d)->body().capacity(), 100000u + 32);  // small-string slack at most
}

TEST(HttpRouterTest, MethodsPathsGuardsAndRests) {
  HttpRouter r;
  int hits = 0;
  HttpHandler h = [&](HttpRequest, std::shared_ptr<HttpResponder>) { ++hits; };
  r.Handle("POST", "/v1/completions", h);
  r.Handle("GET", "/v1/models", h);
  r.Handle("GET", "/v1/models/*", h);
  r.Handle("DELETE", "/v1/models/*", h);
  EXPECT_NE(r.Find("POST", "/v1/completions").route, nullptr);
  HttpRouter::Match wrong = r.Find("GET", "/v1/completions");
  EXPECT_EQ(wrong.route, nullptr);
  EXPECT_EQ(wrong.allow, "POST");
  HttpRouter::Match rest = r.Find("GET", "/v1/models/org%2Fname");
  ASSERT_NE(rest.route, nullptr);
  EXPECT_EQ(rest.route->path, "/v1/models/*");
  EXPECT_EQ(rest.path_rest, "org/name");
  EXPECT_EQ(r.Find("PUT", "/v1/models/x").allow, "GET, DELETE");
  EXPECT_EQ(r.Find("GET", "/v1/models/").route, nullptr);  // the rest may not be empty
  EXPECT_EQ(r.Find("GET", "/v2/nothing").allow, "");
  r.AddGuard("/v1/", [](const HttpRequest& req) -> std::optional<HttpResponse> {
    if (req.headers.Get("authorization") == "ok") return std::nullopt;
    return MakeResponse(401, "no");
  });
  HttpRequest req;
  req.path = "/v1/anything";
  ASSERT_TRUE(r.Refusal(req));
  EXPECT_EQ(r.Refusal(req)->status, 401);
  req.headers.Add("Authorization", "ok");
  EXPECT_FALSE(r.Refusal(req));
  req.path = "/health";
  req.headers = {};
  EXPECT_FALSE(r.Refusal(req));
  EXPECT_EQ(PercentDecode("a%20b%zz%4"), "a b%zz%4");
}

TEST(RequestIdTest, OnlyShortPrintableAsciiIsTaken) {
  EXPECT_EQ(ClientRequestId("").value(), "");
  EXPECT_EQ(ClientRequestId("  trace-1  ").value(), "trace-1");
  EXPECT_EQ(ClientRequestId(std::string(kMaxRequestIdLength, 'a')).value().size(), kMaxRequestIdLength);
  for (const std::string& bad : {std::string(kMaxRequestIdLength + 1, 'a'), std::string("a b"), std::string("a\x01"),
                                 std::string("caf\xc3\xa9"), std::string("a\x7f")}) {
    auto id = ClientRequestId(bad);
    ASSERT_FALSE(id.ok()) << bad;
    EXPECT_EQ(FieldOf(id.status()).value_or(""), "X-Request-Id");
    EXPECT_EQ(std::string(id.status().message()).find(bad), std::string::npos) << "the message repeats the id";
  }
}

// A server on 127.0.0.1 with the given routes.
std::unique_ptr<HttpServer> Serve(HttpRouter router, HttpServer::Options o = {}) {
  o.host = "127.0.0.1";
  o.port = 0;
  o.io_threads = 2;
  o.worker_threads = 2;
  auto s = std::make_unique<HttpServer>(std::move(o), std::move(router));
  EXPECT_TRUE(s->Start().ok());
  return s;
}

TEST(HttpServerTest, WritesFromAnotherThreadArriveInOrder) {
  HttpRouter router;
  std::vector<std::thread> writers;
  router.Handle("GET", "/count", [&](HttpRequest, std::shared_ptr<HttpResponder> out) {
    out->StartStream(MakeResponse(200, "", "text/plain"));
    writers.emplace_back([out] {
      for (int i = 0; i < 2000; ++i) out->Write(absl::StrCat(i, "\n"));
      out->EndStream();
    });
  });
  auto server = Serve(std::move(router));
  RawConnection c(server->port());
  ASSERT_TRUE(c.Send("GET /count HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto r = c.ReadResponse();
  for (auto& t : writers) t.join();
  ASSERT_TRUE(r) << c.received().substr(0, 200);
  EXPECT_TRUE(r->chunked);
  std::string expected;
  for (int i = 0; i < 2000; ++i) absl::StrAppend(&expected, i, "\n");
  EXPECT_EQ(r->body, expected);
}

TEST(HttpServerTest, ClientGoneAndServerStopReachOnGone) {
  HttpRouter router;
  std::atomic<int> gone{0};
  std::atomic<int> attached{0};
  router.Handle(
      "GET", "/wait",
      [&](HttpRequest, std::shared_ptr<HttpResponder> out) {
        auto state = std::make_shared<int>(7);
        EXPECT_TRUE(out->Attach(state, [&] { ++gone; }));
        ++attached;
      },
      RunOn::kWorkers);
  auto server = Serve(std::move(router));
  auto wait_for = [](const std::function<bool()>& f) {
    for (int i = 0; i < 500 && !f(); ++i) absl::SleepFor(absl::Milliseconds(10));
    return f();
  };
  {
    RawConnection c(server->port());
    ASSERT_TRUE(c.Send("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n"));
    ASSERT_TRUE(wait_for([&] { return attached == 1; }));
  }  // the client leaves without an answer
  EXPECT_TRUE(wait_for([&] { return gone == 1; }));
  RawConnection waiting(server->port());
  ASSERT_TRUE(waiting.Send("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(wait_for([&] { return attached == 2; }));
  server->Stop();
  EXPECT_EQ(gone, 2);
  EXPECT_TRUE(waiting.ReadToEof(absl::Seconds(5)));
  EXPECT_EQ(server->open_connections(), 0);
}

TEST(HttpServerTest, AClientThatStopsReadingIsCutOffAtTheQueueLimit) {
  HttpRouter router;
  std::atomic<bool> gone{false};
  std::thread writer;
  router.Handle("GET", "/flood", [&](HttpRequest, std::shared_ptr<HttpResponder> out) {
    out->Attach(nullptr, [&] { gone = true; });
    out->StartStream(MakeResponse(200, "", "text/plain"));
    writer = std::thread([out, &gone] {
      const std::string chunk(64 << 10, 'z');
      for (int i = 0; i < 4096 && !gone; ++i) out->Write(chunk);  // 256 MiB, never read
    });
  });
  HttpServer::Options o;
  o.max_queued_write_bytes = 1 << 20;
  auto server = Serve(std::move(router), o);
  RawConnection c(server->port());
  ASSERT_TRUE(c.Send("GET /flood HTTP/1.1\r\nHost: x\r\n\r\n"));
  for (int i = 0; i < 1000 && !gone; ++i) absl::SleepFor(absl::Milliseconds(10));
  writer.join();
  EXPECT_TRUE(gone) << "a client that reads nothing holds the server's memory";
}

TEST(HttpServerTest, ErrorsOfTheServerItselfUseTheErrorRenderer) {
  HttpRouter router;
  router.HandleSimple("GET", "/x", [](const HttpRequest&) { return MakeResponse(200, "x"); });
  HttpServer::Options o;
  o.error_response = [](int status, std::string message, std::string code) {
    return MakeResponse(status, absl::StrCat("{\"code\":\"", code, "\"}"));
  };
  o.max_header_bytes = 1024;
  auto server = Serve(std::move(router), o);
  auto ask = [&](const std::string& request) {
    RawConnection c(server->port());
    c.Send(request);
    auto r = c.ReadResponse(absl::Seconds(10));
    return r ? absl::StrCat(r->status, " ", r->body) : "no answer";
  };
  EXPECT_EQ(ask("GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"), "404 {\"code\":\"unknown_url\"}");
  EXPECT_EQ(ask("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"), "405 {\"code\":\"method_not_allowed\"}");
  EXPECT_EQ(ask(absl::StrCat("GET /x HTTP/1.1\r\nHost: x\r\nX-Big: ", std::string(2000, 'b'), "\r\n\r\n")),
            "431 {\"code\":\"header_too_large\"}");
  EXPECT_EQ(ask("GARBAGE\r\n\r\n"), "400 {\"code\":\"bad_request\"}");
}

TEST(HttpServerTest, AHandlerThatThrowsCostsOnlyItsRequest) {
  HttpRouter router;
  router.Handle("GET", "/throw",
                [](HttpRequest, std::shared_ptr<HttpResponder>) -> void { throw std::runtime_error("handler bug"); });
  router.Handle("GET", "/throw-later", [](HttpRequest, std::shared_ptr<HttpResponder> out) {
    out->StartStream(MakeResponse(200, "", "text/plain"));
    out->Post([] { throw std::runtime_error("task bug"); });
  });
  router.HandleSimple("GET", "/ok", [](const HttpRequest&) { return MakeResponse(200, "{}"); });
  HttpServer::Options o;
  o.io_threads = 1;  // the only I/O thread survives both
  auto server = Serve(std::move(router), o);
  auto status = [&](const std::string& path) {
    RawConnection c(server->port());
    c.Send(absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: x\r\n\r\n"));
    auto r = c.ReadResponse(absl::Seconds(5));
    return r ? r->status : (c.closed() ? -1 : 0);
  };
  EXPECT_EQ(status("/throw"), 500);
  EXPECT_EQ(status("/throw-later"), -1);  // the stream had begun: cut off, not ended as if whole
  EXPECT_EQ(status("/ok"), 200);
}

TEST(HttpServerTest, GuardsAnswerBeforeTheBodyIsRead) {
  HttpRouter router;
  std::atomic<int> handled{0};
  router.Handle("POST", "/v1/x", [&](HttpRequest, std::shared_ptr<HttpResponder> out) {
    ++handled;
    out->Send(MakeResponse(200, "{}"));
  });
  router.AddGuard("/v1/", [](const HttpRequest& req) -> std::optional<HttpResponse> {
    if (req.headers.Get("Authorization") == "Bearer k") return std::nullopt;
    return MakeResponse(401, "{}");
  });
  auto server = Serve(std::move(router));
  // 10 MiB announced, none sent: the refusal does not wait for it.
  RawConnection c(server->port());
  ASSERT_TRUE(c.Send("POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 10485760\r\n\r\n"));
  auto r = c.ReadResponse(absl::Seconds(5));
  ASSERT_TRUE(r) << c.received();
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->headers["connection"], "close");
  EXPECT_EQ(handled, 0);
  RawConnection ok(server->port());
  ASSERT_TRUE(ok.Send("POST /v1/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Length: 2\r\n\r\n{}"));
  auto good = ok.ReadResponse(absl::Seconds(5));
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 200);
}

}  // namespace
}  // namespace spar::http
