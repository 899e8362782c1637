// The edges of HTTP framing on a real spar-scheduler (issue 20), sent as
// raw bytes: HTTP/1.0 gets HTTP/1.0 answers (a stream is close-delimited,
// never chunked), a malformed Content-Length is a 400 at once, request ids
// are checked before they are echoed, compressed bodies are decoded,
// unknown codings refused, and Expect: 100-continue and keep-alive work.
// docs/reliability.md lists each case.
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/reliability/grpc_client_util.h"
#include "tests/reliability/raw_http.h"
#include "tests/services/test_cluster.h"

namespace spar {
namespace {

using Json = nlohmann::ordered_json;
using testing::RawConnection;
using testing::RawRequest;

const std::string kCompletion = R"({"prompt":"The capital of France is","max_tokens":3,"temperature":0})";
const std::string kStreamed = R"({"prompt":"The capital of France is","max_tokens":3,"temperature":0,"stream":true})";

class HttpFramingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = testing::TestCluster::Start({.model = testing::ReliabilityModel(),
                                            .stages = 1,
                                            .num_blocks = 64,
                                            .scheduler_flags = {"--served-model-name", "tiny"}},
                                           "http_framing")
                   .release();
  }
  static void TearDownTestSuite() { delete cluster_; }
  void SetUp() override { ASSERT_NE(cluster_, nullptr); }

  static int port() {
    const std::string& a = cluster_->http_address();
    return std::stoi(a.substr(a.rfind(':') + 1));
  }
  // Sends `request` on a new connection and reads one answer.
  static std::optional<testing::RawResponse> Exchange(const std::string& request,
                                                      absl::Duration timeout = absl::Seconds(30)) {
    RawConnection c(port());
    if (!c.Send(request)) return std::nullopt;
    return c.ReadResponse(timeout);
  }
  static Json Body(const testing::RawResponse& r) { return Json::parse(r.body, nullptr, false); }

  static testing::TestCluster* cluster_;
};
testing::TestCluster* HttpFramingTest::cluster_ = nullptr;

TEST_F(HttpFramingTest, Http10StreamIsCloseDelimitedNotChunked) {
  RawConnection c(port());
  ASSERT_TRUE(c.Send(RawRequest("POST", "/v1/completions", kStreamed, "", "HTTP/1.0")));
  ASSERT_TRUE(c.ReadToEof(absl::Seconds(30))) << "the stream did not end by closing: " << c.received();
  auto r = testing::ParseResponse(c.received(), /*closed=*/true);
  ASSERT_TRUE(r) << c.received();
  EXPECT_EQ(r->version, "HTTP/1.0");
  EXPECT_EQ(r->status, 200);
  EXPECT_FALSE(r->chunked) << r->head;
  EXPECT_EQ(r->headers.count("content-length"), 0u) << r->head;
  EXPECT_EQ(r->headers["content-type"], "text/event-stream");
  EXPECT_TRUE(absl::StartsWith(r->body, "data: {")) << r->body;
  EXPECT_TRUE(absl::EndsWith(r->body, "data: [DONE]\n\n")) << r->body;
  EXPECT_EQ(r->body.find("data: [DONE]"), r->body.rfind("data: [DONE]"));

  // Not streamed: Content-Length, and closed after (no keep-alive asked).
  RawConnection plain(port());
  ASSERT_TRUE(plain.Send(RawRequest("POST", "/v1/completions", kCompletion, "", "HTTP/1.0")));
  auto p = plain.ReadResponse();
  ASSERT_TRUE(p) << plain.received();
  EXPECT_EQ(p->version, "HTTP/1.0");
  EXPECT_EQ(p->status, 200) << p->body;
  EXPECT_EQ(p->headers["content-length"], absl::StrCat(p->body.size()));
  EXPECT_TRUE(plain.ReadToEof(absl::Seconds(5)));
}

TEST_F(HttpFramingTest, MalformedContentLengthIsA400AtOnce) {
  for (const std::string& fields :
       {std::string("Content-Length: -1\r\n"), std::string("Content-Length: abc\r\n"),
        std::string("Content-Length: 5\r\nContent-Length: 7\r\n"), std::string("Content-Length: 5, 7\r\n"),
        std::string("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n")}) {
    SCOPED_TRACE(fields);
    RawConnection c(port());
    // No body follows: the answer must not wait for one.
    ASSERT_TRUE(c.Send(absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\n", fields, "\r\n")));
    const absl::Time start = absl::Now();
    auto r = c.ReadResponse(absl::Seconds(5));
    ASSERT_TRUE(r) << "no answer: " << c.received();
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_LT(absl::Now() - start, absl::Seconds(2));
    EXPECT_EQ(Body(*r)["error"]["type"], "invalid_request_error") << r->body;
    EXPECT_TRUE(c.ReadToEof(absl::Seconds(5))) << "closed after a framing error";
  }
  // A Transfer-Encoding other than chunked leaves the body's end unknown.
  auto te = Exchange("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n");
  ASSERT_TRUE(te);
  EXPECT_EQ(te->status, 501) << te->body;
}

TEST_F(HttpFramingTest, RequestIdsAreCheckedBeforeTheyAreEchoed) {
  // A good id is the completion's id and comes back in the header.
  auto good = Exchange(RawRequest("POST", "/v1/completions", kCompletion, "X-Request-Id: trace-42.a_b\r\n"));
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 200) << good->body;
  EXPECT_EQ(good->headers["x-request-id"], "trace-42.a_b");
  EXPECT_EQ(Body(*good)["id"], "cmpl-trace-42.a_b");
  // Control bytes are refused by the header parser, bytes >= 0x80 and
  // over-long ids by the API: none is echoed anywhere.
  const std::string too_long(129, 'x');
  for (const std::string& id : {std::string("a\x01"
                                            "b"),
                                std::string("a\x7f"
                                            "b"),
                                std::string("caf\xc3\xa9"), std::string("a\tb"), too_long}) {
    SCOPED_TRACE(absl::CEscape(id));
    RawConnection c(port());
    ASSERT_TRUE(c.Send(RawRequest("POST", "/v1/completions", kCompletion, absl::StrCat("X-Request-Id: ", id, "\r\n"))));
    auto r = c.ReadResponse();
    ASSERT_TRUE(r) << c.received();
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_EQ(c.received().find(id), std::string::npos) << "the id was echoed";
    EXPECT_EQ(r->head.find(id), std::string::npos);
    EXPECT_EQ(r->body.find(id), std::string::npos);
    EXPECT_EQ(r->headers.count("x-request-id"), 0u);
  }
  auto streamed = Exchange(RawRequest("POST", "/v1/completions", kStreamed, "X-Request-Id: caf\xc3\xa9\r\n"));
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->status, 400) << streamed->body;
  EXPECT_EQ(Body(*streamed)["error"]["param"], "X-Request-Id") << streamed->body;
}

TEST_F(HttpFramingTest, CompressedBodiesAreDecodedAndUnknownCodingsRefused) {
  auto plain = Exchange(RawRequest("POST", "/v1/completions", kCompletion));
  ASSERT_TRUE(plain);
  ASSERT_EQ(plain->status, 200) << plain->body;
  const std::string text = Body(*plain)["choices"][0]["text"];
  for (const bool gzip : {true, false}) {
    SCOPED_TRACE(gzip ? "gzip" : "deflate");
    auto r =
        Exchange(RawRequest("POST", "/v1/completions",
                            testing::Compress(kCompletion, gzip ? testing::Packing::kGzip : testing::Packing::kZlib),
                            gzip ? "Content-Encoding: gzip\r\n" : "Content-Encoding: deflate\r\n"));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(Body(*r)["choices"][0]["text"], text);  // greedy: the same answer
  }
  auto br = Exchange(RawRequest("POST", "/v1/completions", kCompletion, "Content-Encoding: br\r\n"));
  ASSERT_TRUE(br);
  EXPECT_EQ(br->status, 415) << br->body;
  auto corrupt =
      Exchange(RawRequest("POST", "/v1/completions", "\x1f\x8b not gzip at all", "Content-Encoding: gzip\r\n"));
  ASSERT_TRUE(corrupt);
  EXPECT_EQ(corrupt->status, 400) << corrupt->body;
  std::string cut = testing::Compress(kCompletion, testing::Packing::kGzip);
  cut.resize(cut.size() / 2);
  auto truncated = Exchange(RawRequest("POST", "/v1/completions", cut, "Content-Encoding: gzip\r\n"));
  ASSERT_TRUE(truncated);
  EXPECT_EQ(truncated->status, 400) << truncated->body;
}

TEST_F(HttpFramingTest, ExpectContinueKeepAliveAndChunkedBodiesWork) {
  RawConnection c(port());
  // curl sends Expect: 100-continue for larger bodies and waits for it.
  ASSERT_TRUE(c.Send(absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ", kCompletion.size(),
                                  "\r\nExpect: 100-continue\r\n\r\n")));
  auto interim = c.ReadResponse(absl::Milliseconds(1));  // nothing whole yet
  EXPECT_FALSE(interim);
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (c.received().find("100 Continue") == std::string::npos && absl::Now() < until)
    c.ReadResponse(absl::Milliseconds(50));
  ASSERT_NE(c.received().find("HTTP/1.1 100 Continue\r\n\r\n"), std::string::npos) << c.received();
  ASSERT_TRUE(c.Send(kCompletion));
  auto first = c.ReadResponse();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200) << first->body;
  // The same connection serves the next request: a chunked body, then a
  // stream, then a plain request again.
  const std::string half = kCompletion.substr(0, 10), rest = kCompletion.substr(10);
  ASSERT_TRUE(c.Send(absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
                                  absl::Hex(half.size()), "\r\n", half, "\r\n", absl::Hex(rest.size()), "\r\n", rest,
                                  "\r\n0\r\n\r\n")));
  auto second = c.ReadResponse();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->status, 200) << second->body;
  ASSERT_TRUE(c.Send(RawRequest("POST", "/v1/completions", kStreamed)));
  auto third = c.ReadResponse();
  ASSERT_TRUE(third);
  EXPECT_TRUE(third->chunked);
  EXPECT_TRUE(absl::EndsWith(third->body, "data: [DONE]\n\n")) << third->body;
  ASSERT_TRUE(c.Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto fourth = c.ReadResponse();
  ASSERT_TRUE(fourth);
  EXPECT_EQ(fourth->status, 200);
  EXPECT_FALSE(c.closed());
}

}  // namespace
}  // namespace spar
